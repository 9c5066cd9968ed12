# the device call that made call1/ (one H200; $OUT is the call's output folder): the fused MLP's tail pool. Its GPU
# tests (every candidate and share in a CUDA graph under PDL; the step with each share against off), then
# `floorline run --mode native` of issue 38's bf16 cells and the 7-8B ones, one process each: the step tuner times
# the pool's shares against off in the same process (native_mlp_pool_step_tuning)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
t0=$(date +%s); left() { echo $(( 580 - ($(date +%s) - t0) )); }
nvidia-smi > "$OUT/nvidia-smi.txt"
TESTS_K="tail_pool" OUT=$OUT/tests timeout 170 bash scripts/gpu_check.sh tests | tail -4
for cell in "qwen3-8b 2048" "llama-3.2-1b 128" "qwen2.5-0.5b 128" "qwen2.5-1.5b 2048" "llama-3.2-3b 2048" \
            "qwen2.5-7b 2048" "llama-3.1-8b 2048"; do
  set -- $cell
  [ $(left) -gt 70 ] || { echo "skipped $cell: $(left) s left"; continue; }
  timeout $(left) python3 -m floorline run --model $1 --ctx $2 --mode native ${3:+--quant $3} \
    --output "$OUT/runs.jsonl" >> "$OUT/runs.log" 2>&1
done
python3 results/lab/2026-12-04-mlp-tail-pool/summary.py "$OUT/runs.jsonl" | tee "$OUT/summary.txt"
