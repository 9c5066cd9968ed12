"""Per-kernel GB/s of mode native against the measured copy bandwidth (GPU): `python -m floorline.native.bench`.

Each kernel runs on the shapes of one model (default qwen2.5-7b): the fused GEMVs in bf16 and int4 with their real
prologues / epilogues, and flash-decoding attention at ctx 2048 and 16384. Time per call: triton.testing's CUDA-graph
benchmark (median); bytes: what the kernel must read (weights, or the KV cache up to ctx).
"""

from __future__ import annotations

import argparse
import json

import torch


def main(argv=None) -> int:
    from triton.testing import do_bench_cudagraph

    from floorline import bandwidth, zoo
    from floorline.native import kernels as K
    from floorline.quant.int4 import Int4Native

    p = argparse.ArgumentParser()
    p.add_argument("--model", default="qwen2.5-7b")
    p.add_argument("--json", default=None, help="also write the rows here")
    args = p.parse_args(argv)
    a, dev = zoo.ZOO[args.model], torch.device("cuda")
    copy_gbps, _ = bandwidth.copy_bandwidth(dev)
    h, kv, d = a.heads, a.kv_heads, a.head_dim
    shapes = {"qkv (norm+bias)": ((h + 2 * kv) * d, a.hidden, K.PRO_RMSNORM), "o (+res)": (a.hidden, h * d, K.PRO_NONE),
              "gate_up (norm)": (2 * a.intermediate, a.hidden, K.PRO_RMSNORM),
              "down (silu+res)": (a.hidden, a.intermediate, K.PRO_SILU_MUL),
              "lm_head (norm)": (a.vocab, a.hidden, K.PRO_RMSNORM)}
    rows = []
    for name, (n, k, pro) in shapes.items():
        x = torch.randn(2 * k if pro == K.PRO_SILU_MUL else k, device=dev)
        kw = dict(pro=pro, norm_w=torch.rand(k, device=dev) + 0.5 if pro == K.PRO_RMSNORM else None,
                  residual=torch.randn(n, device=dev) if "res" in name else None,
                  bias=torch.randn(n, device=dev) if "bias" in name else None)
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02
        formats = [("bf16", w, {})]
        if name != "lm_head (norm)":
            lin = torch.nn.Linear(k, n, bias=False, device=dev, dtype=torch.bfloat16)
            lin.weight.data = w
            q = Int4Native().pack(lin).module
            formats.append(("int4", q.words, {"scales": q.scales, "zeros": q.zeros}))
        xb = x[:k].to(torch.bfloat16)[None]  # cuBLAS baseline: the plain product on a k-wide input
        for fmt, wt, extra in formats:
            out = torch.empty(n, device=dev)
            K.tri_gemv(wt, x, out=out, **kw, **extra)  # compile + autotune
            ms = do_bench_cudagraph(lambda: K.tri_gemv(wt, x, out=out, **kw, **extra))
            nbytes = sum(t.numel() * t.element_size() for t in [wt, *extra.values()])
            if fmt == "bf16":
                cub = do_bench_cudagraph(lambda: torch.nn.functional.linear(xb, w))
            rows.append({"kernel": f"gemv {name}", "format": fmt, "shape": f"{n}x{k}", "us": ms * 1e3,
                         "bytes": nbytes, "gbps": nbytes / (ms * 1e-3) / 1e9,
                         "cublas_gbps": w.numel() * 2 / (cub * 1e-3) / 1e9 if fmt == "bf16" else None})
    for ctx in (2048, 16384):
        kc = torch.randn(kv, ctx + 64, d, device=dev, dtype=torch.bfloat16)
        vc = torch.randn_like(kc)
        qv = torch.randn(h, d, device=dev)
        pos = torch.tensor([ctx - 1], device=dev, dtype=torch.int32)
        sc = K.AttnScratch(h, kv, d, ctx + 64, dev)
        K.tri_attention(qv, kc, vc, pos, d ** -0.5, sc)
        ms = do_bench_cudagraph(lambda: K.tri_attention(qv, kc, vc, pos, d ** -0.5, sc))
        nbytes = 2 * kv * ctx * d * 2
        rows.append({"kernel": f"attention ctx {ctx}", "format": "bf16 KV", "shape": f"{h}q/{kv}kv x {d}",
                     "us": ms * 1e3, "bytes": nbytes, "gbps": nbytes / (ms * 1e-3) / 1e9, "cublas_gbps": None})
    print(f"{torch.cuda.get_device_name()}: copy bandwidth {copy_gbps:.0f} GB/s measured; {a.name} shapes")
    print("| kernel | format | shape | us | MB | GB/s | % of copy bw | cuBLAS bf16 GB/s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        cb = f"{r['cublas_gbps']:.0f}" if r["cublas_gbps"] else "-"
        print(f"| {r['kernel']} | {r['format']} | {r['shape']} | {r['us']:.1f} | {r['bytes'] / 1e6:.1f} | "
              f"{r['gbps']:.0f} | {r['gbps'] / copy_gbps:.0%} | {cb} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"copy_gbps": copy_gbps, "model": a.name, "rows": rows}, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
