"""Experiments over many fresh processes: the launcher and its child (worker.py), the one resume path, the sweep, the
A/B, the quant study and the all-reduce timing. Imports core, bench and serve."""
