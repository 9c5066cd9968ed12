"""Triton kernels of the native decode step, batch 1, and their torch references (the same math, plain ops).

One GEMV kernel with compile-time prologues and epilogues, so each fused matrix is one launch:
  y = W @ p(x) (+ bias) (+ residual | glu)       p: identity | RMSNorm(x) * g;  glu: silu(y[:N/2]) * y[N/2:]
W is bf16 (N, K) row-major, or floorline's W4A16 (int4_format.py): int32 codes, bf16 scales and zeros per 128 inputs,
in the `rows` layout (this Triton GEMV's) or the `mma` layout (int4_cuda.py's CUDA GEMV, which tri_gemv calls for it).
Each program owns BN output rows (with glu: BN/2 gate rows and the same up rows) and streams them along K in BK-wide
tiles, either two (bf16 AHEAD 2: three) register buffers in turn or Triton's cp.async pipeline (STAGES, autotuned), the
first tile (AHEAD 2: two) requested before the wait on the previous kernel, each tile's inputs with the weights of the
tile after it (their L2 round trip off the sums' path); activations are fp32 vectors (KB). RMSNorm's sum of squares
comes from the same x loads as the product (every program reads all of x) and its 1/rms scales the sums. A residual is
added in place (ACC: y holds it, y += W x), which lets the K range be split over SPLIT programs that add their partial
sums atomically (o and down, whose few rows leave SMs idle). int4 codes become floats 2048 + c or 128 + c by one and-or
into a power of two's mantissa (no conversions), and the group's scale and zero are applied once per 32 weights of a row
(_int4_tile).
Attention is flash-decoding, RoPE and the KV write folded in: one program per (kv head, chunk of the cache) rotates
q and k at the current position (read from the device: graph-safe), the chunk holding the position writes k and v
into the cache, and every program scores all query heads of its group with tensor cores; a second kernel merges the
chunks. On Hopper every kernel is launched with programmatic dependent launch (see _pdl_default).

Under TRITON_INTERPRET=1 the same kernels run on the CPU (small shapes, in the tests), with fixed launch parameters;
on a GPU the GEMV autotunes its tile per (N, K, prologue, epilogue) once, before the CUDA graph is captured, timing
each tile as a decode step sees it (_cold_bench: cold L2, inside a CUDA graph).
"""

from __future__ import annotations

import functools
import inspect
import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # floorline runs without Triton; only mode native and its kernel tests need it
    triton = tl = None

from floorline.native import env_pair
from floorline.native.int4_format import GROUP
from floorline.native.int4_format import dequant as dequant_int4

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
PRO_NONE, PRO_RMSNORM = 0, 1
ATTN_CHUNK = 64  # cache positions per attention program (the least; more at long contexts)
ATTN_BL = 64  # positions per inner tile
ATTN_STAGES = 3  # the tile loop's software-pipeline depth (Triton's default for a loop)


# ------------------------------------------------------------------------------------------- torch references
def rmsnorm(x, w, eps):
    """x / sqrt(mean(x^2) + eps) * w over the last dimension, in fp32."""
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.float()


def ref_gemv(w, x, *, pro=PRO_NONE, norm_w=None, eps=1e-6, bias=None, residual=None, scales=None, zeros=None,
             glu=False, layout="rows"):
    """y = W @ p(x) (+ bias) (+ residual) in fp32; W bf16 (N, K), or int4 words with scales and zeros in `layout`.
    glu: W holds gate rows then up rows; y = silu(gate) * up (N/2)."""
    x = x.float()
    if pro == PRO_RMSNORM:
        x = rmsnorm(x, norm_w, eps)
    wf = dequant_int4(w, scales, zeros, layout) if scales is not None else w.float()
    y = wf @ x
    if bias is not None:
        y = y + bias.float()
    if glu:
        gate, up = y.chunk(2)
        y = torch.nn.functional.silu(gate) * up
    if residual is not None:
        y = y + residual.float()
    return y


def rope_tables(inv_freq: torch.Tensor, length: int, scaling: float, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (length, head_dim) fp32, HF's layout: the frequencies twice, times the attention scaling."""
    t = torch.arange(length, device=device, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq.to(device=device, dtype=torch.float32))
    emb = torch.cat([freqs, freqs], -1)
    return emb.cos() * scaling, emb.sin() * scaling


def _rotate(x, cos, sin):
    h = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., h:], x[..., :h]], -1) * sin


def ref_rope_kv(qkv, cos, sin, pos, k_cache, v_cache, heads, kv_heads, head_dim):
    """q (heads, D) fp32 rotated at `pos`; k rotated and v written into the caches (kv_heads, L, D) at `pos`."""
    p = int(pos)
    x = qkv.float().reshape(heads + 2 * kv_heads, head_dim)
    q = _rotate(x[:heads], cos[p], sin[p])
    k = _rotate(x[heads:heads + kv_heads], cos[p], sin[p])
    k_cache[:, p] = k.to(k_cache.dtype)
    v_cache[:, p] = x[heads + kv_heads:].to(v_cache.dtype)
    return q


