# the device call that made call3/ (one H200; $OUT is the call's output folder): the rest of the early switch's GPU
# test (llama-3.2-1b with the CUDA chunks, and int4; qwen3-0.6b passed in call 2), then issue 38's no-regression cells
# (scripts/h200_suite.toml's groups native and native-int4: qwen2.5-7b and llama-3.1-8b ctx 2048, bf16 and int4), one
# fresh `floorline run --mode native` process each, as far as the call's time goes
# (its -k matched the test's first form, whose llama cases were CUDA chunks and int4; against the committed test it
# selects the int4 case only)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
nvidia-smi > "$OUT/nvidia-smi.txt"
TESTS_K="let_the_next_launch and llama" OUT=$OUT/tests timeout 230 bash scripts/gpu_check.sh tests | tail -3
SUITE_GROUPS="native,native-int4" SUITE_BUDGET=330 OUT=$OUT timeout 340 bash scripts/gpu_check.sh suite > /dev/null 2>&1
python3 - "$OUT"/suite/*.jsonl <<'PY'
import json, sys
for f in sys.argv[1:]:
    for line in open(f):
        r = json.loads(line)
        print(r["model"], r["ctx"], r.get("quant"), round(r["step_ms_median"], 4), round(r.get("measured_gbps") or 0),
              "early", r.get("native_pdl_early_used"), json.dumps(r.get("native_pdl_early_step_tuning")))
PY
