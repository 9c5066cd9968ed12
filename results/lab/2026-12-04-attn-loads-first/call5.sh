# the device call that made call5/ (one H200; $OUT is the call's output folder), at call 4's sources: probe4.py, the
# pairs behind call 4's choices, interleaved in one process a model
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
nvidia-smi > "$OUT/nvidia-smi.txt"
timeout 300 python3 results/lab/2026-12-04-attn-loads-first/probe4.py qwen2.5-1.5b:2048 llama-3.2-3b:2048 \
  > "$OUT/probe4.txt" 2> "$OUT/probe4.log"
cat "$OUT/probe4.txt"; tail -c 300 "$OUT/probe4.log" | cut -c1-300
