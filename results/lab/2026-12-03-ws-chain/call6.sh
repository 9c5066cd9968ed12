#!/usr/bin/env bash
# the chain with the loader asking the L2 for pages `ahead` of the one it arms (DRAM keeps streaming while the ring
# is full and the consumers wait on a dependency): ahead 0 (none), 16, 24, 32, 48; traced
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
O=$OUT/call6
mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.mem --format=csv > $O/nvidia-smi.txt
timeout 200 python3 -m floorline.native.ws_chain --layers 16 --nslot 12 8 --cw 4 --ahead 0 16 24 32 48 --mode 0 --trace --out $O/ws_chain.jsonl 2>&1 | tee $O/ws_chain16.log | cut -c1-220
timeout 100 python3 -m floorline.native.ws_chain --layers 16 --nslot 12 --cw 4 6 --ahead 24 --mode 1 2 --out $O/ws_chain.jsonl 2>&1 | tee $O/ws_chain16_diag.log | cut -c1-220
