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
#     quant   floorline quant qwen2.5-7b ctx 2048, every backend here, eager + graph, with the kernel chain
#             (issue: quantised decode); the quant libraries come from .site/ or .whl/ (see below); QUANT_MODES and
#             QUANT_BACKENDS override the modes and backends
#     native  mode native: native-check then native-run (issue: native); on the device tool, whose calls stop at
#             600 s, run them as separate calls:
#       native-check  agreement with HF (qwen2.5-7b, llama-3.1-8b), the per-kernel GB/s table, explain (qwen2.5-7b
#                     ctx 2048, graph vs native, bf16 and int4)
#       native-run    floorline run --mode graph,compile,native at ctx 2048 and 16384 (bf16) and --mode graph,native
#                     --quant int4, for each of $NATIVE_MODELS (default: qwen2.5-7b llama-3.1-8b)
#     tp      issue #17, needs 2 GPUs (nvidia-h200-x2): tp-allreduce (floorline allreduce, nccl and symm, fp32 and
#             bf16), tp-native (native TP=1, TP=2 nccl, TP=2 symm; qwen2.5-7b and llama-3.1-8b at ctx 2048 and 16384,
#             bf16), tp-hf (HF's own tp plan, eager and graph); each fits one 600 s device call for one model
#             (TP_MODELS=qwen2.5-7b). The table: per-GPU floor at measured bandwidth, all-reduce term (measured in
#             the session), the rest (kernel excess + gaps; `explain --tp` is not there yet)
#     endpoint  qwen2.5-7b with random weights written to $OUT/qwen2.5-7b-random (config.json + safetensors + a
#               tokenizers-built tokenizer, python -m floorline.servedir), served by `transformers serve` on a free
#               127.0.0.1 port and measured by `floorline endpoint` (ctx 2048, 5 sessions, 64 tokens), then the
#               server stopped and `floorline run --mode eager,graph,native` on the same weights: the server's
#               overhead per token over the in-process step (issue: endpoint). transformers[serving] is not on the
#               H200: first, on a machine with PyPI, `scripts/serve_wheels.sh` (15 wheels, 5 MB, into .whl/).
#               ENDPOINT_MODEL, ENDPOINT_DEVICE, ENDPOINT_MODES, ENDPOINT_CTX override it (a CPU dry run: tiny-qwen2,
#               cpu, eager, 256)
#     recheck   the ctx-16384 agreement tests and explain of the native steps (int4 beside HF's graph mode, bf16):
#               what the last session changed without a GPU left to check it
#     final-min  the int4 step's GPU tests, records, kernel rows and agreement in one call of FINAL_BUDGET s
#     final-s9  session 9's records: attention GPU tests, ctx-16384 agreement, native bf16 and int4 records
#     cta-times  per-CTA start/end/SM of the CUDA attention chunks and of a plain fixed-slice read
#     final-s11  session 11's: attention GPU tests, native records, attention bench rows, ctx 8192 A/B, agreement
#     step-ends  session 12's: the step's embedding and next-token kernels (GPU tests, explain)
#     tiles      session 12's: every bf16 GEMV tile of the autotuner against its reference on the GPU
#     final-s12  session 12's sources: step-end GPU tests, native records, agreement with HF at ctx 256
#     final-s14  session 14's sources: native bf16 records, graph replays, agreement at ctx 256, explain, int4 records
#     final-s16, final-s18  session 16's and 18's: final-s14 after the fused MLP's GPU tests
#     final-s13  session 13's sources: native bf16 records, graph replays, agreement with HF at ctx 256, int4 records
#     final-s10  session 10's: attention GPU tests, records with the split merge beside the old one, ctx-16384 agreement
#     final-last  the int4 GEMV's SASS order test, llama-3.1-8b's int4 kernel rows, explain of native int4 (time-boxed)
#     final, final2  issues #13, #14 in two device calls: the native int4 and bf16 records of the sources, then the
#               per-kernel table, explain of native int4 and the GPU agreement tests (final-int4: int4 and bf16 at
#               ctx 2048 only)
#     int4-ncu, attn-ncu  Nsight Compute on the int4 CUDA GEMV (NCU_CONFIGS) and on the attention kernels, with each
#               kernel's largest warp-stall reasons
#     native-ab  a change A/B'd on the native steps against the sources in out/ab_base (see the stage)
#     attn-cuda  the CUDA attention chunks (attn_cuda): GPU tests, bench rows beside Triton's, A/B in the step
#     attn-step  the attention chunk swept inside the native step (FLOORLINE_ATTN_CHUNK), ctx 2048 and 16384
#     fused-mlp  each MLP one kernel split over the intermediate rows (FLOORLINE_FUSED_MLP): GPU tests, the kernel
#                alone against gate_up + down, then native bf16 ctx 2048 off / on, one process a cell
#     mlp-split  how the fused MLP shares its rows among programs (FLOORLINE_MLP_SPLIT): GPU tests, alone, A/B
#     boundaries what each kernel boundary costs the native bf16 step (FLOORLINE_PROBE_NO_WAIT), one process a cell
#     screen     the Triton tiles re-timed in the step x attention layouts, screened in one process a cell
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu_check}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# optional quant libraries: wheels in .whl/ (../shared/device/fetch_wheels.sh), or already installed in .site/
# (pip install --target .site), and locally built extensions in .ext/lib; each is used where present
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
for d in .site .ext/lib; do [ -d "$d" ] && export PYTHONPATH=$PYTHONPATH:$PWD/$d; done
export MAX_JOBS=${MAX_JOBS:-$(nproc)}  # exllamav2 JIT-builds its extension on first import (~2 min on 16 cores)
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(tests run ab explain grid quant native)
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,power.draw --format=csv | tee "$OUT/nvidia-smi.txt"
python3 -c 'import torch, transformers, triton; print("torch", torch.__version__, "transformers", transformers.__version__, "triton", triton.__version__)'
fl() { python3 -m floorline "$@"; }
medians() { grep -h -o '"step_ms_median": [0-9.]*' "$@" | cut -d' ' -f2 | paste -sd' '; }  # of the records in files
# Nsight Compute's warp-stall reasons (cycles a warp spends stalled on each, per issued instruction), and
# ncu_stalls FILE: each kernel's largest ones, one line a kernel
NCU_STALLS="regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
ncu_stalls() {
  python3 - "$1" <<'PY'
import re, sys
name, stalls = None, {}
def show():
    if name and stalls:
        top = sorted(stalls.items(), key=lambda kv: -kv[1])[:6]
        print(f"  stalls per issued instruction, {name[:40]}: " + ", ".join(f"{k} {v:.2f}" for k, v in top))
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"  (\S+)\s*\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)", line)
    if m:
        show()
        name, stalls = m.group(1), {}
    m = re.search(r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio\s+\S*\s+([\d.]+)", line)
    if m:
        stalls[m.group(1)] = float(m.group(2))
show()
PY
}
# show_records FILE...: one line a record (model, ctx, quant, ms, % of the peak floor, valid)
show_records() {
  python3 - "$@" <<'PY'
import json, sys
for f in sys.argv[1:]:
    for l in open(f):
        r = json.loads(l)
        print(f"{r['model']:<13} ctx {r['ctx']:>5} {r.get('quant') or 'bf16':<5} {r['step_ms_median']:.3f} ms "
              f"{100 * r['floor_ms_peak'] / r['step_ms_median']:.1f}% of peak floor {r.get('valid')} ({f.split('/')[-1]})")
PY
}
# left: seconds left of a final-* stage's $budget since the script started
left() { echo $(( budget - ($(date +%s) - t0) )); }
# gpu_pytest SECS NAME EXPR: the gpu-marked tests of tests/test_gpu_native.py matching EXPR, time-boxed, into
# $OUT/pytest_NAME.log; their outcome and printed figures shown
gpu_pytest() {
  timeout "$1" python3 -m pytest -q -s -rf -m gpu tests/test_gpu_native.py -k "$3" > "$OUT/pytest_$2.log" 2>&1
  grep -E "vs HF fp32|vs torch|passed|skipped|failed|FAILED|Error|assert" "$OUT/pytest_$2.log" | cut -c1-400
}
# gpu_pytest_left MIN NAME EXPR: gpu_pytest in what is left of the budget, if more than MIN seconds
gpu_pytest_left() { [ $(left) -gt "$1" ] && gpu_pytest $(( $(left) - 5 )) "$2" "$3"; }
# bf16_records: native bf16, qwen2.5-7b at ctx 2048, 16384, 30720 and llama-3.1-8b at 2048, 16384 (one process a
# model), into $OUT/native_bf16.jsonl
bf16_records() {
  fl run --model qwen2.5-7b --ctx 2048,16384,30720 --mode native --output "$OUT/native_bf16.jsonl" \
    >> "$OUT/native.log" 2>&1
  fl run --model llama-3.1-8b --ctx 2048,16384 --mode native --output "$OUT/native_bf16.jsonl" \
    >> "$OUT/native.log" 2>&1
}
# int4_records SECS: native int4 at ctx 2048, qwen2.5-7b then llama-3.1-8b, each while more than SECS of the
# budget are left, into $OUT/native_int4.jsonl
int4_records() {
  for m in qwen2.5-7b llama-3.1-8b; do
    [ $(left) -gt $1 ] && fl run --model $m --ctx 2048 --quant int4 --mode native \
      --output "$OUT/native_int4.jsonl" >> "$OUT/native.log" 2>&1
  done
}
# cell FILE LOG RUN-ARGS...: one `floorline run` (a fresh process, this shell's environment), its records appended to
# FILE, its log to LOG; prints this run's medians alone (nothing if it failed, not an earlier cell's)
cell() {
  local file=$1 log=$2; shift 2
  rm -f "$OUT/cell.jsonl"
  fl run "$@" --output "$OUT/cell.jsonl" >> "$log" 2>&1
  medians "$OUT/cell.jsonl" 2>/dev/null
  cat "$OUT/cell.jsonl" >> "$file" 2>/dev/null
}

