# the device call that made call1/ (one H200; $OUT is the call's output folder): the fused MLP asking the L2 for the
# next layer's KV cache (mlp.KV_PREFETCH: off, on, on evict_last), timed by the step tuner in four cells; then the GPU
# tests of it and of the last review commits (the CUDA chunks, the merge inside o, persistent layers, the timeline)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi > "$OUT/nvidia-smi.txt"
for cell in "qwen3-8b 2048" "llama-3.2-3b 2048" "qwen2.5-1.5b 2048" "llama-3.1-8b 2048"; do
  set -- $cell
  timeout 100 python3 -m floorline run --model $1 --ctx $2 --mode native --output "$OUT/runs.jsonl" >> "$OUT/runs.log" 2>&1
done
python3 - "$OUT/runs.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(r["model"], r["ctx"], "ms", round(r["step_ms_median"], 4), "GB/s", round(r["measured_gbps"]), r["native_attn"],
          "| kv_prefetch", r.get("native_kv_prefetch_used"), r.get("native_kv_prefetch_step_tuning"),
          "| o_merge", r.get("native_o_merge_used"))
PY
TESTS_K="kv_prefetch or cuda_chunks_the_step_tuner or merge_inside_o or persistent_layers or timeline_stamps" \
  timeout 200 bash scripts/gpu_check.sh tests | tail -30
