# the device call that made call4/ (one H200; $OUT is the call's output folder), at sources cf365672: commit 484dfcc with
# o_merge_ahead.diff and double_chunk_and_tests.diff (o_merge's AHEAD candidates, the CUDA chunks' double chunk,
# o_merge's round over the longest chunk; all dropped afterwards): the GPU tests that run them
# (the merge inside o at every candidate over every attention candidate, D 128 and 64; the runtime's replay test; the
# CUDA chunks the tuner tries against the Triton ones), then three cells, one fresh process each
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
nvidia-smi > "$OUT/nvidia-smi.txt"
TESTS_K="(merge_inside_o_matches and (qwen3 or llama)) or replays_real_tokens or cuda_chunks_the_step_tuner" \
  OUT=$OUT/tests timeout 300 bash scripts/gpu_check.sh tests | tail -4
SUITE_ONLY="qwen2.5-1.5b:native:none llama-3.2-1b:native:none" SUITE_BUDGET=130 OUT=$OUT timeout 140 \
  bash scripts/gpu_check.sh suite > /dev/null 2>&1
timeout 110 python3 -m floorline run --model qwen3-8b --ctx 2048 --mode native --output "$OUT/runs.jsonl" \
  > "$OUT/runs.log" 2>&1
python3 - "$OUT/runs.jsonl" "$OUT"/suite/*.jsonl <<'PY'
import json, sys
for f in sys.argv[1:]:
    for line in open(f):
        r = json.loads(line)
        print(r["model"], r["ctx"], r.get("quant"), round(r["step_ms_median"], 4), round(r.get("measured_gbps") or 0),
              "attn", r.get("native_attn"), "o_merge", r.get("native_o_merge_used"), "early",
              r.get("native_pdl_early_used"))
        print("  attn", json.dumps(r.get("native_attn_step_tuning")))
        print("  o_merge", json.dumps(r.get("native_o_merge_step_tuning")))
PY