# mlp_alone "SPLIT...": the fused MLP kernel alone at qwen2.5-7b's and llama-3.1-8b's shapes, every candidate under each
# split (mlp.SPLITS), beside gate_up + down as two GEMVs: triton's do_bench median of eager launches (0.35-0.41 GB of
# weights, past the L2; launch and ramp included: not the step's graph), into $OUT/mlp_alone.log
mlp_alone() {
  python3 - $1 <<'PY' 2>&1 | tee -a "$OUT/mlp_alone.log"
import sys, torch, triton
from floorline.native import kernels as K, mlp as M
for h, i in ((3584, 18944), (4096, 14336)):
    g = torch.Generator("cuda").manual_seed(0)
    gu = (torch.randn(2 * i, h, device="cuda", generator=g) * 0.02).bfloat16()
    dn = (torch.randn(h, i, device="cuda", generator=g) * 0.02).bfloat16()
    dt = dn.t().contiguous()
    nw, x = torch.ones(h, device="cuda"), torch.randn(h, device="cuda", generator=g)
    act, out, z = torch.zeros(i, device="cuda"), torch.zeros(h, device="cuda"), torch.zeros(h, device="cuda")
    gb = 3 * i * h * 2 / 1e9
    def two():
        K.tri_gemv(gu, x, out=act, pro=K.PRO_RMSNORM, norm_w=nw, glu=True)
        K.tri_gemv(dn, act, out=out, residual=out)
    two()
    ms = triton.testing.do_bench(two, warmup=20, rep=200, return_mode="median")
    print(f"{h}x{i} gate_up + down (autotuned tiles): {ms * 1e3:.1f} us, {gb / ms * 1e3:.0f} GB/s")
    for c in M.fitting(i):
        row = []
        for split in sys.argv[1:]:
            f = lambda: M.tri_mlp(gu, dt, x, out, z, nw, 1e-6, config=c, split=split)
            f()
            ms = triton.testing.do_bench(f, warmup=20, rep=200, return_mode="median")
            row.append(f"{split} {ms * 1e3:.1f} us {gb / ms * 1e3:.0f} GB/s")
        print(f"{h}x{i} fused {c}: " + ", ".join(row))
PY
}

