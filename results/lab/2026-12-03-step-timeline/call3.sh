# the device call that made call3/ (one H200; $OUT is the call's output folder)
OUT=$OUT TIMELINE_CELLS="qwen3-8b:2112:attn_kernel=cuda qwen3-8b:2112:attn_chunk=128 qwen3-8b:2048:attn_kernel=cuda qwen3-8b:2112" timeout 560 bash scripts/gpu_check.sh timeline
