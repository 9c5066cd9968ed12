"""The only clocks: step timers for decode steps, and the one timer of graph-captured work.

A step timer holds n + 1 pre-allocated marks; the caller marks before the first step and after each one, so step i
is mark[i] -> mark[i+1] and nothing between steps escapes the count. No sync, allocation or logging happens between
marks: CUDA events are recorded on the current stream and read once, after one synchronize, in samples_ms().

Graph-captured work (capture_graph, graph_ms, time_captured): warm-up calls on a side stream (compilers, autotuners
and workspaces run there), one call recorded into a CUDA graph, replays timed back to back with the step timer.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

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


# ------------------------------------------------------------------------------------------ graph-captured work
def capture_graph(body: Callable[[], None], warmup: int) -> "torch.cuda.CUDAGraph":
    """`warmup` real calls of `body` on a side stream (as CUDA graphs require; compilers and autotuners run here),
    then one call recorded, not run, into a CUDA graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    torch.cuda.synchronize()
    return graph


def time_captured(body: Callable[[], None], warmup: int, samples: int, device: torch.device) -> list[float]:
    """Milliseconds per call of `body`, one sample per call: on a GPU `body` is captured once (capture_graph) and
    each sample is one replay (no launch overhead), after `warmup` untimed replays; on the CPU, where nothing is
    captured, `warmup` plain calls then `samples` timed ones."""
    if device.type != "cuda":
        for _ in range(warmup):
            body()
        return time_steps(body, samples, device)
    graph = capture_graph(body, warmup)
    for _ in range(warmup):
        graph.replay()
    torch.cuda.synchronize()
    out = time_steps(graph.replay, samples, device)
    del graph
    return out


def graph_ms(calls: list[Callable[[], object]], replays: int = 20) -> float:
    """Median milliseconds per call of `calls` recorded into one CUDA graph (capture_graph: one warm-up call each,
    where Triton compiles and autotunes), replayed `replays` times back to back after one untimed replay."""
    graph = capture_graph(lambda: [f() for f in calls], 1)
    graph.replay()
    return statistics.median(time_steps(graph.replay, replays, torch.device("cuda"))) / len(calls)


def keeper(state: list) -> Callable[[], None]:
    """A function that puts `state` (tensors: the decode step's token and position) back to its values now."""
    keep = [t.clone() for t in state]

    def restore():
        for t, k in zip(state, keep):
            t.copy_(k)

    return restore


def replay_ms(graph: "torch.cuda.CUDAGraph", restore: Callable[[], None]) -> float:
    """One replay of `graph` in ms (CUDA events), `restore()` run first, outside the timed span."""
    restore()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def state_replay_ms(capture: Callable[[], "torch.cuda.CUDAGraph"], state: list, reps: int = 30) -> float:
    """The median ms of `reps` replays (after 3 untimed) of the graph `capture()` records, `state` (tensors: the
    decode step's token and position) restored to its values at the call before every replay and after the last: the
    launch-config trials that re-time a kernel inside the whole step (int4_cuda, gemv and mlp.retune_in_step) leave
    the decode where it was, writing only cache positions from the current one on, which a step writes before it
    reads."""
    restore = keeper(state)
    graph = capture()
    times = [replay_ms(graph, restore) for _ in range(reps + 3)]
    del graph
    restore()
    return statistics.median(times[3:])


def warm_each(candidates: list, use: Callable[[object], None], warm: Callable[[], None], state: list) -> None:
    """Each candidate put in place by `use` and `warm()` run once outside any graph capture (its kernels compiled
    there, not while a graph is being captured), then the device synchronised and `state` put back (a warm-up may
    run whole steps, which advance the token and position)."""
    restore = keeper(state)
    for c in candidates:
        use(c)
        warm()
    torch.cuda.synchronize()
    restore()


def fastest_in_step(candidates: list, use: Callable[[object], None], capture: Callable[[], "torch.cuda.CUDAGraph"],
                    state: list, reps: int = 30, warm: Callable[[], None] | None = None) -> dict:
    """The step tuners' trial loop (the native kernels' retune_in_step): each candidate put in place by `use` and
    timed in the whole decode step (state_replay_ms), then the fastest put back in place. Returns {candidate: ms}.
    warm: every candidate warmed first (warm_each)."""
    if warm is not None:
        warm_each(candidates, use, warm, state)
    times = {}
    for c in candidates:
        use(c)
        times[c] = state_replay_ms(capture, state, reps)
    use(min(times, key=times.get))
    return times


def fastest_interleaved(candidates: list, use: Callable[[object], None], capture: Callable[[], "torch.cuda.CUDAGraph"],
                        state: list, rounds: int = 3, reps: int = 20, warm: Callable[[], None] | None = None) -> dict:
    """The step tuners' final round over a few finalists (at least one): fastest_in_step times one candidate after
    another, so a drift of the GPU between them ranks close candidates at random (on the H200 the tuner's sequential
    picks measured 0.3-1.2% of a step slower than the best timed this way, docs/lab/2026-12-04-attn-loads-first.md).
    Here every candidate is warmed first (warm_each), then each put in place by `use` and its step captured once;
    then the graphs take turns, `reps` replays each a round over `rounds` rounds, `state` restored before every
    replay and after the last. Returns {candidate: median ms of its rounds x reps
    replays}, the fastest put back in place."""
    if warm is not None:
        warm_each(candidates, use, warm, state)
    restore = keeper(state)
    graphs = []
    for c in candidates:
        use(c)
        graphs.append(capture())
    samples: dict = {c: [] for c in candidates}
    for _ in range(rounds):
        for c, graph in zip(candidates, graphs):
            samples[c] += [replay_ms(graph, restore) for _ in range(reps)]
    del graphs
    restore()
    times = {c: statistics.median(v) for c, v in samples.items()}
    use(min(times, key=times.get))
    return times
