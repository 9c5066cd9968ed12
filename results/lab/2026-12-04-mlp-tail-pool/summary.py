"""Print each native run's step and its in-step trials of the fused MLP's tail pool (native_mlp_pool_step_tuning), with
the tiles' trials they start from (native_mlp_step_tuning)."""
import json
import sys

for path in sys.argv[1:]:
    for line in open(path):
        r = json.loads(line)
        print(r["model"], r["ctx"], r["quant"], "ms", round(r["step_ms_median"], 4), "GB/s", round(r["measured_gbps"]),
              "%", round(100 * r["fraction_of_floor_peak"], 1), round(100 * r["fraction_of_floor_measured"], 1),
              "pool", r.get("native_mlp_pool_used"), "prepare_s", round(r["prepare_s"], 1), r["source_sha256"])
        for key in ("native_mlp_step_tuning", "native_mlp_pool_step_tuning"):
            trials = r.get(key) or {}
            for shape, t in (trials.items() if key == "native_mlp_step_tuning" else [("", trials)]):
                print(f"   {key[7:-12]} {shape}: " + ", ".join(f"{k} {v}" for k, v in t.items()))
