"""The probe of call 5: the (attention chunks, o) pairs that decide what call 4's step tuner kept, in one process a
model, interleaved over 3 rounds of 100 replays, from the same position each time (the step otherwise as `floorline
run --mode native` builds it, the step tuner's choices). o: "off" is the merge kernel then the o GEMV; a tuple is
o_merge's (rows a tile, tiles a program, warps[, AHEAD]).

  python probe4.py MODEL:CTX ... > probe4.txt
"""

from __future__ import annotations

import json
import statistics
import sys

import torch

from floorline.bench.config import RunConfig, cache_len
from floorline.bench.measure import open_session, start_runtime
from floorline.device.timing import capture_graph, time_steps

PAIRS = {"qwen2.5-1.5b": [(("cuda", 64, 4), (128, 1, 4)), (("cuda", 256, 8), (128, 1, 4)),
                         (("cuda", 256, 8), (128, 2, 8, 2)), (("cuda", 256, 8), (64, 4, 8, 4)),
                         (("cuda", 128, 8), (128, 1, 4)), (("cuda", 256, 8), None), (("cuda", 64, 4), None)],
         "llama-3.2-3b": [(("cuda", 64, 4), None), (("cuda", 128, 4), None), (("cuda", 256, 8), None),
                          (("cuda", 256, 8), (64, 8, 8, 3)), (("cuda", 64, 4), (32, 16, 4, 4))]}


def run(model: str, ctx: int, rounds: int = 3, n: int = 100) -> dict:
    cfg = RunConfig(model=model, ctxs=[ctx], modes=["native"], device="cuda", energy=False, native="")
    ses = open_session(cfg, lambda s: print(s, file=sys.stderr))
    try:
        with torch.inference_mode():
            rt, _ = start_runtime(ses, "native", ctx, cache_len(cfg, ses.arch, ctx, False) + 200,
                                  lambda s: print(s, file=sys.stderr))
            net = rt.net
            chosen = rt.describe()
            tuned_o = net.o_merge
            a = net.attn
            tuned_a = ("cuda", a.chunk, a.warps) if a.backend == "cuda" else (a.chunk, a.warps)
            keep = [net.tok.clone(), net.pos.clone()]
            pairs = PAIRS[model]
            res: dict[str, list[float]] = {}
            for _ in range(rounds):
                for x, o in pairs:
                    name = f"{x} o {o or 'off'}" + (" (tuned)" if (x, o) == (tuned_a, tuned_o) else "")
                    net.attn.use(x)
                    net.o_merge = o
                    graph = capture_graph(net.step, 1)
                    net.tok.copy_(keep[0])
                    net.pos.copy_(keep[1])
                    res.setdefault(name, []).extend(time_steps(graph.replay, n, ses.device))
                    net.tok.copy_(keep[0])
                    net.pos.copy_(keep[1])
                    del graph
            rt.close()
    finally:
        ses.close()
    med = {k: statistics.median(v) for k, v in res.items()}
    out = {"model": model, "ctx": ctx, "measured_gbps": ses.base["measured_gbps"], "layers": ses.arch.layers,
           "tuned_attn": chosen["native_attn"], "tuned_o_merge": chosen.get("native_o_merge_used"),
           "pdl_early": chosen.get("native_pdl_early_used"), "source_sha256": ses.base.get("source_sha256"),
           "median_ms": med, "samples_ms": res}
    print(f"{model} ctx {ctx}, {ses.base['measured_gbps']:.0f} GB/s, the tuner's attention {chosen['native_attn']}, "
          f"o_merge {chosen.get('native_o_merge_used')}, pdl early {chosen.get('native_pdl_early_used')}:")
    best = min(med, key=med.get)
    for k, v in med.items():
        rs = ", ".join(f"{statistics.median(res[k][i * n:(i + 1) * n]):.4f}" for i in range(rounds))
        print(f"  {k:40s} {v:.4f} ms  (rounds: {rs}){'  <- fastest' if k == best else ''}")
    sys.stdout.flush()
    return out


if __name__ == "__main__":
    recs = [run(c.split(":")[0], int(c.split(":")[1])) for c in sys.argv[1:]]
    print(json.dumps(recs), file=sys.stderr)
