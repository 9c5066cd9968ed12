# the device call that made call5/ (one H200; $OUT is the call's output folder), at the final kernel sources:
# qwen2.5-0.5b ctx 128 and qwen2.5-1.5b ctx 2048 (call 1 ran them with the head-major candidates), one fresh
# `floorline run --mode native` process each
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
timeout 70 python3 -m floorline run --model qwen2.5-0.5b --ctx 128 --mode native --output "$OUT/runs.jsonl" \
  > "$OUT/runs.log" 2>&1
timeout 85 python3 -m floorline run --model qwen2.5-1.5b --ctx 2048 --mode native --output "$OUT/runs.jsonl" \
  >> "$OUT/runs.log" 2>&1
python3 - "$OUT/runs.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r["model"], r["ctx"], r.get("quant"), round(r["step_ms_median"], 4), round(r.get("measured_gbps") or 0),
          "attn", r.get("native_attn"), "o_merge", r.get("native_o_merge_used"), "early", r.get("native_pdl_early_used"))
    print("  attn", json.dumps(r.get("native_attn_step_tuning")))
PY
