"""When each CTA of the CUDA attention chunk kernel starts and ends, and on which SM (a measurement script for issue
#14, not part of the package): does a grid of fixed per-SM slices end when its slowest SM does?

It builds a probed copy of attn_cuda's kernel (globaltimer and %smid written by thread 0 of each CTA at its start,
after its first tiles' data landed, and at its end) and a plain read kernel (one CTA an SM, each a fixed slice; or
8x as many CTAs of 1/8 the slice, scheduled as SMs free up), runs each cold (distinct copies) and prints, per config:
the grid's span, the CTAs' durations (min / median / max) and the SMs' read rates. GPU only.

    python scripts/cta_times.py [--model qwen2.5-7b] [--ctx 16384] [--configs 8,512 4,256 4,128] [--json F]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics

import torch

from floorline import zoo
from floorline.native import attn_cuda, kernels as K, nvrtc

PROBE_START = "  pdl_trigger(1);\n"
PROBE_LANDED = "  pdl_wait_after(A.k[0][0].x ^ B.k[0][0].x ^ A.v[0][0].x ^ B.v[0][0].x, pos + 33);\n"
PROBE_END = "      lo[part + g] = L;\n    }\n  }\n"
SIGNATURE = "float scale, long long skh) {"

READ = nvrtc.PRELUDE + r"""
extern "C" __global__ void __launch_bounds__(256) read_slices(const uint4* __restrict__ src, long long words,
                                                                 unsigned long long* __restrict__ prb,
                                                                 float* __restrict__ sink) {
  unsigned long long t0, t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  const uint4* p = src + (long long)blockIdx.x * words;
  u32 acc = 0;
  for (long long i = threadIdx.x; i < words; i += 256 * 8) {
    uint4 r[8];
#pragma unroll
    for (int u = 0; u < 8; u++) {
      const long long j = i + u * 256;
      if (j < words) asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                                  : "=r"(r[u].x), "=r"(r[u].y), "=r"(r[u].z), "=r"(r[u].w) : "l"(p + j));
      else r[u] = make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < 8; u++) acc ^= r[u].x ^ r[u].y ^ r[u].z ^ r[u].w;
  }
  if (acc == 0x12345678u) sink[0] = 1.f;
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    u32 sm;
    asm("mov.u32 %0, %%smid;" : "=r"(sm));
    unsigned long long* r = prb + 4 * blockIdx.x;
    r[0] = t0; r[1] = t1; r[2] = t1; r[3] = sm;
  }
}
"""


def probed_source() -> str:
    src = attn_cuda.SOURCE
    for anchor in (PROBE_START, PROBE_LANDED, PROBE_END, SIGNATURE):
        assert src.count(anchor) == 1, f"probe anchor not found once: {anchor!r}"
    src = src.replace(SIGNATURE, "float scale, long long skh, unsigned long long* __restrict__ prb) {")
    src = src.replace(PROBE_START, PROBE_START + "  unsigned long long pt0, pt1;\n"
                      "  asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(pt0));\n")
    src = src.replace(PROBE_LANDED, PROBE_LANDED + "  asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(pt1));\n")
    return src.replace(PROBE_END, PROBE_END + (
        "  __syncthreads();\n  if (tid == 0) {\n    unsigned long long t2;\n"
        "    asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t2));\n    u32 sm;\n"
        "    asm(\"mov.u32 %0, %%smid;\" : \"=r\"(sm));\n"
        "    unsigned long long* r = prb + 4 * (blockIdx.y * gridDim.x + blockIdx.x);\n"
        "    r[0] = pt0; r[1] = t2; r[2] = pt1; r[3] = sm;\n  }\n"))


def load(source: str, name: str, defines: dict):
    major, minor = torch.cuda.get_device_capability()
    cubin = nvrtc.compile_cubin(source, f"{name}.cu", defines, f"sm_{major}{minor}")
    return torch.cuda._utils._cuda_load_module(cubin, [name])[name]


def summarize(rows: torch.Tensor, nbytes: list[int]) -> dict:
    """rows: (ctas, 4) start, end, landed, sm (live CTAs only); nbytes: each CTA's bytes read."""
    t0 = rows[:, 0].min().item()
    start = (rows[:, 0] - t0).double() / 1e3
    end = (rows[:, 1] - t0).double() / 1e3
    landed = (rows[:, 2] - t0).double() / 1e3
    dur = end - start
    per_sm: dict[int, list] = {}
    for i, sm in enumerate(rows[:, 3].tolist()):
        per_sm.setdefault(sm, []).append(i)
    rates = []
    for ids in per_sm.values():
        b = sum(nbytes[i] for i in ids)
        span = max(end[i].item() for i in ids) - min(start[i].item() for i in ids)
        rates.append(b / span / 1e3 if span > 0 else float("nan"))  # GB/s (bytes / us / 1e3)
    rates.sort()
    return {"span_us": end.max().item(), "start_max_us": start.max().item(),
            "landed_med_us": landed.median().item(), "dur_min_us": dur.min().item(),
            "dur_med_us": dur.median().item(), "dur_max_us": dur.max().item(), "end_min_us": end.min().item(),
            "sms": len(per_sm), "sm_gbps_min": rates[0], "sm_gbps_med": statistics.median(rates),
            "sm_gbps_max": rates[-1], "gbps": sum(nbytes) / end.max().item() / 1e3}


