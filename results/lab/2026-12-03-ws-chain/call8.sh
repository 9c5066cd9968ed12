#!/usr/bin/env bash
# the consumers with independent accumulator chains (tensor cores: 4 chains at K 2048, 2 at 8192; FMA: 8 a page):
# one accumulator serialised every mma's latency; the GPU test, then both consumer forms, modes 0 and 1, traced
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
O=$OUT/call8
mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.mem --format=csv > $O/nvidia-smi.txt
timeout 100 python3 -m pytest -q -s -rf -m gpu tests/test_ws_chain.py > $O/pytest.log 2>&1; tail -3 $O/pytest.log
timeout 200 python3 -m floorline.native.ws_chain --layers 16 --mma 1 0 --nslot 12 8 --cw 4 --mode 0 1 --trace --out $O/ws_chain.jsonl 2>&1 | tee $O/ws_chain.log | cut -c1-220
