# the device call that made call2/ (one H200; $OUT is the call's output folder): the merge inside o with three more
# step-tuner candidates of one tile a program (every weight requested before the wait), timed in five cells of issues
# 38 and 39; then the GPU test of the merge inside o (every candidate, every attention chunk the tuner tries)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi > "$OUT/nvidia-smi.txt"
for cell in "llama-3.2-1b 128" "qwen2.5-0.5b 128" "qwen2.5-1.5b 2048" "llama-3.2-3b 2048" "qwen3-8b 2048"; do
  set -- $cell
  timeout 100 python3 -m floorline run --model $1 --ctx $2 --mode native --output "$OUT/runs.jsonl" >> "$OUT/runs.log" 2>&1
done
python3 - "$OUT/runs.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(r["model"], r["ctx"], "ms", round(r["step_ms_median"], 4), "GB/s", round(r["measured_gbps"]),
          "%", round(100 * r["fraction_of_floor_peak"], 1), round(100 * r["fraction_of_floor_measured"], 1),
          r["native_attn"], "| o_merge", r.get("native_o_merge_used"), r.get("native_o_merge_step_tuning"),
          r["source_sha256"])
PY
TESTS_K="merge_inside_o" timeout 150 bash scripts/gpu_check.sh tests | tail -5