def ref_attention(q, k_cache, v_cache, pos, scale):
    """Softmax attention of q (heads, D) over cache positions 0..pos, grouped query heads; -> (heads * D) fp32."""
    n = int(pos) + 1
    heads, kv = q.shape[0], k_cache.shape[0]
    k = k_cache[:, :n].float().repeat_interleave(heads // kv, 0)
    v = v_cache[:, :n].float().repeat_interleave(heads // kv, 0)
    s = torch.einsum("hd,hld->hl", q.float(), k) * scale
    return torch.einsum("hl,hld->hd", s.softmax(-1), v).reshape(-1)


# ------------------------------------------------------------------------------------------------------ Triton
PDL_MODES = {"off": 0, "early": 1, "late": 2, "after-wait": 3}
PDL_NO_WAIT = 4  # a timing probe only: the kernel lets the next one launch and never waits (its results are wrong)
# FLOORLINE_PROBE_NO_WAIT=kind,... (qkv, attn, merge, o, gate_up, down, lm_head; `all`): those kernels skip their wait
# on the previous one, a probe of what each kernel boundary costs the step (an upper bound on what removing it could
# save); the tokens are garbage and the records say so (native_probe_no_wait)
PROBE_NO_WAIT = frozenset(filter(None, os.environ.get("FLOORLINE_PROBE_NO_WAIT", "").split(",")))
PROBE_KINDS = ("qkv", "attn", "merge", "o", "gate_up", "down", "mlp", "lm_head", "all")


def _pdl_default() -> int:
    """Programmatic dependent launch (Hopper and newer): a kernel's programs may start, and load their constant
    weights, while the previous kernel finishes; they wait (griddepcontrol.wait) before touching its outputs.
    FLOORLINE_PDL picks when a kernel lets the next one launch: `after-wait` (the default: as soon as it has waited
    for its own predecessor; one kernel ahead, its programs resident and their first loads in flight while this one
    runs), `late` (after its main loop), `early` (at its start: the next kernel may let the one after it launch too, a
    chain of waiting programs holding the SMs) or `off` (plain stream order). On the H200, qwen2.5-7b ctx 2048:
    after-wait 1.739 ms int4, 3.769 ms bf16; late 1.840, 3.838 (results/h200/pdl/pdl_*.jsonl)."""
    if INTERPRET or triton is None or not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
        return 0
    mode = os.environ.get("FLOORLINE_PDL", "after-wait")
    if mode not in PDL_MODES:
        from floorline.errors import UserError

        raise UserError(f"FLOORLINE_PDL={mode!r}: use one of {', '.join(PDL_MODES)}")
    return PDL_MODES[mode]


def _pdl_for(kind: str) -> int:
    """_pdl_default, or PDL_NO_WAIT for a kind of kernel FLOORLINE_PROBE_NO_WAIT names (under PDL only)."""
    if not PROBE_NO_WAIT <= set(PROBE_KINDS):  # a typo would probe nothing and time the plain step
        from floorline.errors import UserError

        raise UserError(f"FLOORLINE_PROBE_NO_WAIT={','.join(sorted(PROBE_NO_WAIT))!r}: use a comma list of "
                        f"{', '.join(PROBE_KINDS)}")
    pdl = _pdl_default()
    return PDL_NO_WAIT if pdl and (kind in PROBE_NO_WAIT or "all" in PROBE_NO_WAIT) else pdl


def pdl_name() -> str:
    """The programmatic-dependent-launch mode in force here (`off` without Hopper or under the interpreter)."""
    return {v: k for k, v in PDL_MODES.items()}[_pdl_default()]


if triton is not None:

    @triton.jit
    def _pdl_wait(PDL: tl.constexpr):
        """Wait for the previous kernel (programmatic dependent launch); in mode 3 (`after-wait`) then let the next
        kernel launch (mode PDL_NO_WAIT: only that)."""
        if PDL and PDL != 4:
            tl.extra.cuda.gdc_wait()
        if PDL >= 3:
            tl.extra.cuda.gdc_launch_dependents()

    @triton.jit
    def _x_tile(X, NW, rk, PRO: tl.constexpr):
        """The GEMV input at columns rk: (x, x) or, for RMSNorm, (x * g, x) (its 1/rms is applied to the sums, from
        the sum of squares of the raw x that the main loop accumulates: no separate pass over x)."""
        xr = tl.load(X + rk).to(tl.float32)
        xv = xr
        if PRO == 1:
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
              PDL: tl.constexpr, STAGES: tl.constexpr = 0, SPLIT: tl.constexpr = 1, AHEAD: tl.constexpr = 1):
        if PDL == 1:  # let the next kernel's programs launch as soon as all of ours have
            tl.extra.cuda.gdc_launch_dependents()
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
            w = tl.load(wp + kb, mask=nmask[:, None], other=0.0, eviction_policy="evict_first")
            if STAGES == 0 and AHEAD == 2:  # the second tile too: twice the bytes before the wait, kept in flight
                more1 = (tl.zeros([1, 1], dtype=tl.int32) + kb + BK) < ke
                w1 = tl.load(wp + kb + BK, mask=nmask[:, None] & more1, other=0.0, eviction_policy="evict_first")
            acc = tl.zeros([BN, BK], dtype=tl.float32)
            ss = tl.zeros([BK], dtype=tl.float32)
        if HAS_BIAS:  # constant: read before the wait, not at the end (a DRAM round trip after the last sums)
            first = (tl.zeros_like(rn) + sid) == 0  # one split adds it
            bias = tl.load(B + rn, mask=nmask & first, other=0.0).to(tl.float32)
        _pdl_wait(PDL)
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
        if PDL == 2:
            tl.extra.cuda.gdc_launch_dependents()
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

    def _prune(configs, named_args, **kwargs):
        """Tiles must divide K (the loop has no K mask) and int4 tiles hold whole groups; split-K only for a plain
        GEMV that adds into its output (ACC), at least two tiles a split. Else one fitting tile."""
        k, int4, acc = named_args["K"], kwargs.get("INT4", False), kwargs.get("ACC", False)
        plain = acc and not kwargs.get("PRO") and not kwargs.get("GLU")
        keep = [c for c in configs if k % c.kwargs["BK"] == 0 and (not int4 or c.kwargs["BK"] % GROUP == 0)
                and (c.kwargs.get("SPLIT", 1) == 1 or plain and k // c.kwargs["BK"] >= 2 * c.kwargs["SPLIT"])]
        keep = keep or [triton.Config({"BN": 8, "BK": _pick_bk(k, int4)}, num_warps=4)]
        _CANDIDATES[(named_args["N"], k, kwargs.get("PRO"), kwargs.get("GLU"), acc, int4)] = keep
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
                      # around the step's picks of session 11 (4x256 w2 for gate_up and lm_head, 8x512 w8 / 16x512 w8
                      # for o, 4x512 w4 k2 / 8x512 w8 for down): fewer threads a tile, fewer rows, o and down split
                      (2, 512, 2, 0, 1), (4, 256, 1, 0, 1), (8, 256, 2, 0, 1), (4, 512, 2, 0, 1), (2, 256, 1, 0, 1),
                      (16, 512, 8, 0, 2), (8, 256, 4, 0, 2)]) + _configs(
        # two tiles ahead (AHEAD 2: both requested before the wait), around session 12's picks: gate_up and lm_head
        # 4x256 w2, q/k/v 8x256 w4, o 8x256 w4 k2, down 4x512 w4 k2 / 8x256 w4 k2
        [(4, 256, 2, 0, 1), (8, 256, 4, 0, 1), (4, 256, 4, 0, 1), (8, 256, 4, 0, 2), (4, 512, 4, 0, 2),
         (2, 512, 2, 0, 1)], ahead=2)
    # (deeper cp.async tiles, 4-6 stages, 108-160 KB of weights in flight an SM, o and down split too: the step's
    # re-timing took none of them on the H200, results/h200/session14/NOTES.md)
    # int4: the winners of bench --gemv-sweep on the H200 (register caps, ptx .maxnreg, lost on every shape there)
    _INT4 = _configs([(16, 512, 2, 0, 1), (4, 512, 1, 0, 1), (8, 512, 2, 0, 1), (8, 512, 2, 6, 1), (4, 512, 1, 0, 2),
                      (4, 512, 1, 0, 4), (4, 512, 1, 0, 8), (8, 512, 2, 0, 8)])
    _KEY = ["N", "K", "PRO", "GLU", "ACC"]
    _tune = dict(key=_KEY, prune_configs_by={"early_config_prune": _prune}, restore_value=["Y"])
    if "do_bench" in inspect.signature(triton.autotune).parameters:  # Triton >= 3.2
        _tune["do_bench"] = lambda call, quantiles=None: _cold_bench(call)
    _gemv_bf16 = triton.autotune(_BF16, **_tune)(_gemv)
    _gemv_int4 = triton.autotune(_INT4, **_tune)(_gemv)

    @triton.jit
    def _rope(QKV, cos, sin, rows, d, mask, D: tl.constexpr):
        """Rows `rows` (head indices) of the fused q/k/v vector, rotated by the position's cos, sin (D,) (HF's
        rotate_half layout)."""
        x = tl.load(QKV + rows[:, None] * D + d[None, :], mask=mask, other=0.0)
        partner = tl.load(QKV + rows[:, None] * D + ((d + D // 2) % D)[None, :], mask=mask, other=0.0)
        sign = tl.where(d < D // 2, -1.0, 1.0)
        return x * cos[None, :] + sign[None, :] * partner * sin[None, :]

    @triton.jit
    def _attn_tile(q, k, v, live, m, l, acc, DOT_F32: tl.constexpr):
        """One tile of positions into the online softmax: k, v (BL, D) with dead rows zeroed, live (BL,) masks them."""
        if DOT_F32:  # the interpreter multiplies bf16 operands of tl.dot as raw bits: give it fp32
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        s = tl.dot(q, tl.trans(k))
        s = tl.where(live[None, :], s, -1e30)
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.where(live[None, :], tl.exp(s - m_new[:, None]), 0.0)
        alpha = tl.exp(m - m_new)
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        return m_new, l, acc

    @triton.jit
    def _attn_chunk(QKV, COS, SIN, POS, KC, VC, MO, LO, OO, scale, stride_kh, NCHUNK,
                    H: tl.constexpr, KVH: tl.constexpr, G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr,
                    CHUNK: tl.constexpr, BL: tl.constexpr, DOT_F32: tl.constexpr, PDL: tl.constexpr,
                    STAGES: tl.constexpr = 3):
        """RoPE, KV write and one chunk of flash-decoding for one KV head: program (kv head, chunk). The chunk's first
        tile of cached positions is loaded before waiting on the previous kernel (the q/k/v GEMV): positions before
        `pos` were written by earlier steps, and `pos` itself by the last kernel of the previous step."""
        if PDL == 1:
            tl.extra.cuda.gdc_launch_dependents()
        kvh = tl.program_id(0)
        c = tl.program_id(1)
        pos = tl.load(POS)
        start = c * CHUNK
        d = tl.arange(0, D)
        rl = start + tl.arange(0, BL)
        old = rl < pos  # (all false for a chunk past the position: no bytes moved)
        base = kvh * stride_kh + rl[:, None] * D + d[None, :]
        k0 = tl.load(KC + base, mask=old[:, None], other=0.0)
        v0 = tl.load(VC + base, mask=old[:, None], other=0.0)
        cos = tl.load(COS + pos * D + d)  # the rotation's tables are constant: read before the wait too
        sin = tl.load(SIN + pos * D + d)
        _pdl_wait(PDL)
        if start <= pos:  # chunks past the position write nothing: the merge reads only the live ones
            g = tl.arange(0, GP)
            one = tl.arange(0, 1)
            q = _rope(QKV, cos, sin, kvh * G + g, d, (g < G)[:, None], D)  # the group's query heads
            q = (q * scale).to(KC.dtype.element_ty)
            # this position's k (rotated) and v, rounded as the cache holds them; the chunk holding the
            # position writes them to the cache, and every program uses the registers, not the cache, for it
            k_new = _rope(QKV, cos, sin, H + kvh + one, d, one[:, None] >= 0, D).to(KC.dtype.element_ty)
            v_new = tl.load(QKV + (H + KVH + kvh + one)[:, None] * D + d[None, :]).to(VC.dtype.element_ty)
            if pos < start + CHUNK:
                tl.store(KC + kvh * stride_kh + pos * D + d[None, :] + one[:, None] * 0, k_new)
                tl.store(VC + kvh * stride_kh + pos * D + d[None, :] + one[:, None] * 0, v_new)
            if DOT_F32:
                q = q.to(tl.float32)
            m = tl.full([GP], -1e30, dtype=tl.float32)
            l = tl.zeros([GP], dtype=tl.float32)
            acc = tl.zeros([GP, D], dtype=tl.float32)
            k = tl.where((rl == pos)[:, None], k_new, k0)
            v = tl.where((rl == pos)[:, None], v_new, v0)
            m, l, acc = _attn_tile(q, k, v, rl <= pos, m, l, acc, DOT_F32)
            # the chunk's further tiles, STAGES deep in Triton's software pipeline (3: its default for any loop)
            for off in tl.range(BL, CHUNK, BL, num_stages=STAGES):
                rl = start + off + tl.arange(0, BL)
                old = rl < pos
                base = kvh * stride_kh + rl[:, None] * D + d[None, :]
                k = tl.where((rl == pos)[:, None], k_new, tl.load(KC + base, mask=old[:, None], other=0.0))
                v = tl.where((rl == pos)[:, None], v_new, tl.load(VC + base, mask=old[:, None], other=0.0))
                m, l, acc = _attn_tile(q, k, v, rl <= pos, m, l, acc, DOT_F32)
            if PDL == 2:
                tl.extra.cuda.gdc_launch_dependents()
            o = (kvh * NCHUNK + c) * GP + g
            real = g < G  # only the group's real query heads are written (GP pads it to the tensor-core tile)
            tl.store(MO + o, m, mask=real)
            tl.store(LO + o, l, mask=real)
            tl.store(OO + o[:, None] * D + d[None, :], acc, mask=real[:, None])

    @triton.jit
    def _attn_merge(MO, LO, OO, OUT, POS, NCHUNK, ZP, ZN, G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr,
                    CHUNK: tl.constexpr, CB: tl.constexpr, PDL: tl.constexpr, ZB: tl.constexpr, DB: tl.constexpr):
        """The chunks' partial softmax sums of one query head, merged: program (h, j) merges dims [j DB, (j + 1) DB)
        of query head h (DB = D: one program a head). The position is read before the wait (it changes only between
        steps); each block of CB chunks has its maxima, sums and partial outputs loaded before any is used (one round
        trip to L2, not one per dependent load). ZB > 0: program (h, 0) also zeroes ZP[h ZB, (h + 1) ZB) below ZN --
        the q/k/v vector, read by the chunks (all finished once the wait returns), which the next layer's int4 q/k/v
        GEMV adds into (split-K)."""
        if PDL == 1:
            tl.extra.cuda.gdc_launch_dependents()
        h = tl.program_id(0)
        kvh = h // G
        nlive = tl.load(POS) // CHUNK + 1  # chunks holding positions 0..pos
        _pdl_wait(PDL)
        d = tl.program_id(1) * DB + tl.arange(0, DB)
        cs = tl.arange(0, CB)
        m_run = tl.max(tl.full([CB], -1e30, dtype=tl.float32), 0)
        den = tl.sum(tl.zeros([CB], dtype=tl.float32), 0)
        num = tl.zeros([DB], dtype=tl.float32)
        for c0 in range(0, nlive, CB):
            cm = (c0 + cs) < nlive
            o = (kvh * NCHUNK + c0 + cs) * GP + h % G
            mc = tl.load(MO + o, mask=cm, other=-1e30)
            lc = tl.load(LO + o, mask=cm, other=0.0)
            oc = tl.load(OO + o[:, None] * D + d[None, :], mask=cm[:, None], other=0.0)
            m_new = tl.maximum(m_run, tl.max(mc, 0))
            a = tl.exp(m_run - m_new)
            w = tl.where(cm, tl.exp(mc - m_new), 0.0)
            den = den * a + tl.sum(w * lc, 0)
            num = num * a + tl.sum(oc * w[:, None], 0)
            m_run = m_new
        if PDL == 2:
            tl.extra.cuda.gdc_launch_dependents()
        tl.store(OUT + h * D + d, num / den)
        if ZB > 0:
            if tl.program_id(1) == 0:
                z = h * ZB + tl.arange(0, ZB)
                tl.store(ZP + z, tl.zeros([ZB], dtype=tl.float32), mask=z < ZN)


    @triton.jit
    def _embed(E, stride_e, TOK, X, H, BLOCK: tl.constexpr, PDL: tl.constexpr, ZERO_NEXT: tl.constexpr = 0):
        """The step's first kernel: x (fp32) = row `tok` of the embedding E; program p copies [p BLOCK, (p + 1) BLOCK).
        tok was written by the previous step's last kernel (_next_token). ZERO_NEXT: the H floats after x zeroed too
        (the fused MLP's first output buffer, mlp.py)."""
        if PDL == 1:
            tl.extra.cuda.gdc_launch_dependents()
        _pdl_wait(PDL)
        tok = tl.load(TOK)  # int64: tok * stride_e stays exact past 2^31 elements
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        live = offs < H
        tl.store(X + offs, tl.load(E + tok * stride_e + offs, mask=live).to(tl.float32), mask=live)
        if ZERO_NEXT:
            tl.store(X + H + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=live)

    @triton.jit
    def _next_token(LOGITS, N, STATE, TOK, POS, BLOCK: tl.constexpr, PDL: tl.constexpr):
        """The step's last kernel: tok = argmax(logits) (the first index among equal maxima, as torch.argmax) and
        pos += 1, on the device. Program p takes logits [p BLOCK, (p + 1) BLOCK) and raises STATE[0] to its packed
        key (tpdist.argmax_across's: the max's fp32 bits made order-preserving << 32 | (2^32 - 1 - index)) with an
        atomic max; STATE[1] counts the programs done, and the last one writes tok and pos and resets both words for
        the next step (STATE starts as (-2^63, 0): next_token_state)."""
        if PDL == 1:
            tl.extra.cuda.gdc_launch_dependents()
        _pdl_wait(PDL)
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(LOGITS + offs, mask=offs < N, other=float("-inf"))
        m = tl.max(v, 0)
        # the first index holding the max (or a NaN: a NaN max matches nothing, and the token must stay a row)
        i = tl.min(tl.where((v == m) | (v != v), offs, N), 0).to(tl.int64)
        bits = m.to(tl.int32, bitcast=True)
        ordered = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF).to(tl.int64)  # negative floats: reverse magnitude
        tl.atomic_max(STATE, ordered * 4294967296 + (4294967295 - i))
        done = tl.atomic_add(STATE + 1, 1)  # acq_rel: the last program sees every program's atomic max
        if done == tl.num_programs(0) - 1:
            key = tl.atomic_xchg(STATE, -9223372036854775807 - 1)
            tl.store(TOK, 4294967295 - (key & 4294967295))
            tl.store(POS, tl.load(POS) + 1)
            tl.atomic_xchg(STATE + 1, 0)


_CANDIDATES: dict = {}  # (N, K, PRO, GLU, ACC, INT4): the tiles _prune kept for the autotuner (retune_in_step's trials)
_USED: set = set()  # the same keys, autotuned launches since the last clear (retune_in_step: the step's own shapes)
# FLOORLINE_TRITON_STEP_TUNE (default 1; 0 turns it off): mode native re-times the Triton GEMV's tiles inside the
# step, as int4_cuda.retune_in_step does the CUDA GEMV's launch configs
STEP_TUNE = os.environ.get("FLOORLINE_TRITON_STEP_TUNE", "1") != "0"
last_step_tuning: dict = {}  # shape -> {tile: step ms} of the latest retune_in_step (kept in the records)


def shape_name(n: int, k: int, pro, glu, acc) -> str:
    """A GEMV shape and its fusions in words, as the step tuners' records name them: "37888x3584 norm glu"."""
    return f"{n}x{k}{' norm' if pro else ''}{' glu' if glu else ''}{' acc' if acc else ''}"


def tile_name(cfg) -> str:
    """A Triton GEMV tile in words: rows x columns a program, warps, then cp.async stages, splits and two tiles ahead
    (a2) where set."""
    kw = cfg.kwargs
    return (f"{kw['BN']}x{kw['BK']} w{cfg.num_warps}" + (f" s{kw['STAGES']}" if kw.get("STAGES") else "")
            + (f" k{kw['SPLIT']}" if kw.get("SPLIT", 1) > 1 else "") + (" a2" if kw.get("AHEAD", 1) == 2 else ""))


def retune_in_step(capture, state: list, reps: int = 30) -> None:
    """The Triton GEMV's tiles re-chosen where they run (int4_cuda.retune_in_step's method): for each shape the
    autotuner chose a tile for (its timer: one launch after an L2 flush), every tile it considered, each timed in the
    whole decode step (`capture()`: a CUDA graph of one step; timing.state_replay_ms, `state` restored), the fastest
    kept in the autotuner's cache."""
    from floorline import timing

    global last_step_tuning
    last_step_tuning = {}
    if triton is None:
        return
    _USED.clear()
    graph = capture()  # which shapes the step launches
    del graph
    for int4, tuner in ((False, _gemv_bf16), (True, _gemv_int4)):
        for key in list(tuner.cache):
            n, k, pro, glu, acc = key[:5]
            cands = _CANDIDATES.get((n, k, pro, glu, acc, int4), [])
            if len(cands) < 2 or (n, k, pro, glu, acc, int4) not in _USED:
                continue
            times = timing.fastest_in_step(cands, functools.partial(tuner.cache.__setitem__, key), capture, state,
                                           reps)
            last_step_tuning[shape_name(n, k, pro, glu, acc)] = {tile_name(c): round(t, 4) for c, t in times.items()}


def _pick_bk(k: int, int4: bool) -> int:
    for bk in ((256, 128) if int4 else (256, 128, 64, 32, 16)):
        if k % bk == 0:
            return bk
    raise ValueError(f"K = {k} is not a multiple of {GROUP if int4 else 16}")


def tri_gemv(w, x, *, pro=PRO_NONE, norm_w=None, eps=1e-6, bias=None, residual=None, scales=None, zeros=None,
             glu=False, out=None, config=None, layout="rows", kind=""):
    """The GPU twin of ref_gemv (int4 in the `mma` layout: int4_cuda.gemv, whose `config` is (warps, groups ahead,
    splits)); writes into `out` (fp32) when given (a static buffer under a CUDA graph);
    the residual is added in place: `residual=out` adds W p(x) into out (the residual stream), which also allows
    split-K; another residual tensor is first copied into the output.
    A GPU autotunes the tile unless `config` fixes it (keys BN, BK, STAGES, SPLIT, num_warps, maxnreg: bench
    --gemv-sweep); under the interpreter `config` overrides fixed defaults (BN 16, the largest fitting BK, register
    buffers). `kind` names the matrix for FLOORLINE_PROBE_NO_WAIT."""
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
                              acc=acc, glu=glu, config=config, pdl=_pdl_default())
    dummy = y
    args = (w, scales if int4 else dummy, zeros if int4 else dummy, x, norm_w if norm_w is not None else dummy,
            bias if bias is not None else dummy, y, n, k, k // 8, eps)
    flags = dict(PRO=pro, GLU=glu, HAS_BIAS=bias is not None, ACC=acc, INT4=int4, GROUP_K=GROUP)
    rows = n // 2 if glu else n

    def grid(meta):
        return triton.cdiv(rows, meta["BN"] // 2 if glu else meta["BN"]), meta.get("SPLIT", 1)

    if INTERPRET or not w.is_cuda or config:  # fixed tiles: the interpreter (small shapes, the tests) or a sweep
        cfg = {"BN": 16, "BK": _pick_bk(k, int4), "STAGES": 0, "SPLIT": 1, **(config or {})}
        if cfg["SPLIT"] > 1 and not (acc and pro == PRO_NONE and not glu):
            raise ValueError("split-K adds partial sums into the output: it needs a residual, no norm, no glu")
        pdl = 0 if INTERPRET or not w.is_cuda else _pdl_for(kind)
        _gemv[grid(cfg)](*args, **flags, **cfg, PDL=pdl, **_launch(pdl))
    else:
        pdl = _pdl_for(kind)
        _USED.add((n, k, pro, glu, acc, int4))
        (_gemv_int4 if int4 else _gemv_bf16)[grid](*args, **flags, PDL=pdl, **_launch(pdl))
    return y


_FLUSH: dict = {}  # per device: a buffer of twice its L2, written to evict it


def _cold_bench(call, reps: int = 8) -> list[float]:
    """The GEMV autotuner's timer, as a decode step sees a kernel: `reps` calls, each after a write that evicts the L2
    cache (the weights come from memory), recorded in one CUDA graph (no launch overhead), minus the same graph of
    writes alone. Triton's default times one eager launch on warm weights, which ranks small matrices by launch
    cost and L2 hits. ms per call, as the autotuner's [median, p20, p80] (one figure: medians of 5 replays)."""
    from floorline.timing import graph_ms

    dev = torch.device("cuda", torch.cuda.current_device())
    if dev not in _FLUSH:  # a normal tensor even when first asked for under inference_mode (written outside it too)
        with torch.inference_mode(False):
            _FLUSH[dev] = torch.empty(2 * torch.cuda.get_device_properties(dev).L2_cache_size, dtype=torch.int8,
                                      device=dev)
    buf = _FLUSH[dev]
    both = graph_ms([lambda: (buf.zero_(), call())] * reps, 5)
    ms = max(both - graph_ms([buf.zero_] * reps, 5), 0.0)
    return [ms, ms, ms]


def _launch(pdl: int) -> dict:
    return {"launch_pdl": True} if pdl else {}


def attn_chunk_len(length: int, kv_heads: int, sms: int) -> int:
    """Cache positions per attention program: a power of two in [64, 512], small enough that the (kv head, chunk)
    programs fill the GPU about 1.5 times over at the full length, large enough that the partials (one fp32 row per
    query head per chunk) stay a small fraction of the KV bytes. FLOORLINE_ATTN_CHUNK fixes it, 64-1024 (a sweep
    inside the step: the bench times attention after a copy of itself, the step after the q/k/v GEMV, whose run time
    its first tile's loads before the wait can overlap)."""
    fixed = os.environ.get("FLOORLINE_ATTN_CHUNK")
    if fixed:
        if fixed not in ("64", "128", "256", "512", "1024"):
            from floorline.errors import UserError

            raise UserError(f"FLOORLINE_ATTN_CHUNK={fixed!r}: use 64, 128, 256, 512 or 1024 (cache positions per "
                            "attention program)")
        return int(fixed)
    c = ATTN_CHUNK
    while c < 512 and length * kv_heads >= 3 * c * sms:  # (length / 2c) * kv_heads programs >= 1.5 * sms
        c *= 2
    return c


# auto picks the CUDA chunk kernel for caches of at least this many positions. H200, native bf16 steps, one process
# a cell, Triton / CUDA: session 9 (results/h200/attn_cuda) qwen2.5-7b ctx 2048 3.683 / 3.709 ms, ctx 8192 3.919 /
# 3.921, ctx 16384 4.089 / 4.006; llama-3.1-8b ctx 16384 4.616 / 4.548. Session 11, CUDA loads of whole sectors
# (results/h200/final_session11, cta_times/call2): qwen2.5-7b ctx 8192 3.860 / 3.824, ctx 2048 3.715 / 3.722;
# llama-3.1-8b ctx 2048 4.072 / 4.059 (ties at 2048)
ATTN_CUDA_FROM = 8192


def attn_backend(device, heads: int, kv_heads: int, head_dim: int, dtype, length: int) -> str:
    """Which kernel computes the attention's chunks of a `length`-position cache: "cuda" (attn_cuda, where the GPU and
    shapes allow it) or "triton". FLOORLINE_ATTN=auto (the default: cuda from ATTN_CUDA_FROM positions, where it
    measured faster), cuda or triton. The merge is Triton's either way."""
    want = os.environ.get("FLOORLINE_ATTN", "auto")
    if want not in ("auto", "cuda", "triton"):
        from floorline.errors import UserError

        raise UserError(f"FLOORLINE_ATTN={want!r}: use auto, cuda or triton (the attention's chunk kernel)")
    if want == "triton" or INTERPRET or torch.device(device).type != "cuda":
        return "triton"
    if want == "auto" and length < ATTN_CUDA_FROM:
        return "triton"
    from floorline.native import attn_cuda

    why = attn_cuda.unavailable(torch.device(device), heads, kv_heads, head_dim, dtype)
    if why is None:
        return "cuda"
    if want == "cuda":
        from floorline.errors import UserError

        raise UserError(f"FLOORLINE_ATTN=cuda: {why}; use FLOORLINE_ATTN=triton or auto")
    return "triton"


MERGE_DEFAULT = (4, 1)


def merge_launch(head_dim: int) -> tuple[int, int]:
    """(programs a query head, warps a program) of the attention's merge: FLOORLINE_ATTN_MERGE="split,warps" if set,
    else MERGE_DEFAULT -- each program a 1/split share of the head's dims, so that the merge's programs are many and
    small (one warp fits an SM beside a chunk block that fills most of its registers, and starts before the chunks
    end). "1,4" is the one program of 4 warps a head of sessions 1-9."""
    split, warps = env_pair("FLOORLINE_ATTN_MERGE") or MERGE_DEFAULT
    if split not in (1, 2, 4, 8) or warps not in (1, 2, 4, 8):
        from floorline.errors import UserError

        raise UserError(f"FLOORLINE_ATTN_MERGE={os.environ['FLOORLINE_ATTN_MERGE']!r}: use 'split,warps', each 1, 2, "
                        "4 or 8 (the merge's programs a query head and warps a program)")
    while split > 1 and head_dim // split < 16:  # a program's share of the dims stays a power of two >= 16
        split //= 2
    return split, warps


class AttnScratch:
    """The flash-decoding partials for a cache of `length` positions: static buffers a CUDA graph can keep, and the
    chunk kernel's launch parameters. Triton: the chunk (positions per program), tile (positions per inner step),
    warps and pipeline stages of the tile loop default to attn_chunk_len's, ATTN_BL, 8 warps and ATTN_STAGES. CUDA
    (backend "cuda", attn_backend's choice by default): warps and chunk default to attn_cuda.config's."""

    def __init__(self, heads: int, kv_heads: int, head_dim: int, length: int, device, chunk: int | None = None,
                 tile: int | None = None, warps: int | None = None, stages: int | None = None,
                 dtype=torch.bfloat16, backend: str | None = None, merge: tuple[int, int] | None = None):
        device = torch.device(device)
        self.g = heads // kv_heads
        self.gp = max(16, triton.next_power_of_2(self.g)) if triton is not None else 16
        sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1
        self.backend = backend or attn_backend(device, heads, kv_heads, head_dim, dtype, length)
        if self.backend == "cuda":
            from floorline.native import attn_cuda

            w, c = attn_cuda.config(length, kv_heads, sms)
            self.chunk, self.warps = chunk or c, warps or w
        else:
            self.chunk = chunk or (ATTN_CHUNK if INTERPRET else attn_chunk_len(length, kv_heads, sms))
            self.warps = warps or 8  # measured on the H200 (bench --attn-sweep: 7.1 us against 8.0 with 4 at ctx 2048)
        self.merge = merge or merge_launch(head_dim)
        self.tile = min(tile or ATTN_BL, self.chunk)
        self.stages = stages or ATTN_STAGES
        self.nchunk = -(-length // self.chunk)
        shape = (kv_heads, self.nchunk, self.gp)
        self.m = torch.empty(shape, device=device, dtype=torch.float32)
        self.l = torch.empty(shape, device=device, dtype=torch.float32)
        self.o = torch.empty(*shape, head_dim, device=device, dtype=torch.float32)
        self.out = torch.empty(heads * head_dim, device=device, dtype=torch.float32)

    def name(self) -> str:
        merge = "" if self.merge == (1, 4) else f", merge {self.merge[0]} x w{self.merge[1]}"
        if self.backend == "cuda":
            return f"cuda chunk {self.chunk} w{self.warps}{merge}"
        return f"chunk {self.chunk} tile {self.tile} w{self.warps} s{self.stages}{merge}"


def tri_attention(qkv, cos, sin, pos, k_cache, v_cache, heads, scale, scratch: AttnScratch, zero_qkv: bool = False):
    """RoPE of q and k at `pos`, k and v written to the caches (kv_heads, L, D) at `pos`, and the attention of q over
    positions 0..pos: the GPU twin of ref_rope_kv then ref_attention. Two launches: the chunks (Triton's _attn_chunk
    or attn_cuda's, as scratch.backend says), then the merge; with zero_qkv the merge also zeroes qkv (fp32) once it
    is read."""
    kv_heads, _, d = k_cache.shape
    if scratch.backend == "cuda":  # (no probe: its PDL modes are 0-3)
        from floorline.native import attn_cuda

        attn_cuda.chunks(qkv, cos, sin, pos, k_cache, v_cache, heads, scale, scratch.m, scratch.l, scratch.o,
                         scratch.warps, scratch.chunk, _pdl_default())
    else:
        pdl = _pdl_for("attn")
        _attn_chunk[(kv_heads, scratch.nchunk)](qkv, cos, sin, pos, k_cache, v_cache, scratch.m, scratch.l,
                                                scratch.o, scale, k_cache.stride(0), scratch.nchunk, H=heads,
                                                KVH=kv_heads, G=scratch.g, GP=scratch.gp, D=d, CHUNK=scratch.chunk,
                                                BL=scratch.tile, DOT_F32=INTERPRET, PDL=pdl, STAGES=scratch.stages,
                                                num_warps=scratch.warps, **_launch(pdl))
    zb = triton.next_power_of_2(-(-qkv.numel() // heads)) if zero_qkv else 0
    split, mwarps = scratch.merge
    pdl = _pdl_for("merge")
    _attn_merge[(heads, split)](scratch.m, scratch.l, scratch.o, scratch.out, pos, scratch.nchunk, qkv, qkv.numel(),
                                G=scratch.g, GP=scratch.gp, D=d, CHUNK=scratch.chunk,
                                CB=min(64, triton.next_power_of_2(scratch.nchunk)), PDL=pdl, ZB=zb, DB=d // split,
                                num_warps=mwarps, **_launch(pdl))
    return scratch.out


# ------------------------------------------------------------------------------------------- the step's ends
STEP_BLOCK = 1024  # elements a program of _embed and _next_token (a vocabulary of 152064: 149 programs)


def next_token_state(device) -> torch.Tensor:
    """_next_token's two int64 words: the running packed key (starts below every key) and the programs done."""
    return torch.tensor([-(2**63), 0], dtype=torch.int64, device=device)


def tri_embed(embed: torch.Tensor, tok: torch.Tensor, x: torch.Tensor, zero_next: bool = False) -> None:
    """x (fp32) = embed[tok] in one PDL launch: the GPU twin of x.copy_(embed.index_select(0, tok)[0]);
    zero_next: x is row 0 of a contiguous (rows >= 2, n) buffer whose row 1 is zeroed too."""
    pdl = _pdl_default()
    n = x.numel()
    if zero_next and x.untyped_storage().nbytes() < (x.storage_offset() + 2 * n) * x.element_size():
        raise ValueError("tri_embed zero_next: x must be followed by n more floats of its buffer")
    _embed[(triton.cdiv(n, STEP_BLOCK),)](embed, embed.stride(0), tok, x, n, BLOCK=STEP_BLOCK, PDL=pdl,
                                          num_warps=4, **({"ZERO_NEXT": 1} if zero_next else {}), **_launch(pdl))


def tri_next_token(logits: torch.Tensor, tok: torch.Tensor, pos: torch.Tensor, state: torch.Tensor) -> None:
    """tok = argmax(logits), pos += 1 in one PDL launch: the GPU twin of tok.copy_(logits.argmax().view(1));
    pos.add_(1). With NaN logits the token is a valid row, not necessarily torch.argmax's (the first NaN)."""
    pdl = _pdl_default()
    n = logits.numel()
    _next_token[(triton.cdiv(n, STEP_BLOCK),)](logits, n, state, tok, pos, BLOCK=STEP_BLOCK, PDL=pdl, num_warps=4,
                                               **_launch(pdl))
