#!/usr/bin/env bash
# the sources as kept (the clusters and the merge's tuning taken out; the CUDA chunks with Qwen3's q/k norm, which
# auto now takes for Qwen3 from 8192 positions): the CUDA attention's GPU tests, qwen3-8b against HF fp32 at ctx
# 16384, then `floorline run --mode native` (defaults) for qwen3-8b at ctx 16384 and 2048, one fresh process a cell
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
O=$OUT/call3
mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.mem --format=csv > $O/nvidia-smi.txt
timeout 300 python3 -m pytest -q -s -rf -m gpu tests/test_gpu_native.py -k "cuda_attention or (ctx_16384 and qwen3)" > $O/pytest.log 2>&1
grep -E "vs HF|passed|failed|Error" $O/pytest.log | cut -c1-300 | tail -12
for cell in "qwen3-8b 16384" "qwen3-8b 2048"; do
  set -- $cell
  timeout 150 python3 -m floorline run --model $1 --ctx $2 --mode native --output $O/native.jsonl > $O/run_$1_$2.log 2>&1 || { echo "run $1 $2 rc=$?"; tail -3 $O/run_$1_$2.log; }
done
python3 - $O/native.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(f"{r['model']:13} ctx {r['ctx']:5} {r['step_ms_median']:.4f} ms, floor {r['floor_ms_peak']:.3f} ({100 * r['fraction_of_floor_peak']:.1f}%) / "
          f"{r['floor_ms_measured']:.3f} at {r['bw_patterns_gbps']['native']:.0f} GB/s ({100 * r['fraction_of_floor_measured']:.1f}%); attn {r.get('native_attn')} "
          f"sha {r.get('source_sha256', '')[:16]}")
PY
