#!/usr/bin/env bash
# the figures of record at the final sources: issue 38's five cells, qwen3-8b bf16 and int4 (issue 39), and the 7-8B
# bf16 cells (no regression), one fresh process each, through the suite (records appended to suite/<group>.jsonl)
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
OUT=$OUT/final SUITE_GROUPS=native,small,today SUITE_BUDGET=520 \
  SUITE_ONLY="qwen2.5-7b:native llama-3.1-8b:native llama-3.2-1b:native qwen2.5-0.5b:native qwen2.5-1.5b:native llama-3.2-3b:native qwen3-8b:native" \
  bash scripts/gpu_check.sh suite
python3 - $OUT/final/suite <<'PY'
import json, sys, glob
for f in sorted(glob.glob(f"{sys.argv[1]}/*.jsonl")):
    for l in open(f):
        r = json.loads(l)
        print(f"{r['model']:13} ctx {r['ctx']:5} {r.get('quant') or 'bf16':5} {r['step_ms_median']:.4f} "
              f"attn {r.get('native_attn_chunk_used')} o_merge {r.get('native_o_merge_used')} "
              f"mlp {json.dumps({k: min(v, key=v.get) for k, v in (r.get('native_mlp_step_tuning') or {}).items()})}")
PY
