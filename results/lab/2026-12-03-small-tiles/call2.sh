#!/usr/bin/env bash
# the second call: GPU tests of the new candidates (attention chunks, small-hidden MLP tiles, the merge inside o),
# then the probe's cells with the merge inside o among the step tuner's choices
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
mkdir -p $OUT/call2
timeout 240 python3 -m pytest -q -s -rf -m gpu tests/test_gpu_native.py \
  -k "merge_inside or attention_chunks_the_step or fused_mlp or replays_real_tokens" > $OUT/call2/pytest.log 2>&1
grep -E "o_merge|fused mlp|passed|failed|Error" $OUT/call2/pytest.log | cut -c1-200 | tail -40
TAG=call2 CELLS="llama-3.2-1b:128 qwen2.5-0.5b:128 qwen2.5-1.5b:2048 qwen3-8b:2048 qwen2.5-7b:2048" \
  bash results/lab/2026-12-03-small-tiles/probe.sh
