#!/usr/bin/env bash
# the chain with the RMSNorm folded into the staging (x * w staged, 1 / rms on the outputs: one pass, one barrier),
# the next page's task read one page ahead, and the inputs in registers where K is 2048; each cell once more with
# the kernel's clock stamps (where a stage's time goes); modes 0 (the chain), 1 (no waits), 2 (the stream alone)
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
O=$OUT/call4
mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.mem --format=csv > $O/nvidia-smi.txt
timeout 200 python3 -m floorline.native.ws_chain --layers 16 --nslot 12 8 --cw 4 8 --mode 0 1 2 --trace --out $O/ws_chain.jsonl 2>&1 | tee $O/ws_chain16.log | cut -c1-220
