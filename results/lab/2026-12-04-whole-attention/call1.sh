# the device call that made call1/ (one H200; $OUT is the call's output folder): the whole-cache attention (one
# program a KV head, no merge kernel) as a step-tuner candidate, timed in the two ctx-128 cells of issue 38, two
# processes each; then its GPU tests and those its candidate joins (the merge inside o, the CUDA chunks' comparison)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi > "$OUT/nvidia-smi.txt"
TESTS_K="whole or merge_inside_o or cuda_chunks_the_step_tuner" timeout 230 bash scripts/gpu_check.sh tests | tail -30
for cell in "llama-3.2-1b 128" "qwen2.5-0.5b 128" "llama-3.2-1b 128" "qwen2.5-0.5b 128"; do
  set -- $cell
  timeout 90 python3 -m floorline run --model $1 --ctx $2 --mode native --output "$OUT/runs.jsonl" >> "$OUT/runs.log" 2>&1
done
python3 - "$OUT/runs.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(r["model"], r["ctx"], "ms", round(r["step_ms_median"], 4), "GB/s", round(r["measured_gbps"]),
          "%", round(100 * r["fraction_of_floor_peak"], 1), round(100 * r["fraction_of_floor_measured"], 1),
          r["native_attn"], "| attn", r.get("native_attn_step_tuning"), "| o_merge", r.get("native_o_merge_used"),
          r.get("native_o_merge_step_tuning"), r["source_sha256"])
PY
