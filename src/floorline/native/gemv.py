"""The Triton GEMV of mode native's step, batch 1: one kernel with compile-time prologues and epilogues, so each fused
matrix is one launch.

  y = W @ p(x) (+ bias) (+ residual | glu)       p: identity | RMSNorm(x) * g;  glu: silu(y[:N/2]) * y[N/2:]

W is bf16 (N, K) row-major, or floorline's W4A16 (int4_format.py) in the `rows` layout: int32 codes, bf16 scales and
zeros per 128 inputs (the `mma` layout goes to int4_cuda.py's CUDA GEMV, which tri_gemv calls for it). Each program
owns BN output rows (with glu: BN/2 gate rows and the same up rows) and streams them along K in BK-wide tiles, either
register buffers in turn (AHEAD tiles ahead) or Triton's cp.async pipeline (STAGES), the first tile (AHEAD 2: two)
requested before the wait on the previous kernel, each tile's inputs with the weights of the tile after it (their L2
round trip off the sums' path); activations are fp32 vectors. For bf16 K up to WHOLE_K the tuner also tries
whole-row tiles (_whole: one tile of BK >= K columns, masked past K where BK > K: KM): a program then requests every
weight it uses before the wait, and after it reads x and sums once, with no DRAM round trip in between. A small
matrix is all latency otherwise: qwen2.5-0.5b's q/k/v (2 MB, 0.5 us of bytes), 7 tiles of 128 columns two ahead,
spanned 4.6 us a layer from the MLP's last end to the attention's first wait; whole rows took 51 us off the step
tuner's trial step (docs/lab/2026-12-04-whole-row-tiles.md). RMSNorm's sum of squares comes from the same x loads as
the product (every program reads all of x) and its 1/rms scales the sums. A residual is added in place (ACC: y holds
it, y += W x), which lets the K range be split over SPLIT programs that add their partial sums atomically (o and down,
whose few rows leave SMs idle). int4 codes become floats 2048 + c or 128 + c by one and-or into a power of two's
mantissa (no conversions), and the group's scale and zero are applied once per 32 weights of a row (_int4_tile).

Under TRITON_INTERPRET=1 the kernel runs on the CPU (small shapes, the tests) with fixed launch parameters; on a GPU
it autotunes its tile per (N, K, prologue, epilogue) once, before the CUDA graph is captured, with the tuner's
cold_bench, and retune_in_step re-times the candidates inside the whole step.
"""

from __future__ import annotations

import functools
import inspect

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # floorline runs without Triton; only mode native and its kernel tests need it
    triton = tl = None

from floorline.device import timing
from floorline.native import INTERPRET
from floorline.native import pdl as P
from floorline.native import timeline as T
from floorline.native.int4_format import GROUP
from floorline.native.refs import PRO_NONE
from floorline.native.tuner import TUNER, shape_name