for stage in "${stages[@]}"; do
  echo "== $stage ($(( $(date +%s) - t0 )) s)"
  case $stage in
    tests)
      python3 -m pytest -q -m gpu tests --ignore tests/test_gpu_quant.py --ignore tests/test_gpu_native.py 2>&1 \
        | tee "$OUT/pytest_gpu.log"
      # one process per quant backend: a library that faults (Marlin on the H200) poisons its CUDA context
      for b in nf4 exllamav2 marlin tinygemm gemlite "int4 and not tinygemm and not gemlite" run_records; do
        python3 -m pytest -q -m gpu tests/test_gpu_quant.py -k "$b" 2>&1 | tee -a "$OUT/pytest_gpu.log" | tail -3
      done ;;
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
    quant)
      fl quant --model qwen2.5-7b --ctx 2048 --mode "${QUANT_MODES:-eager,graph}" \
        ${QUANT_BACKENDS:+--backends "$QUANT_BACKENDS"} --kernels --timeout 900 \
        --output "$OUT/quant.jsonl" 2>&1 | tee "$OUT/quant.log" ;;
    int4)
      python3 -m pytest -q tests/test_int4_format.py tests/test_gpu_native.py -k "int4_cuda or compiles" 2>&1 \
        | tee "$OUT/pytest_int4.log" | tail -15
      for m in qwen2.5-7b llama-3.1-8b; do
        python3 -m floorline.native.bench --model "$m" --gemv-sweep --json "$OUT/int4_sweep_$m.json" 2>&1 \
          | grep -v "^  " | tee "$OUT/int4_sweep_$m.log"
      done
      python3 -m floorline.native.bench --json "$OUT/native_bench.json" 2>&1 | tee "$OUT/native_bench.log" ;;
    int4-run)  # the int4 targets: kernel tests and agreement, the per-kernel table, native/graph int4 steps, explain
      python3 -m pytest -q -s tests/test_gpu_native.py tests/test_int4_format.py -k "int4_cuda or compiles or int4" \
        2>&1 | tee "$OUT/pytest_int4.log" | grep -E "agreement|passed|failed"
      python3 -m floorline.native.bench --json "$OUT/native_bench.json" 2>&1 | tee "$OUT/native_bench.log" | tail -1
      for m in qwen2.5-7b llama-3.1-8b; do
        fl run --model "$m" --ctx 2048,16384 --quant int4 --mode native,graph --output "$OUT/native.jsonl" \
          >> "$OUT/native.log" 2>&1
      done
      fl explain --model qwen2.5-7b --ctx 2048 --mode native,graph --quant int4 --out "$OUT/explain_native_int4" 2>&1 \
        | tee "$OUT/explain_native_int4.log" | tail -2
      tar czf "$OUT/explain_native_int4.tgz" -C "$OUT" explain_native_int4 ;;
    int4-final)  # the int4 kernel's tests, the int4 steps at ctx 2048, the per-kernel GEMV table, the GPU tests of
                 # timing and of the int4 backend (a short lease: everything else is in int4-run)
      python3 -m pytest -q tests/test_gpu_native.py tests/test_int4_format.py -k "int4_cuda or compiles" 2>&1 \
        | tee "$OUT/pytest_int4.log" | tail -2
      for m in qwen2.5-7b llama-3.1-8b; do
        fl run --model "$m" --ctx 2048 --quant int4 --mode native --output "$OUT/native.jsonl" >> "$OUT/native.log" 2>&1
      done
      python3 -m floorline.native.bench --only "(" --json "$OUT/native_bench.json" > "$OUT/native_bench.log" 2>&1
      python3 -m pytest -q -m gpu tests/test_timing.py tests/test_gpu_quant.py -k "timing or int4 and not tinygemm and \
        not gemlite" 2>&1 | tee "$OUT/pytest_gpu.log" | tail -2 ;;
    int4-ncu)  # Nsight Compute on the int4 CUDA GEMV, one launch per shape and config (cold weights: distinct copies);
               # NCU_CONFIGS overrides the list ("shape warps,ahead,splits,flat,stages[,persist[,tiles]]" items, `;`-separated)
      ncu_default="gate_up 8,2,1,0,0,3;gate_up 8,2,1,0,0;down 8,2,4,0,0,2;down 4,2,4,0,0;qkv 8,1,1,0,4"
      IFS=';' read -ra ncu_cfgs <<< "${NCU_CONFIGS:-$ncu_default}"
      for sc in "${ncu_cfgs[@]}"; do
        set -- $sc
        ncu --clock-control none -k regex:int4_gemv --launch-skip 2 --launch-count 1 --section SpeedOfLight \
          --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats \
          --metrics "smsp__inst_executed.sum,dram__bytes_read.sum,$NCU_STALLS" \
          python3 -m floorline.native.bench --only "$1" --formats "int4 cuda" --int4-config "$2" \
          > "$OUT/ncu_${1}_${2//,/-}.txt" 2>&1  # (no commas in names: the device tool drops such files)
        echo "== ncu $1 $2"; grep -E "DRAM Throughput|Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible|Eligible Warps|inst_executed|dram__bytes|Block Limit" "$OUT/ncu_${1}_${2//,/-}.txt" | head -14
        ncu_stalls "$OUT/ncu_${1}_${2//,/-}.txt"
      done ;;
    attn-ncu)  # Nsight Compute on the attention kernels (chunks, merge) at ctx 2048 and 16384: the checked first call
      for c in 2048 16384; do
        ncu --clock-control none -k regex:_attn --launch-count 2 --section SpeedOfLight --section Occupancy \
          --section WarpStateStats --section LaunchStats --metrics "dram__bytes_read.sum,$NCU_STALLS" \
          python3 -m floorline.native.bench --only attention --attn-ctx $c > "$OUT/ncu_attn_$c.txt" 2>&1
        echo "== ncu attention ctx $c"
        grep -E "^  _attn|DRAM Throughput|Duration|Registers Per|Achieved Occupancy|Grid Size|No Eligible|dram__bytes" \
          "$OUT/ncu_attn_$c.txt" | head -24
        ncu_stalls "$OUT/ncu_attn_$c.txt"
      done ;;
    attn-cuda)  # issue #14: the attention's chunks by attn_cuda (CUDA C++, NVRTC) against Triton's: its GPU tests
                # (every position class, graph replays with PDL, SASS load order), the bench's attention rows of both
                # models at $ACU_CTX (default 2048,16384: Triton's default, CUDA's default and, for
                # $ACU_SWEEP_MODELS, its warps x chunk sweep), once for each of $ACU_BENCH_ENVS (space-separated
                # sides, each a +-separated list of VAR=value, "-" for none; set and empty: no bench), then, if the
                # tests passed (ACU_TESTS=0 skips them), the native step for each side of $ACU_SIDES (default
                # FLOORLINE_ATTN=triton and =cuda), one fresh process a cell, for each of $ACU_CELLS
                # ("model:quant:ctx" items)
      ok=0
      if [ "${ACU_TESTS:-1}" != 0 ]; then
        timeout 240 python3 -m pytest -q -rf -m gpu tests/test_gpu_native.py -k cuda_attention \
          > "$OUT/pytest_acu.log" 2>&1
        ok=$?
        grep -E "passed|failed|FAILED|Error|assert" "$OUT/pytest_acu.log" | cut -c1-400 | head -20
      fi
      for side in ${ACU_BENCH_ENVS--}; do
        envs=${side//+/ }; [ "$side" = - ] && envs=""
        for m in qwen2.5-7b llama-3.1-8b; do
          sweep=""; [[ " ${ACU_SWEEP_MODELS:-qwen2.5-7b} " == *" $m "* ]] && sweep="--attn-sweep cuda"
          echo "bench $m $side"
          ([ -n "$envs" ] && export $envs; timeout 150 python3 -m floorline.native.bench --model $m --only attention \
            --attn-ctx ${ACU_CTX:-2048,16384} $sweep --json "$OUT/bench_acu_${m}_${side//[=,+]/_}.json" \
            > "$OUT/bench_acu_${m}_${side//[=,+]/_}.log" 2>&1)
          grep -E "^\| rope|not timed|Error" "$OUT/bench_acu_${m}_${side//[=,+]/_}.log" \
            | awk -F'|' '{print $2 "|" $5 "|" $6 "|" $9 "|" $11}'
        done
      done
      [ $ok -eq 0 ] && for cell in ${ACU_CELLS:-qwen2.5-7b:none:16384 llama-3.1-8b:none:16384 qwen2.5-7b:none:2048}; do
        IFS=: read -r m q c <<< "$cell"
        meds=""
        for side in ${ACU_SIDES:-FLOORLINE_ATTN=triton FLOORLINE_ATTN=cuda}; do
          tag=${side//[=,+]/_}
          meds="$meds | $side $(export ${side//+/ }; cell "$OUT/acu_$tag.jsonl" "$OUT/acu_$tag.log" --model $m \
            --ctx $c --quant $q --mode native)"
        done
        echo "$cell:$meds ms"
      done ;;
    final-s13|final-s14|final-s16|final-s18)  # issue #14, session 13's, 14's, 16's and 18's sources in one call
                # (FINAL_BUDGET s, default 520 / 540 / 560): (final-s16, -s18) the fused MLP's GPU tests, the
                # native bf16 records (qwen2.5-7b ctx 2048, 16384, 30720; llama-3.1-8b 2048, 16384), the runtime's
                # graph replays against the torch-reference step, native against HF fp32 at ctx 256, (final-s14)
                # explain of native bf16 (qwen2.5-7b ctx 2048), int4 records, each as the budget allows
      budget=${FINAL_BUDGET:-$(case $stage in final-s13) echo 520;; final-s14) echo 540;; *) echo 560;; esac)}
      [ $stage = final-s16 ] || [ $stage = final-s18 ] && gpu_pytest 120 mlp fused_mlp
      bf16_records
      show_records "$OUT/native_bf16.jsonl"
      gpu_pytest_left 60 replays replays_real_tokens
      gpu_pytest_left 120 agree agrees_with_hf_in_bf16
      if [ $stage != final-s13 ] && [ $(left) -gt 100 ]; then
        timeout $(( $(left) - 10 )) python3 -m floorline explain --model qwen2.5-7b --ctx 2048 --mode native \
          --out "$OUT/explain_native" 2>&1 | grep -v -i warn > "$OUT/explain_native.log"
        grep -E " native |_gemv|_attn|_mlp" "$OUT/explain_native.log" | head -14 | cut -c1-150
      fi
      int4_records 90
      [ -f "$OUT/native_int4.jsonl" ] && show_records "$OUT/native_int4.jsonl" ;;
    final-s12)  # issue #14, session 12's sources in one call (FINAL_BUDGET s, default 540): the step ends' GPU tests
                # and graph replays, the native bf16 records (qwen2.5-7b ctx 2048, 16384, 30720; llama-3.1-8b 2048,
                # 16384), int4 at ctx 2048, then native against HF fp32 over 32 steps at ctx 256 as the budget allows
      budget=${FINAL_BUDGET:-540}
      gpu_pytest 150 ends "step_ends or replays_real_tokens"
      bf16_records
      int4_records 150
      show_records "$OUT/native_bf16.jsonl" "$OUT/native_int4.jsonl"
      gpu_pytest_left 90 agree agrees_with_hf_in_bf16 ;;
    tiles)  # issue #14, session 12: every bf16 GEMV tile of the autotuner against ref_gemv on qwen2.5-7b's shapes
            # (before the step may pick it); A/B the table with `tiles native-ab`
      gpu_pytest 200 tiles every_bf16_tile ;;
    step-ends)  # issue #14, session 12: the step's first and last kernels (_embed; _next_token: argmax, token and
                # position) as PDL launches instead of torch's index_select, copy, argmax, copy and add: their GPU
                # tests and the runtime's graph replays against the torch reference, explain of native bf16 at ctx
                # 2048; their A/B: `step-ends native-ab` with AB_BASE the sources before them
      gpu_pytest 150 ends "step_ends or replays_real_tokens"
      timeout 120 python3 -m floorline explain --model qwen2.5-7b --ctx 2048 --mode native \
        --out "$OUT/explain_native" 2>&1 | grep -v -i warn | tee "$OUT/explain_native.log" | head -40 ;;
    cta-times)  # issue #14: when each CTA of the CUDA attention chunks starts and ends and on which SM, beside a plain
                # read of fixed per-SM slices (scripts/cta_times.py; CTA_MODELS, default qwen2.5-7b llama-3.1-8b at
                # ctx 16384)
      for m in ${CTA_MODELS:-qwen2.5-7b llama-3.1-8b}; do
        timeout 120 python3 scripts/cta_times.py --model $m --ctx ${CTA_CTX:-16384} --json "$OUT/cta_times_$m.json" \
          2>&1 | tee "$OUT/cta_times_$m.log" | grep -vi warn
      done ;;
    final-s11)  # issue #14, session 11's sources in one call (FINAL_BUDGET s, default 540): the GPU tests of the
                # attention (CUDA chunks, whose loads now take whole 32-byte sectors, + the merge), the native bf16
                # records (qwen2.5-7b ctx 2048, 16384, 30720; llama-3.1-8b 2048, 16384), the bench's attention rows
                # of both models at ctx 2048 and 16384 (each checked against the torch reference first), int4 at
                # ctx 2048, qwen2.5-7b ctx 8192 with FLOORLINE_ATTN=cuda beside auto (Triton's chunks there), then
                # native against HF fp32 at ctx 16384 as the budget allows
      budget=${FINAL_BUDGET:-540}
      gpu_pytest 120 attn cuda_attention  # the CUDA chunks + merge against the torch reference, PDL replays
      bf16_records
      for m in qwen2.5-7b llama-3.1-8b; do
        [ $(left) -gt 200 ] && timeout 120 python3 -m floorline.native.bench --model $m --only attention \
          --attn-ctx 2048,16384 --json "$OUT/bench_attn_$m.json" > "$OUT/bench_attn_$m.log" 2>&1
        grep -E "^\| rope|not timed|Error" "$OUT/bench_attn_$m.log" | awk -F'|' '{print "'$m'" $5 "|" $6 "|" $9 "|" $11}'
      done
      int4_records 150
      [ $(left) -gt 150 ] && fl run --model qwen2.5-7b --ctx 8192 --mode native --output "$OUT/native_8192.jsonl" \
        >> "$OUT/native.log" 2>&1
      [ $(left) -gt 120 ] && (export FLOORLINE_ATTN=cuda; fl run --model qwen2.5-7b --ctx 8192 --mode native \
        --output "$OUT/native_8192_cuda.jsonl" >> "$OUT/native.log" 2>&1)
      show_records "$OUT/native_bf16.jsonl" "$OUT/native_int4.jsonl" "$OUT/native_8192.jsonl" \
        "$OUT/native_8192_cuda.jsonl"
      gpu_pytest_left 90 16384 at_ctx_16384 ;;
    final-s10)  # issue #14, session 10's sources in one call: the GPU tests of the attention (CUDA chunks + the merge,
                # now split over the head's dims), then the native records with the default merge (qwen2.5-7b bf16
                # ctx 2048, 16384, 30720; llama-3.1-8b 2048, 16384; int4 at 2048) beside sessions 1-9's merge
                # (FLOORLINE_ATTN_MERGE=1,4: qwen2.5-7b 2048, 16384; llama-3.1-8b 16384), one process a model and
                # side, then, as FINAL_BUDGET allows, native against HF fp32 at ctx 16384
      budget=${FINAL_BUDGET:-560}
      gpu_pytest 120 attn cuda_attention  # the CUDA chunks + merge against the torch reference, PDL replays
      fl run --model qwen2.5-7b --ctx 2048,16384,30720 --mode native --output "$OUT/native_bf16.jsonl" \
        >> "$OUT/native.log" 2>&1
      (export FLOORLINE_ATTN_MERGE=1,4; fl run --model qwen2.5-7b --ctx 2048,16384 --mode native \
        --output "$OUT/native_bf16_merge14.jsonl" >> "$OUT/native_merge14.log" 2>&1)
      [ $(left) -gt 120 ] && fl run --model llama-3.1-8b --ctx 2048,16384 --mode native \
        --output "$OUT/native_bf16.jsonl" >> "$OUT/native.log" 2>&1
      [ $(left) -gt 100 ] && (export FLOORLINE_ATTN_MERGE=1,4; fl run --model llama-3.1-8b --ctx 16384 --mode native \
        --output "$OUT/native_bf16_merge14.jsonl" >> "$OUT/native_merge14.log" 2>&1)
      int4_records 70
      show_records "$OUT/native_bf16.jsonl" "$OUT/native_bf16_merge14.jsonl" "$OUT/native_int4.jsonl"
      gpu_pytest_left 100 16384 at_ctx_16384 ;;
    final-s9)  # issues #13, #14 at session 9's sources in one call: the GPU tests of the attention path (the CUDA
               # chunks, then both models against HF fp32 at ctx 16384, which the CUDA chunks now serve), the native
               # bf16 records (qwen2.5-7b ctx 2048, 16384, 30720; llama-3.1-8b 2048, 16384: one process a model),
               # the int4 records at ctx 2048, and, as the time left allows, the int4 picks diagnostic
      budget=${FINAL_BUDGET:-560}
      gpu_pytest 200 s9 "cuda_attention or at_ctx_16384"
      bf16_records
      int4_records 60
      show_records "$OUT/native_bf16.jsonl" "$OUT/native_int4.jsonl"
      gpu_pytest_left 100 picks taken_out_in_turn ;;
    native-ab)  # a change A/B'd on the native steps: the sources in $AB_BASE (default out/ab_base: `git archive REV src |
                # tar -x -C out/ab_base`, carried) against these, one fresh process a cell, base then new for each cell
                # of $AB_CELLS ("model:quant:ctx" items; default qwen2.5-7b int4, bf16 and llama-3.1-8b int4 at 2048)
      base=$(realpath "${AB_BASE:-out/ab_base}")
      for cell in ${AB_CELLS:-qwen2.5-7b:int4:2048 qwen2.5-7b:none:2048 llama-3.1-8b:int4:2048}; do
        IFS=: read -r m q c <<< "$cell"
        meds=""
        for side in base new; do
          src=$PWD/src; [ $side = base ] && src=$base/src
          meds="$meds $side $(PYTHONPATH=$src${PYTHONPATH#$PWD/src} FLOORLINE_CACHE=/tmp/flc_$side cell \
            "$OUT/ab_$side.jsonl" "$OUT/ab_$side.log" --model $m --ctx $c --quant $q --mode native)"
        done
        echo "$cell:$meds ms"
      done ;;
    fused-mlp)  # issue #14: the MLP as one kernel with no gate_up -> down boundary (native/mlp.py): its GPU tests and
                # the runtime's replays with it, the kernel alone (every candidate, mlp_alone) beside the two GEMVs,
                # then native bf16 ctx 2048 one process a cell, off and on in turn (MLP_ROUNDS rounds, MLP_MODELS
                # override)
      FLOORLINE_FUSED_MLP=1 gpu_pytest 300 mlp "fused_mlp or (replays_real_tokens and None)"
      mlp_alone rows
      for m in ${MLP_MODELS:-qwen2.5-7b llama-3.1-8b}; do
        line="$m ctx 2048:"
        for r in $(seq ${MLP_ROUNDS:-1}); do
          for f in 0 1; do
            rm -f "$OUT/cell.jsonl"
            FLOORLINE_FUSED_MLP=$f timeout 200 python3 -m floorline run --model $m --ctx 2048 --mode native \
              --output "$OUT/cell.jsonl" >> "$OUT/mlp.log" 2>&1 || echo "($m fused mlp $f: rc $?)"
            line="$line $([ $f = 1 ] && echo on || echo off) $(medians "$OUT/cell.jsonl")"
            cat "$OUT/cell.jsonl" >> "$OUT/mlp_$m.jsonl" 2>/dev/null
          done
        done
        echo "$line ms"
      done ;;
    mlp-split)  # issue #14 (session 18): how the fused MLP shares its rows (FLOORLINE_MLP_SPLIT: rows, the
                # default; tiles; strided): the GPU test of every candidate with rows and with strided, each candidate
                # alone under each split (mlp_alone; MLP_SPLITS override), then native bf16 ctx 2048 one process a
                # cell (SPLIT_CELLS "model:split,split..." override)
      gpu_pytest 120 mlp fused_mlp
      FLOORLINE_MLP_SPLIT=strided gpu_pytest 120 mlp_strided fused_mlp
      mlp_alone "${MLP_SPLITS:-tiles rows strided}"
      for c in ${SPLIT_CELLS:-"llama-3.1-8b:rows,strided,tiles" "qwen2.5-7b:rows,strided"}; do
        IFS=: read -r m splits <<< "$c"
        IFS=, read -ra ss <<< "$splits"
        line="$m ctx 2048:"
        for sp in "${ss[@]}"; do
          line="$line $sp $(FLOORLINE_MLP_SPLIT=$sp cell "$OUT/split_$m.jsonl" "$OUT/split.log" --model $m --ctx 2048 \
            --mode native)"
        done
        echo "$line ms"
      done ;;
    boundaries)  # issue #14: what each kernel boundary costs the native bf16 step -- one process a cell with
                 # FLOORLINE_PROBE_NO_WAIT=kind (that kind of kernel never waits on the one before it: wrong tokens,
                 # the step's time without that boundary's dependency), the tiles from the autotuner alone
                 # (FLOORLINE_TRITON_STEP_TUNE=0, every side; PROBE_STEP_TUNE=1: re-timed in the step as `run` does);
                 # PROBE_CELLS "model:ctx:kind,kind..." items override
      for c in ${PROBE_CELLS:-"qwen2.5-7b:2048:none,qkv,attn,merge,o,mlp,lm_head,all" \
                 "llama-3.1-8b:2048:none,mlp,all"}; do
        IFS=: read -r m x kinds <<< "$c"
        IFS=, read -ra ks <<< "$kinds"
        line="$m ctx $x:"
        for k in "${ks[@]}"; do
          w=$k; [ $k = none ] && w=""
          line="$line $k $(FLOORLINE_TRITON_STEP_TUNE=${PROBE_STEP_TUNE:-0} FLOORLINE_PROBE_NO_WAIT=$w cell "$OUT/probe_$m.jsonl" \
            "$OUT/probe.log" --model $m --ctx $x --mode native)"
        done
        echo "$line ms"
      done ;;
    attn-step)  # issue #14: the attention chunk swept inside the step (FLOORLINE_ATTN_CHUNK; the bench's sweep times
                # attention after a copy of itself, the step after the q/k/v GEMV): native bf16 at ctx 16384 (and
                # 2048), one process a cell; ATTN_MODELS, ATTN_CHUNKS, ATTN_CTX override
      for m in ${ATTN_MODELS:-qwen2.5-7b llama-3.1-8b}; do
        for c in ${ATTN_CHUNKS:-64 128 256 512}; do
          echo "$m chunk $c: $(FLOORLINE_ATTN_CHUNK=$c cell "$OUT/attn_step_$c.jsonl" "$OUT/attn_step.log" \
            --model $m --ctx ${ATTN_CTX:-2048,16384} --mode native) ms"
        done
      done ;;
    screen)  # issues #13, #14: the Triton GEMV's tiles re-timed in the step against the autotuner's, crossed with
             # attention layouts, screened in one process a cell (scripts/step_screen.py), after the GPU test of the
             # runtime's replays (tokens against the torch reference, the tiles re-timed); SCREEN_CELLS
             # "model:quant:ctx:attn;attn..." items override
      timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_native.py -k "replays_real_tokens" 2>&1 | tail -2 \
        | tee "$OUT/pytest_screen.log"
      for c in ${SCREEN_CELLS:-"qwen2.5-7b:int4:2048:default;128,64,8,3;64,64,4,3;64,32,8,3;64,64,8,2" \
                 "qwen2.5-7b:none:2048:default;128,64,8,3;64,64,4,3;64,32,8,3;64,64,8,2" \
                 "qwen2.5-7b:none:16384:default;128,64,8,3;512,64,8,3;256,128,8,3;256,64,4,3"}; do
        IFS=: read -r m q x at <<< "$c"
        IFS=';' read -ra ats <<< "$at"
        timeout 240 python3 scripts/step_screen.py --model $m --quant $q --ctx $x --attn "${ats[@]}" \
          --json "$OUT/screen_${m}_${q}_$x.json" > "$OUT/screen_${m}_${q}_$x.log" 2>&1
        grep -E "^\||ctx|re-timed" "$OUT/screen_${m}_${q}_$x.log" | cut -c1-400
      done ;;
    pdl)  # issues #13, #14: when a kernel lets the next one launch (FLOORLINE_PDL), A/B'd on the native steps of
          # qwen2.5-7b at ctx 2048, int4 and bf16 (one process a cell); ATTN_SWEEP=1 adds the attention kernel's
          # chunk x tile x warps x stages
      for mode in ${PDL_MODES:-late after-wait}; do
        for q in int4 none; do
          FLOORLINE_PDL=$mode fl run --model qwen2.5-7b --ctx 2048 --quant $q --mode native \
            --output "$OUT/pdl_$mode.jsonl" >> "$OUT/pdl.log" 2>&1
        done
        echo "PDL $mode: $(medians "$OUT/pdl_$mode.jsonl") ms"
      done
      if [ -n "${ATTN_SWEEP:-}" ]; then
        python3 -m floorline.native.bench --only attention --attn-sweep --json "$OUT/attn.json" > "$OUT/attn.log" 2>&1
        grep "|" "$OUT/attn.log" | sort -t'|' -k2,2 -k7,7n | head -80
      fi ;;
    int4-zero)  # issue #13: how the int4 CUDA GEMV takes off the zero point (FLOORLINE_INT4_ZERO), A/B'd on the native
                # int4 steps at ctx 2048 (one process a cell); then the GEMV table (each row checked) with each
      for z in ${INT4_ZEROS:-sub sum subnormal}; do
        for m in ${INT4_MODELS:-qwen2.5-7b}; do
          FLOORLINE_INT4_ZERO=$z fl run --model $m --ctx 2048 --quant int4 --mode native \
            --output "$OUT/int4_zero_$z.jsonl" >> "$OUT/int4_zero.log" 2>&1
        done
        echo "zero point $z: $(medians "$OUT/int4_zero_$z.jsonl") ms"
      done
      for z in ${INT4_ZEROS:-sub sum subnormal}; do
        FLOORLINE_INT4_ZERO=$z python3 -m floorline.native.bench --only "qkv,o (,gate_up,down" --formats "int4 cuda" \
          --json "$OUT/int4_zero_bench_$z.json" > "$OUT/int4_zero_bench_$z.log" 2>&1
        echo "zero point $z:"; grep "int4 cuda" "$OUT/int4_zero_bench_$z.log"
      done ;;
    int4-step)  # issue #13: the int4 launch configs re-timed inside the step (FLOORLINE_INT4_STEP_TUNE=1, the default)
                # against the one-launch timer's choices (0); native int4 at ctx 2048, both models (one process a cell)
      for st in 1 0; do
        for m in ${INT4_MODELS:-qwen2.5-7b llama-3.1-8b}; do
          FLOORLINE_INT4_STEP_TUNE=$st fl run --model $m --ctx 2048 --quant int4 --mode native \
            --output "$OUT/int4_step_tune$st.jsonl" >> "$OUT/int4_step.log" 2>&1
        done
        echo "step tuning $st: $(medians "$OUT/int4_step_tune$st.jsonl") ms"
      done ;;
    recheck)  # what the last session changed without a GPU left to check it: the ctx-16384 agreement tests after the
              # prefill's single rounding of q/k/v + bias, and explain's per-kernel split (time each kernel adds to
              # busy, not its span) of the native steps, int4 and bf16, qwen2.5-7b ctx 2048
      timeout 300 python3 -m pytest -q -s -m gpu tests/test_gpu_native.py -k 16384 2>&1 \
        | grep -E "vs HF fp32|vs torch-reference|passed|failed" | tee "$OUT/pytest_16384.log"
      for q in int4 none; do  # int4: graph beside native, how HF's graph mode spends its step over the same GEMV (#13)
        modes=native; [ $q = int4 ] && modes=native,graph
        timeout 200 python3 -m floorline explain --model qwen2.5-7b --ctx 2048 --mode $modes --quant $q \
          --out "$OUT/explain_native_$q" > "$OUT/explain_native_$q.log" 2>&1
        grep -E "native|graph|gemv|attn|kernel" "$OUT/explain_native_$q.log" | head -30
      done ;;
    final)  # issues #13, #14, first of two calls: the records of the final sources -- native int4 at ctx 2048, both
            # models; bf16 qwen2.5-7b at ctx 2048, 16384, 30720 and llama-3.1-8b at 2048, 16384 (final2: the rest)
      for m in qwen2.5-7b llama-3.1-8b; do
        fl run --model $m --ctx 2048 --quant int4 --mode native --output "$OUT/native_int4.jsonl" >> "$OUT/native.log" 2>&1
      done
      show_records "$OUT/native_int4.jsonl"
      fl run --model qwen2.5-7b --ctx 2048,16384,30720 --mode native --output "$OUT/native_bf16.jsonl" \
        >> "$OUT/native.log" 2>&1
      fl run --model llama-3.1-8b --ctx 2048,16384 --mode native --output "$OUT/native_bf16.jsonl" >> "$OUT/native.log" 2>&1
      show_records "$OUT/native_bf16.jsonl" ;;
    final-int4)  # the int4 records again (both models, ctx 2048) and bf16 qwen2.5-7b at ctx 2048, for sources that
                 # changed only the int4 GEMV's configs after `final`
      for m in qwen2.5-7b llama-3.1-8b; do
        fl run --model $m --ctx 2048 --quant int4 --mode native --output "$OUT/native_int4.jsonl" >> "$OUT/native.log" 2>&1
      done
      fl run --model qwen2.5-7b --ctx 2048 --mode native --output "$OUT/native_bf16.jsonl" >> "$OUT/native.log" 2>&1
      show_records "$OUT/native_int4.jsonl" "$OUT/native_bf16.jsonl" ;;
    final2)  # the second call: the per-kernel table (bf16 and the int4 CUDA GEMV, attention), explain of qwen2.5-7b
             # int4 (its GEMV split by place in the layer), then GPU tests in what is left of a 590 s call: native
             # int4 against HF fp32 (both models), the runtime's replays, the int4 GEMV against its reference (and
             # every row-tile config on qwen2.5-7b's o and down shapes)
      timeout 130 python3 -m floorline.native.bench --formats "bf16,int4 cuda" --json "$OUT/native_bench.json" \
        > "$OUT/native_bench.log" 2>&1
      grep "|" "$OUT/native_bench.log"
      timeout 90 python3 -m floorline explain --model qwen2.5-7b --ctx 2048 --mode native --quant int4 \
        --out "$OUT/explain_native_int4" > "$OUT/explain_native_int4.log" 2>&1
      grep -E "native|int4_gemv|_gemv|attn|/4|after" "$OUT/explain_native_int4.log" | tail -16
      for k in "agrees_with_hf_in_bf16 and int4" "replays_real_tokens" "matches_its_reference" "every_row_tile"; do
        left=$(( 590 - ($(date +%s) - t0) ))
        [ $left -gt 40 ] && timeout $left python3 -m pytest -q -s -m gpu tests/test_gpu_native.py -k "$k" 2>&1 \
          | grep -E "vs HF fp32|vs torch-reference|passed|failed|Error|assert" | tee -a "$OUT/pytest_final2.log"
      done ;;
    final-min)  # issues #13, #14 in one call of what device time is left (FINAL_BUDGET s, default 380): the GPU tests
                # of the int4 step (replays against the torch reference, split q/k/v configs), the int4 records of
                # both models and bf16 qwen2.5-7b at ctx 2048, the int4 CUDA GEMV's per-kernel rows, int4 agreement
                # with HF fp32 -- each only if the time left allows it (explain: `final2`)
      budget=${FINAL_BUDGET:-380}
      gpu_pytest 150 min "replays_real_tokens and int4 or every_split_qkv"
      int4_records 60
      [ $(left) -gt 150 ] && fl run --model qwen2.5-7b --ctx 2048 --mode native --output "$OUT/native_bf16.jsonl" \
        >> "$OUT/native.log" 2>&1
      show_records "$OUT/native_int4.jsonl" "$OUT/native_bf16.jsonl"
      [ $(left) -gt 100 ] && timeout $(( $(left) - 60 )) python3 -m floorline.native.bench --formats "int4 cuda" \
        --attn-ctx 2048 --json "$OUT/native_bench.json" > "$OUT/native_bench.log" 2>&1 && grep "|" "$OUT/native_bench.log"
      gpu_pytest_left 70 agree "agrees_with_hf_in_bf16 and int4" ;;
    final-last)  # what final-min leaves out, in the last minutes of a session: the SASS order test of the int4 GEMV's
                 # first loads, llama-3.1-8b's int4 kernel rows, explain of qwen2.5-7b native int4 (each time-boxed)
      gpu_pytest 40 sass first_weights
      timeout 60 python3 -m floorline.native.bench --model llama-3.1-8b --formats "int4 cuda" --attn-ctx 2048 \
        --json "$OUT/native_bench_llama.json" > "$OUT/native_bench_llama.log" 2>&1; grep "|" "$OUT/native_bench_llama.log"
      timeout 80 python3 -m floorline explain --model qwen2.5-7b --ctx 2048 --mode native --quant int4 \
        --out "$OUT/explain_native_int4" > "$OUT/explain_native_int4.log" 2>&1
      grep -E "native|int4_gemv|_gemv|attn|wall|busy|idle|excess" "$OUT/explain_native_int4.log" | tail -20 ;;
    native-check|native)
      python3 -m pytest -q -s -m gpu tests/test_gpu_native.py 2>&1 | tee "$OUT/pytest_native.log"
      python3 -m floorline.native.bench --json "$OUT/native_bench.json" 2>&1 | tee "$OUT/native_bench.log"
      fl explain --model qwen2.5-7b --ctx 2048 --mode graph,native --out "$OUT/explain_native" 2>&1 \
        | tee "$OUT/explain_native.log" | tail -3
      fl explain --model qwen2.5-7b --ctx 2048 --mode native --quant int4 --out "$OUT/explain_native_int4" 2>&1 \
        | tee "$OUT/explain_native_int4.log" | tail -3 ;;&
    native-run|native)
      for m in ${NATIVE_MODELS:-qwen2.5-7b llama-3.1-8b}; do
        fl run --model "$m" --ctx 2048,16384 --mode graph,compile,native --output "$OUT/native.jsonl" --format md \
          2>&1 | tee -a "$OUT/native.log"
        fl run --model "$m" --ctx 2048,16384 --quant int4 --mode graph,native --output "$OUT/native.jsonl" \
          --format md 2>&1 | tee -a "$OUT/native.log"
      done ;;
    endpoint)
      em=${ENDPOINT_MODEL:-qwen2.5-7b} edev=${ENDPOINT_DEVICE:-cuda}
      d=$OUT/$em-random
      if ! python3 -c 'import fastapi, uvicorn, openai, pydantic' 2>/dev/null; then
        echo "endpoint: transformers serve needs fastapi, uvicorn, openai, pydantic: run scripts/serve_wheels.sh"
        echo "          on a machine with PyPI (it fills .whl/), then this stage again"; continue
      fi
      [ -f "$d/tokenizer.json" ] || python3 -m floorline.servedir --model "$em" --out "$d" --device "$edev" 2>&1 \
        | tail -1
      port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
      HF_HUB_OFFLINE=1 python3 -m transformers.cli.transformers serve "$d" --host 127.0.0.1 --port "$port" \
        --device "$edev" --dtype bfloat16 > "$OUT/serve.log" 2>&1 &
      serve_pid=$!
      python3 - "$port" "$serve_pid" <<'PY' || { tail -20 "$OUT/serve.log"; kill "$serve_pid"; continue; }
