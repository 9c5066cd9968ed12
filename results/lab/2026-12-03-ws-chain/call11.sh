#!/usr/bin/env bash
# one release a block and stage (thread 0 after the consumers' barrier) against one a warp and stage; modes 0 and 1

set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
O=$OUT/call11
mkdir -p $O
timeout 100 python3 -m pytest -q -s -rf -m gpu tests/test_ws_chain.py > $O/pytest.log 2>&1; tail -3 $O/pytest.log
timeout 150 python3 -m floorline.native.ws_chain --layers 16 --mma 0 --nslot 8 --cw 4 --mode 0 1 --one-fence 0 1 --trace --out $O/ws_chain.jsonl 2>&1 | tee $O/ws_chain.log | cut -c1-220
