#!/usr/bin/env bash
# the chain with each consumer warp owning NSLOT / CW slots (no shared-memory poll for a slot's use: a warp's
# waits are always on its slots' current phase), the norm's weights read before the dependency wait; traced
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
O=$OUT/call5
mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.mem --format=csv > $O/nvidia-smi.txt
timeout 200 python3 -m floorline.native.ws_chain --layers 16 --nslot 12 --cw 3 4 6 --mode 0 1 2 --trace --out $O/ws_chain.jsonl 2>&1 | tee $O/ws_chain16.log | cut -c1-220
timeout 100 python3 -m floorline.native.ws_chain --layers 16 --nslot 8 --cw 4 --mode 0 --trace --out $O/ws_chain.jsonl 2>&1 | tee $O/ws_chain16_8.log | cut -c1-220
