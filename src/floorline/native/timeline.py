"""A diagnostic of mode native's step: when each program of a kernel starts, when its wait on the previous kernel
returns, when it ends, and on which SM -- read from the GPU's %globaltimer (ns) inside one decode step.

Why: `explain` sees kernels whole (a kernel's span from the profiler), so a kernel boundary's cost shows only as
time no kernel explains. Under programmatic dependent launch a program's life has three points that say where that
time goes: its start (when it became resident: the SM had room), its wait's return (the previous kernel's whole grid
has ended and its writes are visible: that kernel's end as the next one sees it) and its end. Between two kernels:
  - wait - start: how early a program was resident (its first loads in flight before the wait);
  - the next kernel's first wait - this kernel's last end: the boundary's own latency;
  - end - wait: the program's work after the wait (its latency chain).

The kernels that take a timeline (the single-GPU step's Triton GEMV: q/k/v, o, gate_up and down where the MLP is not
fused, lm_head; the attention's chunks and merge, the o GEMV with the merge inside and the fused MLP; a constexpr
pointer TL, None by default: with None they compile to the same code as without it; the CUDA attention chunks by a
define TL, absent by default: the same machine code) get a slot per launch from ACTIVE (Timeline.slot), which a CUDA
graph keeps: every replay rewrites the same slots. A stamped Triton GEMV runs the tile its autotuner chose for the
shape, launched directly (gemv.stamped_tile). The int4 CUDA GEMV takes none: its end is the next kernel's wait. A stamp
costs a program three timer reads (one before its first loads) and four stores after its work: the diagnostic moves the
step by that. A live CUDA chunk program pays more: five timer reads (two of them inside its work, at barriers it has
anyway), six stores and one more barrier before its end.

A launch may also name marks: points inside a program's work after the wait, one word each after the four (the CUDA
chunks: "qkv", its q/k/v prologue done; "tiles", its own token's scores, its q fragments and its warps' tiles done,
the combine of their partials left). A program that leaves without waiting (the CUDA chunks past the position)
stamps its wait and marks 0: the figures of waits, ends, work and marks are over the programs that waited, so
those of the CUDA chunks and of Triton's (whose programs past the position wait, then leave) differ by those.

scripts/timeline.py runs it on a model (`scripts/gpu_check.sh timeline`); summarize() reduces the stamps to a table.
"""

from __future__ import annotations

import statistics

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # floorline runs without Triton; only mode native and its kernel tests need it
    triton = tl = None

FIELDS = ("start", "wait", "end", "sm")  # a program's stamps: start, wait returned, end (ns), its SM
WORDS = len(FIELDS)  # int64 each


class Timeline:
    """Slots of WORDS int64 a program (and one more a mark) for the launches of one step, in launch order. rewind()
    before each step that is run or captured: the slots are handed out again from the first, so a graph's replays
    rewrite them."""

    def __init__(self, device, programs: int = 1 << 20):
        self.buf = torch.zeros(programs * WORDS, dtype=torch.int64, device=device)
        self.capacity = programs * WORDS  # words
        self.launches: list[tuple[str, int, int, tuple[str, ...]]] = []  # (kind, first word, programs, marks)
        self.used = 0  # words

    def rewind(self) -> None:
        self.launches, self.used = [], 0

    def slot(self, kind: str, programs: int, marks: tuple[str, ...] = ()) -> torch.Tensor:
        words = programs * (WORDS + len(marks))
        if self.used + words > self.capacity:
            raise ValueError(f"timeline: {self.used + words} words a step, room for {self.capacity}")
        view = self.buf[self.used:self.used + words]
        self.launches.append((kind, self.used, programs, tuple(marks)))
        self.used += words
        return view

    def read(self) -> list[dict]:
        """The step's stamps, launch by launch: {kind, start, wait, end, sm, marks, and a list for each mark} (lists
        over its programs; ns; wait 0: the program did not wait, and its marks are 0)."""
        flat = self.buf[:self.used].tolist()
        out = []
        for kind, first, n, marks in self.launches:
            fields = FIELDS + marks
            rows = [flat[first + i * len(fields):first + (i + 1) * len(fields)] for i in range(n)]
            out.append({"kind": kind, "marks": list(marks),
                        **{k: [r[i] for r in rows] for i, k in enumerate(fields)}})
        return out


ACTIVE: Timeline | None = None  # set by the diagnostic; None: the kernels take no timeline


def launch_kwargs(kind: str, programs: int) -> dict:
    """A launch's timeline argument: TL, a slot of ACTIVE for `programs` programs, where the diagnostic is on;
    nothing otherwise (the kernel compiles without it)."""
    return {} if (tl_slot := slot(kind, programs)) is None else {"TL": tl_slot}


