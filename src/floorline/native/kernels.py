"""Triton kernels of the native decode step, batch 1, and their torch references (the same math, plain ops).

One GEMV kernel with compile-time prologues and epilogues, so each fused matrix is one launch:
  y = W @ p(x) (+ bias) (+ residual)       p: identity | RMSNorm(x) * g | silu(x[:K]) * x[K:]
W is bf16 (N, K) row-major, or floorline's W4A16 (int4.py): int32 (N, K/8) codes, bf16 scales and zeros (N, K/128).
Each program owns BN output rows and streams them along K in BK-wide tiles; activations are fp32 vectors (KB).
RoPE + KV write: one launch per layer rotates q and k at the current position (read from the device: graph-safe) and
writes k and v into the cache. Attention is flash-decoding: the cache length is split into fixed chunks, one program
per (kv head, chunk) scores all query heads of its group with tensor cores, a second kernel merges the chunks.

Under TRITON_INTERPRET=1 the same kernels run on the CPU (small shapes, in the tests), with fixed launch parameters;
on a GPU the GEMV autotunes its tile per (N, K) once, before the CUDA graph is captured.
"""

from __future__ import annotations

import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # floorline runs without Triton; only mode native and its kernel tests need it
    triton = tl = None

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
PRO_NONE, PRO_RMSNORM, PRO_SILU_MUL = 0, 1, 2
GROUP = 128  # the int4 format's group size along K
ATTN_CHUNK = 64  # cache positions per attention program
ATTN_BL = 32  # positions per inner tile


# ------------------------------------------------------------------------------------------- torch references
def rmsnorm(x, w, eps):
    """x / sqrt(mean(x^2) + eps) * w over the last dimension, in fp32."""
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.float()


def ref_gemv(w, x, *, pro=PRO_NONE, norm_w=None, eps=1e-6, bias=None, residual=None, scales=None, zeros=None):
    """y = W @ p(x) (+ bias) (+ residual) in fp32; W bf16 (N, K), or int4 words (N, K/8) with scales and zeros."""
    x = x.float()
    if pro == PRO_RMSNORM:
        x = rmsnorm(x, norm_w, eps)
    elif pro == PRO_SILU_MUL:
        k = x.numel() // 2
        x = torch.nn.functional.silu(x[:k]) * x[k:]
    wf = dequant_int4(w, scales, zeros) if scales is not None else w.float()
    y = wf @ x
    if bias is not None:
        y = y + bias.float()
    if residual is not None:
        y = y + residual.float()
    return y


