"""Achievable memory bandwidth of the device a run uses: a large copy, bytes read + written, median of repeats.

GPU: a device-to-device copy of up to 1 GiB (at most 1/8 of free memory) timed with CUDA events, like
triton's do_bench: warm up, pre-allocated events, one synchronize. CPU: a 256 MiB copy (well past any last-level
cache) timed with perf_counter, using torch's own threads, as the model does.
"""

from __future__ import annotations

import statistics

import torch

from floorline.timing import time_steps

GPU_COPY_BYTES = 1 << 30
CPU_COPY_BYTES = 256 << 20


def copy_bandwidth(device: torch.device, nbytes: int | None = None, reps: int = 10) -> tuple[float, list[float]]:
    """(median GB/s, every sample in GB/s); 1 GB = 1e9 B; each copy moves 2 x nbytes (read + write)."""
    if nbytes is None:
        if device.type == "cuda":
            nbytes = min(GPU_COPY_BYTES, torch.cuda.mem_get_info(device)[0] // 8)
        else:
            nbytes = CPU_COPY_BYTES
    n = nbytes // 2
    gen = torch.Generator(device=device).manual_seed(0)
    src = torch.randn(n, dtype=torch.bfloat16, device=device, generator=gen)  # random, never zeros
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    ms = time_steps(lambda: dst.copy_(src), reps, device)
    del src, dst
    gbps = [2 * n * 2 / (t * 1e-3) / 1e9 for t in ms]  # n bf16 elements = 2n bytes, read and written
    return statistics.median(gbps), gbps