import os, socket, sys, time
port, pid = int(sys.argv[1]), int(sys.argv[2])
for _ in range(300):  # up to ~5 min for 15 GB of safetensors
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit("transformers serve exited; see serve.log")
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        sys.exit(0)
    except OSError:
        time.sleep(1)
sys.exit("transformers serve did not listen in 300 s")
PY
      fl endpoint --url "http://127.0.0.1:$port/v1" --model "$d" --served-model "$d" --ctx "${ENDPOINT_CTX:-2048}" \
        --sessions 5 --steps 64 --warmup 5 --output "$OUT/endpoint.jsonl" --format md 2>&1 | tee "$OUT/endpoint.log"
      kill "$serve_pid"; wait "$serve_pid" 2>/dev/null
      fl run --model "$d" --ctx ${ENDPOINT_CTX:-2048} --mode ${ENDPOINT_MODES:-eager,graph,native} --device "$edev" \
        --output "$OUT/endpoint.jsonl" --format md 2>&1 | tee -a "$OUT/endpoint.log" ;;
    tp-allreduce|tp)  # issue #17 on nvidia-h200-x2: one hidden vector (3584 / 4096 values), fp32 and bf16, per backend
      ngpu=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
      if [ "$ngpu" -lt 2 ]; then echo "tp: needs 2 GPUs, $ngpu here"; continue; fi
      # multicast (NVLS) stays off: floorline's launcher sets these for its ranks; here too, for anything else
      export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
      for m in qwen2.5-7b llama-3.1-8b; do for dt in fp32 bf16; do
        fl allreduce --tp 2 --model "$m" --dtype "$dt" --backends nccl,symm --output "$OUT/tp.jsonl" 2>&1 \
          | tee -a "$OUT/tp.log"
      done; done ;;&
    tp-native|tp)  # native TP=1, then TP=2 with each all-reduce backend; ctx 2048 and 16384, bf16
      for m in ${TP_MODELS:-qwen2.5-7b llama-3.1-8b}; do
        fl run --model "$m" --ctx 2048,16384 --mode native --output "$OUT/tp.jsonl" --format md 2>&1 \
          | tee -a "$OUT/tp.log"
        for b in nccl symm; do
          fl run --model "$m" --ctx 2048,16384 --mode native --tp 2 --allreduce "$b" --output "$OUT/tp.jsonl" \
            --format md 2>&1 | tee -a "$OUT/tp.log"
        done
      done ;;&
    tp-hf|tp)  # HF transformers' own tensor parallelism (its tp plan), eager and graph (a crash is recorded)
      for m in ${TP_MODELS:-qwen2.5-7b llama-3.1-8b}; do
        fl run --model "$m" --ctx 2048,16384 --mode eager,graph --tp 2 --output "$OUT/tp.jsonl" --format md 2>&1 \
          | tee -a "$OUT/tp.log"
      done ;;
    native-check|tp-allreduce|tp-native) ;;
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
    print(f"{r0['device_name']} driver {r0.get('driver_version')}, peak {r0['peak_gbps']} GB/s; torch "
          f"{r0['torch_version']}, transformers {r0['transformers_version']}")
    print(f"achievable bandwidth: {display.bandwidth_line(r0)}")  # which pattern wins: the README's H200 line
    print(display.markdown([r for r in recs if r.get("kind", "cell") == "cell"]))
