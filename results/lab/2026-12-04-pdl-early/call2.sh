# the device call that made call2/ (one H200; $OUT is the call's output folder): the GPU tests of the early PDL switch
# (every role early against none: the same tokens; the runtime's replay test with the tuner's trials), llama-3.2-1b
# int4 ctx 2048 (the small group's last cell, one fresh process), then qwen2.5-0.5b ctx 128 A/B: pdl=auto (the tuner
# may trigger early) against pdl=after-wait (every kernel after its wait, as before), interleaved, fresh processes
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
nvidia-smi > "$OUT/nvidia-smi.txt"
TESTS_K="let_the_next_launch or replays_real_tokens" OUT=$OUT/tests timeout 280 bash scripts/gpu_check.sh tests | tail -3
timeout 80 python3 -m floorline run --model llama-3.2-1b --ctx 2048 --mode native --quant int4 \
  --output "$OUT/runs.jsonl" > "$OUT/runs.log" 2>&1
for round in 1 2; do
  for pdl in auto after-wait; do
    timeout 60 python3 -m floorline run --model qwen2.5-0.5b --ctx 128 --mode native --native pdl=$pdl \
      --output "$OUT/ab.jsonl" >> "$OUT/runs.log" 2>&1
  done
done
python3 - "$OUT/runs.jsonl" "$OUT/ab.jsonl" <<'PY'
import json, sys
for f in sys.argv[1:]:
    for line in open(f):
        r = json.loads(line)
        print(r["model"], r["ctx"], r.get("quant"), r.get("native_pdl"), round(r["step_ms_median"], 4),
              round(r.get("measured_gbps") or 0), "early", r.get("native_pdl_early_used"),
              json.dumps(r.get("native_pdl_early_step_tuning")))
PY
