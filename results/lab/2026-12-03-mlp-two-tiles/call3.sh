#!/usr/bin/env bash
# This tree (SMALL_TWO in the fused MLP's candidates) against 6bb5284's src/ unpacked in ab_base/ (git archive 6bb5284
# src | tar -x -C ab_base), one lease, interleaved. Run from the repository root with OUT set.
set -uo pipefail
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/nvidia-smi.txt"
PYTHONPATH=$PWD/src python3 scripts/suite.py results/lab/2026-12-03-mlp-two-tiles/ab.toml --out "$OUT" --budget 520 \
  --src "$PWD/ab_base/src" > "$OUT/suite.log" 2>&1
grep "^|" "$OUT/suite.log"
python3 - "$OUT/ab.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    trials = next(iter((r.get("native_mlp_step_tuning") or {}).values()), {})
    best = min(trials, key=trials.get)
    print(r["model"], r["source_sha256"], round(r["step_ms_median"], 4), best, trials[best], trials.get("bj2 w4 x2 two"))
PY
