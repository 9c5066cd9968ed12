# the device call that made call4/ (one H200; $OUT is the call's output folder)
OUT=$OUT TIMELINE_CELLS="llama-3.1-8b:2112 llama-3.1-8b:2112:attn_kernel=cuda llama-3.1-8b:2048:attn_kernel=cuda llama-3.1-8b:2048 llama-3.2-3b:2112 llama-3.2-3b:2112:attn_kernel=cuda llama-3.2-3b:2048:attn_kernel=cuda qwen3-8b:2112:attn_kernel=cuda" timeout 575 bash scripts/gpu_check.sh timeline
