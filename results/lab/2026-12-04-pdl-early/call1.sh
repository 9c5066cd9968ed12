# the device call that made call1/ (one H200; $OUT is the call's output folder): the early PDL trigger as a step-tuner
# choice. qwen3-8b ctx 2048 and the small group (scripts/h200_suite.toml), one fresh `floorline run --mode native`
# process a cell (the tuner's trials: none, each role alone, the union of the winners, in one process); then the GPU
# tests of the new switch (every role early against none: the same tokens) and the runtime's replay test
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
nvidia-smi > "$OUT/nvidia-smi.txt"
timeout 150 python3 -m floorline run --model qwen3-8b --ctx 2048 --mode native --output "$OUT/runs.jsonl" \
  > "$OUT/qwen3.log" 2>&1
SUITE_GROUPS=small SUITE_BUDGET=250 OUT=$OUT timeout 270 bash scripts/gpu_check.sh suite > /dev/null 2>&1
cat "$OUT"/suite/*.jsonl >> "$OUT/runs.jsonl" 2>/dev/null
TESTS_K="let_the_next_launch or replays_real_tokens" OUT=$OUT/tests timeout 150 bash scripts/gpu_check.sh tests | tail -3
python3 - "$OUT/runs.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("mode") != "native":
        continue
    print(r["model"], r["ctx"], r.get("quant"), round(r["step_ms_median"], 4), round(r.get("measured_gbps") or 0),
          "early", r.get("native_pdl_early_used"), json.dumps(r.get("native_pdl_early_step_tuning")))
PY
