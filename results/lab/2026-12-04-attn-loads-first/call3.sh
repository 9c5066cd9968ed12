# the device call that made call3/ (one H200; $OUT is the call's output folder), at commit 484dfcc with o_merge's AHEAD
# (this page's o_merge.py): probe3.py, the merge inside o with more tiles in flight, on four cells
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
nvidia-smi > "$OUT/nvidia-smi.txt"
timeout 560 python3 results/lab/2026-12-04-attn-loads-first/probe3.py qwen3-8b:2048 llama-3.2-1b:128 \
  llama-3.1-8b:2048 qwen2.5-1.5b:2048 > "$OUT/probe3.txt" 2> "$OUT/probe3.log"
cat "$OUT/probe3.txt"; tail -c 300 "$OUT/probe3.log" | cut -c1-300
