"""The step timeline of mode native (src/floorline/native/timeline.py) for one model and context on a GPU.

  python scripts/timeline.py MODEL --ctx 2048 [--native OPTS] [--replays 20] [--out DIR] [--profile]

One process builds the model as `floorline run --mode native` does (random weights, the prompt prefilled, the step
captured and its launch choices re-timed in the step, the warm-up steps), then captures the step again with the
timeline on and replays it from there: every stamped kernel's programs record when they started, when their wait
returned and when they ended. Both steps are then timed (30 replays each) from the same position and token, the
positions a run's timed steps take (the cache's position decides how many attention chunks are live). Prints, per
kind of stamped kernel, medians over its launches (layers) and the replays; then one middle layer's launches on one
time axis. Writes DIR/timeline_MODEL_ctxN[_OPTS].json: the conditions, both steps' samples, the summary and the middle
replay's stamps (ns from the step's first start).

--profile: at the end, one more plain step between cudaProfilerStart and cudaProfilerStop, for a profiler that
records only that range (`ncu --profile-from-start off --graph-profiling node`: each kernel of the captured step
alone, its caches flushed; scripts/gpu_check.sh ncu).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from floorline.bench.config import RunConfig, cache_len
from floorline.bench.measure import open_session, start_runtime
from floorline.device.timing import capture_graph, keeper, time_steps
from floorline.native import timeline as T


def run(model: str, ctx: int, native: str, replays: int, out: Path, profile: bool = False) -> dict:
    cfg = RunConfig(model=model, ctxs=[ctx], modes=["native"], device="cuda", energy=False, native=native)
    ses = open_session(cfg, lambda s: print(s, file=sys.stderr))
    try:
        with torch.inference_mode():
            rt, _ = start_runtime(ses, "native", ctx, cache_len(cfg, ses.arch, ctx, False) + replays + 200,
                                  lambda s: print(s, file=sys.stderr))
            chosen = rt.describe()
            net = rt.net
            restore = keeper([net.tok, net.pos])  # the stamps and both timings start here, as a run's steps do
            position = int(net.pos.reshape(-1)[0])

            line = T.Timeline(ses.device)
            T.ACTIVE = line
            try:
                def body():
                    line.rewind()
                    net.step()

                graph = capture_graph(body, 1)  # the warm-up call compiles the stamped kernels
                restore()
                steps = []
                for _ in range(replays):
                    graph.replay()
                    torch.cuda.synchronize()
                    steps.append(line.read())
                restore()
                stamped = time_steps(graph.replay, 30, ses.device)
            finally:
                T.ACTIVE = None
            restore()
            plain = time_steps(rt.step, 30, ses.device)
            if profile:
                restore()
                torch.cuda.synchronize()
                torch.cuda.profiler.start()
                rt.step()
                torch.cuda.synchronize()
                torch.cuda.profiler.stop()
            rt.close()
    finally:
        ses.close()
    layers = ses.arch.layers
    summary = T.summarize(steps)
    mid = steps[len(steps) // 2]  # the replay whose stamps are kept and drawn
    rec = {"kind": "timeline", "model": model, "ctx": ctx, "native": native, "device_name": ses.base["device_name"],
           "measured_gbps": ses.base["measured_gbps"], "source_sha256": ses.base.get("source_sha256"),
           "layers": layers, "position": position, "step_ms_samples": plain, "step_ms": statistics.median(plain),
           "stamped_step_ms_samples": stamped, "stamped_step_ms": statistics.median(stamped),
           "summary_us": summary, "chosen": chosen,
           # the middle replay's stamps, ns from the step's first start (a wait of 0, not waited, stays 0)
           "steps_ns": [[T.shifted(x, T.origin(mid)) for x in mid]]}
    out.mkdir(parents=True, exist_ok=True)
    opts = "_" + native.replace("=", "-").replace(",", "_") if native else ""  # cells that differ by options only
    (out / f"timeline_{model}_ctx{ctx}{opts}.json").write_text(json.dumps(rec))
    report(rec, mid)
    return rec


def report(rec: dict, s: list[dict]) -> None:
    """The summary, then one middle layer of step `s` (a read() of the timeline) on one time axis."""
    print(f"\n{rec['model']} ctx {rec['ctx']} (stamps from position {rec['position']}): step {rec['step_ms']:.4f} ms, "
          f"with the stamps {rec['stamped_step_ms']:.4f} ms; {rec['measured_gbps']:.0f} GB/s")
    print("per kind, medians over launches and replays (us): lead = wait - start (a program's), work = end - wait"
          " (work_max: a launch's longest), <mark>_med = mark - wait, span = last end - first wait, tail = last end -"
          " median end, gap_after_X = first wait - X's last end; waits, work and marks over the programs that waited")
    for kind, d in rec["summary_us"].items():
        print(f"  {kind:8s} " + "  ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                                          for k, v in d.items()))
    per = len(s) // rec["layers"]
    mid = s[per * (rec["layers"] // 2):per * (rec["layers"] // 2 + 1)]
    t0 = T.origin(s)
    base = T.launch_stats(mid[0], t0)["wait_first"]
    print(f"one middle layer (us from its first stamped kernel's first wait return), {per} stamped launches a layer:")
    print("  kind      progs  start first/med/last      wait first/med/last       end first/med/last")
    for x in mid:
        st = T.launch_stats(x, t0)
        f = lambda k: "/".join(f"{st[f'{k}_{q}'] - base:7.2f}" for q in ("first", "med", "last"))  # noqa: E731
        print(f"  {x['kind']:8s} {st['programs']:5d}  {f('start')}  {f('wait')}  {f('end')}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--native", default="")
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--out", type=Path, default=Path("results/timeline"))
    ap.add_argument("--profile", action="store_true", help="one more step inside cudaProfilerStart/Stop")
    a = ap.parse_args()
    run(a.model, a.ctx, a.native, a.replays, a.out, a.profile)


if __name__ == "__main__":
    main()
