"""Where the gap between the floor and the step goes: a profiled look at a few decode steps per mode.

Per mode, on one built model: wall time per step (CUDA events, no profiler attached), host time to enqueue a step
(perf_counter around step() with no sync), then K steps under torch.profiler for the device activity.
  floor        = strict floor bytes / measured bandwidth
  kernel excess = GPU busy - floor            (GPU busy: device activity intervals, overlaps merged)
  idle gaps    = wall - GPU busy              (launch and host overhead: the GPU waits; where the profiled steps'
                                              busy exceeds the unprofiled wall, 0 with a warning in the record)
Per kernel (the top-kernel table, attention): the time it adds to GPU busy, each stretch of busy time given to the
kernel that ends first among those running then (_exclusive_us). Under programmatic dependent launch (mode native on
Hopper) a kernel starts while its predecessor runs and waits for it, so its own span would count that wait twice;
the shares sum to GPU busy. Each kernel's span is kept beside it (span_ms_per_step). A top kernel launched several
times a layer is also split by its place in the layer (kernels_by_slot: mode native's one GEMV kernel serves q/k/v
and o, in that order, then lm_head after the layers; the MLP is a kernel of its own, or with --native mlp=gemv
the GEMV's gate_up and down after o).
On the CPU the "kernels" are the aten ops of the profile, each owning the time no op nested in it takes, and "GPU busy"
is the time inside any of them.
"""

from __future__ import annotations

import heapq
import re
import statistics
import time
from collections import defaultdict
from typing import Callable

import torch

from floorline.bench.config import RunConfig, cache_len
from floorline.bench.measure import open_session, start_runtime
from floorline.core import floor, records
from floorline.core.errors import UserError
from floorline.device.timing import time_steps

ATTENTION_KERNEL = re.compile(r"flash|fmha|attention|attn|sdpa|softmax", re.I)
TOP_KERNELS = 8


def _merged_us(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0.0)


def _exclusive_us(intervals: list[tuple[float, float]]) -> list[float]:
    """Each interval's share of the union of all: a stretch that several cover goes to the one that ends first (ties:
    the first listed). The shares sum to _merged_us(intervals)."""
    out = [0.0] * len(intervals)
    order = sorted(range(len(intervals)), key=lambda i: intervals[i][0])
    points = sorted({p for iv in intervals for p in iv})
    running: list[tuple[float, int]] = []  # (end, index), a heap
    j = 0
    for a, b in zip(points, points[1:]):
        while j < len(order) and intervals[order[j]][0] <= a:
            heapq.heappush(running, (intervals[order[j]][1], order[j]))
            j += 1
        while running and running[0][0] <= a:
            heapq.heappop(running)
        if running:
            out[running[0][1]] += b - a
    return out


def _layer_slots(names: list[str], steps: int, layers: int) -> list[str | None]:
    """Each event's place in its layer, events in launch order over `steps` identical steps: a name launched
    c = m x layers + r times a step (m >= 2, or r > 0) has its i-th launch of a step in slot "j/m" (j = i % m + 1)
    while i < m x layers, and in slot "after" past them (the r launches after the last layer); other names: None."""
    count: dict[str, int] = defaultdict(int)
    for n in names:
        count[n] += 1
    seen: dict[str, int] = defaultdict(int)
    out: list[str | None] = []
    for n in names:
        c = count[n] // steps
        i = seen[n] % max(c, 1)
        seen[n] += 1
        m = c // layers
        if count[n] % steps or m < 1 or (m < 2 and c == m * layers):
            out.append(None)
        else:
            out.append(f"{i % m + 1}/{m}" if i < m * layers else "after")
    return out


def _device_events(prof, cuda: bool) -> list:
    from torch.autograd import DeviceType

    evs = prof.events()
    if cuda:
        return [e for e in evs if e.device_type == DeviceType.CUDA]
    # CPU: every aten op. Busy is the union of their spans, and a stretch inside nested ops belongs to the innermost
    # (_exclusive_us: the one that ends first): aten::mm owns its time, not the aten::linear around it. (Leaf ops
    # alone missed aten::mm, whose aten::resolve_conj children made it no leaf: busy a tenth of the matmuls' time.)
    return [e for e in evs if e.name.startswith("aten::")]