def dequant_int4(words, scales, zeros):
    """floorline's W4A16 layout -> fp32 (N, K): code j of word i in row n is weight (n, 8i + j), bits 4j..4j+3;
    w = (code - zero) * scale per group of 128 along K."""
    n, kw = words.shape
    shifts = torch.arange(0, 32, 4, device=words.device, dtype=torch.int32)
    codes = (words.unsqueeze(-1) >> shifts) & 0xF
    codes = codes.reshape(n, kw * 8).float()
    g = codes.shape[1] // scales.shape[1]
    return (codes - zeros.float().repeat_interleave(g, 1)) * scales.float().repeat_interleave(g, 1)


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
if triton is not None:

    @triton.jit
    def _gemv(W, S, Z, X, NW, B, R, Y, N, K, eps,
              PRO: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr, INT4: tl.constexpr,
              GROUP_K: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pid = tl.program_id(0)
        rn = pid * BN + tl.arange(0, BN)
        nmask = rn < N
        rstd = 1.0
        if PRO == 1:  # RMSNorm prologue: every program reads the whole (KB-sized) input for its norm
            ss = tl.zeros([BK], dtype=tl.float32)
            for k0 in range(0, K, BK):
                xv = tl.load(X + k0 + tl.arange(0, BK)).to(tl.float32)
                ss += xv * xv
            rstd = 1.0 / tl.sqrt(tl.sum(ss, 0) / K + eps)
        acc = tl.zeros([BN, BK], dtype=tl.float32)
        for k0 in range(0, K, BK):
            rk = k0 + tl.arange(0, BK)
            if PRO == 2:  # SiLU-and-multiply prologue: x = silu(g) * u, g and u the two halves of the input
                g = tl.load(X + rk).to(tl.float32)
                u = tl.load(X + K + rk).to(tl.float32)
                xv = g / (1.0 + tl.exp(-g)) * u
            else:
                xv = tl.load(X + rk).to(tl.float32)
            if PRO == 1:
                xv = xv * rstd * tl.load(NW + rk).to(tl.float32)
            if INT4:  # BK <= GROUP_K: one scale and one zero per row per tile
                rw = k0 // 8 + tl.arange(0, BK // 8)
                words = tl.load(W + rn[:, None] * (K // 8) + rw[None, :], mask=nmask[:, None], other=0)
                shifts = tl.arange(0, 8) * 4
                codes = (words[:, :, None] >> shifts[None, None, :]) & 0xF
                codes = tl.reshape(codes, [BN, BK]).to(tl.float32)
                gi = k0 // GROUP_K
                sc = tl.load(S + rn * (K // GROUP_K) + gi, mask=nmask, other=0.0).to(tl.float32)
                ze = tl.load(Z + rn * (K // GROUP_K) + gi, mask=nmask, other=0.0).to(tl.float32)
                wv = (codes - ze[:, None]) * sc[:, None]
            else:
                wv = tl.load(W + rn[:, None] * K + rk[None, :], mask=nmask[:, None], other=0.0,
                             eviction_policy="evict_first").to(tl.float32)
            acc += wv * xv[None, :]
        y = tl.sum(acc, 1)
        if HAS_BIAS:
            y += tl.load(B + rn, mask=nmask, other=0.0).to(tl.float32)
        if HAS_RES:
            y += tl.load(R + rn, mask=nmask, other=0.0).to(tl.float32)
        tl.store(Y + rn, y, mask=nmask)

    # few configs: every one is compiled per fused matrix before the graph is captured
    _CONFIGS = [triton.Config({"BN": bn, "BK": bk}, num_warps=w)
                for bn, bk, w in ((4, 512, 4), (8, 512, 8), (8, 256, 4), (16, 256, 8))]
    _gemv_tuned = triton.autotune(_CONFIGS, key=["N", "K", "PRO", "INT4"])(_gemv)

    @triton.jit
    def _rope_kv(QKV, COS, SIN, POS, Q, KC, VC, stride_kh, H: tl.constexpr, KVH: tl.constexpr, D: tl.constexpr):
        h = tl.program_id(0)  # 0..H-1: q heads; H..H+KVH-1: k heads; then v heads
        pos = tl.load(POS)
        d = tl.arange(0, D)
        x = tl.load(QKV + h * D + d).to(tl.float32)
        if h < H + KVH:
            partner = tl.load(QKV + h * D + (d + D // 2) % D).to(tl.float32)
            sign = tl.where(d < D // 2, -1.0, 1.0)
            c = tl.load(COS + pos * D + d)
            s = tl.load(SIN + pos * D + d)
            x = x * c + sign * partner * s
            if h < H:
                tl.store(Q + h * D + d, x)
            else:
                tl.store(KC + (h - H) * stride_kh + pos * D + d, x.to(KC.dtype.element_ty))
        else:
            tl.store(VC + (h - H - KVH) * stride_kh + pos * D + d, x.to(VC.dtype.element_ty))

    @triton.jit
    def _attn_chunk(Q, KC, VC, POS, MO, LO, OO, scale, stride_kh, NCHUNK,
                    G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, CHUNK: tl.constexpr, BL: tl.constexpr,
                    DOT_F32: tl.constexpr):
        kvh = tl.program_id(0)
        c = tl.program_id(1)
        n = tl.load(POS) + 1
        g = tl.arange(0, GP)
        d = tl.arange(0, D)
        q = tl.load(Q + (kvh * G + g)[:, None] * D + d[None, :], mask=(g < G)[:, None], other=0.0)
        q = (q * scale).to(KC.dtype.element_ty)
        if DOT_F32:  # the interpreter multiplies bf16 operands of tl.dot as raw bits: give it fp32
            q = q.to(tl.float32)
        m = tl.full([GP], -1e30, dtype=tl.float32)
        l = tl.zeros([GP], dtype=tl.float32)
        acc = tl.zeros([GP, D], dtype=tl.float32)
        start = c * CHUNK
        if start < n:
            for off in range(0, CHUNK, BL):
                rl = start + off + tl.arange(0, BL)
                lm = rl < n
                base = kvh * stride_kh + rl[:, None] * D + d[None, :]
                k = tl.load(KC + base, mask=lm[:, None], other=0.0)
                v = tl.load(VC + base, mask=lm[:, None], other=0.0)
                if DOT_F32:
                    k = k.to(tl.float32)
                    v = v.to(tl.float32)
                s = tl.dot(q, tl.trans(k))
                s = tl.where(lm[None, :], s, -1e30)
                m_new = tl.maximum(m, tl.max(s, 1))
                p = tl.where(lm[None, :], tl.exp(s - m_new[:, None]), 0.0)
                alpha = tl.exp(m - m_new)
                l = l * alpha + tl.sum(p, 1)
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
                m = m_new
        o = (kvh * NCHUNK + c) * GP + g
        tl.store(MO + o, m)
        tl.store(LO + o, l)
        tl.store(OO + o[:, None] * D + d[None, :], acc)

    @triton.jit
    def _attn_merge(MO, LO, OO, OUT, NCHUNK, G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr,
                    CB: tl.constexpr):
        h = tl.program_id(0)
        kvh = h // G
        gi = h % G
        d = tl.arange(0, D)
        cs = tl.arange(0, CB)
        mx = tl.full([CB], -1e30, dtype=tl.float32)
        for c0 in range(0, NCHUNK, CB):
            cm = (c0 + cs) < NCHUNK
            mx = tl.maximum(mx, tl.load(MO + (kvh * NCHUNK + c0 + cs) * GP + gi, mask=cm, other=-1e30))
        mmax = tl.max(mx, 0)
        num = tl.zeros([D], dtype=tl.float32)
        den = tl.zeros([CB], dtype=tl.float32)
        for c0 in range(0, NCHUNK, CB):
            cm = (c0 + cs) < NCHUNK
            o = (kvh * NCHUNK + c0 + cs) * GP + gi
            w = tl.where(cm, tl.exp(tl.load(MO + o, mask=cm, other=-1e30) - mmax), 0.0)
            den += w * tl.load(LO + o, mask=cm, other=0.0)
            part = tl.load(OO + o[:, None] * D + d[None, :], mask=cm[:, None], other=0.0)
            num += tl.sum(part * w[:, None], 0)
        tl.store(OUT + h * D + d, num / tl.sum(den, 0))


def _pick_bk(k: int, int4: bool) -> int:
    for bk in ((128,) if int4 else (256, 128, 64, 32, 16)):
        if k % bk == 0:
            return bk
    raise ValueError(f"K = {k} is not a multiple of 16")


def tri_gemv(w, x, *, pro=PRO_NONE, norm_w=None, eps=1e-6, bias=None, residual=None, scales=None, zeros=None,
             out=None):
    """The Triton twin of ref_gemv; writes into `out` (fp32, N) when given (a static buffer under a CUDA graph)."""
    int4 = scales is not None
    n = w.shape[0]
    k = w.shape[1] * 8 if int4 else w.shape[1]
    y = out if out is not None else torch.empty(n, device=w.device, dtype=torch.float32)
    dummy = y
    args = (w, scales if int4 else dummy, zeros if int4 else dummy, x, norm_w if norm_w is not None else dummy,
            bias if bias is not None else dummy, residual if residual is not None else dummy, y, n, k, eps)
    flags = dict(PRO=pro, HAS_BIAS=bias is not None, HAS_RES=residual is not None, INT4=int4, GROUP_K=GROUP)
    if INTERPRET or not w.is_cuda:
        bk = _pick_bk(k, int4)
        _gemv[(triton.cdiv(n, 16),)](*args, **flags, BN=16, BK=bk)
    else:
        if int4 or k % 512:  # int4 tiles stay inside one group; other K need a tile that divides them
            bk = _pick_bk(k, int4)
            _gemv[(triton.cdiv(n, 8),)](*args, **flags, BN=8, BK=bk, num_warps=4)
        else:
            _gemv_tuned[lambda meta: (triton.cdiv(n, meta["BN"]),)](*args, **flags)
    return y


def tri_rope_kv(qkv, cos, sin, pos, k_cache, v_cache, heads, kv_heads, head_dim, q_out=None):
    q = q_out if q_out is not None else torch.empty(heads, head_dim, device=qkv.device, dtype=torch.float32)
    _rope_kv[(heads + 2 * kv_heads,)](qkv, cos, sin, pos, q, k_cache, v_cache, k_cache.stride(0),
                                      H=heads, KVH=kv_heads, D=head_dim)
    return q


class AttnScratch:
    """The flash-decoding partials for a cache of `length` positions: static buffers a CUDA graph can keep."""

    def __init__(self, heads: int, kv_heads: int, head_dim: int, length: int, device):
        self.g = heads // kv_heads
        self.gp = max(16, triton.next_power_of_2(self.g)) if triton is not None else 16
        self.nchunk = -(-length // ATTN_CHUNK)
        shape = (kv_heads, self.nchunk, self.gp)
        self.m = torch.empty(shape, device=device, dtype=torch.float32)
        self.l = torch.empty(shape, device=device, dtype=torch.float32)
        self.o = torch.empty(*shape, head_dim, device=device, dtype=torch.float32)
        self.out = torch.empty(heads * head_dim, device=device, dtype=torch.float32)


def tri_attention(q, k_cache, v_cache, pos, scale, scratch: AttnScratch):
    kv_heads, _, d = k_cache.shape
    heads = q.shape[0]
    _attn_chunk[(kv_heads, scratch.nchunk)](q, k_cache, v_cache, pos, scratch.m, scratch.l, scratch.o, scale,
                                            k_cache.stride(0), scratch.nchunk, G=scratch.g, GP=scratch.gp, D=d,
                                            CHUNK=ATTN_CHUNK, BL=ATTN_BL, DOT_F32=INTERPRET)
    _attn_merge[(heads,)](scratch.m, scratch.l, scratch.o, scratch.out, scratch.nchunk, G=scratch.g,
                          GP=scratch.gp, D=d, CB=16)
    return scratch.out
