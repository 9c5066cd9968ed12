"""Achievable memory bandwidth of the device a run uses: the best of three streaming patterns, each the median of
repeats, so the floor at measured bandwidth is a lower bound no decode kernel should beat.

Patterns, over one buffer well past any last-level cache (GPU: up to 1 GiB, at most 1/8 of free memory; CPU:
256 MiB), bytes counted as the memory traffic each must cause:
  copy   dst.copy_(src)                 reads and writes n bytes: 2n
  read   src.sum() (a read-only reduction)                     n
  gemv   W @ x, W the buffer as (n / 8 KiB) rows of 4096 elements of the run's dtype, x one vector: a decode
         step's own access pattern (a large GEMV-like read)      n
  native the same product by mode native's own Triton GEMV (a fixed tile, bf16/fp16 on a CUDA GPU with Triton):
         on the H200 it reads faster than the copy (results/h200/suite/today.jsonl: 4346 GB/s against 4243), so
         without it a native step could beat the "floor"          n
Timed like triton's do_bench: 3 warm-ups, pre-allocated timer marks, one synchronize (timing.time_steps); the
GPU's with CUDA events, the CPU's with perf_counter on torch's own threads, as the model runs.
"""

from __future__ import annotations

import statistics

import torch

from floorline.device.timing import time_steps

GPU_BYTES = 1 << 30
CPU_BYTES = 256 << 20
GEMV_COLS = 4096
PATTERNS = ("copy", "read", "gemv", "native")
NATIVE_TILE = {"BN": 8, "BK": 512, "num_warps": 4, "STAGES": 3}  # the lm_head's tuned tile on the H200


def _bytes(device: torch.device, nbytes: int | None) -> int:
    if nbytes is not None:
        return nbytes
    if device.type == "cuda":
        return min(GPU_BYTES, torch.cuda.mem_get_info(device)[0] // 8)
    return CPU_BYTES


def _gbps(moved: int, ms: list[float]) -> list[float]:
    return [moved / (t * 1e-3) / 1e9 for t in ms]


def copy_bandwidth(device: torch.device, nbytes: int | None = None, reps: int = 10) -> tuple[float, list[float]]:
    """(median GB/s, every sample in GB/s) of the copy alone; 1 GB = 1e9 B; each copy moves 2 x nbytes."""
    return _patterns(device, _bytes(device, nbytes), reps, torch.bfloat16, ("copy",))["copy"]


def achievable_bandwidth(device: torch.device, dtype: torch.dtype = torch.bfloat16, nbytes: int | None = None,
                         reps: int = 10) -> dict:
    """Every pattern's (median GB/s, samples) and the best: {"gbps", "samples", "pattern", "patterns"}."""
    which = PATTERNS if _native_ok(device, dtype) else PATTERNS[:-1]
    by = _patterns(device, _bytes(device, nbytes), reps, dtype, which)
    best = max(by, key=lambda k: by[k][0])
    return {"gbps": by[best][0], "samples": by[best][1], "pattern": best,
            "patterns": {k: v[0] for k, v in by.items()}, "pattern_samples": {k: v[1] for k, v in by.items()}}


def _native_ok(device: torch.device, dtype: torch.dtype) -> bool:
    import importlib.util

    return device.type == "cuda" and dtype != torch.float32 and importlib.util.find_spec("triton") is not None


def _patterns(device: torch.device, nbytes: int, reps: int, dtype: torch.dtype,
              which: tuple[str, ...]) -> dict[str, tuple[float, list[float]]]:
    size = torch.tensor([], dtype=dtype).element_size()
    rows = max(1, nbytes // (size * GEMV_COLS))
    n = rows * GEMV_COLS  # elements: whole GEMV rows, the same buffer for every pattern
    gen = torch.Generator(device=device).manual_seed(0)
    src = torch.randn(n, dtype=dtype, device=device, generator=gen)  # random, never zeros
    x = torch.randn(GEMV_COLS, dtype=dtype, device=device, generator=gen)
    out: dict[str, tuple[float, list[float]]] = {}
    with torch.inference_mode():
        for name in which:
            if name == "copy":
                dst = torch.empty_like(src)
                fn, moved = (lambda: dst.copy_(src)), 2 * n * size  # read + write
            elif name == "read":
                fn, moved = src.sum, n * size  # read only; the result is one element
            elif name == "gemv":
                w = src.view(rows, GEMV_COLS)
                y = torch.empty(rows, dtype=dtype, device=device)
                fn, moved = (lambda: torch.mv(w, x, out=y)), n * size  # the matrix read once; x and y are tiny
            else:
                from floorline.native import gemv

                w, xf = src.view(rows, GEMV_COLS), x.float()
                yf = torch.empty(rows, dtype=torch.float32, device=device)
                fn = lambda: gemv.tri_gemv(w, xf, out=yf, config=NATIVE_TILE)  # noqa: E731
                moved = n * size
            try:
                for _ in range(3):
                    fn()
                gbps = _gbps(moved, time_steps(fn, reps, device))
            except Exception:  # noqa: BLE001 -- only the optional native pattern may fail (a Triton that cannot build)
                if name != "native":
                    raise
                continue
            out[name] = (statistics.median(gbps), gbps)
    return out
