"""q/k/v, the attention's chunks and their merge in one launch a layer (mode native's dense step): tasks taken by
ticket, a counter per kv head instead of the two kernel boundaries between them.

Per layer, tickets in dependency order:

    q/k/v rows, kv group 0, 1, ...   RMSNorm prologue, bias (Config.qkv 0: the q/k/v GEMV stays its own kernel)
    ->  chunk (kv head g, c)          waits on group g's q/k/v rows (counter QC[g]), then attention._attn_chunk's work
    ->  merge (query head h)          waits on its kv head's chunks (counter AC[g]); none where the cache is one chunk
                                      (the chunk task writes the normalised output itself)

A program takes one task by an atomic ticket and waits only on tasks of smaller tickets, which programs already running
hold: no deadlock whatever the number of resident programs (persist.py's argument, for one layer). A group's rows are
its q heads [g G, (g + 1) G), k head g and v head g, so its chunks wait on those rows only, not on the whole GEMV's
tail. Each task requests what never depends on another task (its weights, the chunk's first tile of cached positions,
the RoPE tables, the norms' weights) before it waits, and once it has waited lets the next kernel (o) launch: PDL
after-wait, as every native kernel. The last program out zeroes the layer's counters for the next step. A wait past
persist.LIMIT_NS writes its ticket into the error word and goes on: check() raises one line instead of a hang.

Why: the boundary probe (docs/lab/2026-12-02-boundary-probe.md) measured q/k/v -> chunks and chunks -> merge as the
two largest dependencies of qwen2.5-7b's step (49 and 40 us of 3.48 ms), and the persistent kernel's traces put a
counter handoff at 0.3-0.8 us against 2-4 us a kernel boundary (docs/lab/2026-12-03-persistent-step.md). Whether one
launch pays on a GPU is the step tuner's to find: retune_in_step times each Config against the separate kernels in the
whole step and keeps the fastest (native_qkv_attn_step_tuning, native_qkv_attn_used).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # floorline runs without Triton; only mode native and its kernel tests need it
    triton = tl = None

from floorline.core.errors import UserError
from floorline.native import INTERPRET
from floorline.native import pdl as P
from floorline.native import persist as PS


@dataclass(frozen=True)
class Config:
    """A launch: q/k/v tasks in it (1) or the GEMV before it (0), rows a q/k/v task (a divisor of head_dim), the
    GEMV's tile width along K, warps a program (every task's: one kernel)."""
    qkv: int = 1
    bq: int = 16
    bk: int = 512
    warps: int = 8
    early: int = 0  # 1: chunk and merge tasks let the next kernel launch at their start, not once they have waited

    def name(self) -> str:
        return ((f"q/k/v {self.bq}x{self.bk} + " if self.qkv else "") + f"chunks + merge w{self.warps}"
                + (" early" if self.early else ""))


# the step tuner's candidates; the first is what the tests run. Eight warps is the chunk kernel's own choice at 64
# positions; four gives the q/k/v tasks more programs an SM. Offline SASS (sm_90, qwen3-8b and llama-3.2-1b shapes,
# capped at MAXNREG): no spills but 8-16 bytes of stack at 8 warps; the chunks alone in 4-warp programs spill 400-616
# bytes (not a candidate)
CANDIDATES = [Config(), Config(bq=8, bk=256), Config(bq=8, bk=256, warps=4), Config(bq=32, bk=256), Config(qkv=0),
              Config(bq=32, bk=256, early=1), Config(qkv=0, early=1)]
MAXNREG = 128  # registers a thread: two 8-warp or four 4-warp programs an SM (uncapped, ptxas takes 134-162)

if triton is not None:

    @triton.jit
    def _qkv_rows(W, X, NW, B, rn, eps, K: tl.constexpr, BK: tl.constexpr, HAS_BIAS: tl.constexpr,
                  PDL: tl.constexpr):
        """y = W[rn] @ RMSNorm(x) (+ b): gemv.py's bf16 register buffers two tiles ahead, the first two tiles and the
        bias requested before the wait on the previous kernel, each tile's inputs with the tile before."""
        wp = W + rn[:, None] * K + tl.arange(0, BK)[None, :]
        w0 = tl.load(wp, eviction_policy="evict_first")
        more = (tl.zeros([1, 1], dtype=tl.int32) + BK) < K
        w1 = tl.load(wp + BK, mask=more, other=0.0, eviction_policy="evict_first")
        if HAS_BIAS:
            bias = tl.load(B + rn)
        P.wait(PDL)
        k = tl.arange(0, BK)
        xr = tl.load(X + k)
        xv = xr * tl.load(NW + k)
        acc = tl.zeros([rn.shape[0], BK], dtype=tl.float32)
        ss = tl.zeros([BK], dtype=tl.float32)
        for k0 in range(0, K, BK):
            more = (tl.zeros([1, 1], dtype=tl.int32) + k0 + 2 * BK) < K
            w2 = tl.load(wp + k0 + 2 * BK, mask=more, other=0.0, eviction_policy="evict_first")
            kn = tl.minimum(k0 + BK, K - BK) + k  # the next tile's inputs (the last tile's again at the end)
            xr2 = tl.load(X + kn)
            xv2 = xr2 * tl.load(NW + kn)
            acc += w0.to(tl.float32) * xv[None, :]
            ss += xr * xr
            w0 = w1
            w1 = w2
            xr = xr2
            xv = xv2
        y = tl.sum(acc, 1) / tl.sqrt(tl.sum(ss, 0) / K + eps)
        if HAS_BIAS:
            y += bias
        return y

    @triton.jit
    def _qkv_attn(W, ANORM, B, X, QKV, COS, SIN, POS, KC, VC, MO, LO, OO, OUT, QN, KN, CNT, ERR, eps, scale,
                  stride_kh, limit, drop,
                  H: tl.constexpr, NH: tl.constexpr, KVH: tl.constexpr, D: tl.constexpr, G: tl.constexpr,
                  GP: tl.constexpr, CHUNK: tl.constexpr, NCH: tl.constexpr, BL: tl.constexpr, CB: tl.constexpr,
                  BQ: tl.constexpr, BK: tl.constexpr, QKV_TASKS: tl.constexpr, HAS_BIAS: tl.constexpr,
                  QK_NORM: tl.constexpr, QK_EPS: tl.constexpr, DOT_F32: tl.constexpr, GPU: tl.constexpr,
                  PDL: tl.constexpr, SP: tl.constexpr, EARLY: tl.constexpr = 0):
        QR: tl.constexpr = (G + 2) * D // BQ  # q/k/v tasks a kv group
        NQ: tl.constexpr = KVH * QR * QKV_TASKS
        NA: tl.constexpr = KVH * NCH
        NM: tl.constexpr = NH if NCH > 1 else 0
        # the layer's words: q/k/v counters (KVH), chunk counters (KVH), the ticket, programs out, the clock
        deadline = PS._now(CNT + 2 * KVH + 2, GPU) + limit
        pos = tl.load(POS)
        t = tl.atomic_add(CNT + 2 * KVH, 1, sem="relaxed")
        who = t + 1
        if t < NQ:  # q/k/v rows of kv group g: q heads g G .. g G + G - 1, then k head g, then v head g
            g = t // QR
            r = (t % QR) * BQ
            row = tl.where(r < G * D, g * G * D + r,
                           tl.where(r < (G + 1) * D, NH * D + g * D + r - G * D, (NH + KVH) * D + g * D + r - (G + 1) * D))
            rn = row + tl.arange(0, BQ)
            y = _qkv_rows(W, X, ANORM, B, rn, eps, H, BK, HAS_BIAS, PDL)
            tl.store(QKV + rn, y)
            PS._signal(CNT + g)
        elif t < NQ + NA:  # a chunk, after its group's q/k/v rows (QKV_TASKS) or the previous kernel (the GEMV)
            if EARLY and PDL:
                tl.extra.cuda.gdc_launch_dependents()
            a = t - NQ
            kvh = a // NCH
            PS._attend(QKV, COS, SIN, pos, KC, VC, MO, LO, OO, OUT, QN, KN, scale, stride_kh, kvh, a % NCH, CNT + kvh,
                       QR + drop, deadline, ERR, who, CNT + 2 * KVH + 2, QK_EPS, NH, KVH, G, GP, D, CHUNK, NCH, BL,
                       QK_NORM, DOT_F32, GPU, ERR, 0, 1 + QKV_TASKS, PDL)
            PS._signal(CNT + KVH + kvh)
        elif t < NQ + NA + NM:  # a query head's merge, after its kv head's chunks
            h = t - NQ - NA
            if EARLY and PDL:
                tl.extra.cuda.gdc_launch_dependents()
            PS._gate(CNT + KVH + h // G, NCH + drop, deadline, ERR, who, CNT + 2 * KVH + 2, GPU, ERR, 0, 2, PDL)
            PS._merge(MO, LO, OO, OUT, pos, h, G, GP, D, CHUNK, NCH, CB)
        # the last program out zeroes the layer's words for the next step: every other one has left
        if tl.atomic_add(CNT + 2 * KVH + 1, 1) == tl.num_programs(0) - 1:
            z = tl.arange(0, SP)
            tl.store(CNT + z, tl.zeros([SP], dtype=tl.int32), mask=z < 2 * KVH + 3)


def unsupported(net) -> str | None:
    """Why this native model's layers cannot take the one launch (None: they can)."""
    if "scales" in net.layers[0]["qkv"]:
        return "int4 q/k/v (the one launch streams bf16/fp16/fp32 matrices)"
    if net.qkv_acc:
        return "a q/k/v vector added into"
    if net.attn.backend != "triton":
        return "the CUDA attention chunks (caches of 8192 positions and more)"
    if net.head_dim % 8:
        return f"head_dim {net.head_dim} (a q/k/v task's rows divide it)"
    return None


class QkvAttn:
    """The one launch's buffers for a NativeModel (net): a layer's counters, ticket and exit count (zeroed by the
    kernel's last program out), the error word; `config` the launch (None: q/k/v, chunks and merge as their own
    kernels, the default until the step tuner chooses)."""

    def __init__(self, net):
        why = unsupported(net)
        if why:
            raise ValueError(f"qkv_attn: not for {why}")
        self.net = net
        self.per = 2 * net.kv_heads + 3
        dev = net.qkv.device
        self.cnt = torch.zeros(len(net.layers) * self.per, dtype=torch.int32, device=dev)
        self.err = torch.zeros(1, dtype=torch.int32, device=dev)
        self.config: Config | None = None
        self.drop = 0  # > 0: every wait asks for this many tasks more than exist (the tests' deadlock)

    def launch(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """Layer i's q/k/v (Config.qkv; else already in net.qkv), RoPE, k and v into its cache at the position, and
        the attention over positions 0..pos; returns the attention's output (net.attn.out)."""
        net, c, s = self.net, self.config, self.net.attn
        lay = net.layers[i]
        gpu = int(not INTERPRET and x.is_cuda)
        pdl = net.pdl if gpu else 0
        d, kv = net.head_dim, net.kv_heads
        bq = min(c.bq, d)
        tasks = (kv * (s.g + 2) * d // bq if c.qkv else 0) + kv * s.nchunk + (net.heads if s.nchunk > 1 else 0)
        norm = lay["qk_norm"]
        bias = lay["qkv_bias"]
        kc, vc = net.k_cache[i], net.v_cache[i]
        _qkv_attn[(tasks,)](
            lay["qkv"]["w"], lay["attn_norm"], bias if bias is not None else lay["attn_norm"], x, net.qkv, net.cos,
            net.sin, net.pos, kc, vc, s.m, s.l, s.o, s.out, norm[0] if norm else lay["attn_norm"],
            norm[1] if norm else lay["attn_norm"], self.cnt[i * self.per:], self.err, net.eps, net.scale,
            kc.stride(0), PS.LIMIT_NS if gpu else PS.LIMIT_POLLS, self.drop,
            H=net.hidden, NH=net.heads, KVH=kv, D=d, G=s.g, GP=s.gp, CHUNK=s.chunk, NCH=s.nchunk, BL=s.tile,
            CB=min(64, triton.next_power_of_2(s.nchunk)), BQ=bq, BK=PS.tile_k(net.hidden, c.bk), QKV_TASKS=c.qkv,
            HAS_BIAS=bias is not None, QK_NORM=norm is not None, QK_EPS=float(norm[2]) if norm else 0.0,
            DOT_F32=not gpu, GPU=gpu, PDL=pdl, SP=triton.next_power_of_2(self.per), EARLY=c.early,
            num_warps=c.warps, **({"maxnreg": MAXNREG} if gpu else {}), **P.launch_kwargs(pdl))
        return s.out

    def check(self) -> None:
        """One line if any wait of the steps run so far timed out (a deadlock caught, not a hang)."""
        who = int(self.err.item())
        if who:
            raise UserError(f"native q/k/v + attention kernel: task {who - 1} waited past {PS.LIMIT_NS / 1e9:.0f} s "
                            "for its inputs (a deadlock); run with --native step_tune=off")


def retune_in_step(net, capture, state: list, reps: int = 30) -> None:
    """Each Config against the separate kernels (None, with whatever o_merge.retune_in_step chose), timed in the whole
    step (timing.fastest_in_step), the fastest kept in net.qkv_attn.config. One launch and the merge inside o are
    exclusive: a Config in place sets o_merge aside. Each candidate is compiled first, outside any graph capture (a
    launch of layer 0 at the current position, which the step rewrites before it reads it)."""
    from floorline.device import timing
    from floorline.native.tuner import TUNER

    qa = net.qkv_attn
    if qa is None or net.persist_on:
        return
    keep = net.o_merge

    def use(c):
        qa.config = c
        net.o_merge = keep if c is None else None

    def warm():
        if qa.config is not None:
            if not qa.config.qkv:
                net._qkv(net.layers[0], net.x)
            qa.launch(0, net.x)
            qa.check()

    times = timing.fastest_in_step([None] + CANDIDATES, use, capture, state, reps, warm=warm)
    TUNER.step_tuning["qkv_attn"] = {("off" if c is None else c.name()): round(t, 4) for c, t in times.items()}