def _attention_events(prof, evs: list, cuda: bool) -> list:
    """GPU: the attention kernels. CPU: the outermost attention ops (SDPA is no leaf there)."""
    if cuda:
        return [e for e in evs if ATTENTION_KERNEL.search(e.name)]
    return [e for e in prof.events() if ATTENTION_KERNEL.search(e.name)
            and not (e.cpu_parent is not None and ATTENTION_KERNEL.search(e.cpu_parent.name))]


def explain_mode(ses, mode: str, ctx: int, profile_steps: int, log: Callable[[str], None]) -> dict:
    cuda = ses.device.type == "cuda"
    max_len = cache_len(ses.cfg, ses.arch, ctx, False) + 3 * profile_steps
    strict = floor.floor(ses.arch, ctx, ses.fmt, "strict")
    rt = None
    try:
        with torch.inference_mode():
            rt, _ = start_runtime(ses, mode, ctx, max_len, log)
            chosen = rt.describe()  # what the runtime resolved (mode native: every tuned launch and its trials)
            log(f"{mode}: timing {ses.cfg.steps} steps, then profiling {profile_steps}")
            wall = time_steps(rt.step, ses.cfg.steps, ses.device)
            host = []
            for _ in range(profile_steps):
                t0 = time.perf_counter()
                rt.step()  # no sync: how long the host takes to enqueue one step
                host.append((time.perf_counter() - t0) * 1e3)
            if cuda:
                torch.cuda.synchronize()
            acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
            with torch.profiler.profile(activities=acts) as prof:
                t0 = time.perf_counter()
                for _ in range(profile_steps):
                    rt.step()
                if cuda:
                    torch.cuda.synchronize()
                profiled_ms = (time.perf_counter() - t0) * 1e3 / profile_steps  # (the profiler's overhead in it)
    finally:
        if rt is not None:
            rt.close()
    evs = sorted(_device_events(prof, cuda), key=lambda e: e.time_range.start)  # launch order
    k = profile_steps
    spans = [(e.time_range.start, e.time_range.end) for e in evs]
    busy_ms = _merged_us(spans) / 1e3 / k
    own = _exclusive_us(spans)  # us each kernel adds to busy (its span less what overlaps a kernel ending earlier)
    by_name: dict[str, list[tuple[float, float]]] = defaultdict(list)  # name: [(own ms, span ms)]
    for e, (s0, s1), o in zip(evs, spans, own):
        by_name[e.name].append((o / 1e3, (s1 - s0) / 1e3))
    total_ms = sum(o for v in by_name.values() for o, _ in v) / k or float("nan")
    top = sorted(by_name.items(), key=lambda kv: -sum(o for o, _ in kv[1]))[:TOP_KERNELS]
    by_slot: dict[tuple[str, str], list[float]] = defaultdict(list)  # (name, slot): [own ms]
    names = {n for n, _ in top}
    for e, slot, o in zip(evs, _layer_slots([e.name for e in evs], k, ses.arch.layers), own):
        if slot is not None and e.name in names:
            by_slot[(e.name, slot)].append(o / 1e3)
    if cuda:
        attn = {id(e) for e in _attention_events(prof, evs, cuda)}
        attn_ms = sum(o for e, o in zip(evs, own) if id(e) in attn) / 1e3 / k
    else:  # SDPA is no leaf op on the CPU: its outermost events' spans
        attn_ms = sum(e.time_range.end - e.time_range.start for e in _attention_events(prof, evs, cuda)) / 1e3 / k
    wall_ms = statistics.median(wall)
    warnings = []
    if busy_ms > wall_ms:  # busy comes from the profiled steps, wall from unprofiled ones: no idle time is seen
        warnings.append(f"busy {busy_ms:.3f} ms a step (profiled steps, {profiled_ms:.3f} ms each) exceeds the wall "
                        f"time {wall_ms:.3f} ms (unprofiled steps): the profiler's overhead or a noisy host; idle gaps "
                        f"taken as 0 - rerun on a quiet machine")
    floor_ms = strict.ms(ses.base["measured_gbps"])
    kv_bytes = strict.components["kv_read"] + strict.components["kv_write"]
    return {
        "schema_version": records.SCHEMA_VERSION, "kind": "explain", **ses.arch.identity(), "ctx": ctx,
        "mode": mode, "dtype": ses.cfg.dtype, "quant": ses.base["quant"], "device": str(ses.device),
        "device_name": ses.base["device_name"],
        "measured_gbps": ses.base["measured_gbps"],  # and the bandwidth probe's samples, as a run's record keeps them
        **{b: ses.base.get(b) for b in ("bw_samples_gbps", "bw_pattern", "bw_patterns_gbps",
                                        "bw_pattern_samples_gbps")},
        "floor_bytes": strict.bytes, "profile_steps": k,
        "wall_ms": wall_ms, "wall_samples_ms": wall, "gpu_busy_ms": busy_ms, "floor_ms_measured": floor_ms,
        "kernel_excess_ms": busy_ms - floor_ms, "idle_gaps_ms": max(wall_ms - busy_ms, 0.0),
        "profiled_wall_ms": profiled_ms, "warnings": warnings,
        "kernels_per_step": len(evs) / k, "host_enqueue_ms": statistics.median(host), "host_samples_ms": host,
        "attention_ms": attn_ms, "attention_kv_bytes": kv_bytes,
        "attention_gbps": kv_bytes / (attn_ms * 1e-3) / 1e9 if attn_ms > 0 else None,
        "top_kernels": [{"name": n, "ms_per_step": sum(o for o, _ in ds) / k,
                         "span_ms_per_step": sum(sp for _, sp in ds) / k, "calls_per_step": len(ds) / k,
                         "share": sum(o for o, _ in ds) / k / total_ms} for n, ds in top],
        "kernels_by_slot": [{"name": n, "slot": sl, "ms_per_step": sum(v) / k, "calls_per_step": len(v) / k,
                             "us_per_call": sum(v) / len(v) * 1e3} for (n, sl), v in by_slot.items()],
        "busy_is": "GPU kernels and copies" if cuda else "aten ops on the CPU",
        "timestamp": ses.base["timestamp"], "floorline_version": ses.base["floorline_version"],
        **{k: ses.base.get(k) for k in ("source_sha256", "kernel_sources_sha256", "git_sha")},
        **({k: v for k, v in ses.base.items() if k.startswith("native_")} if mode == "native" else {}), **chosen,
    }


