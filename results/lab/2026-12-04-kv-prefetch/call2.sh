# the device call that made call2/ (one H200): the KV prefetch's one win of call 1 (qwen2.5-1.5b ctx 2048) again in
# two fresh processes, and the step tuner's choice in issue 38's ctx-128 cells and qwen2.5-7b ctx 2048
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
for cell in "qwen2.5-1.5b 2048" "qwen2.5-1.5b 2048" "qwen2.5-0.5b 128" "llama-3.2-1b 128" "qwen2.5-7b 2048"; do
  set -- $cell
  timeout 100 python3 -m floorline run --model $1 --ctx $2 --mode native --output "$OUT/runs.jsonl" >> "$OUT/runs.log" 2>&1
done
python3 - "$OUT/runs.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(r["model"], r["ctx"], "ms", round(r["step_ms_median"], 4), "GB/s", round(r["measured_gbps"]), r["native_attn"],
          "| kv_prefetch", r.get("native_kv_prefetch_used"), r.get("native_kv_prefetch_step_tuning"),
          "| o_merge", r.get("native_o_merge_used"))
PY
