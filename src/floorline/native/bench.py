"""Per-kernel GB/s of mode native against the measured copy bandwidth (GPU): `python -m floorline.native.bench`.

Each kernel runs on the shapes of one model (default qwen2.5-7b): the fused GEMVs in bf16 and int4 with their real
prologues / epilogues, and flash-decoding attention at ctx 2048 and 16384. Bytes: what the kernel must read (weights,
or the KV cache up to ctx). Time per call: one CUDA graph calls the kernel on enough distinct copies of its operands
(>= 4x the L2 cache) that no call finds its weights in L2, back to back as in a decode step; median of the replays.
"""

from __future__ import annotations

import argparse
import json

import torch


def chain_us(calls) -> float:
    """Median microseconds per call of `calls` (closures) in one CUDA graph (timing.graph_ms)."""
    from floorline.timing import graph_ms

    return graph_ms(calls) * 1e3


def _operands(K, name: str, n: int, k: int, pro: int, dev):
    """Input x, output (holding a random residual for "+res": added in place, as the model does) and the GEMV
    keywords of one bench shape; "silu" marks the gate_up GEMV (glu: n/2 outputs)."""
    x = torch.randn(k, device=dev)
    out = torch.randn(n // 2 if "silu" in name else n, device=dev)
    kw = dict(pro=pro, norm_w=torch.rand(k, device=dev) + 0.5 if pro == K.PRO_RMSNORM else None, glu="silu" in name,
              residual=out if "res" in name else None, bias=torch.randn(n, device=dev) if "bias" in name else None)
    return x, out, kw


def _acc_qkv(name: str, fmt: str, kw: dict, out) -> dict:
    """The keywords of one format's row: mode native's int4 CUDA q/k/v adds into its output (zeroed by the attention
    after use; here a random start, as a residual), which lets it split K."""
    if fmt == "int4 cuda" and name.startswith("qkv"):
        return {**kw, "residual": out}
    return {**kw, "residual": out if "res" in name else None}


CHECK_TOLERANCE = 2e-3  # relative error against the fp32 torch reference (int4 CUDA: fp16 inputs, ~3e-4)


def _config_name(K, fmt: str) -> str:
    """The tuned launch parameters of the kernel just timed."""
    if fmt == "int4 cuda":
        from floorline.native import int4_cuda

        return int4_cuda.config_name(int4_cuda.last_config)
    cfg = (K._gemv_int4 if fmt == "int4" else K._gemv_bf16).best_config
    return (f"BN{cfg.kwargs['BN']} BK{cfg.kwargs['BK']} w{cfg.num_warps} s{cfg.kwargs.get('STAGES', 0)}"
            f" k{cfg.kwargs.get('SPLIT', 1)} a{cfg.kwargs.get('AHEAD', 1)} r{cfg.maxnreg or '-'}")


def _copies(nbytes: int) -> int:
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20)
    return max(2, -(-4 * l2 // nbytes))


def main(argv=None) -> int:
    from floorline import bandwidth, zoo
    from floorline.native import kernels as K
    from floorline.quant import int4

    p = argparse.ArgumentParser()
    p.add_argument("--model", default="qwen2.5-7b")
    p.add_argument("--json", default=None, help="also write the rows here")
    p.add_argument("--attn-sweep", nargs="?", const="all", choices=("all", "triton", "cuda"), default=None,
                   help="also time attention over its launch parameters: Triton's chunk x tile x warps x pipeline "
                        "stages, the CUDA chunk kernel's warps x chunk, or both (all, the default)")
    p.add_argument("--gemv-sweep", action="store_true",
                   help="time every int4 GEMV launch config (CUDA) and, with --triton-tiles, every Triton tile of "
                        "GEMV_SWEEP on each shape (and HF's unfused q, k, gate) instead")
    p.add_argument("--triton-tiles", action="store_true", help="with --gemv-sweep: the Triton tiles too")
    p.add_argument("--only", default=None,
                   help="comma-separated: GEMV shapes whose name contains one of these (e.g. gate_up,down), and "
                        "`attention` for its rows (left out otherwise)")
    p.add_argument("--formats", default=None,
                   help="comma-separated formats of the GEMV rows: bf16, int4 cuda, int4 (Triton); default all")
    p.add_argument("--attn-ctx", default="2048,16384", help="comma-separated contexts of the attention rows")
    p.add_argument("--int4-config", default=None,
                   help="fix the int4 CUDA launch config: warps,ahead,splits,flat,stages[,persist[,tiles]]")
    args = p.parse_args(argv)
    a, dev = zoo.ZOO[args.model], torch.device("cuda")
    copy_gbps, _ = bandwidth.copy_bandwidth(dev)
    h, kv, d = a.heads, a.kv_heads, a.head_dim
    shapes = {"qkv (norm+bias)": ((h + 2 * kv) * d, a.hidden, K.PRO_RMSNORM), "o (+res)": (a.hidden, h * d, K.PRO_NONE),
              "gate_up (norm, silu*up)": (2 * a.intermediate, a.hidden, K.PRO_RMSNORM),
              "down (+res)": (a.hidden, a.intermediate, K.PRO_NONE),
              "lm_head (norm)": (a.vocab, a.hidden, K.PRO_RMSNORM)}
    if args.only:
        shapes = {k: v for k, v in shapes.items() if any(o in k for o in args.only.split(",") if o != "attention")}
    if args.int4_config:
        from floorline.native import int4_cuda

        int4_cuda.FIXED = int4_cuda.parse_config(args.int4_config)
    if args.gemv_sweep:
        return _gemv_sweep(K, int4, shapes, a, dev, copy_gbps, args.json, args.triton_tiles)
    rows = []
    for name, (n, k, pro) in shapes.items():
        x, out, kw = _operands(K, name, n, k, pro, dev)
        res0 = out.clone()
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02
        formats = [("bf16", w, {})]
        if name != "lm_head (norm)":
            lin = torch.nn.Linear(k, n, bias=False, device=dev, dtype=torch.bfloat16)
            lin.weight.data = w
            for layout in dict.fromkeys([int4.layout_for(dev, n, k), "rows"]):  # the GPU's own GEMV, then Triton's
                q = int4.Int4Native().pack(lin, layout=layout).module
                fmt = "int4" if layout == "rows" else "int4 cuda"
                formats.append((fmt, q.words, {"scales": q.scales, "zeros": q.zeros, "layout": layout}))
        xb = x.to(torch.bfloat16)[None]  # cuBLAS baseline: the plain product on a k-wide input
        for fmt, wt, extra in formats:
            if args.formats and fmt not in args.formats.split(","):
                continue
            kw = _acc_qkv(name, fmt, kw, out)
            tensors = [v for v in extra.values() if isinstance(v, torch.Tensor)]
            nbytes = sum(t.numel() * t.element_size() for t in [wt, *tensors])
            row = {"kernel": f"gemv {name}", "format": fmt, "shape": f"{n}x{k}", "bytes": nbytes}
            # checked before it is timed: a wrong result is never given a time
            want = K.ref_gemv(wt, x, **{**kw, "residual": res0 if kw["residual"] is not None else None}, **extra)
            out.copy_(res0)
            K.tri_gemv(wt, x, out=out, **kw, **extra)
            row["rel_err"] = ((out - want).norm() / want.norm()).item()
            if not row["rel_err"] <= CHECK_TOLERANCE:
                rows.append({**row, "us": float("nan"), "gbps": float("nan"), "cublas_gbps": None,
                             "config": f"WRONG (relative error {row['rel_err']:.1e})"})
                continue
            ops = [(wt, extra)] + [(wt.clone(), {k_: v.clone() if isinstance(v, torch.Tensor) else v
                                                 for k_, v in extra.items()}) for _ in range(_copies(nbytes) - 1)]
            us = chain_us([lambda o=o: K.tri_gemv(o[0], x, out=out, **kw, **o[1]) for o in ops])
            row.update({"us": us, "gbps": nbytes / us / 1e3, "cublas_gbps": None, "config": _config_name(K, fmt)})
            if fmt == "bf16":
                cub = chain_us([lambda o=o: torch.nn.functional.linear(xb, o[0]) for o in ops])
                row["cublas_gbps"] = nbytes / cub / 1e3
            rows.append(row)
            del ops
    attn_ctxs = [int(c) for c in args.attn_ctx.split(",")]
    for ctx in attn_ctxs if args.only is None or "attention" in args.only.split(",") else ():
        tiles = [(None, None, None, None)]  # the defaults, then (with --attn-sweep) chunk x tile x warps x stages
        if args.attn_sweep in ("all", "triton"):
            tiles += [(c, t, w, st) for c in (64, 128, 256, 512) for t in (64, 128) for w in (4, 8)
                      for st in (1, 3) if t <= c and (st == 3 or t < c)]
        for chunk, tile, warps, stages in tiles:
            rows.append(_attention_row(K, h, kv, d, ctx, dev, chunk, tile, warps, stages, "triton"))
        # the CUDA chunk kernel (attn_cuda) at its default, then (--attn-sweep) warps x chunk
        from floorline.native import attn_cuda

        why = attn_cuda.unavailable(dev, h, kv, d, torch.bfloat16)
        cuda = [(None, None)] + ([(c, w) for w in attn_cuda.WARPS for c in (64, 128, 256, 512) if c >= 16 * w]
                                 if args.attn_sweep in ("all", "cuda") else [])
        for chunk, warps in cuda if why is None else ():
            rows.append(_attention_row(K, h, kv, d, ctx, dev, chunk, None, warps, None, "cuda"))
        if why is not None:
            print(f"CUDA attention not timed: {why}")
    print(f"{torch.cuda.get_device_name()}: copy bandwidth {copy_gbps:.0f} GB/s measured; {a.name} shapes")
    print(f"PDL {K.pdl_name()}; per call: median of 20 replays of a graph of calls on distinct copies")
    print("| kernel | format | shape | config | us | MB | GB/s | % of copy bw | cuBLAS bf16 GB/s | rel err |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        cb = f"{r['cublas_gbps']:.0f}" if r["cublas_gbps"] else "-"
        err = f"{r['rel_err']:.1e}" if r.get("rel_err") is not None else "-"
        print(f"| {r['kernel']} | {r['format']} | {r['shape']} | {r['config']} | {r['us']:.1f} | "
              f"{r['bytes'] / 1e6:.1f} | {r['gbps']:.0f} | {r['gbps'] / copy_gbps:.0%} | {cb} | {err} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"copy_gbps": copy_gbps, "model": a.name, "rows": rows}, f)
    return 0


# int4 tiles for --gemv-sweep: (BN, BK, warps, STAGES, SPLIT, register cap or None); split-K only where the output is
# added in place
GEMV_SWEEP = [(4, 512, 1, 0, 1, None), (8, 256, 1, 0, 1, None), (8, 512, 2, 0, 1, None), (16, 512, 2, 0, 1, None),
              (16, 512, 2, 0, 1, 128), (16, 512, 2, 0, 1, 96), (16, 512, 2, 0, 1, 80), (16, 256, 2, 0, 1, 96),
              (8, 512, 2, 0, 1, 96), (4, 512, 1, 0, 1, 96), (32, 512, 4, 0, 1, 128), (16, 512, 2, 3, 1, None),
              (8, 512, 2, 6, 1, None), (4, 512, 1, 0, 2, None), (4, 512, 1, 0, 4, None), (4, 512, 1, 0, 8, None),
              (8, 512, 2, 0, 8, None), (4, 512, 1, 0, 8, 96)]


def _gemv_sweep(K, int4, shapes, a, dev, copy_gbps, json_path, triton_tiles: bool) -> int:
    """us and GB/s of every GEMV_SWEEP tile on each int4 shape (fixed tiles, no autotuning), fastest first."""
    shapes = {**{k: v for k, v in shapes.items() if k != "lm_head (norm)"},
              "hf q (bias)": (a.heads * a.head_dim, a.hidden, K.PRO_NONE),
              "hf k (bias)": (a.kv_heads * a.head_dim, a.hidden, K.PRO_NONE),
              "hf gate": (a.intermediate, a.hidden, K.PRO_NONE)}
    rows = []
    for name, (n, k, pro) in shapes.items():
        x, out, kw = _operands(K, name, n, k, pro, dev)
        res0 = out.clone()
        lin = torch.nn.Linear(k, n, bias=False, device=dev, dtype=torch.bfloat16)
        torch.nn.init.normal_(lin.weight, 0, 0.02)
        q = int4.Int4Native().pack(lin, layout="rows").module
        ts = (q.words, q.scales, q.zeros)
        nbytes = sum(t.numel() * t.element_size() for t in ts)
        ops = [ts] + [tuple(t.clone() for t in ts) for _ in range(_copies(nbytes) - 1)]
        want = K.ref_gemv(q.words, x, scales=q.scales, zeros=q.zeros,
                          **{**kw, "residual": res0 if "res" in name else None})
        if int4.layout_for(dev, n, k) == "mma":  # the CUDA GEMV's launch configs, on its own layout
            from floorline.native import int4_cuda

            qm = int4.Int4Native().pack(lin, layout="mma").module
            mops = [(qm.words, qm.scales, qm.zeros)] + [(qm.words.clone(), qm.scales.clone(), qm.zeros.clone())
                                                        for _ in range(_copies(nbytes) - 1)]
            kw = _acc_qkv(name, "int4 cuda", kw, out)
            want = K.ref_gemv(q.words, x, scales=q.scales, zeros=q.zeros,
                              **{**kw, "residual": res0 if kw["residual"] is not None else None})
            for cfg in int4_cuda.configs_for(n, k, "silu" in name, kw["residual"] is not None):
                out.copy_(res0)
                K.tri_gemv(qm.words, x, scales=qm.scales, zeros=qm.zeros, out=out, config=cfg, layout="mma", **kw)
                err = ((out - want).norm() / want.norm()).item()
                us = chain_us([lambda o=o: K.tri_gemv(o[0], x, scales=o[1], zeros=o[2], out=out, config=cfg,
                                                      layout="mma", **kw) for o in mops])
                rows.append({"kernel": f"gemv {name}", "shape": f"{n}x{k}",
                             "config": "cuda " + int4_cuda.config_name(cfg),
                             "us": us, "bytes": nbytes, "gbps": nbytes / us / 1e3, "rel_err": err})
                print(f"  {name} {rows[-1]['config']}: {us:.1f} us, err {err:.1e}", flush=True)
            del mops
        for bn, bk, w, st, sp, reg in GEMV_SWEEP if triton_tiles else []:
            if k % bk or (sp > 1 and (pro or "res" not in name or k // bk < 2 * sp)):
                continue
            cfg = {"BN": bn, "BK": bk, "num_warps": w, "STAGES": st, "SPLIT": sp, "maxnreg": reg}
            out.copy_(res0)
            K.tri_gemv(q.words, x, scales=q.scales, zeros=q.zeros, out=out, config=cfg, **kw)
            err = ((out - want).norm() / want.norm()).item()  # every timed tile is also checked
            us = chain_us([lambda o=o: K.tri_gemv(o[0], x, scales=o[1], zeros=o[2], out=out, config=cfg, **kw)
                           for o in ops])
            rows.append({"kernel": f"gemv {name}", "shape": f"{n}x{k}",
                         "config": f"BN{bn} BK{bk} w{w} s{st} k{sp} r{reg or '-'}", "us": us, "bytes": nbytes,
                         "gbps": nbytes / us / 1e3, "rel_err": err})
            print(f"  {name} {rows[-1]['config']}: {us:.1f} us", flush=True)
        del ops
    print(f"{torch.cuda.get_device_name()}: copy bandwidth {copy_gbps:.0f} GB/s measured; {a.name} int4 shapes")
    print("| kernel | shape | config | us | GB/s | % of copy bw | rel err |")
    print("|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["kernel"], r["us"])):
        print(f"| {r['kernel']} | {r['shape']} | {r['config']} | {r['us']:.1f} | {r['gbps']:.0f} | "
              f"{r['gbps'] / copy_gbps:.0%} | {r['rel_err']:.1e} |")
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"copy_gbps": copy_gbps, "model": a.name, "rows": rows}, f)
    return 0


ATTN_TOLERANCE = 2e-2  # q and the probabilities go through bf16 tensor-core products


def _attention_row(K, h, kv, d, ctx, dev, chunk, tile, warps, stages, backend) -> dict:
    """The attention (chunks by `backend`'s kernel, then the merge) at the given launch parameters; checked against
    the torch reference, then timed on distinct cache copies."""
    nbytes = 2 * kv * ctx * d * 2
    qkv = torch.randn((h + 2 * kv) * d, device=dev)
    cos, sin = K.rope_tables(torch.rand(d // 2, device=dev), ctx + 64, 1.0, dev)
    pos = torch.tensor([ctx - 1], device=dev, dtype=torch.int32)
    sc = K.AttnScratch(h, kv, d, ctx + 64, dev, chunk=chunk, tile=tile, warps=warps, stages=stages,
                       backend=backend)
    caches = [(torch.randn(kv, ctx + 64, d, device=dev, dtype=torch.bfloat16),
               torch.randn(kv, ctx + 64, d, device=dev, dtype=torch.bfloat16)) for _ in range(_copies(nbytes))]
    row = {"kernel": f"rope+kv+attention ctx {ctx}", "format": "bf16 KV", "shape": f"{h}q/{kv}kv x {d}",
           "bytes": nbytes, "cublas_gbps": None, "config": sc.name()}
    # checked before it is timed, on copies of the first cache: RoPE, the KV write and the attention
    kr, vr = caches[0][0].clone(), caches[0][1].clone()
    want = K.ref_attention(K.ref_rope_kv(qkv, cos, sin, pos, kr, vr, h, kv, d), kr, vr, pos, d ** -0.5)
    got = K.tri_attention(qkv, cos, sin, pos, caches[0][0], caches[0][1], h, d ** -0.5, sc)
    row["rel_err"] = ((got - want).norm() / want.norm()).item()
    if not row["rel_err"] <= ATTN_TOLERANCE:
        wrong = f"WRONG (relative error {row['rel_err']:.1e})"
        return {**row, "us": float("nan"), "gbps": float("nan"), "config": wrong}
    us = chain_us([lambda c=c: K.tri_attention(qkv, cos, sin, pos, c[0], c[1], h, d ** -0.5, sc) for c in caches])
    return {**row, "us": us, "gbps": nbytes / us / 1e3}


if __name__ == "__main__":
    raise SystemExit(main())