def explain(cfg: RunConfig, profile_steps: int = 5, log: Callable[[str], None] = lambda s: None) -> list[dict]:
    ses = open_session(cfg, log)
    try:
        if ses.failed:  # the quantised model failed its check: nothing to profile
            raise UserError(f"{ses.failed}; `floorline run --quant {cfg.quant}` records it")
        return [explain_mode(ses, mode, ctx, profile_steps, log) for ctx in cfg.ctxs for mode in ses.modes]
    finally:
        ses.close()


def stacked_bar_png(rows: list[dict], path: str) -> None:
    """One bar per mode: floor, kernel excess and idle gaps stacked to the wall time per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['mode']}\nctx {r['ctx']}" for r in rows]
    parts = [("memory floor", "floor_ms_measured", "#4c72b0"), ("kernel excess", "kernel_excess_ms", "#dd8452"),
             ("idle gaps (launch + host)", "idle_gaps_ms", "#c44e52")]
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(rows), 4.5))
    bottom = [0.0] * len(rows)
    for name, key, color in parts:
        vals = [max(r[key], 0.0) for r in rows]  # a negative excess (busy under the floor) draws as 0
        ax.bar(labels, vals, bottom=bottom, label=name, color=color)
        bottom = [b + v for b, v in zip(bottom, vals)]
    for i, r in enumerate(rows):  # (busy over wall, a noisy host: the bar is busy's height, and says so)
        over = r["gpu_busy_ms"] > r["wall_ms"]
        ax.text(i, bottom[i], f"{r['wall_ms']:.2f} ms" + (f" wall\n(busy {r['gpu_busy_ms']:.2f})" if over else ""),
                ha="center", va="bottom", fontsize=8)
    ax.set_ylim(top=max(bottom) * 1.18 or 1.0)  # room for the labels under the title
    r0 = rows[0]
    ax.set_ylabel("ms per decode step")
    ax.set_title(f"{r0['model']} on {r0['device_name']}: where the step goes", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
