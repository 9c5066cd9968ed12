"""Screen choices of mode native's decode step in one process, before `floorline run` measures the winners in fresh
processes: the Triton GEMV's tiles as its autotuner chose them (one launch after an L2 flush) or as re-timed inside
the step (kernels.retune_in_step), crossed with attention layouts (chunk, tile, warps, stages of AttnScratch). The
model is built, prefilled and prepared once (int4: the CUDA GEMV's configs tuned and step-tuned as mode native
does); each variant re-captures the step; rounds interleave the variants; every replay's time is kept.

    python scripts/step_screen.py --model qwen2.5-7b --ctx 2048 --quant none --attn default 128,64,8,3 --json x.json
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch


def main() -> None:
    from floorline import models, quant, runtimes, zoo
    from floorline.native import kernels as K
    from floorline.timing import capture_graph

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-7b")
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--quant", default="none")
    ap.add_argument("--attn", nargs="+", default=["default"], help="'default' or chunk,tile,warps,stages")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--replays", type=int, default=40)
    ap.add_argument("--json")
    args = ap.parse_args()

    a = zoo.ZOO[args.model]
    dev = torch.device("cuda")
    m = models.build_random(a, dev, "bf16", seed=0)
    if args.quant != "none":
        quant.convert(m, quant.get(args.quant), torch.bfloat16)
    prompt = torch.randint(0, a.vocab, (1, args.ctx), device=dev, generator=torch.Generator(dev).manual_seed(1))
    length = args.ctx + 555  # the cache `floorline run` sizes (warm-up, steps, slack, energy window): its chunk
    K.STEP_TUNE = False
    rt = runtimes.get("native", "cuda")(m, length)
    net = rt.net
    tuners = (K._gemv_bf16, K._gemv_int4)
    with torch.inference_mode():
        rt.prefill(prompt, 1024)
        rt.prepare()  # int4: the CUDA GEMV's configs, step-tuned as mode native does
        rt.graph = None
        state = [net.tok, net.pos]
        keep = [t.clone() for t in state]
        tiles = {"autotuner": [dict(t.cache) for t in tuners]}
        K.retune_in_step(lambda: capture_graph(net.step, 0), state)
        tiles["step"] = [dict(t.cache) for t in tuners]
        default = net.attn
        variants = [(t, at) for t in tiles for at in args.attn]
        samples = {f"{t} {at}": [] for t, at in variants}
        tokens = {}
        for _ in range(args.rounds):
            for t, at in variants:
                for tuner, cache in zip(tuners, tiles[t]):
                    tuner.cache.update(cache)
                if at == "default":
                    net.attn = default
                else:
                    c, bl, w, st = (int(v) for v in at.split(","))
                    net.attn = K.AttnScratch(net.heads, net.kv_heads, net.head_dim, length, dev, chunk=c, tile=bl,
                                             warps=w, stages=st)
                for s, k in zip(state, keep):
                    s.copy_(k)
                graph = capture_graph(net.step, 2)
                for s, k in zip(state, keep):
                    s.copy_(k)
                toks = []
                for i in range(args.replays + 3):
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    graph.replay()
                    end.record()
                    end.synchronize()
                    toks.append(int(net.tok.item()))
                    if i >= 3:
                        samples[f"{t} {at}"].append(start.elapsed_time(end))
                tokens.setdefault(f"{t} {at}", toks)
                del graph
    first = next(iter(tokens.values()))
    print(f"{args.model} ctx {args.ctx} {args.quant}: default attention chunk {default.chunk}, tile {default.tile}, "
          f"warps {default.warps}, stages {default.stages}; ms a step, median of {args.rounds} x {args.replays} "
          "replays (same tokens as the first variant?)")
    for name, s in samples.items():
        print(f"| {name:36s} | {statistics.median(s):.4f} | p10 {sorted(s)[len(s) // 10]:.4f} | "
              f"{'same' if tokens[name] == first else 'DIFFERENT'} |")
    print("tiles re-timed in the step:", json.dumps(K.last_step_tuning))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "ctx": args.ctx, "quant": args.quant, "samples_ms": samples,
                       "triton_step_tuning": K.last_step_tuning,
                       "tiles": {t: {str(k): K.tile_name(c) for tc in v for k, c in tc.items()}
                                 for t, v in tiles.items()},
                       "tokens_same": {n: tokens[n] == first for n in tokens}}, f)


if __name__ == "__main__":
    main()
