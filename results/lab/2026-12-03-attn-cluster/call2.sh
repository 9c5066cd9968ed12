#!/usr/bin/env bash
# call 1's clusters with CTAs of 4 warps as well (two an SM), the merge's launches tuned in the step (their trials in
# native_attn_step_tuning), and the CUDA chunks with Qwen3's q/k norm: the GPU
# tests of both, then `floorline run --mode native`: qwen3-8b ctx 2048 auto (the tuner's trials) and cuda, ctx 16384
# triton against cuda (which auto might take for Qwen3 at long caches), qwen2.5-7b ctx 2048 auto; a fresh process a cell
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
O=$OUT/call2
mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.mem --format=csv > $O/nvidia-smi.txt
timeout 240 python3 -m pytest -q -s -rf -m gpu tests/test_gpu_native.py -k "clusters_and_qk_norm or every_merge_launch" > $O/pytest.log 2>&1
grep -E "passed|failed|Error|error" $O/pytest.log | cut -c1-300 | tail -15
for cell in "qwen3-8b 2048 auto" "qwen3-8b 2048 cuda" "qwen3-8b 16384 triton" "qwen3-8b 16384 cuda" "qwen2.5-7b 2048 auto"; do
  set -- $cell
  timeout 150 python3 -m floorline run --model $1 --ctx $2 --mode native --native attn_kernel=$3 --output $O/native.jsonl > $O/run_$1_$2_$3.log 2>&1 || { echo "run $1 $3 rc=$?"; tail -3 $O/run_$1_$2_$3.log; }
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
