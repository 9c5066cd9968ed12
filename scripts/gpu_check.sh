#!/usr/bin/env bash
# Every GPU check of floorline, for the H200 device machine (or any CUDA machine with torch + transformers).
# Results and logs go to $OUT (default out/gpu_check); a short table is printed last.
#   scripts/gpu_check.sh [STAGE...]     stages, in order (default: all of them)
#     tests   the gpu-marked pytest tests
#     run     floorline run --mode all: qwen2.5-7b and llama-3.1-8b at ctx 2048 and 8192        (issue: core)
#     ab      floorline ab qwen2.5-7b ctx 2048: eager vs graph and static vs graph, N = 10     (issue: launch overhead)
#     explain floorline explain qwen2.5-7b ctx 2048: eager, static, graph                        (issue: launch overhead)
#     grid    floorline sweep: the study's default grid (3 models x 4 contexts x eager, graph), one fresh process
#             per cell, on every GPU of the machine (--gpus), then floorline report              (issue: sweep/report)
#     quick   one run cell (qwen2.5-7b, ctx 2048, all modes): a smoke test
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu_check}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# optional libraries carried as wheels (../shared/device/fetch_wheels.sh); none is needed by these stages
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(tests run ab explain grid)
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,power.draw --format=csv | tee "$OUT/nvidia-smi.txt"
python3 -c 'import torch, transformers, triton; print("torch", torch.__version__, "transformers", transformers.__version__, "triton", triton.__version__)'
fl() { python3 -m floorline "$@"; }

for stage in "${stages[@]}"; do
  echo "== $stage ($(( $(date +%s) - t0 )) s)"
  case $stage in
    tests) python3 -m pytest -q -m gpu tests 2>&1 | tee "$OUT/pytest_gpu.log" ;;
    run|quick)
      if [ "$stage" = quick ]; then models=(qwen2.5-7b); ctxs=2048; else models=(qwen2.5-7b llama-3.1-8b); ctxs=2048,8192; fi
      for m in "${models[@]}"; do
        fl run --model "$m" --ctx "$ctxs" --mode all --output "$OUT/results.jsonl" --format md 2>&1 | tee -a "$OUT/run.log"
      done ;;
    ab)
      for pair in "eager graph" "static graph"; do
        set -- $pair
        fl ab --model qwen2.5-7b --ctx 2048 --a "$1" --b "$2" --sessions 10 --output "$OUT/ab.jsonl" 2>&1 | tee -a "$OUT/ab.log"
      done ;;
    explain)
      fl explain --model qwen2.5-7b --ctx 2048 --mode eager,static,graph --out "$OUT" 2>&1 | tee "$OUT/explain.log" ;;
    grid)
      gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd, -)
      fl sweep --gpus "$gpus" --timeout 600 --output "$OUT/grid.jsonl" 2>&1 | grep -v '━' | tee "$OUT/grid.log"
      fl report "$OUT/grid.jsonl" --out "$OUT/grid_report" 2>&1 | tee -a "$OUT/grid.log" ;;
    summary) ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done

echo "== summary ($(( $(date +%s) - t0 )) s wall)"
python3 - "$OUT" <<'PY'
import os, sys
from floorline import display, records
out = sys.argv[1]
p = os.path.join(out, "results.jsonl")
if os.path.exists(p):
    recs = records.read(p)
    r0 = recs[0]
    print(f"{r0['device_name']} driver {r0.get('driver_version')}, copy {r0['measured_gbps']:.0f} GB/s measured, "
          f"peak {r0['peak_gbps']} GB/s; torch {r0['torch_version']}, transformers {r0['transformers_version']}")
    print(display.markdown([r for r in recs if r.get("kind", "cell") == "cell"]))
p = os.path.join(out, "grid.jsonl")
if os.path.exists(p):
    recs = records.read(p)
    print(f"grid: {sum(bool(r.get('valid')) for r in recs)}/{len(recs)} cells valid")
    print(display.markdown(recs))
p = os.path.join(out, "ab.jsonl")
if os.path.exists(p):
    from floorline.ab import headline
    for s in [r for r in records.read(p) if r.get("kind") == "ab_summary"]:
        print(f"{s['model']} ctx {s['ctx']}: {headline(s)}; gmean {s['ratio_gmean']:.3f}x {s['ratio_gmean_ci95']}")
p = os.path.join(out, "explain.jsonl")
if os.path.exists(p):
    print("| mode | wall ms | busy ms | floor ms | kernel excess ms | idle gaps ms | kernels/step | host ms | attn ms | attn GB/s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in records.read(p):
        ag = f"{r['attention_gbps']:.0f}" if r["attention_gbps"] else "-"
        print(f"| {r['mode']} | {r['wall_ms']:.3f} | {r['gpu_busy_ms']:.3f} | {r['floor_ms_measured']:.3f} | "
              f"{r['kernel_excess_ms']:.3f} | {r['idle_gaps_ms']:.3f} | {r['kernels_per_step']:.0f} | "
              f"{r['host_enqueue_ms']:.3f} | {r['attention_ms']:.3f} | {ag} |")
PY
