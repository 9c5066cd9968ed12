"""The int4 step of a model with its MLP as two GEMVs and as each fused candidate (int4_mlp.py): the step's median
replay time, then each kernel's calls a step, mean span and mean own time (explain's: its span less what overlaps a
kernel that ends earlier) from torch's profiler over 5 replays.  python profile_mlp.py MODEL CTX [K]  (K: at most K
candidates)."""

import sys
from collections import defaultdict

import torch

from floorline import quant
from floorline.bench import models
from floorline.bench.explain import _exclusive_us
from floorline.core import zoo
from floorline.device.timing import capture_graph, state_replay_ms
from floorline.native import int4_mlp as IM
from floorline.native.model import NativeModel

name, ctx = sys.argv[1], int(sys.argv[2])
top = int(sys.argv[3]) if len(sys.argv) > 3 else 99
exp = int(sys.argv[4]) if len(sys.argv) > 4 else 0  # an experiment's cut of the kernel (MLP_EXP in int4_mlp.cu)
if exp:
    _defines = IM._defines
    IM._defines = lambda *a: {**_defines(*a), "MLP_EXP": exp}
a = zoo.ZOO[name]
m = models.build_random(a, torch.device("cuda"), "bf16", seed=0)
quant.convert(m, quant.get("int4"), torch.bfloat16)
net = NativeModel(m, ctx + 64, ops="triton")
prompt = torch.randint(0, a.vocab, (1, ctx), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
with torch.inference_mode():
    net.prefill(prompt, 1024)
    capture_graph(net.step, 2)  # compile and tune the GEMVs first
    state = [net.tok, net.pos]
    for cfg in [None] + net.int4_mlp_cands[:top]:
        net.int4_mlp = cfg
        capture_graph(net.step, 1)
        ms = state_replay_ms(lambda: capture_graph(net.step, 0), state, 50)
        keep = [t.clone() for t in state]
        g = capture_graph(net.step, 0)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                for t, k in zip(state, keep):
                    t.copy_(k)
                g.replay()
            torch.cuda.synchronize()
        for t, k in zip(state, keep):
            t.copy_(k)
        evs = sorted([e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                      and "copy" not in e.name.lower() and "Memcpy" not in e.name], key=lambda e: e.time_range.start)
        spans = [(e.time_range.start, e.time_range.end) for e in evs]
        own = _exclusive_us(spans)
        by = defaultdict(list)
        for e, (s0, s1), o in zip(evs, spans, own):
            by[e.name[:60]].append((s1 - s0, o))
        print(f"{name} int4 ctx {ctx} mlp {'two GEMVs' if cfg is None else IM.name(cfg)} exp {exp}: step {ms:.4f} ms")
        for n, v in sorted(by.items(), key=lambda kv: -sum(o for _, o in kv[1])):
            print(f"   {len(v) / 5:5.1f}/step span {sum(s for s, _ in v) / len(v):6.2f} us own "
                  f"{sum(o for _, o in v) / len(v):6.2f} us  {n}")
