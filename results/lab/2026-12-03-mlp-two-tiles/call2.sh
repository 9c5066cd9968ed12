#!/usr/bin/env bash
# The fused MLP's first two tiles requested before the wait (mlp._mlp TWO) as step-tuner candidates beside the one-tile form: GPU tests, then
# one fresh `floorline run --mode native` a cell; each record's native_mlp_step_tuning holds both kinds, timed in the
# same process. Run from the repository root with OUT set.
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/nvidia-smi.txt"
timeout 150 python3 -m pytest -q -s -rf -m gpu tests/test_gpu_native.py -k fused_mlp > "$OUT/pytest.log" 2>&1
grep -E "passed|failed|FAILED|Error" "$OUT/pytest.log" | tail -5
for cell in "qwen3-8b 2048" "llama-3.2-1b 128" "qwen2.5-0.5b 128" "qwen2.5-1.5b 2048" "qwen2.5-7b 2048" "llama-3.1-8b 2048" "llama-3.2-3b 2048"; do
  set -- $cell
  timeout 130 python3 -m floorline run --model "$1" --ctx "$2" --mode native --output "$OUT/native.jsonl" \
    >> "$OUT/runs.log" 2>&1 || echo "$1 $2: exit $?"
done
python3 - "$OUT/native.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    trials = next(iter((r.get("native_mlp_step_tuning") or {}).values()), {})
    fixed = {k: v for k, v in trials.items() if not k.endswith("two")}
    two = {k: v for k, v in trials.items() if k.endswith("two")}
    bf = min(fixed, key=fixed.get) if fixed else None
    bd = min(two, key=two.get) if two else None
    print(f"| {r['model']} | {r['ctx']} | {r['step_ms_median']:.3f} | {r['measured_gbps']:.0f} | {bf} {fixed.get(bf)} | {bd} {two.get(bd)} |")
PY
