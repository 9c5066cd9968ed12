#!/usr/bin/env bash
# Every GPU check of floorline in one call, for the H200 device machine (or any CUDA machine with torch +
# transformers + triton). Results and logs go to $OUT (default out/gpu_check); a short table is printed last.
#   scripts/gpu_check.sh [STAGE...]     (default: check tests suite)
#     check     `floorline check`: mode native's kernels against their references on this GPU, then timed alone
#     tests     the gpu-marked pytest tests (native ones in one process, each quant backend in its own: a library that
#               faults poisons its CUDA context); TESTS_K narrows them (pytest -k)
#     suite     the figures of record, scripts/h200_suite.toml (SUITE_GROUPS: some groups; SUITE_ONLY: some
#               model:mode[:quant] entries; SUITE_SRC: other trees' src/ folders measured beside this one, interleaved;
#               SUITE_BUDGET: seconds)
#     quant     `floorline quant` on qwen2.5-7b ctx 2048, every backend here, with the kernel chain; the libraries
#               come as wheels in .whl/ (../shared/device/fetch_wheels.sh)
#     endpoint  a random-weight qwen2.5-7b directory served by `transformers serve` on 127.0.0.1 and measured by
#               `floorline endpoint`, then `floorline run` on the same weights (scripts/serve_wheels.sh fills .whl/)
#     tp        two GPUs (nvidia-h200-x2): `floorline allreduce`, native and HF's tensor parallelism
#     timeline  scripts/timeline.py (when each stamped kernel's programs start, wait and end in the native step) for
#               TIMELINE_CELLS, space-separated model:ctx[:native options] (default llama-3.2-1b:128
#               qwen2.5-0.5b:128:attn_kernel=cuda qwen3-8b:2048)
#     ncu       Nsight Compute on one plain native step of each NCU_CELLS (model:ctx[:native options]; default
#               qwen3-8b:2048), the kernels NCU_KERNELS names (a regex; default the attention's chunks and merge: attn),
#               NCU_COUNT launches of them (default 4), each alone with its caches flushed: speed of light, occupancy,
#               warp states and the stall reasons per issued instruction; a text file a cell
#     explain   `floorline explain --mode native` (a step's kernels, busy against wall, per place in the layer) for
#               EXPLAIN_CELLS, space-separated model:ctx[:quant] (default: the small models' cells and qwen3-8b's)
# PACK=FILE.tgz: everything under $OUT packed into that one file at the end (the device machine returns 8 files a call)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu_check}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then  # optional libraries carried as wheels
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
export MAX_JOBS=${MAX_JOBS:-$(nproc)}  # exllamav2 JIT-builds its extension on first import
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(check tests suite)
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,power.draw --format=csv \
  | tee "$OUT/nvidia-smi.txt"
python3 -c 'import torch, transformers, triton; print("torch", torch.__version__, "transformers", transformers.__version__, "triton", triton.__version__)'
fl() { python3 -m floorline "$@"; }

