"""Every launch choice of mode native's step, in one object (TUNER): what each kernel was tuned to, per shape, and the
trials that chose it.

Two timers choose, in turn:
  1. one launch at a time (cold_bench): each candidate after a write that evicts the L2 cache, inside a CUDA graph (no
     launch overhead), as a decode step sees a matrix: its weights come from memory. Triton's default (one eager
     launch on warm weights) ranks small matrices by launch cost and L2 hits. This picks a first choice per shape.
  2. inside the whole step (retune_in_step of gemv.py, mlp.py, attention.py, o_merge.py and int4_cuda.py, through
     timing.fastest_in_step): each shape's candidates timed in a graph of one decode step, the token and position
     restored between replays, the fastest kept; then the attention's and o's finalists paired and timed in
     interleaved rounds (o_merge.retune_finals_in_step, timing.fastest_interleaved). A kernel's neighbours in the
     step are other kernels, whose tails and ramps it overlaps under programmatic dependent launch; neither timer of
     a kernel alone predicts that.
     NativeOptions.step_tune turns it off.

Each kernel module keeps its own candidates and its own retune; this module holds their state and the shared timer,
so that a record can say what was chosen (record()) and a new model's step starts from its own shapes (clear_used).
"""

from __future__ import annotations

import torch

from floorline.device import timing


# (kind of step tuning, the name its trials have in a record: native_<name>_step_tuning)
RECORD_NAMES = (("int4", "int4"), ("gemv", "triton"), ("mlp", "mlp"), ("persist", "persist"), ("attn", "attn"),
                ("o_merge", "o_merge"), ("finals", "finals"), ("kv_prefetch", "kv_prefetch"),
                ("pdl_early", "pdl_early"))


class Tuner:
    def __init__(self):
        self.gemv_candidates: dict = {}  # (N, K, PRO, GLU, ACC, INT4) -> the tiles gemv's pruning kept for a shape
        self.mlp_choice: dict = {}  # (hidden, intermediate) -> (rows a tile, warps, programs an SM)
        self.mlp_warm: set = set()  # (hidden, intermediate, dtype, PDL): every fused-MLP candidate compiled
        self.int4_best: dict = {}  # (device, shape, switches) -> the int4 CUDA GEMV's launch config
        self.int4_ranked: dict = {}  # the same keys -> its candidates, fastest first by cold_bench
        self.int4_last = None  # the int4 launch config of the latest call (`floorline check` names it)
        self.used: set = set()  # (kind, key) of every tuned launch since clear_used(): the step's own shapes
        self.step_tuning: dict = {}  # kind -> {shape: {candidate: step ms}} of the latest in-step re-timing
        self._flush: dict = {}  # device -> a buffer of twice its L2, written to evict it

    def clear_used(self) -> None:
        self.used.clear()

    def cold_bench(self, call, reps: int = 8) -> list[float]:
        """ms per call as a decode step sees a kernel: `reps` calls, each after a write that evicts the L2 cache,
        recorded in one CUDA graph (no launch overhead), minus the same graph of writes alone; as Triton's autotuner
        takes it ([median, p20, p80]; one figure: medians of 5 replays)."""
        dev = torch.device("cuda", torch.cuda.current_device())
        if dev not in self._flush:  # a normal tensor even when first asked for under inference_mode
            with torch.inference_mode(False):
                self._flush[dev] = torch.empty(2 * torch.cuda.get_device_properties(dev).L2_cache_size,
                                               dtype=torch.int8, device=dev)
        buf = self._flush[dev]
        both = timing.graph_ms([lambda: (buf.zero_(), call())] * reps, 5)
        ms = max(both - timing.graph_ms([buf.zero_] * reps, 5), 0.0)
        return [ms, ms, ms]

    def record(self) -> dict:
        """What a native record keeps of the in-step re-timing: each kind's trials (int4_cuda.tuned() adds the int4
        GEMV's chosen configs)."""
        return {f"native_{name}_step_tuning": self.step_tuning.get(kind) or None for kind, name in RECORD_NAMES}


def shape_name(n: int, k: int, pro, glu, acc) -> str:
    """A GEMV shape and its fusions in words, as the records name them: "37888x3584 norm glu"."""
    return f"{n}x{k}{' norm' if pro else ''}{' glu' if glu else ''}{' acc' if acc else ''}"


TUNER = Tuner()  # the process's one tuner: Triton's autotuner and every kernel module report into it