p = os.path.join(out, "native.jsonl")
if os.path.exists(p):
    print(display.markdown(records.read(p)))
p = os.path.join(out, "native_bench.log")
if os.path.exists(p):
    print("".join(l for l in open(p) if l.startswith("|")))
import glob, json
for p in sorted(glob.glob(os.path.join(out, "int4_sweep_*.json"))):
    d = json.load(open(p))
    best = {}
    for r in d["rows"]:
        if r["kernel"] not in best or r["us"] < best[r["kernel"]]["us"]:
            best[r["kernel"]] = r
    print(f"int4 sweep, {d['model']} (copy {d['copy_gbps']:.0f} GB/s): fastest config per shape")
    print("| kernel | shape | config | us | GB/s | % copy | rel err |")
    for r in best.values():
        print(f"| {r['kernel']} | {r['shape']} | {r['config']} | {r['us']:.1f} | {r['gbps']:.0f} | "
              f"{r['gbps'] / d['copy_gbps']:.0%} | {r['rel_err']:.1e} |")
p = os.path.join(out, "grid.jsonl")
if os.path.exists(p):
    recs = records.read(p)
    print(f"grid: {sum(bool(r.get('valid')) for r in recs)}/{len(recs)} cells valid")
    print(display.markdown(recs))
p = os.path.join(out, "ab.jsonl")
if os.path.exists(p):
    for s in [r for r in records.read(p) if r.get("kind") == "ab_summary"]:
        print(f"{s['model']} ctx {s['ctx']}: {display.ab_headline(s)}; {display.ab_gmean_line(s)}")
