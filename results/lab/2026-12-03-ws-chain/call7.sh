#!/usr/bin/env bash
# the tensor-core consumers (mma.m16n8k16 over 16 virtual rows a page, ldmatrix of rotated 16-B chunks, the input as
# bf16 hi + lo B columns) against the FMA consumers, in one process a side; modes 0 / 1 / 2 for the mma side; traced
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
O=$OUT/call7
mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.mem --format=csv > $O/nvidia-smi.txt
timeout 100 python3 -m pytest -q -s -rf -m gpu tests/test_ws_chain.py > $O/pytest.log 2>&1; tail -3 $O/pytest.log
timeout 150 python3 -m floorline.native.ws_chain --layers 16 --mma 1 --nslot 12 8 --cw 4 --mode 0 1 2 --trace --out $O/ws_chain.jsonl 2>&1 | tee $O/ws_mma.log | cut -c1-220
timeout 100 python3 -m floorline.native.ws_chain --layers 16 --mma 1 --nslot 12 --cw 6 --mode 0 --trace --out $O/ws_chain.jsonl 2>&1 | tee $O/ws_mma6.log | cut -c1-220
timeout 100 python3 -m floorline.native.ws_chain --layers 16 --mma 0 --nslot 8 --cw 4 --mode 0 --out $O/ws_chain.jsonl 2>&1 | tee $O/ws_fma.log | cut -c1-220
