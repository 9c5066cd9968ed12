"""`floorline check`: mode native's kernels against their torch references on this GPU, then timed alone against
the measured copy bandwidth -- what to run first on a new machine.

Each kernel runs on the shapes of one model (default qwen2.5-7b): the fused GEMVs (q/k/v with RMSNorm and bias, o
adding into the residual, gate_up with silu(gate) * up, down, lm_head) in bf16 and in floorline's int4 (the CUDA
GEMV where it builds, and the Triton one), the fused MLP, the attention (RoPE, the KV write, flash-decoding chunks
and merge; Triton's chunks and the CUDA ones) at a short and a long context, and the step's two ends. A row is checked
before it is timed (relative error against the fp32 reference within its tolerance: a wrong kernel is never given a
time) and then timed as a decode step meets it: one CUDA graph calls it on enough distinct copies of its operands
(>= 4x the L2) that none finds its weights in the L2, back to back; the median of 20 replays per call. Bytes: what
the kernel must read (its weights, or the KV cache up to ctx).

Without a CUDA GPU it says so: the kernels run on the CPU only under Triton's interpreter, in the tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

GEMV_TOLERANCE = 2e-3  # relative error against the fp32 reference (bf16 weights; the int4 CUDA GEMV's fp16 inputs)
ATTN_TOLERANCE = 2e-2  # q and the probabilities go through bf16 tensor-core products


@dataclass
class Row:
    kernel: str
    fmt: str
    shape: str
    config: str
    bytes: int
    rel_err: float | None  # None: the kernel has no reference error (exact: the step's ends)
    ok: bool
    us: float | None = None
    cublas_us: float | None = None

    def record(self, copy_gbps: float | None) -> dict:
        gbps = self.bytes / self.us / 1e3 if self.us else None
        return {**self.__dict__, "gbps": gbps, "fraction_of_copy": gbps / copy_gbps if gbps and copy_gbps else None,
                "cublas_gbps": self.bytes / self.cublas_us / 1e3 if self.cublas_us else None}


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


def _copies(nbytes: int, dev) -> int:
    """Distinct operand copies one timing graph cycles through: at least 4x the L2 (no call finds its weights there)."""
    l2 = getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 50 << 20)
    return max(2, -(-4 * l2 // nbytes))


def _chain_us(calls) -> float:
    from floorline.device.timing import graph_ms

    return graph_ms(calls) * 1e3


def gemv_rows(a, dev, timed: bool) -> list[Row]:
    """The model's fused GEMVs: bf16, then int4 in each layout this GPU runs (mma: the CUDA GEMV; rows: Triton)."""
    from floorline.native import gemv, int4_cuda
    from floorline.native import refs as R
    from floorline.quant import int4

    h, kv, d = a.heads, a.kv_heads, a.head_dim
    shapes = {"qkv (norm+bias)": ((h + 2 * kv) * d, a.hidden, R.PRO_RMSNORM),
              "o (+res)": (a.hidden, h * d, R.PRO_NONE),
              "gate_up (norm, silu*up)": (2 * a.intermediate, a.hidden, R.PRO_RMSNORM),
              "down (+res)": (a.hidden, a.intermediate, R.PRO_NONE),
              "lm_head (norm)": (a.vocab, a.hidden, R.PRO_RMSNORM)}
    rows = []
    for name, (n, k, pro) in shapes.items():
        glu = "silu" in name
        x = torch.randn(k, device=dev)
        res0 = torch.randn(n // 2 if glu else n, device=dev)
        out = res0.clone()
        kw = dict(pro=pro, norm_w=torch.rand(k, device=dev) + 0.5 if pro else None, glu=glu,
                  bias=torch.randn(n, device=dev) if "bias" in name else None)
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02
        formats = [("bf16", w, {})]
        if name != "lm_head (norm)":
            lin = torch.nn.Linear(k, n, bias=False, device=dev, dtype=torch.bfloat16)
            lin.weight.data = w
            for layout in dict.fromkeys([int4.layout_for(dev, n, k), "rows"]):  # the GPU's own GEMV, then Triton's
                q = int4.Int4Native().pack(lin, layout=layout).module
                formats.append(("int4 cuda" if layout == "mma" else "int4 triton", q.words,
                                {"scales": q.scales, "zeros": q.zeros, "layout": layout}))
        for fmt, wt, extra in formats:
            # the step's own residuals: o and down add into the stream; int4 CUDA q/k/v adds into zeros (split-K)
            acc = "res" in name or (fmt == "int4 cuda" and name.startswith("qkv"))
            want = R.ref_gemv(wt, x, **kw, residual=res0 if acc else None, **extra)
            out.copy_(res0)
            gemv.tri_gemv(wt, x, out=out, residual=out if acc else None, **kw, **extra)
            tensors = [wt, *(v for v in extra.values() if isinstance(v, torch.Tensor))]
            nbytes = sum(t.numel() * t.element_size() for t in tensors)
            err = _rel(out, want)
            if fmt == "int4 cuda":
                config = "cuda " + int4_cuda.config_name(_tuner().int4_last)
            else:
                cfg = (gemv._gemv_int4 if fmt == "int4 triton" else gemv._gemv_bf16).best_config
                config = gemv.tile_name(cfg) if cfg is not None else "-"
            row = Row(f"gemv {name}", fmt, f"{n}x{k}", config, nbytes, err, err <= GEMV_TOLERANCE)
            if timed and row.ok:
                ops = [(wt, extra)] + [(wt.clone(), {k_: v.clone() if isinstance(v, torch.Tensor) else v
                                                     for k_, v in extra.items()})
                                       for _ in range(_copies(nbytes, dev) - 1)]
                row.us = _chain_us([lambda o=o: gemv.tri_gemv(o[0], x, out=out, residual=out if acc else None, **kw,
                                                              **o[1]) for o in ops])
                if fmt == "bf16":  # cuBLAS beside it: the plain product of the same weights
                    xb = x.to(torch.bfloat16)[None]
                    row.cublas_us = _chain_us([lambda o=o: torch.nn.functional.linear(xb, o[0]) for o in ops])
                del ops
            rows.append(row)
    return rows


def mlp_row(a, dev, timed: bool) -> Row:
    """The fused MLP (one kernel a layer): out = x + down(silu(gate(n(x))) * up(n(x)))."""
    from floorline.native import mlp

    h, i = a.hidden, a.intermediate
    gu = torch.randn(2 * i, h, device=dev, dtype=torch.bfloat16) * 0.02
    dt = torch.randn(i, h, device=dev, dtype=torch.bfloat16) * 0.02
    nw, x = torch.rand(h, device=dev) + 0.5, torch.randn(h, device=dev)
    out, zero = torch.zeros(h, device=dev), torch.randn(h, device=dev)
    mlp.tri_mlp(gu, dt, x, out, zero, nw, 1e-6)
    err = _rel(out, mlp.ref_mlp(gu, dt, x, nw, 1e-6))
    ok = err <= GEMV_TOLERANCE and not zero.any()
    choice = _tuner().mlp_choice.get((h, i)) or mlp.fitting(i, h)[0]
    row = Row("mlp (norm, silu*up, down, +res)", "bf16", f"3x{i}x{h}", mlp.name(choice),
              3 * i * h * 2, err, ok)
    if timed and ok:
        ops = [(gu, dt)] + [(gu.clone(), dt.clone()) for _ in range(_copies(row.bytes, dev) - 1)]
        row.us = _chain_us([lambda o=o: mlp.tri_mlp(o[0], o[1], x, out, zero, nw, 1e-6) for o in ops])
    return row


def attention_rows(a, dev, ctx: int, timed: bool) -> list[Row]:
    """RoPE, the KV write and the attention at `ctx`: Triton's chunks, and the CUDA ones where they build."""
    from floorline.native import attention as A
    from floorline.native import attn_cuda
    from floorline.native import refs as R

    h, kv, d = a.heads, a.kv_heads, a.head_dim
    kernels = ["triton"] + (["cuda"] if attn_cuda.unavailable(dev, h, kv, d, torch.bfloat16) is None else [])
    nbytes = 2 * kv * ctx * d * 2
    rows = []
    for kernel in kernels:
        qkv = torch.randn((h + 2 * kv) * d, device=dev)
        cos, sin = R.rope_tables(torch.rand(d // 2, device=dev), ctx + 64, 1.0, dev)
        pos = torch.tensor([ctx - 1], device=dev, dtype=torch.int32)
        sc = A.AttnScratch(h, kv, d, ctx + 64, dev, kernel=kernel)
        caches = [(torch.randn(kv, ctx + 64, d, device=dev, dtype=torch.bfloat16),
                   torch.randn(kv, ctx + 64, d, device=dev, dtype=torch.bfloat16))
                  for _ in range(_copies(nbytes, dev) if timed else 1)]
        kr, vr = caches[0][0].clone(), caches[0][1].clone()
        want = R.ref_attention(R.ref_rope_kv(qkv, cos, sin, pos, kr, vr, h, kv, d), kr, vr, pos, d ** -0.5)
        got = A.tri_attention(qkv, cos, sin, pos, caches[0][0], caches[0][1], h, d ** -0.5, sc)
        err = _rel(got, want)
        ok = err <= ATTN_TOLERANCE and _rel(caches[0][0][:, ctx - 1], kr[:, ctx - 1]) <= ATTN_TOLERANCE  # its k
        row = Row(f"rope+kv+attention ctx {ctx}", f"{kernel} chunks, bf16 KV", f"{h}q/{kv}kv x {d}", sc.name(),
                  nbytes, err, ok)
        if timed and ok:
            row.us = _chain_us([lambda c=c: A.tri_attention(qkv, cos, sin, pos, c[0], c[1], h, d ** -0.5, sc)
                                for c in caches])
        rows.append(row)
        if kernel == "triton":  # the same chunks' partials, merged inside the o GEMV (o_merge.py; untimed)
            c = caches[0]
            chunks = lambda: A.tri_attention(qkv, cos, sin, pos, c[0], c[1], h, d ** -0.5, sc, merge=False)  # noqa: E731
            rows.append(_o_merge_row(a, dev, chunks, sc, pos, want))
    return rows


def _o_merge_row(a, dev, chunks, sc, pos, want) -> Row:
    """x += W_o a with the merge inside the o GEMV, after `chunks()` left the attention's partials in `sc`, against
    x + W_o (the reference attention's output)."""
    from floorline.native import o_merge

    h, d = a.heads, a.head_dim
    w = (torch.randn(a.hidden, h * d, device=dev) * 0.02).bfloat16()
    x = torch.randn(a.hidden, device=dev)
    y = x.clone()
    chunks()
    o_merge.tri_o_merge(w, sc, pos, y, o_merge.CANDIDATES[0])
    err = _rel(y - x, w.float() @ want)
    return Row("o with the merge inside (+res)", "bf16", f"{a.hidden}x{h * d}", o_merge.name(o_merge.CANDIDATES[0]),
               a.hidden * h * d * 2, err, err <= ATTN_TOLERANCE)


def ends_rows(a, dev) -> list[Row]:
    """The step's first and last kernels: the embedding row into x; the argmax, next token and position."""
    from floorline.native import ends as E

    embed = torch.randn(a.vocab, a.hidden, device=dev, dtype=torch.bfloat16)
    tok = torch.tensor([a.vocab - 3], device=dev)
    x = torch.full((2, a.hidden), float("nan"), device=dev)
    E.tri_embed(embed, tok, x[0], zero_next=True)
    ok_embed = torch.equal(x[0], embed[a.vocab - 3].float()) and not x[1].any()
    logits = torch.randn(a.vocab, device=dev)
    logits[E.STEP_BLOCK + 7] = logits.max() + 1  # the max in a program other than the first
    pos, state = torch.tensor([41], device=dev, dtype=torch.int32), E.next_token_state(dev)
    E.tri_next_token(logits, tok, pos, state)
    ok_next = int(tok) == int(logits.argmax()) and int(pos) == 42 and state.tolist() == [-(2**63), 0]
    return [Row("embed (row into x)", "bf16 -> fp32", f"{a.vocab}x{a.hidden}", "-", a.hidden * 2, None, ok_embed),
            Row("next token (argmax, pos+1)", "fp32", f"{a.vocab}", "-", a.vocab * 4, None, ok_next)]


def _tuner():
    from floorline.native.tuner import TUNER

    return TUNER


def check(model: str, ctxs: list[int], timed: bool = True, log=lambda s: None) -> tuple[dict, list[dict]]:
    """Every kernel of mode native on the shapes of `model`, checked (and timed): (what this GPU is, the rows)."""
    from floorline.bench import bandwidth
    from floorline.core import zoo
    from floorline.native import nvrtc, pdl

    a = zoo.resolve(model, need="config")
    dev = torch.device("cuda", torch.cuda.current_device())
    log("measuring the copy bandwidth")
    copy_gbps, _ = bandwidth.copy_bandwidth(dev)
    info = {"device_name": torch.cuda.get_device_name(dev), "capability": ".".join(map(str, torch.cuda.
            get_device_capability(dev))), "copy_gbps": copy_gbps, "model": a.name, "pdl": pdl.supported(dev),
            "cuda_kernels": nvrtc.no_tensor_core_gpu(dev, "floorline's CUDA kernels") or "built by NVRTC"}
    rows: list[Row] = []
    with torch.inference_mode():
        log("GEMVs (the first call of each shape tunes its tile)")
        rows += gemv_rows(a, dev, timed)
        log("the fused MLP")
        rows.append(mlp_row(a, dev, timed))
        for ctx in ctxs:
            log(f"attention at ctx {ctx}")
            rows += attention_rows(a, dev, ctx, timed)
        rows += ends_rows(a, dev)
    return info, [r.record(copy_gbps) for r in rows]
