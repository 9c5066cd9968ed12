# the device call that made call3/ (one H200; $OUT is the call's output folder), at the sources that add the CUDA
# chunks of 32 positions on 2 warps and of 16 on one where the rule's CTAs fill under half the SMs: their GPU tests
# (against the reference; the step tuner's candidates against Triton's chunks), then qwen2.5-0.5b and llama-3.2-1b
# ctx 128, llama-3.2-1b int4 ctx 2048 and qwen2.5-1.5b ctx 2048, one fresh process a cell
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
nvidia-smi > "$OUT/nvidia-smi.txt"
python3 -c "from floorline.bench import system; print('sources', system.source_sha256())" | tee "$OUT/sources.txt"
mapfile -t ids < <(python3 -m pytest --collect-only -q -m gpu tests/test_gpu_native.py 2>/dev/null \
  | grep -E "cuda_attention_chunks_match_the_reference\[(2-32|1-16)-|step_tuner_tries_match_the_triton_chunks\[(llama-3.2-1b|qwen2.5-0.5b)")
timeout 170 python3 -m pytest -q -s -m gpu "${ids[@]}" > "$OUT/pytest_attn.log" 2>&1
grep -E "passed|failed|FAILED|Error" "$OUT/pytest_attn.log" | cut -c1-300 | tail -8
for cell in "qwen2.5-0.5b 128 none" "llama-3.2-1b 128 none" "llama-3.2-1b 2048 int4" "qwen2.5-1.5b 2048 none"; do
  set -- $cell
  timeout 110 python3 -m floorline run --model "$1" --ctx "$2" --quant "$3" --mode native \
    --output "$OUT/runs.jsonl" > "$OUT/run_$1_$3.log" 2>&1
done
python3 results/lab/2026-12-04-attn-cuda-d64/summary.py "$OUT/runs.jsonl" | tee "$OUT/summary.txt"
