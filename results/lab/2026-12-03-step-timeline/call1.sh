# the device call that made call1/ (one H200; $OUT is the call's output folder)
OUT=$OUT TESTS_K=timeline TIMELINE_CELLS="llama-3.2-1b:128 qwen3-8b:2048 qwen2.5-1.5b:2048" timeout 580 bash scripts/gpu_check.sh tests timeline
