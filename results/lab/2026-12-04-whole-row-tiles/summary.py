"""Print each native run's step and, per Triton GEMV shape, the in-step trials' best tile overall, the best of the
tiles that existed before (BK below K) and the best whole-row tile (BK at or above K: gemv._whole), all from the same
process (native_triton_step_tuning). At K 1024 _BF16's own 1024-column tiles would count as whole-row ones: no shape of
the calls here has that K."""
import json
import re
import sys

for path in sys.argv[1:]:
    for line in open(path):
        r = json.loads(line)
        print(r["model"], r["ctx"], r["quant"], "ms", round(r["step_ms_median"], 4), "GB/s", round(r["measured_gbps"]),
              "%", round(100 * r["fraction_of_floor_peak"], 1), round(100 * r["fraction_of_floor_measured"], 1),
              "prepare_s", round(r["prepare_s"], 1), r["source_sha256"])
        for shape, trials in (r.get("native_triton_step_tuning") or {}).items():
            k = int(shape.split()[0].split("x")[1])
            whole = {t: v for t, v in trials.items() if int(re.match(r"\d+x(\d+)", t).group(1)) >= k}
            old = {t: v for t, v in trials.items() if t not in whole}
            best = min(trials, key=trials.get)
            bo = min(old, key=old.get) if old else None
            bw = min(whole, key=whole.get) if whole else None
            print(f"   {shape}: kept {best} {trials[best]} | before: {bo} {old.get(bo)} | whole: {bw} {whole.get(bw)}")
