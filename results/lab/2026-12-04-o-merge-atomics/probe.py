"""The probe of call 5: what the fp32 atomics of o with the merge inside cost the step. One process a model builds the
step as `floorline run --mode native` does (the step tuner's choices), then times the graph with o_merge's adds as
the product's atomics and as plain stores to the same words (a wrong sum; timing only: o_merge.PROBE_STORE, a
constexpr of the probe's diff), alternating, from the same position each time (100 replays a round, 3 rounds).

  python probe.py MODEL:CTX ... > probe.txt
"""

from __future__ import annotations

import json
import statistics
import sys

import torch

from floorline.bench.config import RunConfig, cache_len
from floorline.bench.measure import open_session, start_runtime
from floorline.device.timing import capture_graph, time_steps
from floorline.native import o_merge as OM


def run(model: str, ctx: int, rounds: int = 3, n: int = 100) -> dict:
    cfg = RunConfig(model=model, ctxs=[ctx], modes=["native"], device="cuda", energy=False, native="")
    ses = open_session(cfg, lambda s: print(s, file=sys.stderr))
    try:
        with torch.inference_mode():
            rt, _ = start_runtime(ses, "native", ctx, cache_len(cfg, ses.arch, ctx, False) + 2 * rounds * n + 100,
                                  lambda s: print(s, file=sys.stderr))
            net = rt.net
            chosen = rt.describe()
            keep = [net.tok.clone(), net.pos.clone()]
            forced = net.o_merge is None
            if forced:  # the tuner kept the merge kernel: the probe times the merge inside anyway, its first one-tile
                net.o_merge = (128, 1, 4)
            res: dict[str, list[float]] = {"atomic": [], "store": []}
            for _ in range(rounds):
                for mode in ("atomic", "store"):
                    OM.PROBE_STORE = mode == "store"
                    graph = capture_graph(net.step, 1)
                    net.tok.copy_(keep[0])
                    net.pos.copy_(keep[1])
                    res[mode] += time_steps(graph.replay, n, ses.device)
                    net.tok.copy_(keep[0])
                    net.pos.copy_(keep[1])
            OM.PROBE_STORE = False
            rt.close()
    finally:
        ses.close()
    med = {k: statistics.median(v) for k, v in res.items()}
    out = {"model": model, "ctx": ctx, "measured_gbps": ses.base["measured_gbps"], "o_merge": net.o_merge,
           "o_merge_forced": forced, "layers": ses.arch.layers, "attn": chosen["native_attn"],
           "source_sha256": ses.base.get("source_sha256"), "median_ms": med, "samples_ms": res}
    d_us = (med["atomic"] - med["store"]) * 1e3
    print(f"{model} ctx {ctx}: o_merge {net.o_merge}{' (forced)' if forced else ''}; atomics {med['atomic']:.4f} ms, "
          f"stores {med['store']:.4f} ms: {d_us:+.1f} us a step, {d_us / ses.arch.layers:+.2f} us a layer; "
          f"{ses.base['measured_gbps']:.0f} GB/s")
    return out


if __name__ == "__main__":
    recs = [run(c.split(":")[0], int(c.split(":")[1])) for c in sys.argv[1:]]
    print(json.dumps(recs), file=sys.stderr)
