#!/usr/bin/env bash
# the persistent layer kernel's final candidates: their GPU tests, then issue 38's two ctx-128 cells with
# --native persist=auto (the per-kernel step and each candidate timed in the whole step, the faster kept), and
# qwen3-8b ctx 2048 (issue 39's cell) the same way
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
R=$OUT/final; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv | tee $R/nvidia-smi.txt
timeout 200 python3 -m pytest -q -s -rf -m gpu tests/test_gpu_native.py -k "persistent" > $R/pytest.log 2>&1
grep -E "vs the kernel|deadlock|passed|failed|Error|error" $R/pytest.log | cut -c1-300
for c in llama-3.2-1b:128 qwen2.5-0.5b:128 qwen3-8b:2048; do
  IFS=: read -r m x <<< "$c"
  timeout 150 python3 -m floorline run --model $m --ctx $x --mode native --native persist=auto --output $R/native.jsonl \
    >> $R/run.log 2>&1
done
python3 - $R <<'PY'
import json, sys
for l in open(f"{sys.argv[1]}/native.jsonl"):
    r = json.loads(l)
    print(f"{r['model']:13} ctx {r['ctx']:5} {r['step_ms_median']:.4f} ms floor@peak {r['floor_ms_peak']:.3f} "
          f"persist {r.get('native_persist_used')} valid {r.get('valid')} sources {r.get('source_sha256')}")
    print("   ", r.get("native_persist_step_tuning"))
PY
tail -3 $R/run.log
