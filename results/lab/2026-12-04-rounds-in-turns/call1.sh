# the device call that made call1/ (one H200; $OUT is the call's output folder), at the sources of the rounds in
# turns (every sequential step-tuner round's three fastest timed again in turns): qwen3-8b ctx 2048, llama-3.2-1b ctx
# 128 and qwen2.5-1.5b ctx 2048, one fresh process a cell; then the GPU tests of the interleaved timer and of the
# runtime's replay (bf16 and int4: the finals and the turns in its record)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
nvidia-smi > "$OUT/nvidia-smi.txt"
python3 -c "from floorline.bench import system; print('sources', system.source_sha256())" | tee "$OUT/sources.txt"
for cell in "qwen3-8b 2048" "llama-3.2-1b 128" "qwen2.5-1.5b 2048"; do
  set -- $cell
  timeout 150 python3 -m floorline run --model "$1" --ctx "$2" --mode native --output "$OUT/runs.jsonl" \
    > "$OUT/run_$1.log" 2>&1
done
python3 results/lab/2026-12-04-rounds-in-turns/turns_gain.py "$OUT/runs.jsonl" | tee "$OUT/turns.txt" | cut -c1-200
python3 -m pytest -q -m gpu tests/test_timing.py > "$OUT/pytest_timing.log" 2>&1; tail -1 "$OUT/pytest_timing.log"
TESTS_K="replays_real_tokens" OUT=$OUT/tests timeout 220 bash scripts/gpu_check.sh tests | tail -3
