# the device call that made call3/ (one H200): the cells of issues 38 and 39 not rerun in calls 1-2, at the sources of
# the commit that keeps the KV prefetch as a step-tuner choice
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
timeout 100 python3 -m floorline run --model qwen3-8b --ctx 2048 --mode native --output "$OUT/runs.jsonl" >> "$OUT/runs.log" 2>&1
timeout 100 python3 -m floorline run --model llama-3.2-1b --ctx 2048 --mode native --quant int4 --output "$OUT/runs.jsonl" >> "$OUT/runs.log" 2>&1
timeout 100 python3 -m floorline run --model qwen2.5-1.5b --ctx 2048 --mode native --output "$OUT/runs.jsonl" >> "$OUT/runs.log" 2>&1
python3 - "$OUT/runs.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(r["model"], r["ctx"], r["quant"], "ms", round(r["step_ms_median"], 4), "GB/s", round(r["measured_gbps"]),
          "%", round(100 * r["fraction_of_floor_peak"], 1), round(100 * r["fraction_of_floor_measured"], 1),
          r["source_sha256"], "| kv_prefetch", r.get("native_kv_prefetch_used"), r.get("native_kv_prefetch_step_tuning"))
PY
