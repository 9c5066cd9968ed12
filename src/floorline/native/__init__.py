"""floorline's own batch-1 decode path (mode `native`): a gpt-fast-style model over the HF weights (model.py),
Triton kernels with torch references (kernels.py), floorline's int4 format (int4_format.py) and its CUDA GEMV
(int4_cuda.py, NVRTC)."""
