#!/usr/bin/env bash
# #38 baseline at HEAD 8b18a0c: native records, explain (graph, native) and the boundary probe for the small models
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
R=$OUT/baseline; mkdir -p $R
t0=$(date +%s); left() { echo $(( ${BUDGET:-540} - ($(date +%s) - t0) )); }
fl() { timeout $(left) python3 -m floorline "$@"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv | tee $R/nvidia-smi.txt
git rev-parse HEAD 2>/dev/null | tee $R/head.txt
for c in llama-3.2-1b:128 qwen2.5-0.5b:128 qwen2.5-1.5b:2048 llama-3.2-3b:2048; do
  IFS=: read -r m x <<< "$c"
  fl run --model $m --ctx $x --mode native --output $R/native.jsonl >> $R/run.log 2>&1
done
fl run --model llama-3.2-1b --ctx 2048 --mode native --quant int4 --output $R/native.jsonl >> $R/run.log 2>&1
echo "== runs done $(( $(date +%s) - t0 )) s"
for c in llama-3.2-1b:128 qwen2.5-0.5b:128 qwen2.5-1.5b:2048 llama-3.2-3b:2048; do
  IFS=: read -r m x <<< "$c"
  fl explain --model $m --ctx $x --mode graph,native --out $R/explain_${m}_$x > $R/explain_${m}_$x.log 2>&1
done
fl explain --model llama-3.2-1b --ctx 2048 --quant int4 --mode native --out $R/explain_llama-3.2-1b_2048_int4 > $R/explain_int4.log 2>&1
echo "== explain done $(( $(date +%s) - t0 )) s"
for c in llama-3.2-1b:128:none,all,qkv,attn,merge,o,mlp,lm_head qwen2.5-0.5b:128:none,all; do
  IFS=: read -r m x kinds <<< "$c"; IFS=, read -ra ks <<< "$kinds"
  for k in "${ks[@]}"; do
    [ $(left) -gt 40 ] || break
    w=$k; [ $k = none ] && w=""
    FLOORLINE_TRITON_STEP_TUNE=0 FLOORLINE_PROBE_NO_WAIT=$w fl run --model $m --ctx $x --mode native --format json \
      --output $R/probe_${m}_$k.jsonl >> $R/probe.log 2>&1
  done
done
echo "== probes done $(( $(date +%s) - t0 )) s"
python3 - $R <<'PY'
import json, sys, glob, os
R = sys.argv[1]
for f in sorted(glob.glob(f"{R}/native.jsonl")) + sorted(glob.glob(f"{R}/probe_*.jsonl")):
    for l in open(f):
        r = json.loads(l)
        print(f"{os.path.basename(f):28} {r['model']:13} ctx {r['ctx']:5} {r.get('quant') or 'bf16':5} {r['step_ms_median']:.4f} ms floor@peak {r.get('floor_ms_peak',0):.3f} {100*r.get('floor_ms_peak',0)/r['step_ms_median']:.1f}% valid {r.get('valid')}")
PY
for f in $R/explain_*.log; do echo "== $f"; sed "s/ *$//" $f | grep -v "^$" | grep -v "^wrote" | cut -c1-140; done
cd $OUT && tar czf baseline.tgz baseline && rm -rf baseline
