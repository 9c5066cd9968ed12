#!/usr/bin/env bash
# `floorline explain --mode native` of issue 38's bf16 cells at the final sources: kernels a step, busy against wall,
# each kernel's us a call
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
R=$OUT/explain; mkdir -p $R
for c in llama-3.2-1b:128 qwen2.5-0.5b:128 qwen2.5-1.5b:2048 llama-3.2-3b:2048; do
  IFS=: read -r m x <<< "$c"
  timeout 90 python3 -m floorline explain --model $m --ctx $x --mode native --out $R/explain_${m}_$x \
    > $R/explain_${m}_$x.log 2>&1 || echo "$c: exit $?"
done
for f in $R/explain_*.log; do echo "== $f"; sed "s/ *$//" $f | grep -v "^$" | grep -v "^wrote\|─\|Warn\|warn" | cut -c1-120; done
