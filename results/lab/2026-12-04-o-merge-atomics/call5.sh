# the device call that made call5/ (one H200; $OUT is the call's output folder): the probe of o_merge's fp32 atomics
# (probe.py, with probe.diff applied to the tree of commit 469a2dd: o_merge.PROBE_STORE) on the three cells that keep
# the merge inside o
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi > "$OUT/nvidia-smi.txt"
timeout 400 python3 results/lab/2026-12-04-o-merge-atomics/probe.py llama-3.2-1b:128 qwen2.5-0.5b:128 \
  qwen2.5-1.5b:2048 > "$OUT/probe.txt" 2> "$OUT/probe.log"
cat "$OUT/probe.txt"; tail -c 300 "$OUT/probe.log" | tail -2 | cut -c1-200