def slot(kind: str, programs: int, marks: tuple[str, ...] = ()) -> torch.Tensor | None:
    """A CUDA kernel's timeline slot where the diagnostic is on, else None (the kernel is built without one)."""
    return None if ACTIVE is None else ACTIVE.slot(kind, programs, marks)


if triton is not None:

    @triton.jit
    def now():
        """The GPU's global timer, ns."""
        return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False,
                                         pack=1)

    @triton.jit
    def put(TL, t0, t1):
        """This program's stamps: t0 (start), t1 (wait returned), now (end), its SM; programs numbered along axis 0
        first."""
        p = 4 * (tl.program_id(0) + tl.program_id(1) * tl.num_programs(0))  # WORDS a program
        sm = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)
        tl.store(TL + p, t0)
        tl.store(TL + p + 1, t1)
        tl.store(TL + p + 2, now())
        tl.store(TL + p + 3, sm.to(tl.int64))


def origin(launches: list[dict]) -> int:
    """A step's (read()'s) first program start, ns: the time axis's zero."""
    return min(min(x["start"]) for x in launches)


def shifted(launch: dict, t0: int) -> dict:
    """A launch of read() with its times (start, wait, end and marks) in ns from t0; a wait of 0 (and the marks of
    a program that did not wait) stay 0."""
    live = [bool(w) for w in launch["wait"]]
    out = {**launch, "start": [v - t0 for v in launch["start"]], "end": [v - t0 for v in launch["end"]]}
    for k in ("wait", *launch.get("marks", ())):
        out[k] = [v - t0 if ok else 0 for v, ok in zip(launch[k], live)]
    return out


def launch_stats(launch: dict, t0: int) -> dict:
    """One launch's programs in us from t0: first / median / last start, wait and end, the median of each program's
    end - wait (its work after the wait) and wait - start (how early it was resident), the longest work, and for each
    mark the median of mark - wait (`<mark>_med`); starts over every program, the rest over the programs that waited
    (`waited`). (The median can hide the programs that matter: Triton's chunks past the position only wait and
    leave, so at a short position most of its chunk programs work ~0.1 us while the live ones take 1.2-2.3 us.)"""
    live = [i for i, w in enumerate(launch["wait"]) if w]  # (wait 0: left without waiting)
    if not live:
        raise ValueError(f"timeline: no program of a {launch['kind']!r} launch waited (a slot never written?)")
    every = range(len(launch["start"]))
    us = {k: [(launch[k][i] - t0) / 1e3 for i in idx] for k, idx in (("start", every), ("wait", live), ("end", live))}
    out = {"kind": launch["kind"], "programs": len(launch["start"]), "waited": len(live)}
    for k, xs in us.items():
        out[f"{k}_first"], out[f"{k}_med"], out[f"{k}_last"] = min(xs), statistics.median(xs), max(xs)
    work = [(launch["end"][i] - launch["wait"][i]) / 1e3 for i in live]
    out["work_med"], out["work_max"] = statistics.median(work), max(work)
    out["lead_med"] = statistics.median((launch["wait"][i] - launch["start"][i]) / 1e3 for i in live)
    for mark in launch.get("marks", ()):
        out[f"{mark}_med"] = statistics.median((launch[mark][i] - launch["wait"][i]) / 1e3 for i in live)
    out["sms"] = len(set(launch["sm"]))
    return out


def summarize(steps: list[list[dict]]) -> dict:
    """Stamps of several replays of one step (read() each) -> per kind, medians over every launch of that kind and
    every replay: its programs' lead (wait - start), work (end - wait) and longest work, each mark's time after the
    wait, its span from the first wait to the last end, the spread of its ends (last - median), and gap_after_<kind>:
    its first wait after the previous stamped launch's last end (the boundary as the programs see it, with the
    unstamped kernels between them)."""
    by_kind: dict[str, dict[str, list[float]]] = {}
    for launches in steps:
        t0 = origin(launches)
        prev = None
        for x in launches:
            s = launch_stats(x, t0)
            d = by_kind.setdefault(x["kind"], {})
            for k in ("lead_med", "work_med", "work_max", *(f"{m}_med" for m in x.get("marks", ()))):
                d.setdefault(k, []).append(s[k])
            d.setdefault("span", []).append(s["end_last"] - s["wait_first"])
            d.setdefault("tail", []).append(s["end_last"] - s["end_med"])
            if prev is not None:
                d.setdefault(f"gap_after_{prev['kind']}", []).append(s["wait_first"] - prev["end_last"])
            d.setdefault("programs", []).append(s["programs"])
            d.setdefault("waited", []).append(s["waited"])
            d.setdefault("sms", []).append(s["sms"])
            prev = s
    return {kind: {k: statistics.median(v) for k, v in d.items()} for kind, d in by_kind.items()}
