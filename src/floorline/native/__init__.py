"""floorline's own batch-1 decode path (mode `native`): a gpt-fast-style model over the HF weights (model.py),
Triton kernels with torch references (kernels.py), floorline's int4 format (int4_format.py) and its CUDA GEMV
(int4_cuda.py, NVRTC)."""

import os


def env_pair(var: str) -> tuple[int, int] | None:
    """The "a,b" pair of integers in environment variable `var` (a launch-shape switch such as FLOORLINE_ATTN_CUDA),
    None where it is unset or empty, (0, 0) where it is not two integers (each caller names its allowed values)."""
    text = os.environ.get(var)
    if not text:
        return None
    try:
        a, b = (int(v) for v in text.split(","))
    except ValueError:
        return 0, 0
    return a, b
