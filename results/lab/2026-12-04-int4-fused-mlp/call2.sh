# the device call that made call2/ (one H200; $OUT is the call's output folder): the fused int4 MLP with its h sums
# by warp shuffles (call 1's shared-memory atomic was a CAS loop), kernel by kernel in the step, then in the tuner
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
d=results/lab/2026-12-04-int4-fused-mlp
timeout 150 python3 $d/profile_mlp.py llama-3.2-1b 2048 2>&1 | tee $OUT/profile_llama-3.2-1b.txt | grep -v Warning
timeout 100 python3 -m floorline run --model llama-3.2-1b --ctx 2048 --mode native --quant int4 --output $OUT/runs.jsonl \
  > $OUT/runs.log 2>&1
python3 -c "
import json
for l in open('$OUT/runs.jsonl'):
    r = json.loads(l); print(r['model'], r['ctx'], round(r['step_ms_median'], 4), r['measured_gbps'], r['native_int4_mlp_used'], r['native_int4_mlp_step_tuning'])"
