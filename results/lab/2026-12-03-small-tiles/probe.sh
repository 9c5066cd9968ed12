#!/usr/bin/env bash
# smaller attention chunks and MLP tiles with more bytes in flight, both chosen by the step tuner: issue 38's cells,
# issue 39's qwen3-8b and qwen2.5-7b (no-regression) with `floorline run --mode native`, one fresh process a cell;
# each record keeps every candidate's step time (native_attn_step_tuning, native_mlp_step_tuning)
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
R=$OUT/${TAG:-probe}; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv | tee $R/nvidia-smi.txt
for c in ${CELLS:-llama-3.2-1b:128 qwen2.5-0.5b:128 qwen2.5-1.5b:2048 llama-3.2-3b:2048 qwen3-8b:2048 llama-3.2-1b:2048:int4 qwen2.5-7b:2048}; do
  IFS=: read -r m x q <<< "$c"
  timeout 170 python3 -m floorline run --model $m --ctx $x --mode native ${q:+--quant $q} ${NATIVE:+--native $NATIVE} \
    --output $R/native.jsonl >> $R/run.log 2>&1 || echo "$c: exit $?"
done
python3 - $R <<'PY'
import json, sys
for l in open(f"{sys.argv[1]}/native.jsonl"):
    r = json.loads(l)
    print(f"{r['model']:13} ctx {r['ctx']:5} {r.get('quant') or 'bf16':5} {r['step_ms_median']:.4f} ms "
          f"floor@peak {r['floor_ms_peak']:.3f} bw {r.get('measured_gbps'):.0f} %meas {100*r['fraction_of_floor_measured']:.1f} attn {r.get('native_attn')} "
          f"valid {r.get('valid')} src {r.get('source_sha256')}")
    print("    attn", r.get("native_attn_step_tuning"))
    print("    mlp ", r.get("native_mlp_step_tuning"))
    print("    o_merge", r.get("native_o_merge_used"), r.get("native_o_merge_step_tuning"))
PY
tail -3 $R/run.log
