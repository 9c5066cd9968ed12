"""Print each native run's step and, per GEMV shape, the first in-step pass's pick against the second pass's trials
(both passes' trials are in the record: native_{triton,int4}_step_tuning and native_{triton,int4}_again_step_tuning)."""
import json
import sys

for path in sys.argv[1:]:
    for line in open(path):
        r = json.loads(line)
        print(r["model"], r["ctx"], r["quant"], "ms", round(r["step_ms_median"], 4), "GB/s", round(r["measured_gbps"]),
              "%", round(100 * r["fraction_of_floor_peak"], 1), round(100 * r["fraction_of_floor_measured"], 1),
              "prepare_s", round(r["prepare_s"], 1), r["source_sha256"])
        for first_key, again_key in (("native_triton_step_tuning", "native_triton_again_step_tuning"),
                                     ("native_int4_step_tuning", "native_int4_again_step_tuning")):
            first, again = r.get(first_key) or {}, r.get(again_key) or {}
            for shape, trials in first.items():
                pick = min(trials, key=trials.get)
                t2 = again.get(shape, {})
                best2 = min(t2, key=t2.get) if t2 else None
                print(f"   {shape}: first pass {pick} {trials[pick]} | again: {pick} {t2.get(pick)}, best {best2} "
                      f"{t2.get(best2)}")
