"""Every decoder layer of a dense bf16 step in one persistent kernel (NativeOptions persist): tasks taken by ticket,
counters instead of kernel boundaries (docs/persistent-step.md).

The step's other kernels stay: the embedding row, then this kernel, then lm_head (a GEMV at the bandwidth) and the
argmax. Inside, the layers are a list of tasks in dependency order, per layer

    q/k/v row blocks (RMSNorm prologue, bias)  ->  attention (kv head, chunk)  ->  merge (query head; only where the
    cache has several chunks)  ->  o row blocks (+= residual, in place)  ->  MLP row ranges (mlp.py's fused MLP:
    silu(gate) * up and its share of down, added atomically into the next residual buffer)

and the next layer's q/k/v blocks wait on this layer's MLP. A program takes the next task by an atomic ticket, loads
the weights it can (they never depend on another task) and then waits for its inputs: a counter per (layer, kind of
task) that the producing tasks raise after their stores (bar.sync, then a release add) and the consumer polls with
acquire loads. A task waits only on tasks with smaller tickets, which running programs hold, so the kernel cannot
deadlock whatever the number of resident programs, and under Triton's interpreter (which runs program 0 to the end
first) program 0 takes every ticket in order. Programs that finish a stage early take the next stage's tasks and
request their weights while the stage drains, as much as a program's registers hold: on the H200 that is too little
to keep the stream going across the boundaries, and the kernel is slower than the per-kernel step there
(docs/lab/2026-12-03-persistent-step.md), so the default is off and `auto` lets the step tuner choose.

A wait never hangs: past `limit` (a deadline from the program's start: %globaltimer on a GPU, a count of polls under
the interpreter) the task writes its ticket + 1 into the error word and goes on; the runtime reads the word after the
steps it ran (check) and raises one line naming the kernel and `--native persist=off`. The last program to leave
zeroes the counters and the ticket for the next step (all others have left: no task is still reading them).

Buffers: the residual stream in three fp32 buffers in turn (layer l reads B[l % 3], its MLP adds into B[(l + 1) % 3],
its o tasks zero B[(l + 2) % 3] for layer l + 1: last read by layer l - 1, whose tasks all finished before layer l's
o could start); q/k/v, the attention output and the chunks' partial sums are one buffer each, reused by every layer
(each is rewritten only after the next layer's q/k/v waited on this layer's MLP, which waited on all their readers).
Weights are the native model's own per-layer tensors, addressed as element offsets from layer 0's (no copy).
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
from floorline.native import attention as A_
from floorline.native import mlp as M_
from floorline.native import pdl as P

KINDS = 5  # counters a layer: q/k/v, attention chunks, merge, o, MLP
LIMIT_NS = 1_000_000_000  # a wait past one second from the program's start is a deadlock: the error word, not a hang
LIMIT_POLLS = 100_000  # the interpreter's clock: polls, not nanoseconds


@dataclass(frozen=True)
class Config:
    """A launch of the persistent kernel: programs an SM, warps a program, rows a q/k/v and an o task, the GEMV tile
    width, rows a tile of an MLP task, and MLP tasks a layer per SM (0: one a program)."""
    per_sm: int = 2
    warps: int = 8
    bq: int = 16
    bo: int = 16
    bk: int = 512
    bj: int = 2
    mlp: int = 0
    whole: int = 0  # 1: a q/k/v or o task requests its whole block of weights before the wait (else two tiles)
    chunk: int = 0  # cache positions an attention task covers (0: one chunk up to 512 positions, else the step's)
    bl: int = 64  # positions an attention tile (the chunk's first tile is loaded before the wait)

    def maxnreg(self) -> int:
        """Registers a thread, capped so that per_sm programs fit an SM's 64K (ptxas takes up to 255 otherwise: the
        fully unrolled K loops keep their loads in flight in registers)."""
        return min(255, 65536 // (self.per_sm * self.warps * 32) // 8 * 8)

    def name(self) -> str:
        return (f"x{self.per_sm} w{self.warps} q{self.bq} o{self.bo} k{self.bk} j{self.bj}"
                + (f" m{self.mlp}" if self.mlp else "") + (f" c{self.chunk}" if self.chunk else "")
                + (f" l{self.bl}" if self.bl != 64 else "") + (" whole" if self.whole else ""))


# the step tuner's candidates: the fastest three of the H200 traces (llama-3.2-1b and qwen2.5-0.5b at ctx 128,
# docs/lab/2026-12-03-persistent-step.md); one MLP task an SM, one attention tile for the whole chunk, 16 warps a
# program and 3-4 programs an SM were slower there
CANDIDATES = [Config(bq=8, bo=8, whole=1), Config(warps=4, bq=8, bo=8, bk=128, bj=1), Config()]

if triton is not None:

    @triton.jit
    def _now(CLOCK, GPU: tl.constexpr):
        """The wait's clock: %globaltimer (ns) on a GPU; under the interpreter a counter each read raises."""
        if GPU:
            t = tl.extra.cuda.globaltimer()
        else:
            t = tl.atomic_add(CLOCK, 1).to(tl.int64)
        return t

    @triton.jit
    def _load_acquire(C, GPU: tl.constexpr):
        """A counter read with acquire semantics at GPU scope: the loads after it see what its producers stored before
        their release (and not a stale L1 line of an earlier layer)."""
        if GPU:
            c = tl.inline_asm_elementwise("ld.global.acquire.gpu.b32 $0, [$1];", "=r,l", [C], dtype=tl.int32,
                                          is_pure=False, pack=1)
        else:
            c = tl.load(C)
        return c

    @triton.jit
    def _wait(C, target, deadline, ERR, who, CLOCK, GPU: tl.constexpr, TR, TRACE: tl.constexpr):
        """Until counter C reaches target, or the deadline: then ERR[0] = who (the first task to time out keeps it).
        TRACE: the clock before and after the wait into the task's row of TR (words 1 and 2)."""
        c = _load_acquire(C, GPU)
        t = _now(CLOCK, GPU)
        if TRACE:
            tl.store(TR + (who - 1) * 8 + 1, t)
        while (c < target) & (t < deadline):
            c = _load_acquire(C, GPU)
            t = _now(CLOCK, GPU)
        if TRACE:
            tl.store(TR + (who - 1) * 8 + 2, t)
        if c < target:
            tl.atomic_cas(ERR, 0, who)

    @triton.jit
    def _signal(C):
        """One task more done: every thread's stores first (bar.sync), then one release add at GPU scope."""
        tl.debug_barrier()
        tl.atomic_add(C, 1, sem="release", scope="gpu")

    @triton.jit
    def _rows(W, K: tl.constexpr, rn, nmask, X, NW, C, target, deadline, ERR, who, CLOCK, eps,
              BK: tl.constexpr, NORM: tl.constexpr, GPU: tl.constexpr, TR, TRACE: tl.constexpr):
        """y = W[rn] @ n(x) (n: RMSNorm with weights NW where NORM): the first two BK-wide weight tiles are requested
        before the wait on the producers of x, the rest two tiles ahead of their use."""
        wp = W + rn[:, None] * K + tl.arange(0, BK)[None, :]
        w0 = tl.load(wp, mask=nmask[:, None], other=0.0, eviction_policy="evict_first")
        w1 = tl.load(wp + BK, mask=nmask[:, None] & (BK < K), other=0.0, eviction_policy="evict_first")
        _wait(C, target, deadline, ERR, who, CLOCK, GPU, TR, TRACE)
        acc = tl.zeros([rn.shape[0], BK], dtype=tl.float32)
        ss = tl.zeros([BK], dtype=tl.float32)
        for k0 in range(0, K, BK):
            w2 = tl.load(wp + k0 + 2 * BK, mask=nmask[:, None] & (k0 + 2 * BK < K), other=0.0,
                         eviction_policy="evict_first")
            xr = tl.load(X + k0 + tl.arange(0, BK))
            xv = xr
            if NORM:
                xv = xr * tl.load(NW + k0 + tl.arange(0, BK))
            acc += w0.to(tl.float32) * xv[None, :]
            ss += xr * xr
            w0 = w1
            w1 = w2
        y = tl.sum(acc, 1)
        if NORM:
            y = y / tl.sqrt(tl.sum(ss, 0) / K + eps)
        return y

    @triton.jit
    def _rows_whole(W, K: tl.constexpr, KP: tl.constexpr, rn, nmask, X, NW, C, target, deadline, ERR, who, CLOCK,
                    eps, NORM: tl.constexpr, GPU: tl.constexpr, TR, TRACE: tl.constexpr):
        """_rows with the task's whole (rows, K) block of weights requested before the wait (K padded to KP, a power
        of two): the deepest prefetch a task can hold in registers."""
        k = tl.arange(0, KP)
        km = k < K
        w = tl.load(W + rn[:, None] * K + k[None, :], mask=nmask[:, None] & km[None, :], other=0.0,
                    eviction_policy="evict_first")
        nw = tl.load(NW + k, mask=km, other=0.0)
        _wait(C, target, deadline, ERR, who, CLOCK, GPU, TR, TRACE)
        xr = tl.load(X + k, mask=km, other=0.0)
        xv = xr
        if NORM:
            xv = xr * nw
        y = tl.sum(w.to(tl.float32) * xv[None, :], 1)
        if NORM:
            y = y / tl.sqrt(tl.sum(xr * xr, 0) / K + eps)
        return y

    @triton.jit
    def _attend(QKV, COS, SIN, pos, KC, VC, MO, LO, OO, A, QN, KN, scale, stride_kh, kvh, c,
                C, target, deadline, ERR, who, CLOCK, QK_EPS: tl.constexpr,
                NH: tl.constexpr, KVH: tl.constexpr, G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr,
                CHUNK: tl.constexpr, NCH: tl.constexpr, BL: tl.constexpr, QK_NORM: tl.constexpr,
                DOT_F32: tl.constexpr, GPU: tl.constexpr, TR, TRACE: tl.constexpr):
        """attention._attn_chunk as a task: RoPE of the group's q and of k at the position, this position's k and v
        into the layer's cache (by the chunk holding it), flash-decoding over the chunk; one chunk: the normalised
        output into A, else the partial sums for the merge tasks. The chunk's first tile of cached positions, the
        rotation's tables and the norm's weights are loaded before the wait."""
        start = c * CHUNK
        d = tl.arange(0, D)
        rl = start + tl.arange(0, BL)
        old = rl < pos
        base = kvh * stride_kh + rl[:, None] * D + d[None, :]
        k0 = tl.load(KC + base, mask=old[:, None], other=0.0)
        v0 = tl.load(VC + base, mask=old[:, None], other=0.0)
        cos = tl.load(COS + pos * D + d)
        sin = tl.load(SIN + pos * D + d)
        qn, qnp, kn, knp = None, None, None, None
        if QK_NORM:
            qn, qnp = tl.load(QN + d), tl.load(QN + (d + D // 2) % D)
            kn, knp = tl.load(KN + d), tl.load(KN + (d + D // 2) % D)
        _wait(C, target, deadline, ERR, who, CLOCK, GPU, TR, TRACE)
        if start <= pos:
            g = tl.arange(0, GP)
            one = tl.arange(0, 1)
            q = A_._rope(QKV, cos, sin, kvh * G + g, d, (g < G)[:, None], D, qn, qnp, QK_EPS)
            q = (q * scale).to(KC.dtype.element_ty)
            k_new = A_._rope(QKV, cos, sin, NH + kvh + one, d, one[:, None] >= 0, D, kn, knp, QK_EPS)
            k_new = k_new.to(KC.dtype.element_ty)
            v_new = tl.load(QKV + (NH + KVH + kvh + one)[:, None] * D + d[None, :]).to(VC.dtype.element_ty)
            if pos < start + CHUNK:
                tl.store(KC + kvh * stride_kh + pos * D + d[None, :] + one[:, None] * 0, k_new)
                tl.store(VC + kvh * stride_kh + pos * D + d[None, :] + one[:, None] * 0, v_new)
            if DOT_F32:
                q = q.to(tl.float32)
            m = tl.full([GP], -1e30, dtype=tl.float32)
            lsum = tl.zeros([GP], dtype=tl.float32)
            acc = tl.zeros([GP, D], dtype=tl.float32)
            k = tl.where((rl == pos)[:, None], k_new, k0)
            v = tl.where((rl == pos)[:, None], v_new, v0)
            m, lsum, acc = A_._attn_tile(q, k, v, rl <= pos, m, lsum, acc, DOT_F32)
            for off in range(BL, CHUNK, BL):
                if start + off <= pos:
                    rl = start + off + tl.arange(0, BL)
                    old = rl < pos
                    base = kvh * stride_kh + rl[:, None] * D + d[None, :]
                    k = tl.where((rl == pos)[:, None], k_new, tl.load(KC + base, mask=old[:, None], other=0.0))
                    v = tl.where((rl == pos)[:, None], v_new, tl.load(VC + base, mask=old[:, None], other=0.0))
                    m, lsum, acc = A_._attn_tile(q, k, v, rl <= pos, m, lsum, acc, DOT_F32)
            real = g < G
            if NCH == 1:
                tl.store(A + (kvh * G + g)[:, None] * D + d[None, :], acc / lsum[:, None], mask=real[:, None])
            else:
                o = (kvh * NCH + c) * GP + g
                tl.store(MO + o, m, mask=real)
                tl.store(LO + o, lsum, mask=real)
                tl.store(OO + o[:, None] * D + d[None, :], acc, mask=real[:, None])

    @triton.jit
    def _merge(MO, LO, OO, A, pos, h, G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, CHUNK: tl.constexpr,
               NCH: tl.constexpr, CB: tl.constexpr):
        """attention._attn_merge for query head h, all its dims: its live chunks' partial sums combined into A. This
        repeats the loop of attention.py's merge kernel: moved into a shared helper, that kernel compiled to another
        instruction schedule (scripts/sass_same.py: two merges), and its figures of record stand on its machine code.
        (_mlp_task's tile arithmetic is mlp._tile_sum, which the fused MLP kernel calls too.)"""
        kvh = h // G
        nlive = pos // CHUNK + 1
        d = tl.arange(0, D)
        cs = tl.arange(0, CB)
        m_run = tl.max(tl.full([CB], -1e30, dtype=tl.float32), 0)
        den = tl.sum(tl.zeros([CB], dtype=tl.float32), 0)
        num = tl.zeros([D], dtype=tl.float32)
        for c0 in range(0, nlive, CB):
            cm = (c0 + cs) < nlive
            o = (kvh * NCH + c0 + cs) * GP + h % G
            mc = tl.load(MO + o, mask=cm, other=-1e30)
            lc = tl.load(LO + o, mask=cm, other=0.0)
            oc = tl.load(OO + o[:, None] * D + d[None, :], mask=cm[:, None], other=0.0)
            m_new = tl.maximum(m_run, tl.max(mc, 0))
            a = tl.exp(m_run - m_new)
            w = tl.where(cm, tl.exp(mc - m_new), 0.0)
            den = den * a + tl.sum(w * lc, 0)
            num = num * a + tl.sum(oc * w[:, None], 0)
            m_run = m_new
        tl.store(A + h * D + d, num / den)

    @triton.jit
    def _mlp_task(WGU, WDT, X, NW, XO, j, MT, C, target, deadline, ERR, who, CLOCK, eps,
                  H: tl.constexpr, HP: tl.constexpr, I: tl.constexpr, BJ: tl.constexpr, GPU: tl.constexpr, TR,
                  TRACE: tl.constexpr):
        """mlp._mlp as a task: intermediate rows [j I / MT, (j + 1) I / MT) in tiles of BJ (the first tile loaded
        before the wait on the o tasks), their share of down summed privately and added into XO atomically; task 0
        adds x itself."""
        r0 = j * I // MT
        r1 = (j + 1) * I // MT
        nt = tl.cdiv(r1 - r0, BJ)
        rk = tl.arange(0, HP)
        km = rk < H
        i = tl.arange(0, 2 * BJ)
        jg = r0 + i % BJ
        jd = r0 + tl.arange(0, BJ)
        gu_rows = (jg + (i // BJ) * I)[:, None] * H + rk[None, :]
        d_rows = jd[:, None] * H + rk[None, :]
        wgu = tl.load(WGU + gu_rows, mask=km[None, :] & (jg < r1)[:, None], other=0.0, eviction_policy="evict_first")
        wd = tl.load(WDT + d_rows, mask=km[None, :] & (jd < r1)[:, None], other=0.0, eviction_policy="evict_first")
        _wait(C, target, deadline, ERR, who, CLOCK, GPU, TR, TRACE)
        x = tl.load(X + rk, mask=km, other=0.0)
        xn = x * tl.load(NW + rk, mask=km, other=0.0) / tl.sqrt(tl.sum(x * x, 0) / H + eps)
        y = tl.where(j == 0, x, 0.0)
        half = tl.arange(0, 2)[:, None]
        for t in range(0, nt):
            mg = km[None, :] & (jg + (t + 1) * BJ < r1)[:, None]
            md = km[None, :] & (jd + (t + 1) * BJ < r1)[:, None]
            wgu2 = tl.load(WGU + gu_rows + BJ * H, mask=mg, other=0.0, eviction_policy="evict_first")
            wd2 = tl.load(WDT + d_rows + BJ * H, mask=md, other=0.0, eviction_policy="evict_first")
            y += M_._tile_sum(wgu, wd, xn, half, BJ)
            wgu = wgu2
            wd = wd2
            gu_rows += BJ * H
            d_rows += BJ * H
        tl.atomic_add(XO + rk, y, mask=km, sem="relaxed")

    @triton.jit
    def _persist(WQKV, WO, WGU, WDT, OFF, ANORM, FNORM, QB, QN, KN, XS, QKV, A, MO, LO, OO, KC, VC, COS, SIN, POS,
                 CNT, ERR, TR, eps, scale, stride_l, stride_kh, limit,
                 L: tl.constexpr, H: tl.constexpr, HP: tl.constexpr, NH: tl.constexpr, KVH: tl.constexpr,
                 D: tl.constexpr, G: tl.constexpr, GP: tl.constexpr, I: tl.constexpr,
                 BQ: tl.constexpr, BO: tl.constexpr, BKQ: tl.constexpr, BKO: tl.constexpr, BJ: tl.constexpr,
                 MT: tl.constexpr, CHUNK: tl.constexpr, NCH: tl.constexpr, BL: tl.constexpr, CB: tl.constexpr,
                 HAS_BIAS: tl.constexpr, QK_NORM: tl.constexpr, QK_EPS: tl.constexpr, DOT_F32: tl.constexpr,
                 GPU: tl.constexpr,
                 PDL: tl.constexpr, WHOLE: tl.constexpr = 0, AP: tl.constexpr = 0, DROP: tl.constexpr = 0,
                 TRACE: tl.constexpr = 0):
        NQKV: tl.constexpr = (NH + 2 * KVH) * D
        NQ: tl.constexpr = (NQKV + BQ - 1) // BQ
        NA: tl.constexpr = KVH * NCH
        NM: tl.constexpr = NH if NCH > 1 else 0
        NO: tl.constexpr = (H + BO - 1) // BO
        TL: tl.constexpr = NQ + NA + NM + NO + MT
        TICKET = CNT + L * 5
        CLOCK = CNT + L * 5 + 2
        if PDL:
            tl.extra.cuda.gdc_wait()  # the embedding row is written
        deadline = _now(CLOCK, GPU) + limit
        pos = tl.load(POS)
        t = tl.atomic_add(TICKET, 1, sem="relaxed")
        while t < L * TL:
            lay = t // TL
            r = t - lay * TL
            who = t + 1
            if TRACE:  # the task's row: ticket, wait start, wait end, done (clock), program, SM
                tl.store(TR + t * 8, _now(CLOCK, GPU))
                tl.store(TR + t * 8 + 4, tl.program_id(0).to(tl.int64))
                if GPU:
                    tl.store(TR + t * 8 + 5, tl.extra.cuda.smid().to(tl.int64))
            X = XS + (lay % 3) * H
            cl = CNT + lay * 5  # this layer's counters: q/k/v, attention, merge, o, MLP
            if r < NQ:  # q/k/v rows, after the previous layer's MLP (layer 0: the embedding, before the kernel)
                prev = tl.where(lay > 0, MT + DROP, 0)  # DROP: the tests' deadlock (a producer too few)
                rn = r * BQ + tl.arange(0, BQ)
                nmask = rn < NQKV
                if HAS_BIAS:
                    bias = tl.load(QB + lay * NQKV + rn, mask=nmask, other=0.0)
                wq = WQKV + tl.multiple_of(tl.load(OFF + lay * 4), 16)
                cm = CNT + tl.maximum(lay - 1, 0) * 5 + 4
                if WHOLE:
                    y = _rows_whole(wq, H, HP, rn, nmask, X, ANORM + lay * H, cm, prev, deadline, ERR, who, CLOCK, eps,
                                    True, GPU, TR, TRACE)
                else:
                    y = _rows(wq, H, rn, nmask, X, ANORM + lay * H, cm, prev, deadline, ERR, who, CLOCK, eps, BKQ,
                              True, GPU, TR, TRACE)
                if HAS_BIAS:
                    y += bias
                tl.store(QKV + rn, y, mask=nmask)
                _signal(cl)
            elif r < NQ + NA:  # attention chunks, after all of the layer's q/k/v
                a = r - NQ
                _attend(QKV, COS, SIN, pos, KC + lay * stride_l, VC + lay * stride_l, MO, LO, OO, A, QN + lay * D,
                        KN + lay * D, scale, stride_kh, a // NCH, a % NCH, cl, NQ, deadline, ERR, who, CLOCK,
                        QK_EPS, NH, KVH, G, GP, D, CHUNK, NCH, BL, QK_NORM, DOT_F32, GPU, TR, TRACE)
                _signal(cl + 1)
            elif r < NQ + NA + NM:  # merges, after every chunk of the layer
                _wait(cl + 1, NA, deadline, ERR, who, CLOCK, GPU, TR, TRACE)
                _merge(MO, LO, OO, A, pos, r - NQ - NA, G, GP, D, CHUNK, NCH, CB)
                _signal(cl + 2)
            elif r < NQ + NA + NM + NO:  # o rows += into the residual, in place; the buffer after next zeroed
                rn = (r - NQ - NA - NM) * BO + tl.arange(0, BO)
                nmask = rn < H
                wo = WO + tl.multiple_of(tl.load(OFF + lay * 4 + 1), 16)
                ca = cl + 1  # the attention's counter, or the merges' where the cache has several chunks
                na = NA
                if NCH > 1:
                    ca = cl + 2
                    na = NM
                if WHOLE:
                    y = _rows_whole(wo, NH * D, AP, rn, nmask, A, A, ca, na, deadline, ERR, who, CLOCK, eps, False,
                                    GPU, TR, TRACE)
                else:
                    y = _rows(wo, NH * D, rn, nmask, A, A, ca, na, deadline, ERR, who, CLOCK, eps, BKO, False, GPU,
                              TR, TRACE)
                tl.store(X + rn, tl.load(X + rn, mask=nmask, other=0.0) + y, mask=nmask)
                tl.store(XS + ((lay + 2) % 3) * H + rn, tl.zeros([BO], dtype=tl.float32), mask=nmask)
                _signal(cl + 3)
            else:  # the MLP's rows, after every o task
                _mlp_task(WGU + tl.multiple_of(tl.load(OFF + lay * 4 + 2), 16),
                          WDT + tl.multiple_of(tl.load(OFF + lay * 4 + 3), 16), X, FNORM + lay * H,
                          XS + ((lay + 1) % 3) * H, r - NQ - NA - NM - NO, MT, cl + 3, NO, deadline, ERR, who, CLOCK,
                          eps, H, HP, I, BJ, GPU, TR, TRACE)
                _signal(cl + 4)
            if TRACE:
                tl.store(TR + t * 8 + 3, _now(CLOCK, GPU))
            t = tl.atomic_add(TICKET, 1, sem="relaxed")
        # the last program out zeroes the counters and the ticket for the next step: every other one has left
        if tl.atomic_add(CNT + L * 5 + 1, 1) == tl.num_programs(0) - 1:
            for c0 in range(0, L * 5 + 3, 128):
                cz = c0 + tl.arange(0, 128)
                tl.store(CNT + cz, tl.zeros([128], dtype=tl.int32), mask=cz < L * 5 + 3)
        if PDL:
            tl.extra.cuda.gdc_launch_dependents()


def unsupported(net) -> str | None:
    """Why the persistent kernel cannot run this native model's layers (None: it can)."""
    lay = net.layers[0]
    if "scales" in lay["qkv"]:
        return "int4 weights (the persistent kernel streams bf16/fp16/fp32 matrices)"
    if not net.fused_mlp:
        return "mlp=gemv (the persistent kernel runs the fused MLP)"
    return None


def _matrices(lay: dict) -> tuple:
    """A native layer's four matrices, in the kernel's order: q/k/v, o, gate_up, down transposed."""
    return lay["qkv"]["w"], lay["o"]["w"], lay["gate_up"]["w"], lay["down_t"]


def tile_k(k: int, want: int) -> int:
    """The GEMV tasks' tile width along K: the largest power of two up to `want` that divides k (at least 16)."""
    bk = want
    while bk > 16 and k % bk:
        bk //= 2
    if k % bk:
        raise UserError(f"native option persist=on: K = {k} is not a multiple of 16; use persist=off")
    return bk


class PersistStep:
    """The persistent kernel's buffers and launch for a NativeModel (net): its counters, error word, attention
    output and partial sums, the per-layer weight offsets and the stacked small vectors (norms, biases)."""

    def __init__(self, net, config: Config = Config(), chunk: int = 0):
        why = unsupported(net)
        if why:
            raise UserError(f"native option persist=on: not for {why}; use persist=off")
        self.net, self.config = net, config
        lays = net.layers
        dev = lays[0]["qkv"]["w"].device
        self.base = _matrices(lays[0])
        offs = []
        for lay in lays:
            row = []
            for b, t in zip(self.base, _matrices(lay)):
                delta = t.data_ptr() - b.data_ptr()
                if delta % (16 * t.element_size()) or t.dtype != b.dtype or not t.is_contiguous():
                    raise UserError("native option persist=on: the layers' matrices are not 16-element aligned "
                                    "contiguous tensors of one dtype; use persist=off")
                row.append(delta // t.element_size())
            offs.append(row)
        self.off = torch.tensor(offs, dtype=torch.int64, device=dev)
        self.anorm = torch.stack([lay["attn_norm"] for lay in lays])
        self.fnorm = torch.stack([lay["ffn_norm"] for lay in lays])
        self.has_bias = lays[0]["qkv_bias"] is not None
        self.qb = torch.stack([lay["qkv_bias"] for lay in lays]) if self.has_bias else self.anorm
        self.qk_norm = lays[0]["qk_norm"] is not None
        self.qk_eps = float(lays[0]["qk_norm"][2]) if self.qk_norm else 0.0
        self.qn = torch.stack([lay["qk_norm"][0] for lay in lays]) if self.qk_norm else self.anorm
        self.kn = torch.stack([lay["qk_norm"][1] for lay in lays]) if self.qk_norm else self.anorm
        h, kv, d = net.heads, net.kv_heads, net.head_dim
        self.g = h // kv
        self.gp = max(16, triton.next_power_of_2(self.g))
        self.fixed_chunk = chunk
        # the chunks' partial sums, for the smallest chunk any config takes (16 positions)
        shape = (kv, -(-net.max_len // 16), self.gp)
        f32 = dict(device=dev, dtype=torch.float32)
        self.mo, self.lo = torch.zeros(shape, **f32), torch.zeros(shape, **f32)
        self.oo = torch.zeros(*shape, d, **f32)
        self.out = torch.zeros(h * d, **f32)
        self.cnt = torch.zeros(len(lays) * KINDS + 3, dtype=torch.int32, device=dev)
        self.err = torch.zeros(1, dtype=torch.int32, device=dev)
        self.inter = lays[0]["gate_up"]["rows"] // 2
        self.trace = None  # an int64 tensor of 8 words a task: the kernel writes each task's clock there (lab use)
        self.drop = 0  # > 0: every wait on a layer's MLP asks for this many tasks more than exist (the tests' deadlock)

    @property
    def chunk(self) -> int:
        """Cache positions an attention task covers: fixed at construction, else the config's, else one chunk up to
        512 positions (no merge tasks) and the native step's own chunk length beyond."""
        net = self.net
        return self.fixed_chunk or self.config.chunk or (
            max(64, triton.next_power_of_2(net.max_len)) if net.max_len <= 512 else max(net.attn.chunk, 64))

    @property
    def nchunk(self) -> int:
        return -(-self.net.max_len // self.chunk)

    def tasks(self) -> dict:
        """Tasks a layer by kind, and in all (what a trace of the kernel holds)."""
        c, net = self.config, self.net
        n = {"qkv": -(-(net.heads + 2 * net.kv_heads) * net.head_dim // c.bq), "attention": net.kv_heads * self.nchunk,
             "merge": net.heads if self.nchunk > 1 else 0, "o": -(-net.hidden // c.bo),
             "mlp": self.mlp_tasks()}
        return {**n, "layer": sum(n.values()), "all": sum(n.values()) * len(net.layers)}

    def mlp_tasks(self) -> int:
        gpu = not INTERPRET and self.base[0].is_cuda
        if not gpu:
            return 3
        return self.programs() // self.config.per_sm * self.config.mlp if self.config.mlp else self.programs()

    def programs(self) -> int:
        if INTERPRET or self.base[0].device.type != "cuda":
            return 2
        return torch.cuda.get_device_properties(self.base[0].device).multi_processor_count * self.config.per_sm

    def launch(self) -> None:
        net, c = self.net, self.config
        gpu = int(not INTERPRET and self.base[0].is_cuda)
        pdl = net.pdl if gpu else 0
        progs = self.programs()
        mt = self.mlp_tasks()
        d = net.head_dim
        _persist[(progs,)](
            *self.base, self.off, self.anorm, self.fnorm, self.qb, self.qn, self.kn, net.xs, net.qkv, self.out,
            self.mo, self.lo, self.oo, net.k_cache, net.v_cache, net.cos, net.sin, net.pos, self.cnt, self.err,
            self.err if self.trace is None else self.trace, net.eps, net.scale, net.k_cache.stride(0),
            net.k_cache.stride(1), LIMIT_NS if gpu else LIMIT_POLLS,
            L=len(net.layers), H=net.hidden, HP=triton.next_power_of_2(net.hidden), NH=net.heads, KVH=net.kv_heads,
            D=d, G=self.g, GP=self.gp, I=self.inter, BQ=c.bq, BO=c.bo, BKQ=tile_k(net.hidden, c.bk),
            BKO=tile_k(net.heads * d, c.bk), BJ=c.bj, MT=mt, CHUNK=self.chunk, NCH=self.nchunk,
            BL=min(c.bl, self.chunk), CB=min(64, triton.next_power_of_2(self.nchunk)), WHOLE=c.whole,
            AP=triton.next_power_of_2(net.heads * d), HAS_BIAS=self.has_bias, QK_NORM=self.qk_norm,
            QK_EPS=self.qk_eps, DOT_F32=not gpu, GPU=gpu, PDL=pdl, DROP=self.drop, TRACE=int(self.trace is not None),
            num_warps=c.warps,
            **({"maxnreg": c.maxnreg()} if gpu else {}), **P.launch_kwargs(pdl))

    def check(self) -> None:
        """One line if any wait of the steps run so far timed out (a deadlock caught, not a hang)."""
        who = int(self.err.item())
        if who:
            raise UserError(f"native persistent layer kernel: task {who - 1} waited past {LIMIT_NS / 1e9:.0f} s for "
                            "its inputs (a deadlock); run with --native persist=off")


def retune_in_step(net, capture, state: list, with_off: bool, reps: int = 30) -> None:
    """The persistent kernel's launch candidates (and, with_off, the per-kernel step: persist=auto) timed in the whole
    step (timing.fastest_in_step), the fastest kept. Each candidate is compiled first, outside any graph capture."""
    from floorline.device import timing
    from floorline.native.tuner import TUNER

    ps = net.persist

    def use(c):
        net.persist_on = c is not None
        if c is not None:
            ps.config = c

    def warm():  # a launch over the current position, which the step rewrites before use; a deadlock is one line
        if net.persist_on:
            ps.launch()
            ps.check()

    times = timing.fastest_in_step(([None] if with_off else []) + CANDIDATES, use, capture, state, reps, warm=warm)
    TUNER.step_tuning["persist"] = {("off" if c is None else c.name()): round(t, 4) for c, t in times.items()}
