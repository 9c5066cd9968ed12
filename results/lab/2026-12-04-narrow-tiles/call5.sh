# the device call that made call5/ (one H200; $OUT is the call's output folder), with call5/fitting_order.diff applied: the small models' fused MLP starting
# from a small-hidden candidate (mlp.fitting's order), so that the Triton GEMV's tiles, re-timed in the step before the
# MLP's, are timed beside a fast MLP; three cells of issue 38, one process each (the device time left: ~7 minutes)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
R=$OUT/call5; mkdir -p $R
nvidia-smi > "$R/nvidia-smi.txt"
for cell in "llama-3.2-1b 128" "qwen2.5-0.5b 128" "qwen2.5-1.5b 2048"; do
  set -- $cell
  timeout 90 python3 -m floorline run --model $1 --ctx $2 --mode native --output "$R/runs.jsonl" >> "$R/runs.log" 2>&1
done
python3 - "$R/runs.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(r["model"], r["ctx"], "ms", round(r["step_ms_median"], 4), "GB/s", round(r["measured_gbps"]),
          "%", round(100 * r["fraction_of_floor_peak"], 1), round(100 * r["fraction_of_floor_measured"], 1),
          r["native_attn"], "| o_merge", r.get("native_o_merge_used"), r["source_sha256"])
    for shape, t in r["native_triton_step_tuning"].items():
        print("  ", shape, "min", min(t.values()), "max", max(t.values()), "kept", min(t, key=t.get))
PY
cd $OUT && tar czf call5.tgz call5 && rm -rf call5
