# the device call that made call2/ (one H200; $OUT is the call's output folder), at the final kernel sources (the
# head-major o taken out again; the CUDA chunks' two more candidates kept): the GPU tests call 1 had no time for (the
# runtime's replay test with the tuner's trials; `floorline check` on a tiny model's shapes), then qwen3-8b ctx 2048,
# then the ctx-16384 no-regression cells (the suite's native-long group), one fresh process a cell
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
nvidia-smi > "$OUT/nvidia-smi.txt"
TESTS_K="replays_real_tokens or check_passes" OUT=$OUT/tests timeout 230 bash scripts/gpu_check.sh tests | tail -3
timeout 110 python3 -m floorline run --model qwen3-8b --ctx 2048 --mode native --output "$OUT/runs.jsonl" \
  > "$OUT/runs.log" 2>&1
SUITE_GROUPS=native-long SUITE_BUDGET=200 OUT=$OUT timeout 220 bash scripts/gpu_check.sh suite > /dev/null 2>&1
python3 - "$OUT/runs.jsonl" "$OUT"/suite/*.jsonl <<'PY'
import json, sys
for f in sys.argv[1:]:
    for line in open(f):
        r = json.loads(line)
        print(r["model"], r["ctx"], r.get("quant"), round(r["step_ms_median"], 4), round(r.get("measured_gbps") or 0),
              "attn", r.get("native_attn"), "o_merge", r.get("native_o_merge_used"), "early",
              r.get("native_pdl_early_used"))
        print("  attn", json.dumps(r.get("native_attn_step_tuning")))
        print("  early", json.dumps(r.get("native_pdl_early_step_tuning")))
PY