if triton is not None:

    @triton.jit
    def _x_tile(X, NW, rk, PRO: tl.constexpr, K=0, KM: tl.constexpr = 0):
        """The GEMV input at columns rk: (x, x) or, for RMSNorm, (x * g, x) (its 1/rms is applied to the sums, from
        the sum of squares of the raw x that the main loop accumulates: no separate pass over x). KM: zeros from
        column K on (the whole-row tile's masked columns)."""
        if KM:
            xr = tl.load(X + rk, mask=rk < K, other=0.0).to(tl.float32)
        else:
            xr = tl.load(X + rk).to(tl.float32)
        xv = xr
        if PRO == 1:
            if KM:
                xv = xr * tl.load(NW + rk, mask=rk < K, other=0.0).to(tl.float32)
            else:
                xv = xr * tl.load(NW + rk).to(tl.float32)
        return xv, xr

    @triton.jit
    def _code(t, HI: tl.constexpr):
        """Bits 12..15 of t as the float 2048 + c, or (HI) bits 16..19 as 128 + c: the code dropped into the
        mantissa of a power of two by one and-or (LOP3); exact, no int->float conversion."""
        if HI:
            return ((t & 0xF0000) | 0x43000000).to(tl.float32, bitcast=True)
        return ((t & 0xF000) | 0x45000000).to(tl.float32, bitcast=True)

    @triton.jit
    def _int4_load(wp, S, Z, gi, k0, ke, nmask, GROUP_K: tl.constexpr):
        """One int4 tile's words (BN, NCH, 4) and its chunks' scales and zeros (BN, NCH), fp32; nothing is read
        for a tile at or past ke, the end of the program's K range (the register buffers' last prefetch)."""
        live = (tl.zeros([1, 1], dtype=tl.int32) + k0) < ke
        m = nmask[:, None] & live
        w = tl.load(wp + k0 // 8, mask=m[:, :, None], other=0)
        sc = tl.load(S + gi + k0 // GROUP_K, mask=m, other=0.0).to(tl.float32)
        ze = tl.load(Z + gi + k0 // GROUP_K, mask=m, other=0.0).to(tl.float32)
        return w, sc, ze

    @triton.jit
    def _int4_tile(acc, ss, w, sc, ze, X, NW, xc, PRO: tl.constexpr):
        """acc (BN, NCH) += one int4 tile: w (BN, NCH, 4) words, chunk c = words 4c .. 4c + 3 of one group;
        xc (NCH, 4) the columns of each word's code 0 (code j: + 16 j, so each x_j is a contiguous load).
        sum (c - z) s x = s (sum (m + c) x - sum m x - z sum x) with m = 2048 for even codes, 128 for odd: four
        shifts put two codes each at bits 12 and 16 (_code), so a weight costs half a shift, a LOP3 and an FFMA;
        the scale and zero once per chunk and row. ss (NCH, 4) += the raw inputs' squares (RMSNorm)."""
        x0, r0 = _x_tile(X, NW, xc, PRO)  # every input first: the loads in flight together
        x1, r1 = _x_tile(X, NW, xc + 16, PRO)
        x2, r2 = _x_tile(X, NW, xc + 32, PRO)
        x3, r3 = _x_tile(X, NW, xc + 48, PRO)
        x4, r4 = _x_tile(X, NW, xc + 64, PRO)
        x5, r5 = _x_tile(X, NW, xc + 80, PRO)
        x6, r6 = _x_tile(X, NW, xc + 96, PRO)
        x7, r7 = _x_tile(X, NW, xc + 112, PRO)
        if PRO == 1:
            ss += r0 * r0 + r1 * r1 + r2 * r2 + r3 * r3 + r4 * r4 + r5 * r5 + r6 * r6 + r7 * r7
        t = w << 12  # codes 0, 1 at bits 12, 16
        p = _code(t, 0) * x0[None]
        p += _code(t, 1) * x1[None]  # one FFMA each
        t = w << 4
        p += _code(t, 0) * x2[None]
        p += _code(t, 1) * x3[None]
        t = w >> 4
        p += _code(t, 0) * x4[None]
        p += _code(t, 1) * x5[None]
        t = w >> 12  # the sign bits above are masked off
        p += _code(t, 0) * x6[None]
        p += _code(t, 1) * x7[None]
        xm = 2048.0 * (x0 + x2 + x4 + x6) + 128.0 * (x1 + x3 + x5 + x7)
        xs = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7
        return acc + sc * (tl.sum(p, 2) - tl.sum(xm, 1)[None, :] - ze * tl.sum(xs, 1)[None, :]), ss

    @triton.jit
    def _gemv(W, S, Z, X, NW, B, Y, N, K, KW, eps,
              PRO: tl.constexpr, GLU: tl.constexpr, HAS_BIAS: tl.constexpr, ACC: tl.constexpr,
              INT4: tl.constexpr, GROUP_K: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
              PDL: tl.constexpr, STAGES: tl.constexpr = 0, SPLIT: tl.constexpr = 1, AHEAD: tl.constexpr = 1,
              KM: tl.constexpr = 0, TL=None):
        if TL is not None:  # a timeline slot (timeline.py; None: not compiled)
            t_start = T.now()
        pid = tl.program_id(0)
        # split-K (ACC only): program (pid, s) sums tiles [s T / SPLIT, (s + 1) T / SPLIT) of the T = K / BK
        sid = tl.program_id(1)
        kb = sid * (K // BK) // SPLIT * BK
        ke = (sid + 1) * (K // BK) // SPLIT * BK
        if GLU:  # rows i of the gate half and i of the up half in one program: y = silu(gate) * up, N/2 outputs
            BH: tl.constexpr = BN // 2
            i = tl.arange(0, BN)
            rr = pid * BH + i % BH
            rn = rr + (i // BH) * (N // 2)
            nmask = rr < N // 2
        else:
            rn = pid * BN + tl.arange(0, BN)
            nmask = rn < N
        # the first weight tile is loaded into registers before waiting on the previous kernel: weights never depend
        # on it (bf16 cp.async tiles too: Triton's pipeline, whose own first loads come after the wait, starts from
        # the second tile; int4's issues all of its loads after the wait)
        if INT4:  # words (BN, NCH, 4): chunk c of the tile is words 4c .. 4c + 3, in one group
            WPG: tl.constexpr = GROUP_K // 8  # words per group; code j of a group's word i is its column WPG j + i
            NCH: tl.constexpr = BK // 32
            rc = tl.arange(0, NCH)
            wcol = rc[:, None] * 4 + tl.arange(0, 4)[None, :]
            wp = W + rn[:, None, None] * KW + wcol[None]
            gi = rn[:, None] * (K // GROUP_K) + (rc * 32 // GROUP_K)[None, :]  # each chunk's group (BN, NCH)
            xcol = wcol // WPG * GROUP_K + wcol % WPG  # (NCH, 4): each word's code 0
            acc = tl.zeros([BN, NCH], dtype=tl.float32)
            ss = tl.zeros([NCH, 4], dtype=tl.float32)
            if STAGES == 0:
                w, sc, ze = _int4_load(wp, S, Z, gi, kb, ke, nmask, GROUP_K)
        else:
            wp = W + rn[:, None] * K + tl.arange(0, BK)[None, :]
            if KM:  # one tile of BK > K columns (_whole), masked from K on: every weight before the wait
                w = tl.load(wp, mask=nmask[:, None] & (tl.arange(0, BK) < K)[None, :], other=0.0,
                            eviction_policy="evict_first")
            else:
                w = tl.load(wp + kb, mask=nmask[:, None], other=0.0, eviction_policy="evict_first")
            if STAGES == 0 and AHEAD == 2:  # the second tile too: twice the bytes before the wait, kept in flight
                more1 = (tl.zeros([1, 1], dtype=tl.int32) + kb + BK) < ke
                w1 = tl.load(wp + kb + BK, mask=nmask[:, None] & more1, other=0.0, eviction_policy="evict_first")
            acc = tl.zeros([BN, BK], dtype=tl.float32)
            ss = tl.zeros([BK], dtype=tl.float32)
        if HAS_BIAS:  # constant: read before the wait, not at the end (a DRAM round trip after the last sums)
            first = (tl.zeros_like(rn) + sid) == 0  # one split adds it
            bias = tl.load(B + rn, mask=nmask & first, other=0.0).to(tl.float32)
        P.wait(PDL)
        if TL is not None:
            t_wait = T.now()
        if STAGES and INT4:  # Triton's software pipeline: STAGES tiles in flight through shared memory (cp.async)
            for k0 in tl.range(kb, ke, BK, num_stages=STAGES):
                w, sc, ze = _int4_load(wp, S, Z, gi, k0, ke, nmask, GROUP_K)
                acc, ss = _int4_tile(acc, ss, w, sc, ze, X, NW, k0 + xcol, PRO)
        elif STAGES:  # the first tile from its registers, the rest through the cp.async pipeline, STAGES deep
            xv, xr = _x_tile(X, NW, kb + tl.arange(0, BK), PRO)
            acc += w.to(tl.float32) * xv[None, :]
            if PRO == 1:
                ss += xr * xr
            for k0 in tl.range(kb + BK, ke, BK, num_stages=STAGES):
                w = tl.load(wp + k0, mask=nmask[:, None], other=0.0, eviction_policy="evict_first")
                xv, xr = _x_tile(X, NW, k0 + tl.arange(0, BK), PRO)
                acc += w.to(tl.float32) * xv[None, :]
                if PRO == 1:
                    ss += xr * xr
        elif KM:  # the one masked tile: x's first K values (zeros past them), one product
            xv, xr = _x_tile(X, NW, tl.arange(0, BK), PRO, K, KM)
            acc += w.to(tl.float32) * xv[None, :]
            if PRO == 1:
                ss += xr * xr
        elif INT4:  # two register buffers in turn: each tile's loads are in flight while the other one is used
            for k0 in range(kb, ke - BK, 2 * BK):
                w2, s2, z2 = _int4_load(wp, S, Z, gi, k0 + BK, ke, nmask, GROUP_K)
                acc, ss = _int4_tile(acc, ss, w, sc, ze, X, NW, k0 + xcol, PRO)
                w, sc, ze = _int4_load(wp, S, Z, gi, k0 + 2 * BK, ke, nmask, GROUP_K)
                acc, ss = _int4_tile(acc, ss, w2, s2, z2, X, NW, k0 + BK + xcol, PRO)
            if ((ke - kb) // BK) % 2 == 1:
                acc, ss = _int4_tile(acc, ss, w, sc, ze, X, NW, ke - BK + xcol, PRO)
        else:  # register buffers in turn: the next AHEAD tiles' loads in flight while one is used
            xv, xr = _x_tile(X, NW, kb + tl.arange(0, BK), PRO)
            for k0 in range(kb, ke, BK):
                more = (tl.zeros([1, 1], dtype=tl.int32) + k0 + AHEAD * BK) < ke
                w_next = tl.load(wp + k0 + AHEAD * BK, mask=nmask[:, None] & more, other=0.0,
                                 eviction_policy="evict_first")
                # the next tile's inputs too: their L2 round trip off the path of this tile's sums (the last tile's
                # again at the end: in bounds, unused)
                xv2, xr2 = _x_tile(X, NW, tl.minimum(k0 + BK, ke - BK) + tl.arange(0, BK), PRO)
                acc += w.to(tl.float32) * xv[None, :]
                if PRO == 1:
                    ss += xr * xr
                if AHEAD == 2:
                    w = w1
                    w1 = w_next
                else:
                    w = w_next
                xv = xv2
                xr = xr2
        y = tl.sum(acc, 1)
        if PRO == 1:  # the norm's 1/rms, applied once (the sums are linear in x); every program saw all of x
            if INT4:
                sq = tl.sum(tl.sum(ss, 1), 0)
            else:
                sq = tl.sum(ss, 0)
            y = y / tl.sqrt(sq / K + eps)
        if HAS_BIAS:
            y += bias
        if GLU:
            y2 = tl.reshape(y, [2, BH])
            half = tl.arange(0, 2)[:, None]
            g = tl.sum(tl.where(half == 0, y2, 0.0), 0)
            u = tl.sum(tl.where(half == 1, y2, 0.0), 0)
            ro = pid * BH + tl.arange(0, BH)
            tl.store(Y + ro, g / (1.0 + tl.exp(-g)) * u, mask=ro < N // 2)
        elif SPLIT > 1:  # ACC: every split adds its partial sums into Y (which holds the residual)
            tl.atomic_add(Y + rn, y, mask=nmask, sem="relaxed")
        else:
            if ACC:  # y += W x in place (the residual stream): each program reads then writes its own rows
                y += tl.load(Y + rn, mask=nmask, other=0.0)
            tl.store(Y + rn, y, mask=nmask)
        if TL is not None:
            T.put(TL, t_start, t_wait)

    def _prune(configs, named_args, **kwargs):
        """Tiles must divide K (the loop has no K mask) and int4 tiles hold whole groups; split-K only for a plain
        GEMV that adds into its output (ACC), at least two tiles a split. Else, where no tile divides K (bf16: K not
        a multiple of 256, qwen2.5-0.5b's 896), the narrow tiles of _narrow; int4: one fitting tile. Then, bf16 with
        K up to WHOLE_K, _whole's tiles (the one masked tile: KM) not already kept, two rows at least with glu."""
        k, int4, acc = named_args["K"], kwargs.get("INT4", False), kwargs.get("ACC", False)
        plain = acc and not kwargs.get("PRO") and not kwargs.get("GLU")

        def fits(c):
            return (k % c.kwargs["BK"] == 0 and (not int4 or c.kwargs["BK"] % GROUP == 0)
                    and (c.kwargs.get("SPLIT", 1) == 1 or plain and k // c.kwargs["BK"] >= 2 * c.kwargs["SPLIT"]))

        keep = [c for c in configs if fits(c)]
        if not keep and not int4:
            keep = [c for c in _narrow(_pick_bk(k, int4)) if fits(c)]
        if not int4 and k <= WHOLE_K:  # glu: a gate row and its up row a pair, so two rows at least
            have = {(c.kwargs["BN"], c.kwargs["BK"], c.num_warps) for c in keep
                    if (c.kwargs.get("STAGES", 0), c.kwargs.get("SPLIT", 1), c.kwargs.get("AHEAD", 1)) == (0, 1, 1)}
            keep += [c for c in _whole(k) if (not kwargs.get("GLU") or c.kwargs["BN"] >= 2)
                     and (c.kwargs["BN"], c.kwargs["BK"], c.num_warps) not in have]
        keep = keep or [triton.Config({"BN": 8, "BK": _pick_bk(k, int4)}, num_warps=4)]
        TUNER.gemv_candidates[(named_args["N"], k, kwargs.get("PRO"), kwargs.get("GLU"), acc, int4)] = keep
        return keep

    # every config is compiled and timed per (N, K, prologue, epilogue) once, before the CUDA graph is captured
    # (ACC's in-place output restored after each trial); int4 tiles give each thread several rows of the same
    # columns (the activations read once for all of them); STAGES > 0: Triton's cp.async pipeline instead of the two
    # register buffers; SPLIT > 1: split-K, for the matrices too short to give every SM enough programs (o, down)
    def _configs(tiles, ahead=1):
        return [triton.Config({"BN": t[0], "BK": t[1], "STAGES": t[3], "SPLIT": t[4], "AHEAD": ahead},
                              num_warps=t[2], maxnreg=t[5] if len(t) > 5 else None) for t in tiles]

    _BF16 = _configs([(2, 1024, 4, 0, 1), (4, 512, 4, 0, 1), (4, 1024, 8, 0, 1), (8, 512, 4, 0, 1), (8, 512, 8, 0, 1),
                      (16, 256, 8, 0, 1), (16, 512, 8, 0, 1), (8, 256, 4, 0, 1), (4, 256, 4, 0, 1), (4, 256, 2, 0, 1),
                      (8, 512, 4, 3, 1), (4, 512, 4, 0, 2), (8, 512, 4, 0, 2), (8, 512, 8, 0, 4), (4, 512, 4, 0, 4),
                      # around the step's picks on 2026-12-01 (4x256 w2 for gate_up and lm_head, 8x512 w8 / 16x512 w8
                      # for o, 4x512 w4 k2 / 8x512 w8 for down): fewer threads a tile, fewer rows, o and down split
                      (2, 512, 2, 0, 1), (4, 256, 1, 0, 1), (8, 256, 2, 0, 1), (4, 512, 2, 0, 1), (2, 256, 1, 0, 1),
                      (16, 512, 8, 0, 2), (8, 256, 4, 0, 2)]) + _configs(
        # two tiles ahead (AHEAD 2: both requested before the wait), around the step's later picks: gate_up and lm_head
        # 4x256 w2, q/k/v 8x256 w4, o 8x256 w4 k2, down 4x512 w4 k2 / 8x256 w4 k2
        [(4, 256, 2, 0, 1), (8, 256, 4, 0, 1), (4, 256, 4, 0, 1), (8, 256, 4, 0, 2), (4, 512, 4, 0, 2),
         (2, 512, 2, 0, 1)], ahead=2)
    def _narrow(bk: int) -> list:
        """bf16 tiles of `bk` columns (the largest power of two dividing K, below 256), for the matrices no tile of
        _BF16 divides: the one fitting tile they had before (8 x bk, 4 warps) first, then more rows a program, fewer
        or more warps, two tiles ahead, split-K (qwen2.5-0.5b: q/k/v, o and lm_head of K 896, seven tiles of 128)."""
        return _configs([(8, bk, 4, 0, 1), (4, bk, 2, 0, 1), (8, bk, 2, 0, 1), (16, bk, 4, 0, 1), (32, bk, 4, 0, 1),
                         (32, bk, 8, 0, 1), (64, bk, 8, 0, 1), (16, bk, 4, 0, 2), (32, bk, 8, 0, 2)]) + _configs(
            [(8, bk, 4, 0, 1), (16, bk, 4, 0, 1), (32, bk, 8, 0, 1)], ahead=2)

    def _whole(k: int) -> list:
        """Tiles of one row-piece: BK the power of two at or above K (columns from K on masked, KM), so a program
        requests every weight it uses before its wait and, after it, reads x once and sums once (no DRAM round trip
        after the wait). Rows and warps such that a thread holds 8 to 64 weights, and 4 warps or more at BK 4096
        (1x4096 on 2 warps spills: 2.3 KB of stack, offline sm_90 SASS; the others 32-254 registers, no spills)."""
        bk = triton.next_power_of_2(k)
        return [triton.Config({"BN": bn, "BK": bk, "STAGES": 0, "SPLIT": 1, "AHEAD": 1, "KM": int(bk != k)},
                              num_warps=w) for bn, w in WHOLE
                if 8 <= bn * bk // (32 * w) <= 64 and (bk < 4096 or w >= 4)]

    # (deeper cp.async tiles, 4-6 stages, 108-160 KB of weights in flight an SM, o and down split too: the step's
    # re-timing took none of them on the H200, docs/lab/2026-12-02-bf16-gemv-tiles.md)
    # int4: the winners of a sweep of every tile on the H200 (register caps, ptx .maxnreg, lost on every shape there)
    _INT4 = _configs([(16, 512, 2, 0, 1), (4, 512, 1, 0, 1), (8, 512, 2, 0, 1), (8, 512, 2, 6, 1), (4, 512, 1, 0, 2),
                      (4, 512, 1, 0, 4), (4, 512, 1, 0, 8), (8, 512, 2, 0, 8)])
    _KEY = ["N", "K", "PRO", "GLU", "ACC"]
    _tune = dict(key=_KEY, prune_configs_by={"early_config_prune": _prune}, restore_value=["Y"])
    if "do_bench" in inspect.signature(triton.autotune).parameters:  # Triton >= 3.2
        _tune["do_bench"] = lambda call, quantiles=None: TUNER.cold_bench(call)
    _gemv_bf16 = triton.autotune(_BF16, **_tune)(_gemv)
    _gemv_int4 = triton.autotune(_INT4, **_tune)(_gemv)


# _whole's tiles: for K up to WHOLE_K, (rows a program, warps), kept where a thread holds 8 to 64 weights
WHOLE_K = 4096
WHOLE = [(1, 2), (1, 4), (2, 4), (4, 4), (4, 8), (8, 8), (16, 8)]


def tile_name(cfg) -> str:
    """A Triton GEMV tile in words: rows x columns a program, warps, then cp.async stages, splits and two tiles ahead
    (a2) where set."""
    kw = cfg.kwargs
    return (f"{kw['BN']}x{kw['BK']} w{cfg.num_warps}" + (f" s{kw['STAGES']}" if kw.get("STAGES") else "")
            + (f" k{kw['SPLIT']}" if kw.get("SPLIT", 1) > 1 else "") + (" a2" if kw.get("AHEAD", 1) == 2 else ""))


def retune_in_step(capture, state: list, reps: int = 30) -> None:
    """The Triton GEMV's tiles re-chosen where they run: for each shape the autotuner chose a tile for (its timer: one
    launch after an L2 flush), every tile it considered, each timed in the whole decode step (`capture()`: a CUDA
    graph of one step; timing.state_replay_ms, `state` restored), the fastest kept in the autotuner's cache."""
    TUNER.step_tuning["gemv"] = trials = {}
    if triton is None:
        return
    TUNER.clear_used()
    graph = capture()  # which shapes the step launches
    del graph
    for int4, kernel in ((False, _gemv_bf16), (True, _gemv_int4)):
        for key in list(kernel.cache):
            n, k, pro, glu, acc = key[:5]
            cands = TUNER.gemv_candidates.get((n, k, pro, glu, acc, int4), [])
            if len(cands) < 2 or ("gemv", (n, k, pro, glu, acc, int4)) not in TUNER.used:
                continue
            times = timing.fastest_in_step(cands, functools.partial(kernel.cache.__setitem__, key), capture, state,
                                           reps)
            trials[shape_name(n, k, pro, glu, acc)] = {tile_name(c): round(t, 4) for c, t in times.items()}


def _pick_bk(k: int, int4: bool) -> int:
    for bk in ((256, 128) if int4 else (256, 128, 64, 32, 16)):
        if k % bk == 0:
            return bk
    raise ValueError(f"K = {k} is not a multiple of {GROUP if int4 else 16}")


def stamped_tile(int4: bool, n: int, k: int, pro: int, glu: bool, acc: bool, dtypes: tuple = ()):
    """The tile (a triton.Config) the autotuner chose for this shape: a stamped launch (the step timeline) bypasses
    the autotuner, whose key would count the timeline's slot as one more argument and tune again, and runs the
    product's tile with the slot. The autotuner's key is N, K, PRO, GLU, ACC, then the tensor arguments' dtypes
    (`dtypes`, as str): the entry that matches it all, else the one entry that matches the shape."""
    shape = [(tuple(key), cfg) for key, cfg in (_gemv_int4 if int4 else _gemv_bf16).cache.items()
             if tuple(key[:5]) == (n, k, pro, glu, acc)]
    exact = [cfg for key, cfg in shape if key[5:] == tuple(dtypes)]
    if exact or len(shape) == 1:
        return (exact or [shape[0][1]])[0]
    raise ValueError(f"timeline: {'no' if not shape else len(shape)} tuned GEMV tiles for {n}x{k} (pro {pro}, glu "
                     f"{glu}, acc {acc}, {', '.join(dtypes)}): run the step once before stamping it")


def tri_gemv(w, x, *, pro=PRO_NONE, norm_w=None, eps=1e-6, bias=None, residual=None, scales=None, zeros=None,
             glu=False, out=None, config=None, layout="rows", pdl=None, kind=None):
    """The GPU twin of refs.ref_gemv (int4 in the `mma` layout: int4_cuda.gemv, whose `config` is (warps, groups
    ahead, splits)); writes into `out` (fp32) when given (a static buffer under a CUDA graph);
    the residual is added in place: `residual=out` adds W p(x) into out (the residual stream), which also allows
    split-K; another residual tensor is first copied into the output.
    A GPU autotunes the tile unless `config` fixes it (keys BN, BK, STAGES, SPLIT, num_warps, maxnreg, AHEAD, KM); under
    the interpreter `config` overrides fixed defaults (BN 16, the largest fitting BK, register
    buffers). pdl: the kernels' PDL switch (pdl.mode; None: on where the GPU has it). kind: the launch's name in the
    step timeline (timeline.py), where one is active on a GPU: the Triton GEMV then stamps its programs, with the tile
    the autotuner chose for the shape (a ValueError if it has chosen none yet; the CUDA int4 GEMV never stamps)."""
    if pdl is None:
        pdl = P.mode("auto", w.device)
    int4 = scales is not None
    mma = int4 and layout == "mma"
    if mma:  # int4_format: words (N/16, 2K), 16-row tiles
        n, k = w.shape[0] * 16, w.shape[1] // 2
    else:
        n, k = w.shape[0], w.shape[1] * 8 if int4 else w.shape[1]
    if glu and (n % (32 if mma else 2) or residual is not None):
        raise ValueError("glu takes gate then up rows (an even number; 32s in the mma layout) and no residual")
    y = out if out is not None else torch.empty(n // 2 if glu else n, device=w.device, dtype=torch.float32)
    acc = residual is not None
    if acc and residual is not y:
        y.copy_(residual)
    if mma:
        from floorline.native import int4_cuda

        return int4_cuda.gemv(w, x, y, scales=scales, zeros=zeros, pro=pro, norm_w=norm_w, eps=eps, bias=bias,
                              acc=acc, glu=glu, config=config, pdl=pdl)
    dummy = y
    args = (w, scales if int4 else dummy, zeros if int4 else dummy, x, norm_w if norm_w is not None else dummy,
            bias if bias is not None else dummy, y, n, k, k // 8, eps)
    flags = dict(PRO=pro, GLU=glu, HAS_BIAS=bias is not None, ACC=acc, INT4=int4, GROUP_K=GROUP)
    rows = n // 2 if glu else n

    def grid(meta):
        return triton.cdiv(rows, meta["BN"] // 2 if glu else meta["BN"]), meta.get("SPLIT", 1)

    def stamps(meta) -> dict:  # the timeline's slot for this launch's programs, where one is active (on a GPU)
        g = grid(meta)
        return T.launch_kwargs(kind, g[0] * g[1]) if kind and w.is_cuda and not INTERPRET else {}

    if INTERPRET or not w.is_cuda or config:  # fixed tiles: the interpreter (small shapes, the tests) or a sweep
        cfg = {"BN": 16, "BK": _pick_bk(k, int4), "STAGES": 0, "SPLIT": 1, **(config or {})}
        if cfg.get("KM") and not (cfg["BK"] > k and not int4 and cfg["SPLIT"] == 1 and cfg.get("STAGES", 0) == 0):
            raise ValueError("a masked tile (KM) spans all of K in one bf16 tile: BK above K, no split, no stages")
        if k % cfg["BK"] and not cfg.get("KM"):
            raise ValueError(f"a tile of {cfg['BK']} columns does not divide K = {k}: pick one that does, or KM 1 with "
                             f"a BK above K")
        if cfg["SPLIT"] > 1 and not (acc and pro == PRO_NONE and not glu):
            raise ValueError("split-K adds partial sums into the output: it needs a residual, no norm, no glu")
        pdl = 0 if INTERPRET or not w.is_cuda else pdl
        _gemv[grid(cfg)](*args, **flags, **cfg, PDL=pdl, **P.launch_kwargs(pdl), **stamps(cfg))
    elif kind and T.ACTIVE is not None:  # the step timeline: the tuned tile, stamped
        tile = stamped_tile(int4, n, k, pro, glu, acc, tuple(str(a.dtype) for a in args if hasattr(a, "dtype")))
        _gemv[grid(tile.kwargs)](*args, **flags, **tile.all_kwargs(), PDL=pdl, **P.launch_kwargs(pdl),
                                 **stamps(tile.kwargs))
    else:
        TUNER.used.add(("gemv", (n, k, pro, glu, acc, int4)))
        (_gemv_int4 if int4 else _gemv_bf16)[grid](*args, **flags, PDL=pdl, **P.launch_kwargs(pdl))
    return y