def chunk_runs(model: str, ctx: int, warps: int, chunk: int, reps: int) -> list[dict]:
    cfg = zoo.ZOO[model]
    h, kv, d = cfg.heads, cfg.kv_heads, cfg.head_dim
    dev = torch.device("cuda")
    length = ctx + 64
    sc = K.AttnScratch(h, kv, d, length, dev, chunk=chunk, warps=warps, backend="cuda")  # the step's partials
    nchunk = sc.nchunk
    kern = load(probed_source(), "attn_chunk", dict(attn_cuda._defines(h, kv, warps, chunk, nchunk, sc.gp, 0)))
    qkv = torch.randn((h + 2 * kv) * d, device=dev)
    cos, sin = K.rope_tables(torch.rand(d // 2, device=dev), length, 1.0, dev)
    pos = torch.tensor([ctx], device=dev, dtype=torch.int32)
    caches = [(torch.randn(kv, length, d, device=dev, dtype=torch.bfloat16),
               torch.randn(kv, length, d, device=dev, dtype=torch.bfloat16)) for _ in range(3)]
    prb = torch.zeros(kv * nchunk, 4, dtype=torch.int64, device=dev)
    live = [(c, k) for k in range(kv) for c in range(nchunk) if c * chunk <= ctx]
    nbytes = [2 * d * 2 * (min((c + 1) * chunk, ctx) - c * chunk) for c, k in live]
    out = []
    for rep in range(reps + 2):
        kc, vc = caches[rep % 3]
        prb.zero_()
        vals = [ctypes.c_void_p(t.data_ptr()) for t in (qkv, cos, sin, pos, kc, vc, sc.m, sc.l, sc.o)]
        vals += [ctypes.c_float(d ** -0.5), ctypes.c_longlong(kc.stride(0)), ctypes.c_void_p(prb.data_ptr())]
        nvrtc.launch(kern.func, (nchunk, kv, 1), warps * 32, 0, torch.cuda.current_stream().cuda_stream, vals)
        torch.cuda.synchronize()
        rows = prb.view(kv, nchunk, 4).cpu()
        rows = torch.stack([rows[k, c] for c, k in live])
        if rep >= 2:
            out.append(summarize(rows, nbytes))
    return out


def read_runs(total: int, ctas: int, reps: int) -> list[dict]:
    dev = torch.device("cuda")
    kern = load(READ, "read_slices", {"PDL": 0})
    words = total // 16 // ctas
    bufs = [torch.empty(words * ctas * 4, dtype=torch.int32, device=dev).random_() for _ in range(3)]
    prb = torch.zeros(ctas, 4, dtype=torch.int64, device=dev)
    sink = torch.zeros(1, device=dev)
    out = []
    for rep in range(reps + 2):
        prb.zero_()
        vals = [ctypes.c_void_p(bufs[rep % 3].data_ptr()), ctypes.c_longlong(words), ctypes.c_void_p(prb.data_ptr()),
                ctypes.c_void_p(sink.data_ptr())]
        nvrtc.launch(kern.func, (ctas, 1, 1), 256, 0, torch.cuda.current_stream().cuda_stream, vals)
        torch.cuda.synchronize()
        if rep >= 2:
            out.append(summarize(prb.cpu(), [words * 16] * ctas))
    return out


def show(label: str, runs: list[dict]) -> dict:
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"{label:<28} span {med['span_us']:6.2f} us  {med['gbps']:5.0f} GB/s | CTA start max {med['start_max_us']:5.2f}"
          f" landed {med['landed_med_us']:5.2f} | dur min/med/max {med['dur_min_us']:5.2f} {med['dur_med_us']:5.2f} "
          f"{med['dur_max_us']:5.2f} | first end {med['end_min_us']:5.2f} | SM GB/s min/med/max "
          f"{med['sm_gbps_min']:4.1f} {med['sm_gbps_med']:4.1f} {med['sm_gbps_max']:4.1f} ({med['sms']} SMs)")
    return med


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen2.5-7b")
    p.add_argument("--ctx", type=int, default=16384)
    p.add_argument("--configs", nargs="*", default=["8,512", "4,256", "4,128", "8,256"])
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--json")
    args = p.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    res = {}
    for cfgs in args.configs:
        w, c = (int(v) for v in cfgs.split(","))
        res[f"chunk {cfgs}"] = show(f"{args.model} ctx {args.ctx} w{w} c{c}",
                                    chunk_runs(args.model, args.ctx, w, c, args.reps))
    total = 254 * 1024 * sms
    for mult in (1, 4, 32):  # one CTA an SM (32 KB in flight), 4 (all resident: fixed slices), 32 (4 waves)
        res[f"read x{mult}"] = show(f"read {total >> 20} MB, {mult * sms} CTAs", read_runs(total, mult * sms,
                                                                                          args.reps))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
