#!/usr/bin/env bash
# The persistent layer kernel (native/persist.py), first GPU measurement: its GPU tests, then issue 38's cells with
# --native persist=auto (the step tuner times the per-kernel step and every persistent candidate, all in the record)
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
R=$OUT/persist; mkdir -p $R
t0=$(date +%s); left() { echo $(( ${BUDGET:-540} - ($(date +%s) - t0) )); }
fl() { timeout $(left) python3 -m floorline "$@"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv | tee $R/nvidia-smi.txt
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
timeout $(left) python3 -m pytest -q -s -rf -m gpu tests/test_gpu_native.py -k "persistent" > $R/pytest.log 2>&1
grep -E "vs the kernel|deadlock|passed|failed|Error|error" $R/pytest.log | cut -c1-300
echo "== tests done $(( $(date +%s) - t0 )) s"
for c in ${CELLS:-llama-3.2-1b:128 qwen2.5-0.5b:128 qwen2.5-1.5b:2048 llama-3.2-3b:2048}; do
  IFS=: read -r m x <<< "$c"
  fl run --model $m --ctx $x --mode native --native persist=auto --output $R/native.jsonl >> $R/run.log 2>&1
  echo "== $m $x done $(( $(date +%s) - t0 )) s"
done
python3 - $R <<'PY'
import json, sys
R = sys.argv[1]
for l in open(f"{R}/native.jsonl"):
    r = json.loads(l)
    print(f"{r['model']:13} ctx {r['ctx']:5} {r['step_ms_median']:.4f} ms floor@peak {r.get('floor_ms_peak',0):.3f} "
          f"{100*r.get('floor_ms_peak',0)/r['step_ms_median']:.1f}% persist {r.get('native_persist_used')} "
          f"valid {r.get('valid')}")
    print("   ", r.get("native_persist_step_tuning"))
PY
tail -5 $R/run.log
