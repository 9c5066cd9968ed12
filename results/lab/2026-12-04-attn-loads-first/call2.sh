# the device call that made call2/ (one H200; $OUT is the call's output folder), at commit 484dfcc's sources (the
# loads-first kernel dropped): probe2.py, the attention's chunks and the merge inside o chosen together
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
nvidia-smi > "$OUT/nvidia-smi.txt"
timeout 560 python3 results/lab/2026-12-04-attn-loads-first/probe2.py qwen3-8b:2048 llama-3.1-8b:2048 \
  llama-3.2-3b:2048 > "$OUT/probe2.txt" 2> "$OUT/probe2.log"
cat "$OUT/probe2.txt"; tail -c 300 "$OUT/probe2.log" | cut -c1-300
