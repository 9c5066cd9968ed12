# the device call that made timeline/ (one H200; $OUT is the call's output folder): the step timeline of qwen2.5-0.5b
# (never stamped before), with llama-3.2-1b and qwen3-8b again in the same lease, at the sources of record
nvidia-smi > "$OUT/nvidia-smi.txt"
OUT=$OUT TIMELINE_CELLS="qwen2.5-0.5b:128 llama-3.2-1b:128 qwen3-8b:2048" timeout 560 bash scripts/gpu_check.sh timeline
