"""Where the persistent layer kernel's step goes: each task's clock (ticket, wait start, wait end, done) from one traced
step per launch config, beside the step's time in a CUDA graph (untraced) and the per-kernel step's.

  python trace.py MODEL CTX OUT.json [CONFIG ...]      CONFIG: persist.Config fields, e.g. per_sm=2,warps=8,bl=128
"""
import json
import statistics
import sys

import torch

from floorline.bench import models
from floorline.core import zoo
from floorline.device import timing
from floorline.native import persist as PS
from floorline.native.model import NativeModel
from floorline.native.options import NativeOptions


def parse(text):
    kw = {}
    for part in filter(None, text.split(",")):
        k, v = part.split("=")
        kw[k] = int(v)
    return PS.Config(**kw)


def summary(tr, tasks, layers):
    """Per kind of task, medians over the layers (us): when its first ticket came, its first and last wait end, its
    last done, each relative to the layer's first q/k/v wait end; and the median task's time in its wait and after."""
    kinds = [k for k in ("qkv", "attention", "merge", "o", "mlp") if tasks[k]]
    out = {k: {"first_ticket": [], "first_wait_end": [], "last_wait_end": [], "last_done": [], "wait": [], "work": []}
           for k in kinds}
    per = tasks["layer"]
    for lay in range(1, layers - 1):
        rows = tr[lay * per:(lay + 1) * per]
        t0 = rows[:tasks["qkv"], 2].min()
        i = 0
        for k in kinds:
            r = rows[i:i + tasks[k]]
            i += tasks[k]
            o = out[k]
            o["first_ticket"].append((r[:, 0].min() - t0).item() / 1e3)
            o["first_wait_end"].append((r[:, 2].min() - t0).item() / 1e3)
            o["last_wait_end"].append((r[:, 2].max() - t0).item() / 1e3)
            o["last_done"].append((r[:, 3].max() - t0).item() / 1e3)
            o["wait"].append((r[:, 2] - r[:, 1]).float().median().item() / 1e3)
            o["work"].append((r[:, 3] - r[:, 2]).float().median().item() / 1e3)
    return {k: {m: round(statistics.median(v), 2) for m, v in o.items()} for k, o in out.items()}


def main():
    name, ctx, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    configs = [parse(c) for c in sys.argv[4:]] or PS.CANDIDATES
    a = zoo.ZOO[name]
    m = models.build_random(a, torch.device("cuda"), "bf16", seed=0)
    net = NativeModel(m, ctx + 64, ops="triton", options=NativeOptions(persist="on"))
    prompt = torch.randint(0, a.vocab, (1, ctx), device="cuda", generator=torch.Generator("cuda").manual_seed(3))
    res = {"model": name, "ctx": ctx, "configs": {}}
    with torch.inference_mode():
        net.prefill(prompt, 1024)
        state = [net.tok, net.pos]
        capture = lambda: timing.capture_graph(net.step, 0)  # noqa: E731
        net.persist_on = False
        timing.capture_graph(net.step, 2)
        res["off_ms"] = timing.state_replay_ms(capture, state, 50)
        print(f"{name} ctx {ctx} per-kernel step {res['off_ms']:.4f} ms", flush=True)
        for c in configs:
            net.persist_on = True
            net.persist.config = c
            timing.capture_graph(net.step, 2)
            ms = timing.state_replay_ms(capture, state, 50)
            tasks = net.persist.tasks()
            net.persist.trace = torch.zeros(tasks["all"], 8, dtype=torch.int64, device="cuda")
            keep = [t.clone() for t in state]
            for _ in range(3):  # the last of three traced steps (compiled by the first)
                for t, k in zip(state, keep):
                    t.copy_(k)
                net.step()
            torch.cuda.synchronize()
            net.persist.check()
            tr = net.persist.trace.cpu()
            net.persist.trace = None
            span = (tr[:, 3].max() - tr[:, 0].min()).item() / 1e3
            s = summary(tr, tasks, len(net.layers))
            progs = len(set(tr[:, 4].tolist()))
            res["configs"][c.name()] = {"ms": ms, "traced_span_us": span, "tasks": tasks, "programs_seen": progs,
                                        "layer": s, "raw": tr[:, :6].tolist()}
            print(f"  {c.name():34} {ms:.4f} ms (traced span {span:.0f} us, {progs} programs, chunk {net.persist.chunk})",
                  flush=True)
            for k, v in s.items():
                print(f"    {k:9} " + " ".join(f"{m}={x}" for m, x in v.items()), flush=True)
    json.dump(res, open(path, "w"))


if __name__ == "__main__":
    main()
