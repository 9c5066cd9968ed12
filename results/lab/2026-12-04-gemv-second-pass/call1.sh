# the device call that made call1/ (one H200; $OUT is the call's output folder): the GEMVs' second in-step pass
# (after the MLP's, the attention's, the merge's and the prefetch's tuning): the GPU tests of the tuner's records and
# of the narrow tiles, then `floorline run --mode native` of issue 38's cells and qwen3-8b ctx 2048, one process each
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
t0=$(date +%s); left() { echo $(( 575 - ($(date +%s) - t0) )); }
nvidia-smi > "$OUT/nvidia-smi.txt"
TESTS_K="replays_real_tokens or (every_bf16_tile and 896)" OUT=$OUT/tests timeout 150 bash scripts/gpu_check.sh tests | tail -3
for cell in "llama-3.2-1b 128" "qwen2.5-0.5b 128" "qwen2.5-1.5b 2048" "llama-3.2-3b 2048" "llama-3.2-1b 2048 int4" \
            "qwen3-8b 2048"; do
  set -- $cell
  [ $(left) -gt 75 ] || { echo "skipped $cell: $(left) s left"; continue; }
  timeout $(left) python3 -m floorline run --model $1 --ctx $2 --mode native ${3:+--quant $3} \
    --output "$OUT/runs.jsonl" >> "$OUT/runs.log" 2>&1
done
python3 results/lab/2026-12-04-gemv-second-pass/summary.py "$OUT/runs.jsonl"
