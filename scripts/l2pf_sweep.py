"""Screen L2 prefetch plans (FLOORLINE_L2PF, native/prefetch.py) on mode native's decode step in one process: the
model built, prefilled and its int4 launch configs step-tuned once, then for each plan the step re-captured and
replayed. Rounds interleave the plans (drift hits all alike); every replay's time is kept. A screen, not the
record: the winners then go through `floorline run` in fresh processes (gpu_check.sh l2pf).

    python scripts/l2pf_sweep.py --model qwen2.5-7b --ctx 2048 --quant int4 --plans "o@qkv" "o@qkv,qkv@down" \
        --json out/l2pf_int4.json
A plan ending in " bulk" uses cp.async.bulk.prefetch.L2 (int4 CUDA GEMV only; the Triton GEMV prefetches by line).
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch


def main() -> None:
    from floorline import models, quant, runtimes, zoo
    from floorline.native import int4_cuda
    from floorline.native import prefetch as P
    from floorline.timing import capture_graph

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-7b")
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--quant", default="none")
    ap.add_argument("--plans", nargs="+", required=True)
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
    # the cache as `floorline run` sizes it at ctx 2048 (2603: warm-up, steps, slack, energy window), so the attention
    # chunk is the record's
    rt = runtimes.get("native", "cuda")(m, args.ctx + 555)
    samples: dict[str, list[float]] = {p: [] for p in args.plans}
    tokens: dict[str, list[int]] = {}
    with torch.inference_mode():
        rt.prefill(prompt, 1024)
        rt.prepare()  # int4: launch configs tuned and re-timed in the step, with no plan
        rt.graph = None
        net = rt.net
        state = [net.tok.clone(), net.pos.clone()]
        for r in range(args.rounds):
            for text in args.plans:
                plan, _, bulk = text.partition(" ")
                int4_cuda.PF_BULK = bulk == "bulk"
                net.prefetch = P.tables(net.layers, P.parse(plan), dev) if plan else [{} for _ in net.layers]
                net.tok.copy_(state[0])
                net.pos.copy_(state[1])
                graph = capture_graph(net.step, 2)
                net.tok.copy_(state[0])
                net.pos.copy_(state[1])
                toks = []
                for i in range(args.replays + 3):
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    graph.replay()
                    end.record()
                    end.synchronize()
                    toks.append(int(net.tok.item()))
                    if i >= 3:
                        samples[text].append(start.elapsed_time(end))
                tokens.setdefault(text, toks)
                del graph
    base = tokens[args.plans[0]]
    print(f"{args.model} ctx {args.ctx} {args.quant}: L2 prefetch plans, ms a step (median of "
          f"{args.rounds} x {args.replays} replays; same tokens as the first plan?)")
    for text in args.plans:
        s = samples[text]
        print(f"| {text or 'off':48s} | {statistics.median(s):.4f} | p10 {sorted(s)[len(s) // 10]:.4f} | "
              f"{'same' if tokens[text] == base else 'DIFFERENT'} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "ctx": args.ctx, "quant": args.quant, "samples_ms": samples,
                       "int4_configs": int4_cuda.tuned(), "tokens_same": {t: tokens[t] == base for t in tokens}}, f)


if __name__ == "__main__":
    main()
