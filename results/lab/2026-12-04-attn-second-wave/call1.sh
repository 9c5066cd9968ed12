# the device call that made call1/ (one H200; $OUT is the call's output folder): the CUDA attention chunks among the
# step tuner's candidates below 8192 positions -- the tests of the step tuner and the merge inside o, then cells on
# both sides of the second wave (8 KV heads, position 2112)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
run() { timeout "$1" python3 -m floorline run --model "$2" --ctx "$3" --mode native --output "$OUT/runs.jsonl" \
  >> "$OUT/runs.log" 2>&1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
TESTS_K="replays_real_tokens or merge_inside_o" timeout 150 bash scripts/gpu_check.sh tests | tail -6
run 80 qwen3-8b 2112
run 70 llama-3.2-3b 2048
run 80 llama-3.1-8b 2048
python3 - "$OUT/runs.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(r["model"], r["ctx"], "ms", round(r["step_ms_median"], 4), "GB/s", round(r["measured_gbps"]), r["native_attn"],
          r["native_attn_step_tuning"])
PY
