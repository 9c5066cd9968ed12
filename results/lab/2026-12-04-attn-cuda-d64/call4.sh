# the device call that made call4/ (one H200; $OUT is the call's output folder), at the final sources (the CUDA
# chunks at head_dim 64; call 2's sources): llama-3.2-1b bf16 and int4 against HF fp32 over the CUDA chunks, then
# llama-3.2-1b int4 ctx 2048 and bf16 ctx 128, one fresh process a cell
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
nvidia-smi > "$OUT/nvidia-smi.txt"
python3 -c "from floorline.bench import system; print('sources', system.source_sha256())" | tee "$OUT/sources.txt"
timeout 130 python3 -m pytest -q -s -m gpu tests/test_gpu_native.py -k head_dim_64_agrees > "$OUT/pytest_agree.log" 2>&1
grep -E "vs HF fp32|passed|failed|FAILED|Error" "$OUT/pytest_agree.log" | cut -c1-300 | tail -6
for cell in "llama-3.2-1b 2048 int4" "llama-3.2-1b 128 none"; do
  set -- $cell
  timeout 100 python3 -m floorline run --model "$1" --ctx "$2" --quant "$3" --mode native \
    --output "$OUT/runs.jsonl" > "$OUT/run_$1_$3.log" 2>&1
done
python3 results/lab/2026-12-04-attn-cuda-d64/summary.py "$OUT/runs.jsonl"
