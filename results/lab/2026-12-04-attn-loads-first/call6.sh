# the device call that made call6/ (one H200; $OUT is the call's output folder), at sources 85328d59 (the attention's and
# o's finalists timed together in interleaved rounds; the commit's sources but for docstrings, call6_to_final.diff):
# the GPU tests of the final round and of the runtime's replay (bf16 and int4), then qwen2.5-1.5b ctx 2048 (the
# suite's entry) and qwen3-8b ctx 2048, one fresh process a cell
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
nvidia-smi > "$OUT/nvidia-smi.txt"
TESTS_K="final_round or replays_real_tokens" OUT=$OUT/tests timeout 100 bash scripts/gpu_check.sh tests | tail -3
python3 -m pytest -q -m gpu tests/test_timing.py -k final_round > "$OUT/pytest_timing.log" 2>&1; tail -1 "$OUT/pytest_timing.log"
SUITE_ONLY="qwen2.5-1.5b:native:none" SUITE_BUDGET=75 OUT=$OUT timeout 85 bash scripts/gpu_check.sh suite \
  > /dev/null 2>&1
timeout 105 python3 -m floorline run --model qwen3-8b --ctx 2048 --mode native --output "$OUT/runs.jsonl" \
  > "$OUT/runs.log" 2>&1
python3 - "$OUT"/suite/*.jsonl "$OUT/runs.jsonl" <<'PY'
import json, sys
for f in sys.argv[1:]:
    for line in open(f):
        r = json.loads(line)
        print(r["model"], r["ctx"], r.get("quant"), round(r["step_ms_median"], 4), round(r.get("measured_gbps") or 0),
              "attn", r.get("native_attn"), "o_merge", r.get("native_o_merge_used"), "early",
              r.get("native_pdl_early_used"), "prepare_s", round(r.get("prepare_s") or 0, 1))
        print("  finals", json.dumps(r.get("native_finals_step_tuning")))
PY
