#!/usr/bin/env bash
# the warp-specialised GEMV chain (native/ws_chain.py): llama-3.2-1b's q/k/v, o, gate_up, down over 16 and 4 layers,
# checked against fp32 torch, then timed (graph replays) for ring depths and consumer warps; then `explain` of the
# product's step, llama-3.2-1b ctx 128, for its per-layer GEMV times in the same lease
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
O=$OUT/call1
mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.mem --format=csv > $O/nvidia-smi.txt
timeout 150 python3 -m floorline.native.ws_chain --layers 16 --out $O/ws_chain.jsonl 2>&1 | tee $O/ws_chain16.log | cut -c1-220
timeout 60 python3 -m floorline.native.ws_chain --layers 4 --nslot 12 --cw 4 8 --out $O/ws_chain.jsonl 2>&1 | tee $O/ws_chain4.log | cut -c1-220
timeout 120 python3 -m floorline explain --model llama-3.2-1b --ctx 128 --mode native --out $O/explain > $O/explain.log 2>&1 || echo "explain: exit $?"
sed "s/ *$//" $O/explain.log | grep -v "^$" | grep -v "^wrote\|─\|Warn\|warn" | cut -c1-140 | tail -24
