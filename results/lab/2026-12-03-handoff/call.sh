#!/usr/bin/env bash
# the attention's handoff by counters (NativeModel.handoff): its GPU test, then the step tuner's trial of it against
# the kernels' ends in four cells (one fresh process each; each record keeps native_handoff_step_tuning)
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
O=$OUT/call
mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.mem --format=csv > $O/nvidia-smi.txt
timeout 150 python3 -m pytest -q -s -rf -m gpu tests/test_gpu_native.py -k "handoff" > $O/pytest.log 2>&1
grep -E "handoff|passed|failed|Error" $O/pytest.log | cut -c1-200
for cell in "qwen3-8b 2048" "llama-3.2-1b 128" "qwen2.5-0.5b 128" "qwen2.5-7b 2048"; do
  set -- $cell
  timeout 120 python3 -m floorline run --model $1 --ctx $2 --mode native --output $O/native.jsonl > $O/run_$1.log 2>&1 || echo "run $1 rc=$?"
done
python3 - $O/native.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(f"{r['model']:13} ctx {r['ctx']:5} {r['step_ms_median']:.4f} GB/s {r['bw_patterns_gbps']['native']:.0f} handoff {r.get('native_handoff_used')} "
          f"o_merge {r.get('native_o_merge_used')} chunk {r.get('native_attn_chunk_used')} trials {json.dumps(r.get('native_handoff_step_tuning'))}")
PY
