# the device call that made call1/ (one H200; $OUT is the call's output folder): the whole-row GEMV tiles. The GPU test
# of every bf16 tile the autotuner may pick (the whole-row tiles among them) at qwen2.5-7b's and qwen2.5-0.5b's shapes,
# then `floorline run --mode native` of issue 38's bf16 cells, qwen3-8b and qwen2.5-7b, one process each (the step
# tuner times the whole-row tiles against the others in the same process)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
t0=$(date +%s); left() { echo $(( 545 - ($(date +%s) - t0) )); }
nvidia-smi > "$OUT/nvidia-smi.txt"
TESTS_K="every_bf16_tile and (qkv or o)" OUT=$OUT/tests timeout 120 bash scripts/gpu_check.sh tests | tail -3
for cell in "qwen2.5-0.5b 128" "qwen2.5-1.5b 2048" "llama-3.2-1b 128" "llama-3.2-3b 2048" "qwen3-8b 2048" \
            "qwen2.5-7b 2048"; do
  set -- $cell
  [ $(left) -gt 70 ] || { echo "skipped $cell: $(left) s left"; continue; }
  timeout $(left) python3 -m floorline run --model $1 --ctx $2 --mode native ${3:+--quant $3} \
    --output "$OUT/runs.jsonl" >> "$OUT/runs.log" 2>&1
done
python3 results/lab/2026-12-04-whole-row-tiles/summary.py "$OUT/runs.jsonl" | tee "$OUT/summary.txt"
