#!/usr/bin/env bash
# Every GPU check of floorline in one call, for the H200 device machine (or any CUDA machine with torch +
# transformers): the GPU-marked tests, then `floorline run --mode all` for qwen2.5-7b and llama-3.1-8b at ctx 2048
# and 8192. Results and logs go to $OUT (default out/gpu_check); a short table is printed last.
#   scripts/gpu_check.sh            the full check
#   scripts/gpu_check.sh quick      one model, ctx 2048 (a smoke test)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu_check}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# optional libraries carried as wheels (../shared/device/fetch_wheels.sh); none is needed by the core checks
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,power.draw --format=csv | tee "$OUT/nvidia-smi.txt"
python3 -c 'import torch, transformers, triton; print("torch", torch.__version__, "transformers", transformers.__version__, "triton", triton.__version__)'

echo "== GPU tests"
python3 -m pytest -q -m gpu tests 2>&1 | tee "$OUT/pytest_gpu.log"

if [ "${1:-full}" = quick ]; then models=(qwen2.5-7b); ctxs=2048; else models=(qwen2.5-7b llama-3.1-8b); ctxs=2048,8192; fi
for m in "${models[@]}"; do
  echo "== floorline run --model $m --ctx $ctxs --mode all"
  python3 -m floorline run --model "$m" --ctx "$ctxs" --mode all --output "$OUT/results.jsonl" --format md 2>&1 \
    | tee -a "$OUT/run.log"
done

echo "== summary ($(( $(date +%s) - t0 )) s wall)"
python3 - "$OUT/results.jsonl" <<'PY'
import sys
from floorline import display, records
recs = records.read(sys.argv[1])
r0 = recs[0]
print(f"{r0['device_name']} driver {r0.get('driver_version')}, copy {r0['measured_gbps']:.0f} GB/s measured, "
      f"peak {r0['peak_gbps']} GB/s; torch {r0['torch_version']}, transformers {r0['transformers_version']}")
print(display.markdown(recs))
PY
