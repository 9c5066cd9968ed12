# the device call that made call2/ (one H200; $OUT is the call's output folder)
OUT=$OUT TIMELINE_CELLS="qwen3-8b:2048 qwen3-8b:2112 llama-3.2-1b:128 qwen2.5-7b:2048 llama-3.2-3b:2048" timeout 560 bash scripts/gpu_check.sh timeline
