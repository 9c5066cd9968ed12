#!/usr/bin/env bash
# the block's task list in shared memory (no global load a page), and the inputs polled for a sentinel instead of a
# counter (sent 1: no release fence, no counter round trip); FMA consumers, cw 4, nslot 8; the GPU test first
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
O=$OUT/call10
mkdir -p $O
timeout 100 python3 -m pytest -q -s -rf -m gpu tests/test_ws_chain.py > $O/pytest.log 2>&1; tail -3 $O/pytest.log
timeout 150 python3 -m floorline.native.ws_chain --layers 16 --mma 0 --nslot 8 --cw 4 --mode 0 1 --sent 0 1 --trace --out $O/ws_chain.jsonl 2>&1 | tee $O/ws_chain.log | cut -c1-220