for stage in "${stages[@]}"; do
  echo "== $stage ($(( $(date +%s) - t0 )) s)"
  case $stage in
    check)
      fl check --output "$OUT/check.jsonl" 2>&1 | tee "$OUT/check.log" ;;
    tests)
      python3 -m pytest -q -s -rf -m gpu tests --ignore tests/test_gpu_quant.py ${TESTS_K:+-k "$TESTS_K"} \
        > "$OUT/pytest_gpu.log" 2>&1
      grep -E "vs HF fp32|vs torch|passed|skipped|failed|FAILED|Error" "$OUT/pytest_gpu.log" | cut -c1-300
      if [ -z "${TESTS_K:-}" ]; then
        for b in nf4 exllamav2 marlin tinygemm gemlite "int4 and not tinygemm and not gemlite" run_records; do
          python3 -m pytest -q -m gpu tests/test_gpu_quant.py -k "$b" 2>&1 | tee -a "$OUT/pytest_quant.log" | tail -1
        done
      fi ;;
    suite)
      python3 scripts/suite.py scripts/h200_suite.toml --out "$OUT/suite" ${SUITE_GROUPS:+--groups "$SUITE_GROUPS"} \
        ${SUITE_ONLY:+--only "$SUITE_ONLY"} ${SUITE_BUDGET:+--budget "$SUITE_BUDGET"} ${SUITE_SRC:+--src $SUITE_SRC} \
        > "$OUT/suite.log" 2>&1
      grep -v "^|" "$OUT/suite.log" ;;
    quant)
      fl quant --model qwen2.5-7b --ctx 2048 --mode eager,graph --kernels --timeout 900 --output "$OUT/quant.jsonl" \
        > "$OUT/quant.log" 2>&1 ;;
    endpoint)
      d=$OUT/qwen2.5-7b-random
      if ! python3 -c 'import fastapi, uvicorn, openai, pydantic' 2>/dev/null; then
        echo "endpoint: transformers serve needs fastapi, uvicorn, openai, pydantic: scripts/serve_wheels.sh"; continue
      fi
      [ -f "$d/tokenizer.json" ] || python3 -m floorline.serve.servedir --model qwen2.5-7b --out "$d" --device cuda
      port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
      HF_HUB_OFFLINE=1 python3 -m transformers.cli.transformers serve "$d" --host 127.0.0.1 --port "$port" \
        --device cuda --dtype bfloat16 > "$OUT/serve.log" 2>&1 &
      serve_pid=$!
      for _ in $(seq 300); do  # up to ~5 min for 15 GB of safetensors
        python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), timeout=1)" 2>/dev/null && break
        kill -0 "$serve_pid" 2>/dev/null || break
        sleep 1
      done
      fl endpoint --url "http://127.0.0.1:$port/v1" --model "$d" --served-model "$d" --ctx 2048 --sessions 5 \
        --steps 64 --output "$OUT/endpoint.jsonl" > "$OUT/endpoint.log" 2>&1
      kill "$serve_pid"; wait "$serve_pid" 2>/dev/null
      fl run --model "$d" --ctx 2048 --mode eager,graph,native --output "$OUT/endpoint.jsonl" >> "$OUT/endpoint.log" 2>&1 ;;
    tp)
      if [ "$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)" -lt 2 ]; then echo "tp: needs 2 GPUs"; continue; fi
      export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # no NVLink multicast
      for m in qwen2.5-7b llama-3.1-8b; do
        fl allreduce --tp 2 --model "$m" --backends nccl,symm --output "$OUT/tp.jsonl" >> "$OUT/tp.log" 2>&1
        for b in nccl symm; do
          fl run --model "$m" --ctx 2048,16384 --mode native --tp 2 --allreduce "$b" --output "$OUT/tp.jsonl" \
            >> "$OUT/tp.log" 2>&1
        done
        fl run --model "$m" --ctx 2048 --mode eager,graph --tp 2 --output "$OUT/tp.jsonl" >> "$OUT/tp.log" 2>&1
      done ;;
    timeline)
      for cell in ${TIMELINE_CELLS:-llama-3.2-1b:128 qwen2.5-0.5b:128:attn_kernel=cuda qwen3-8b:2048}; do
        IFS=: read -r m c opts <<< "$cell"
        python3 scripts/timeline.py "$m" --ctx "$c" --native "${opts:-}" --out "$OUT/timeline" \
          2>> "$OUT/timeline.log" | tee -a "$OUT/timeline.txt"
      done ;;
    ncu)
      for cell in ${NCU_CELLS:-qwen3-8b:2048}; do
        IFS=: read -r m c opts <<< "$cell"
        f="$OUT/ncu_${m}_ctx${c}.txt"
        ncu --clock-control none --profile-from-start off --graph-profiling node -k "regex:${NCU_KERNELS:-attn}" \
          --launch-count "${NCU_COUNT:-4}" --section SpeedOfLight --section Occupancy --section WarpStateStats \
          --section SchedulerStats --section LaunchStats \
          --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
          python3 scripts/timeline.py "$m" --ctx "$c" --native "${opts:-}" --out "$OUT/ncu" --replays 2 --profile \
          > "$f" 2>&1 || echo "ncu $cell: exit $?"
        echo "== ncu $cell"
        grep -E "^  [A-Za-z_0-9]*attn|DRAM Throughput|Duration|Registers Per|Achieved Occupancy|Grid Size|No Eligible|issue_stalled_(long|short|wait|barrier|math|mio|lg|no_inst)" \
          "$f" | head -60
      done ;;
    explain)
      mkdir -p "$OUT/explain"
      for cell in ${EXPLAIN_CELLS:-llama-3.2-1b:128 qwen2.5-0.5b:128 qwen2.5-1.5b:2048 llama-3.2-3b:2048 \
                    llama-3.2-1b:2048:int4 qwen3-8b:2048}; do
        IFS=: read -r m c q <<< "$cell"
        name="${m}_ctx${c}${q:+_$q}"
        fl explain --model "$m" --ctx "$c" --quant "${q:-none}" --mode native --out "$OUT/explain/$name" \
          > "$OUT/explain/$name.log" 2>&1 || echo "explain $cell: exit $?"
      done ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done

echo "== summary ($(( $(date +%s) - t0 )) s wall)"
[ -f "$OUT/check.log" ] && grep -E "kernels match|WRONG" "$OUT/check.log"
for f in quant endpoint tp; do
  [ -f "$OUT/$f.jsonl" ] && python3 -m floorline report "$OUT/$f.jsonl" --out "$OUT/${f}_report" > /dev/null 2>&1 \
    && echo "$f: $OUT/${f}_report/report.md"
done
[ -f "$OUT/suite.log" ] && grep "^|" "$OUT/suite.log"
for f in "$OUT"/explain/*.log; do  # each cell's line of the explain table: wall, busy, floor, kernels a step
  [ -f "$f" ] && echo "explain $(basename "$f" .log): $(grep -E "^ *[0-9]+ +native " "$f" | tr -s ' ')"
done
[ -n "${PACK:-}" ] && tar czf "$PACK" -C "$OUT" . && echo "packed $OUT into $PACK"
exit 0