p = os.path.join(out, "quant.jsonl")
if os.path.exists(p):
    from floorline import quantrows
    recs = records.read(p)
    names = quantrows.backends_in(recs)
    print(display.markdown_table(display.QUANT_HEADER, display.quant_rows(
        quantrows.rows(recs, "qwen2.5-7b", 2048, ["eager", "graph"], names))))
    print(display.markdown_table(display.KERNEL_HEADER, display.kernel_rows(
        quantrows.kernel_rows(recs, "qwen2.5-7b", names))))
p = os.path.join(out, "endpoint.jsonl")
if os.path.exists(p):
    recs = records.read(p)
    print(display.markdown([r for r in recs if r.get("kind", "cell") == "cell"]))
    head, body = display.server_overhead(recs)
    print(head)
    print(display.markdown_table(display.SERVER_HEADER, body))
p = os.path.join(out, "tp.jsonl")
if os.path.exists(p):  # issue #17: the step against the per-GPU floor and the all-reduce term
    recs = records.read(p)
    for r in [r for r in recs if r.get("kind") == "allreduce"]:
        got = f"{r['us_median']:.2f} us" if r.get("valid") else f"not run: {r.get('reason')}"
        print(f"all-reduce {r['backend']:<5} {r['tp']} GPUs, {r['numel']} x {r['dtype']} in a CUDA graph: {got}")
    print("| model | ctx | mode | tp | all-reduce | ms/step | floor/GPU ms (measured bw) | all-reduces ms | rest ms "
          "| % floor+AR |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in [r for r in recs if r.get("kind", "cell") == "cell"]:
        if not r.get("valid"):
            print(f"| {r['model']} | {r['ctx']} | {r['mode']} | {r.get('tp', 1)} | {r.get('allreduce_backend') or '-'} "
                  f"| INVALID: {str(r.get('reason'))[:80]} | | | | |")
            continue
        ar = r.get("allreduce_ms") or 0.0
        fl_ms, step = r["floor_ms_measured"], r["step_ms_median"]
        print(f"| {r['model']} | {r['ctx']} | {r['mode']} | {r.get('tp', 1)} | {r.get('allreduce_backend') or '-'} | "
              f"{step:.3f} | {fl_ms:.3f} | {ar:.3f} | {step - fl_ms - ar:.3f} | {(fl_ms + ar) / step:.0%} |")
for p in [os.path.join(out, d, "explain.jsonl") for d in ("", "explain_native", "explain_native_int4")]:
    if os.path.exists(p):
        print(display.markdown_table(display.EXPLAIN_HEADER, display.explain_rows(records.read(p))))
PY
