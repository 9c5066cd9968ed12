"""floorline's own batch-1 decode path (mode `native`): a gpt-fast-style model over the HF weights (model.py) and
Triton kernels with torch references (kernels.py)."""
