"""Step timers, the only clocks that time decode steps.

A timer holds n + 1 pre-allocated marks; the caller marks before the first step and after each one, so step i is
mark[i] -> mark[i+1] and nothing between steps escapes the count. No sync, allocation or logging happens between
marks: CUDA events are recorded on the current stream and read once, after one synchronize, in samples_ms().
"""

from __future__ import annotations

import time

import torch


class CpuTimer:
    def __init__(self, n: int):
        self.t = [0.0] * (n + 1)

    def mark(self, i: int) -> None:
        self.t[i] = time.perf_counter()

    def samples_ms(self) -> list[float]:
        return [(b - a) * 1e3 for a, b in zip(self.t, self.t[1:])]


class CudaTimer:
    def __init__(self, n: int):
        self.ev = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]

    def mark(self, i: int) -> None:
        self.ev[i].record()

    def samples_ms(self) -> list[float]:
        torch.cuda.synchronize()
        return [a.elapsed_time(b) for a, b in zip(self.ev, self.ev[1:])]


def timer_for(device: torch.device, n: int):
    return CudaTimer(n) if device.type == "cuda" else CpuTimer(n)


def time_steps(step, n: int, device: torch.device) -> list[float]:
    """Run `step` n times back to back; per-step milliseconds."""
    timer = timer_for(device, n)
    timer.mark(0)
    for i in range(n):
        step()
        timer.mark(i + 1)
    return timer.samples_ms()
