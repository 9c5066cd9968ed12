"""floorline: batch-1 LLM decode measured against its memory floor."""

__version__ = "0.1.0"
