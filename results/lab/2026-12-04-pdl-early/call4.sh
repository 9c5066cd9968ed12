# the device call that made call4/ (one H200; $OUT is the call's output folder): the early switch's GPU test with the
# CUDA chunks (qwen3-0.6b ctx 300), then llama-3.1-8b int4 ctx 2048 (the no-regression cell call 3 had no time for),
# qwen3-8b and llama-3.2-1b again, one fresh `floorline run --mode native` process each
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
nvidia-smi > "$OUT/nvidia-smi.txt"
TESTS_K="let_the_next_launch and 300" OUT=$OUT/tests timeout 120 bash scripts/gpu_check.sh tests | tail -3
SUITE_ONLY="llama-3.1-8b:native:int4" SUITE_BUDGET=100 OUT=$OUT timeout 110 bash scripts/gpu_check.sh suite > /dev/null 2>&1
timeout 100 python3 -m floorline run --model qwen3-8b --ctx 2048 --mode native --output "$OUT/runs.jsonl" \
  > "$OUT/runs.log" 2>&1
timeout 60 python3 -m floorline run --model llama-3.2-1b --ctx 128 --mode native --output "$OUT/runs.jsonl" \
  >> "$OUT/runs.log" 2>&1
python3 - "$OUT"/suite/*.jsonl "$OUT/runs.jsonl" <<'PY'
import json, sys
for f in sys.argv[1:]:
    for line in open(f):
        r = json.loads(line)
        print(r["model"], r["ctx"], r.get("quant"), round(r["step_ms_median"], 4), round(r.get("measured_gbps") or 0),
              "early", r.get("native_pdl_early_used"), json.dumps(r.get("native_pdl_early_step_tuning")))
PY
