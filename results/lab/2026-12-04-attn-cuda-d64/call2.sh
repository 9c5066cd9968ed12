# the device call that made call2/ (one H200; $OUT is the call's output folder), at the sources of the CUDA attention
# chunks at head_dim 64: their GPU tests (against the reference, loads before the wait, the step tuner's candidates
# against Triton's chunks), then llama-3.2-1b and qwen2.5-0.5b ctx 128 (one fresh process a cell), then the merge
# inside o over every chunk candidate for the two head_dim-64 models
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
nvidia-smi > "$OUT/nvidia-smi.txt"
python3 -c "from floorline.bench import system; print('sources', system.source_sha256())" | tee "$OUT/sources.txt"
timeout 200 python3 -m pytest -q -s -m gpu tests/test_gpu_native.py -k "cuda_attention or cuda_chunks_the_step_tuner" \
  > "$OUT/pytest_attn.log" 2>&1; grep -E "passed|failed|FAILED|Error" "$OUT/pytest_attn.log" | cut -c1-300 | tail -8
for cell in "llama-3.2-1b 128" "qwen2.5-0.5b 128"; do
  set -- $cell
  timeout 120 python3 -m floorline run --model "$1" --ctx "$2" --mode native --output "$OUT/runs.jsonl" \
    > "$OUT/run_$1.log" 2>&1
done
python3 results/lab/2026-12-04-attn-cuda-d64/summary.py "$OUT/runs.jsonl" | tee "$OUT/summary.txt"
timeout 150 python3 -m pytest -q -s -m gpu tests/test_gpu_native.py -k "merge_inside_o and (llama or qwen2)" \
  > "$OUT/pytest_o_merge.log" 2>&1; grep -E "passed|failed|FAILED|Error" "$OUT/pytest_o_merge.log" | cut -c1-300 | tail -4
