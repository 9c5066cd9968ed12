#!/usr/bin/env bash
# the warp-specialised GEMV chain, a count a warp and stage, the inputs staged in one round trip, residuals read early;
# with the diagnostics (1: no dependency waits, 2: the stream alone); then Nsight Compute of one launch of each mode.
# The first call's text:
# (native/ws_chain.py): llama-3.2-1b's q/k/v, o, gate_up, down over 16 and 4 layers,
# checked against fp32 torch, then timed (graph replays) for ring depths and consumer warps; then `explain` of the
# product's step, llama-3.2-1b ctx 128, for its per-layer GEMV times in the same lease
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
O=$OUT/call2
mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.mem --format=csv > $O/nvidia-smi.txt
timeout 150 python3 -m floorline.native.ws_chain --layers 16 --nslot 12 8 --cw 4 8 --mode 0 1 2 --out $O/ws_chain.jsonl 2>&1 | tee $O/ws_chain16.log | cut -c1-220
timeout 60 python3 -m floorline.native.ws_chain --layers 4 --nslot 12 --cw 8 --mode 0 1 2 --out $O/ws_chain.jsonl 2>&1 | tee $O/ws_chain4.log | cut -c1-220
for m in 0 2; do
  timeout 150 ncu --clock-control none -k regex:ws_chain -c 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section LaunchStats \
    python3 -m floorline.native.ws_chain --layers 16 --nslot 12 --cw 8 --mode $m --samples 3 > $O/ncu_mode$m.log 2>&1 || echo "ncu $m: exit $?"
  grep -E "Duration|Memory Throughput|DRAM Throughput|Registers|Stall|Issued Warp|No Eligible|Active Warps|Warp Cycles" $O/ncu_mode$m.log | head -30
done
