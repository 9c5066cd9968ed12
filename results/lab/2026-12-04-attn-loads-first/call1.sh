# the device call that made call1/ (one H200; $OUT is the call's output folder): the GPU tests of the CUDA attention
# chunks (the reference at every launch shape, chunk 32 on 2 warps added; the SASS order before and after the wait;
# the step with each CUDA candidate against the Triton chunks), then probe.py on three 7-8B cells
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
nvidia-smi > "$OUT/nvidia-smi.txt"
TESTS_K="cuda_attention or cuda_chunks_the_step_tuner" OUT=$OUT/tests timeout 200 bash scripts/gpu_check.sh tests \
  | tail -4
timeout 370 python3 results/lab/2026-12-04-attn-loads-first/probe.py qwen3-8b:2048 llama-3.1-8b:2048 \
  qwen2.5-7b:2048 > "$OUT/probe.txt" 2> "$OUT/probe.log"
cat "$OUT/probe.txt"; tail -c 600 "$OUT/probe.log" | cut -c1-300
