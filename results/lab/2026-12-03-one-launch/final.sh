#!/usr/bin/env bash
# the one launch with the chunk and merge tasks letting o launch at their start (early): its GPU test on one model,
# the step tuner's trials in qwen3-8b ctx 2048, and `explain` of qwen3-8b ctx 2048 with each form forced (where the time goes)
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
O=$OUT/final
mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.mem --format=csv > $O/nvidia-smi.txt
timeout 100 python3 -m pytest -q -s -rf -m gpu tests/test_gpu_native.py -k "one_launch_matches and qwen3-0.6b" > $O/pytest.log 2>&1
grep -E "early|passed|failed|Error" $O/pytest.log | cut -c1-200
for cell in "qwen3-8b 2048"; do
  set -- $cell
  timeout 150 python3 -m floorline run --model $1 --ctx $2 --mode native --output $O/native.jsonl > $O/run_$1.log 2>&1 || echo "run $1 rc=$?"
done
python3 - $O/native.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(f"{r['model']:13} ctx {r['ctx']:5} {r['step_ms_median']:.4f} GB/s {r['bw_patterns_gbps']['native']:.0f} used {r.get('native_qkv_attn_used')}")
    print("   ", json.dumps(r.get("native_qkv_attn_step_tuning")))
PY
i=0
for f in "off" "chunks + merge w8" "chunks + merge w8 early" "q/k/v 32x256 + chunks + merge w8 early"; do
  i=$((i+1))
  timeout 85 python3 results/lab/2026-12-03-one-launch/forced_explain.py "$f" explain --model qwen3-8b --ctx 2048 \
    --mode native --out $O/explain_$i > $O/explain_$i.log 2>&1 || echo "explain $f: exit $?"
  echo "== $f"; sed "s/ *$//" $O/explain_$i.log | grep -v "^$" | grep -v "^wrote\|─\|Warn\|warn" | cut -c1-120 | tail -22
done
