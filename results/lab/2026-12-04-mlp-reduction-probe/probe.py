"""Probe (with probe.diff applied): what the fused MLP's closing fp32 atomics cost the step. One process builds the
model as `floorline run --mode native` does (tuned in the step), then captures the step with each reduction mode of
the MLP (mlp.RED_MODE: 1 the product's atomic adds, 0 plain stores to the same words, k a k-th of the atomics) and
times 30 replays of each from the same position and token, in interleaved rounds. Modes other than 1 compute a wrong
residual (timing only: no kernel's work depends on the values).

  python probe.py MODEL CTX [rounds] >> probe.jsonl
"""
import json
import statistics
import sys

import torch

from floorline.bench.config import RunConfig, cache_len
from floorline.bench.measure import open_session, start_runtime
from floorline.device.timing import capture_graph, time_steps
from floorline.native import mlp as M

model, ctx = sys.argv[1], int(sys.argv[2])
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
MODES = [1, 0, 8, 2]
cfg = RunConfig(model=model, ctxs=[ctx], modes=["native"], device="cuda", energy=False)
ses = open_session(cfg, lambda s: print(s, file=sys.stderr))
samples = {m: [] for m in MODES}
with torch.inference_mode():
    rt, _ = start_runtime(ses, "native", ctx, cache_len(cfg, ses.arch, ctx, False) + 400, lambda s: None)
    chosen = rt.describe()
    net = rt.net
    keep = [net.tok.clone(), net.pos.clone()]

    def restore():
        net.tok.copy_(keep[0])
        net.pos.copy_(keep[1])

    graphs = {}
    for m in MODES:
        M.RED_MODE = m
        restore()
        graphs[m] = capture_graph(net.step, 1)
    for _ in range(rounds):
        for m in MODES:
            restore()
            samples[m] += time_steps(graphs[m].replay, 30, ses.device)
    M.RED_MODE = 1
    rt.close()
ses.close()
med = {m: statistics.median(v) for m, v in samples.items()}
print(f"{model} ctx {ctx} {ses.base['measured_gbps']:.0f} GB/s: " + ", ".join(
    f"red {m} {med[m]:.4f} ms ({1000 * (med[m] - med[1]) / ses.arch.layers:+.2f} us a layer)" for m in MODES),
    file=sys.stderr)
print(json.dumps({"kind": "mlp_reduction_probe", "model": model, "ctx": ctx, "measured_gbps": ses.base["measured_gbps"],
                  "source_sha256": ses.base.get("source_sha256"), "layers": ses.arch.layers, "modes": MODES,
                  "step_ms_median": {str(m): med[m] for m in MODES},
                  "step_ms_samples": {str(m): samples[m] for m in MODES}, "chosen": chosen}))
