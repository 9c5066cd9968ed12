#!/usr/bin/env bash
# the attention's chunks as one thread-block cluster a KV head (attn_cuda.cluster_chunks), and the CUDA chunks with
# Qwen3's q/k norm: their GPU tests, then `floorline run --mode native` with the default (auto: the step tuner times
# the clusters beside the Triton chunks; the record keeps the trials) and with attn_kernel=triton (the step before),
# one fresh process a cell
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
O=$OUT/call1
mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.mem --format=csv > $O/nvidia-smi.txt
timeout 240 python3 -m pytest -q -s -rf -m gpu tests/test_gpu_native.py -k "attention" > $O/pytest.log 2>&1
grep -E "passed|failed|Error|error" $O/pytest.log | cut -c1-300 | tail -15
for cell in "qwen3-8b 2048 auto" "qwen3-8b 2048 triton" "llama-3.2-1b 128 auto" "qwen2.5-7b 2048 auto" "qwen2.5-0.5b 128 auto" "qwen3-8b 2048 auto"; do
  set -- $cell
  timeout 150 python3 -m floorline run --model $1 --ctx $2 --mode native --native attn_kernel=$3 --output $O/native.jsonl > $O/run_$1_$3.log 2>&1 || { echo "run $1 $3 rc=$?"; tail -3 $O/run_$1_$3.log; }
done
python3 - $O/native.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    st = {k: r.get(f"native_{k}_step_tuning") for k in ("attn", "o_merge")}
    print(f"{r['model']:13} ctx {r['ctx']:5} {r.get('native_attn_kernel')} {r['step_ms_median']:.4f} GB/s {r['bw_patterns_gbps']['native']:.0f} "
          f"attn {r.get('native_attn')} o_merge {r.get('native_o_merge_used')}")
    print("   attn trials", json.dumps(st.get("attn")), "o_merge", json.dumps(st.get("o_merge")))
PY
