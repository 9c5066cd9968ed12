# the device call that made call3/ (one H200; $OUT is the call's output folder), at the final kernel sources: the
# ctx-2048 no-regression cells (bf16 and int4, qwen2.5-7b and llama-3.1-8b) and three of the small models' cells, one
# fresh process a cell through the suite
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
nvidia-smi > "$OUT/nvidia-smi.txt"
SUITE_ONLY="qwen2.5-7b:native llama-3.1-8b:native qwen2.5-7b:native:int4 llama-3.1-8b:native:int4 \
llama-3.2-1b:native llama-3.2-3b:native llama-3.2-1b:native:int4" SUITE_BUDGET=540 OUT=$OUT timeout 560 \
  bash scripts/gpu_check.sh suite > /dev/null 2>&1
python3 - "$OUT"/suite/*.jsonl <<'PY'
import json, sys
for f in sys.argv[1:]:
    for line in open(f):
        r = json.loads(line)
        print(r["model"], r["ctx"], r.get("quant"), round(r["step_ms_median"], 4), round(r.get("measured_gbps") or 0),
              "attn", r.get("native_attn"), "o_merge", r.get("native_o_merge_used"), "early",
              r.get("native_pdl_early_used"))
        print("  attn", json.dumps(r.get("native_attn_step_tuning")))
PY
