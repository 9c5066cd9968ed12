# the device call that made call1/ (one H200; $OUT is the call's output folder): the int4 fused MLP in the step
# tuner's hands (int4 cells of the small models), then its GPU tests
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
run() { timeout "$1" python3 -m floorline run --model "$2" --ctx "$3" --mode native --quant int4 --output "$OUT/runs.jsonl" \
  >> "$OUT/runs.log" 2>&1; }
show() { python3 - "$OUT/runs.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(r["model"], r["ctx"], r["quant"], "ms", round(r["step_ms_median"], 4), "GB/s", r.get("measured_gbps"),
          "used", r.get("native_int4_mlp_used"), "trials", r.get("native_int4_mlp_step_tuning"))
PY
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
run 120 llama-3.2-1b 2048; show
TESTS_K="int4_fused or (small_models and int4)" timeout 200 bash scripts/gpu_check.sh tests | tail -25
run 90 qwen2.5-1.5b 2048
run 90 llama-3.2-3b 2048
run 80 qwen2.5-0.5b 128
show
