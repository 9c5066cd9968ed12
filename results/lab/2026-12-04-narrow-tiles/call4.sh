# the device call that made call4/ (one H200; $OUT is the call's output folder), at the sources of call 3: the 7-8B
# cells of issue 38's no-regression clause and llama-3.2-1b ctx 128 (runs), and `explain --mode native` of
# qwen2.5-1.5b ctx 2048 (call 3 returned its log without room for it); everything tarred (a call returns 8 files)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
R=$OUT/call4; mkdir -p $R/explain
nvidia-smi > "$R/nvidia-smi.txt"
for cell in "qwen2.5-7b 2048" "llama-3.1-8b 2048" "llama-3.2-1b 128"; do
  set -- $cell
  timeout 100 python3 -m floorline run --model $1 --ctx $2 --mode native --output "$R/runs.jsonl" >> "$R/runs.log" 2>&1
done
python3 - "$R/runs.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(r["model"], r["ctx"], "ms", round(r["step_ms_median"], 4), "GB/s", round(r["measured_gbps"]),
          "%", round(100 * r["fraction_of_floor_peak"], 1), round(100 * r["fraction_of_floor_measured"], 1),
          r["native_attn"], "| o_merge", r.get("native_o_merge_used"), r.get("native_o_merge_step_tuning"),
          r["source_sha256"])
PY
timeout 150 python3 -m floorline explain --model qwen2.5-1.5b --ctx 2048 --mode native \
  --out "$R/explain/qwen2.5-1.5b_2048" > "$R/explain/qwen2.5-1.5b_2048.log" 2>&1
grep -A3 "ctx   mode" "$R/explain/qwen2.5-1.5b_2048.log" | tail -1
cd $OUT && tar czf call4.tgz call4 && rm -rf call4
