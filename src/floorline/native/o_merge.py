"""The attention's merge folded into the o GEMV: one kernel a layer fewer (mode native's dense bf16 step).

    x += W_o @ a,   a[h] = sum_c w_c o_c[h] / sum_c w_c l_c[h],   w_c = exp(m_c[h] - max_c m_c[h])

The attention's chunk programs leave, per query head h and chunk c, a partial softmax sum (m, l, o: attention.py);
the merge kernel combines them into a, which the o GEMV then reads whole. Here the o GEMV is split along K by query
head instead: program (h, j) merges head h's chunks itself (its D dims only: nlive x D fp32 from L2, as the merge
kernel's programs read them) and multiplies rows [j R, (j + 1) R) of W_o's columns [h D, (h + 1) D) by them, adding
its R partial sums into x with fp32 atomics (x holds the residual: x += W_o a in place, as the split-K GEMV adds).
No program needs another's output, so the merge's launch, its wait on the chunks and the o GEMV's wait on the merge
become one wait. The program's first tile of weights is requested before that wait (weights never depend on the
previous kernel), each later tile while the one before is used.

Bytes: W_o once (its rows in D-wide pieces: 128 or 256 contiguous bytes each), the partials heads x (R-row blocks)
times (nlive x D x 4: each head's read once per row block, from L2), and N fp32 atomics per head.

The step tuner chooses (retune_in_step): each (rows a tile, tiles a program, warps) candidate, and the two-kernel path
(None), timed in the whole step; the fastest kept and recorded (native_o_merge_step_tuning, native_o_merge_used).
int4 o (the CUDA GEMV), tensor parallelism and the persistent kernel keep the merge kernel.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # floorline runs without Triton; only mode native and its kernel tests need it
    triton = tl = None

from floorline.native import INTERPRET
from floorline.native import pdl as P
from floorline.native import timeline as T

# (rows a tile BR, tiles a program NT, warps): the step tuner's candidates (a program covers BR x NT rows of one
# head's D columns); the first is used until then. More rows a program read each head's partials fewer times (qwen3-8b
# ctx 2048: 16 KB a head; 128 rows a program re-read them 32 times, 16 MB of L2 reads a layer against 33.5 MB of
# W_o), fewer rows give more programs. Offline SASS (sm_90, D 128): 80-180 registers, no spills, the first tile's
# loads before the wait. The last three are one tile a program (NT 1): every weight a program reads is requested
# before the wait, none after it (a program of several tiles asks for each after using the one before: a DRAM round
# trip a tile once the wait has returned). Offline SASS (sm_90): D 64 96-127 registers, D 128 173-252, no spills.
CANDIDATES = [(32, 4, 4), (16, 8, 4), (64, 2, 4), (32, 8, 4), (64, 4, 8), (16, 4, 2), (64, 8, 8), (32, 16, 4),
              (128, 1, 4), (64, 1, 4), (256, 1, 8)]

if triton is not None:

    @triton.jit
    def _o_merge(W, MO, LO, OO, POS, Y, N, K, NCHUNK, G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr,
                 CHUNK: tl.constexpr, CB: tl.constexpr, BR: tl.constexpr, NT: tl.constexpr, PDL: tl.constexpr,
                 TL=None):
        if TL is not None:  # a timeline slot (timeline.py; None: not compiled)
            t_start = T.now()
        h = tl.program_id(0)
        r0 = tl.program_id(1) * (BR * NT)
        kvh = h // G
        d = tl.arange(0, D)
        rr = r0 + tl.arange(0, BR)
        wp = W + rr[:, None] * K + h * D + d[None, :]
        w = tl.load(wp, mask=(rr < N)[:, None], other=0.0, eviction_policy="evict_first")  # before the wait
        nlive = tl.load(POS) // CHUNK + 1  # chunks holding positions 0..pos (the position changes between steps)
        P.wait(PDL)
        if TL is not None:
            t_wait = T.now()
        # head h's chunks merged: attention._attn_merge's loop over blocks of CB chunks, for all D dims. A copy: the
        # loop as a helper shared with _attn_merge changed two of its compiled variants' instruction schedules
        # (scripts/sass_same.py), and the merge kernel's figures of record stand on its machine code
        cs = tl.arange(0, CB)
        m_run = tl.max(tl.full([CB], -1e30, dtype=tl.float32), 0)
        den = tl.sum(tl.zeros([CB], dtype=tl.float32), 0)
        num = tl.zeros([D], dtype=tl.float32)
        for c0 in range(0, nlive, CB):
            cm = (c0 + cs) < nlive
            o = (kvh * NCHUNK + c0 + cs) * GP + h % G
            mc = tl.load(MO + o, mask=cm, other=-1e30)
            lc = tl.load(LO + o, mask=cm, other=0.0)
            oc = tl.load(OO + o[:, None] * D + d[None, :], mask=cm[:, None], other=0.0)
            m_new = tl.maximum(m_run, tl.max(mc, 0))
            a = tl.exp(m_run - m_new)
            wc = tl.where(cm, tl.exp(mc - m_new), 0.0)
            den = den * a + tl.sum(wc * lc, 0)
            num = num * a + tl.sum(oc * wc[:, None], 0)
            m_run = m_new
        att = num / den  # (D,): head h of the attention's output
        for t in range(NT):
            rows = rr + t * BR
            more = (tl.zeros([BR], dtype=tl.int32) + t + 1) < NT
            w2 = tl.load(wp + (t + 1) * BR * K, mask=((rows + BR < N) & more)[:, None], other=0.0,
                         eviction_policy="evict_first")
            y = tl.sum(w.to(tl.float32) * att[None, :], 1)
            tl.atomic_add(Y + rows, y, mask=rows < N, sem="relaxed")
            w = w2
        if TL is not None:
            T.put(TL, t_start, t_wait)


def tri_o_merge(w: torch.Tensor, scratch, pos: torch.Tensor, y: torch.Tensor, config: tuple | None = None,
                pdl: int | None = None) -> None:
    """y (fp32, holding the residual) += w @ a, a the merge of the attention partials in `scratch` (AttnScratch, as
    the chunk kernel left them at position `pos`): the GPU twin of y += w @ tri_attention's output. w: bf16 (N,
    heads x D) row-major. config: (BR, NT, warps), else CANDIDATES[0]; pdl: the kernels' PDL switch (None: where
    the GPU has it)."""
    n, k = w.shape
    kv, stride, gp = scratch.m.shape
    d = scratch.o.shape[-1]
    heads = k // d
    if k != heads * d or heads != kv * scratch.g or not w.is_contiguous():
        raise ValueError(f"tri_o_merge: a contiguous o of (N, {kv * scratch.g} x {d}), not {tuple(w.shape)}")
    br, nt, warps = config or CANDIDATES[0]
    pdl = (P.mode("auto", w.device) if pdl is None else pdl) if not INTERPRET else 0
    grid = (heads, triton.cdiv(n, br * nt))
    _o_merge[grid](
        w, scratch.m, scratch.l, scratch.o, pos, y, n, k, stride, G=scratch.g, GP=gp, D=d, CHUNK=scratch.chunk,
        CB=min(64, triton.next_power_of_2(scratch.nchunk)), BR=br, NT=nt, PDL=pdl, num_warps=warps,
        **P.launch_kwargs(pdl), **T.launch_kwargs("o_merge", grid[0] * grid[1]))


def retune_in_step(net, capture, state: list, reps: int = 30) -> dict:
    """The o GEMV with the merge folded in (each candidate) against the merge kernel and the o GEMV (None), timed
    in the whole step (timing.fastest_in_step), the fastest kept in net.o_merge. Each candidate is compiled first,
    outside any graph capture (one launch into a scratch vector). Returns the trials ({candidate: ms}; empty where
    nothing was timed) for retune_finals_in_step."""
    from floorline.device import timing
    from floorline.native.tuner import TUNER

    if not net.o_merge_ok or net.persist_on:  # the persistent kernel has its own merge tasks
        return {}
    w = net.layers[0]["o"]["w"]
    junk = torch.zeros(w.shape[0], device=w.device, dtype=torch.float32)

    def warm():  # a launch into a scratch vector (None: the merge kernel and the o GEMV, compiled already)
        if net.o_merge is not None:
            tri_o_merge(w, net.attn, net.pos, junk, net.o_merge, pdl=net.pdl)

    times = timing.fastest_in_step([None] + CANDIDATES, lambda c: setattr(net, "o_merge", c), capture, state, reps,
                                   warm=warm)
    TUNER.step_tuning["o_merge"] = {("off" if c is None else name(c)): round(t, 4) for c, t in times.items()}
    return times


# finalists of the attention's and o's rounds that the final round times together (FINALS[0] x FINALS[1] pairs)
FINALS = (3, 2)


def retune_finals_in_step(net, capture, state: list, attn_times: dict, o_times: dict, warm) -> None:
    """The attention's chunks and the merge inside o (or not) chosen together. Their rounds ran one after the other,
    each candidate timed once in turn: the attention's with the merge kernel in place, o's over the attention kept.
    But the merge inside o merges each head's chunks in every one of its programs, so the chunk length that is best
    with the merge kernel need not be best with it; and the GPU drifts between one trial and the next. On the H200
    the rounds' picks measured 0.3-1.2% slower than the best pair timed in turns in the same process (qwen3-8b,
    llama-3.2-3b, qwen2.5-1.5b). Here the fastest FINALS[0] attention candidates and FINALS[1] o candidates of those
    rounds (each round's own choice where it timed nothing) are paired, and the pairs timed in turn over interleaved
    rounds (timing.fastest_interleaved, `warm` a step outside any capture to compile each pair's kernels); the
    fastest pair kept, the trials recorded as "<attention> / <o>" (native_finals_step_tuning). H200, qwen2.5-1.5b ctx
    2048, timed in one process: the pair an earlier process's rounds kept (the CUDA chunks of 64 positions on 4 warps,
    o's (128, 1, 4)) 1.0814 ms a step, the rule's chunks of 128 on 8 warps with the same o 1.0559
    (docs/lab/2026-12-04-attn-loads-first.md)."""
    from floorline.device import timing
    from floorline.native import attention as A
    from floorline.native.tuner import TUNER

    def top(times: dict, k: int, now) -> list:
        return sorted(times, key=times.get)[:k] if times else [now]

    if net.persist_on:  # the persistent kernel runs its own attention and merge tasks
        return
    pairs = [(a, o) for a in top(attn_times, FINALS[0], net.attn.choice())
             for o in top(o_times, FINALS[1], net.o_merge)]
    if len(pairs) < 2:
        return

    def use(pair):
        net.attn.use(pair[0])
        net.o_merge = pair[1]

    times = timing.fastest_interleaved(pairs, use, capture, state, warm=warm)
    TUNER.step_tuning["finals"] = {f"{A.cand_name(a)} / {'off' if o is None else name(o)}": round(t, 4)
                                   for (a, o), t in times.items()}


def name(c: tuple) -> str:
    return "{}x{} w{}".format(*c)
