# the device call that made call2/ (one H200; $OUT is the call's output folder): the CUDA chunks' grid sized to the
# cache (call 1 launched one CTA for each slot of the partials' wider stride), their tests, qwen3-8b ctx 2112 again
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
TESTS_K="replays_real_tokens or cuda_chunks_the_step_tuner" timeout 110 bash scripts/gpu_check.sh tests | tail -4
grep -E "vs the CUDA|passed|failed|Error" $OUT/pytest_gpu.log | cut -c1-200
timeout 75 python3 -m floorline run --model qwen3-8b --ctx 2112 --mode native --output "$OUT/runs.jsonl" > "$OUT/runs.log" 2>&1
python3 - "$OUT/runs.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(r["model"], r["ctx"], "ms", round(r["step_ms_median"], 4), "GB/s", round(r["measured_gbps"]), r["native_attn"],
          r["native_attn_step_tuning"])
PY
