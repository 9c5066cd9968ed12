#!/usr/bin/env bash
# traces of the persistent layer kernel (trace.py) for issue 38's small models at ctx 128 (second round: one attention
# tile for the whole chunk, one MLP task an SM)
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
R=$OUT/trace; mkdir -p $R
D=results/lab/2026-12-03-persistent-step
W=per_sm=2,warps=8,bq=8,bo=8,whole=1
timeout 300 python3 $D/trace.py llama-3.2-1b 128 $R/llama-3.2-1b.json $W $W,bl=256 $W,mlp=1 $W,bl=256,mlp=1 \
  $W,bl=256,bj=1 $W,bl=256,mlp=1,bj=4 per_sm=2,warps=8,bq=16,bo=16,bl=256,mlp=1 per_sm=3,warps=4,bq=4,bo=4,whole=1,bl=256,mlp=1 \
  2>&1 | tee $R/llama.log
timeout 200 python3 $D/trace.py qwen2.5-0.5b 128 $R/qwen2.5-0.5b.json per_sm=2,warps=4,bq=8,bo=8,bk=128,bj=1 \
  per_sm=2,warps=4,bq=8,bo=8,bk=128,bj=1,bl=256 per_sm=2,warps=4,bq=8,bo=8,bk=128,bj=1,bl=256,mlp=1 \
  per_sm=2,warps=4,bq=8,bo=8,whole=1,bj=1,bl=256,mlp=1 per_sm=3,warps=4,bq=8,bo=8,bk=128,bj=1,bl=256 2>&1 | tee $R/qwen.log
