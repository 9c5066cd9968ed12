# the device call that made call1/ (one H200; $OUT is the call's output folder): qwen3-8b ctx 2048 with the new step
# tuner candidates (the merge inside o over a head-major copy of W_o; the CUDA chunks on 8 warps and at half the
# chunk), then the GPU tests of those candidates (tokens against the kernel step, `floorline check`'s rows, the
# runtime's replay test), then qwen2.5-0.5b ctx 128 and qwen2.5-1.5b ctx 2048, one fresh process a cell
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
nvidia-smi > "$OUT/nvidia-smi.txt"
timeout 110 python3 -m floorline run --model qwen3-8b --ctx 2048 --mode native --output "$OUT/runs.jsonl" \
  > "$OUT/runs.log" 2>&1
TESTS_K="merge_inside_o_matches or cuda_chunks_the_step_tuner or replays_real_tokens or check_passes" \
  OUT=$OUT/tests timeout 300 bash scripts/gpu_check.sh tests | tail -3
timeout 70 python3 -m floorline run --model qwen2.5-0.5b --ctx 128 --mode native --output "$OUT/runs.jsonl" \
  >> "$OUT/runs.log" 2>&1
timeout 80 python3 -m floorline run --model qwen2.5-1.5b --ctx 2048 --mode native --output "$OUT/runs.jsonl" \
  >> "$OUT/runs.log" 2>&1
python3 - "$OUT/runs.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r["model"], r["ctx"], r.get("quant"), round(r["step_ms_median"], 4), round(r.get("measured_gbps") or 0),
          "attn", r.get("native_attn"), "o_merge", r.get("native_o_merge_used"), "early", r.get("native_pdl_early_used"))
    print("  attn", json.dumps(r.get("native_attn_step_tuning")))
    print("  o_merge", json.dumps(r.get("native_o_merge_step_tuning")))
PY
