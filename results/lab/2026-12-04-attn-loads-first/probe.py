"""The probe of the CUDA attention chunks' post-wait loads: one process a model builds the step as `floorline run
--mode native` does (the step tuner's choices), then times the graph of the step with each attention variant in turn,
the variants interleaved over rounds (100 replays a variant a round, 3 rounds), from the same position each time:

- "new": the CUDA chunks of the tree it ran in, commit 484dfcc with loads_first.diff applied (every q/k/v row a
  thread takes requested at once after the wait, the rotation's tables and the q/k norm's weights before it);
- "before": the same launch with the kernel source of commit 484dfcc (attn_chunk_before.cu beside this file, which is
  that commit's and today's src/floorline/native/cuda/attn_chunk.cu: `git show
  484dfcc:src/floorline/native/cuda/attn_chunk.cu > attn_chunk_before.cu` first; one L2 round trip a row after the
  wait, the tables read after it);
- Triton's chunks of 64 on 8 warps, and the step tuner's own attention choice, for reference.

  python probe.py MODEL:CTX ... > probe.txt
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import torch

from floorline.bench.config import RunConfig, cache_len
from floorline.bench.measure import open_session, start_runtime
from floorline.device.timing import capture_graph, time_steps
from floorline.native import attn_cuda, nvrtc

BEFORE = (Path(__file__).parent / "attn_chunk_before.cu").read_text()
_source = nvrtc.source


def kernel_source(which: str) -> None:
    """The attention chunk kernel's source the next capture compiles: the working tree's ("new") or 484dfcc's."""
    nvrtc.source = (lambda n: BEFORE if n == attn_cuda.SOURCE else _source(n)) if which == "before" else _source
    attn_cuda._kernel.cache_clear()


VARIANTS = [("new", ("cuda", 64, 4)), ("before", ("cuda", 64, 4)), ("new", ("cuda", 128, 4)),
            ("before", ("cuda", 128, 4)), ("new", ("cuda", 128, 8)), ("new", ("cuda", 64, 2)),
            ("new", ("cuda", 32, 2)), ("triton", (64, 8))]


def run(model: str, ctx: int, rounds: int = 3, n: int = 100) -> dict:
    cfg = RunConfig(model=model, ctxs=[ctx], modes=["native"], device="cuda", energy=False, native="")
    ses = open_session(cfg, lambda s: print(s, file=sys.stderr))
    try:
        with torch.inference_mode():
            rt, _ = start_runtime(ses, "native", ctx, cache_len(cfg, ses.arch, ctx, False) + 200,
                                  lambda s: print(s, file=sys.stderr))
            net = rt.net
            chosen = rt.describe()
            tuned = (net.attn.backend, net.attn.chunk, net.attn.warps)
            tuned = ("cuda", tuned[1], tuned[2]) if tuned[0] == "cuda" else (tuned[1], tuned[2])
            keep = [net.tok.clone(), net.pos.clone()]
            variants = VARIANTS + [("tuned", tuned)]
            res: dict[str, list[float]] = {}
            for _ in range(rounds):
                for src, choice in variants:
                    name = f"{src} {choice}"
                    kernel_source("before" if src == "before" else "new")
                    net.attn.use(choice)
                    graph = capture_graph(net.step, 1)
                    net.tok.copy_(keep[0])
                    net.pos.copy_(keep[1])
                    res.setdefault(name, []).extend(time_steps(graph.replay, n, ses.device))
                    net.tok.copy_(keep[0])
                    net.pos.copy_(keep[1])
                    del graph
            kernel_source("new")
            rt.close()
    finally:
        ses.close()
    med = {k: statistics.median(v) for k, v in res.items()}
    out = {"model": model, "ctx": ctx, "measured_gbps": ses.base["measured_gbps"], "layers": ses.arch.layers,
           "tuned_attn": chosen["native_attn"], "pdl_early": chosen.get("native_pdl_early_used"),
           "source_sha256": ses.base.get("source_sha256"), "median_ms": med, "samples_ms": res}
    print(f"{model} ctx {ctx}, {ses.base['measured_gbps']:.0f} GB/s, the tuner's attention {chosen['native_attn']}, "
          f"pdl early {chosen.get('native_pdl_early_used')}:")
    for k, v in med.items():
        print(f"  {k:28s} {v:.4f} ms  (rounds: {', '.join(f'{statistics.median(res[k][i * n:(i + 1) * n]):.4f}' for i in range(rounds))})")
    sys.stdout.flush()
    return out


if __name__ == "__main__":
    recs = [run(c.split(":")[0], int(c.split(":")[1])) for c in sys.argv[1:]]
    print(json.dumps(recs), file=sys.stderr)
