"""The torch references of mode native's kernels: the same math in plain fp32 ops, on any device. Every kernel is
checked against these (tests on the CPU under Triton's interpreter; `floorline check` on a GPU), and the step runs on
them where ops="torch" (model.py)."""

from __future__ import annotations

import torch

from floorline.native.int4_format import dequant as dequant_int4

PRO_NONE, PRO_RMSNORM = 0, 1  # a GEMV's prologue: the input as it is, or RMSNorm(x) * g


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


def rotate(x, cos, sin):
    h = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., h:], x[..., :h]], -1) * sin


def ref_rope_kv(qkv, cos, sin, pos, k_cache, v_cache, heads, kv_heads, head_dim, qk_norm=None):
    """q (heads, D) fp32 rotated at `pos`; k rotated and v written into the caches (kv_heads, L, D) at `pos`.
    qk_norm (q weights, k weights, eps): each q and k head RMS-normalised first (Qwen3)."""
    p = int(pos)
    x = qkv.float().reshape(heads + 2 * kv_heads, head_dim)
    q, k = x[:heads], x[heads:heads + kv_heads]
    if qk_norm is not None:
        q, k = rmsnorm(q, qk_norm[0], qk_norm[2]), rmsnorm(k, qk_norm[1], qk_norm[2])
    q = rotate(q, cos[p], sin[p])
    k = rotate(k, cos[p], sin[p])
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

