#!/usr/bin/env bash
# The README's first command, timed: `floorline run` on the embedded default, as this CPU runs it, then with torch
# held to AVX2 (ATen, oneDNN and MKL: a CPU without AVX-512 BF16, like a newcomer's 2-core EPYC; the default dtype
# follows). Writes results/cpu/default_run.jsonl (this CPU's own run) and results/cpu/first_minute.txt, which
# scripts/readme_tables.py puts in the README. Needs floorline installed (pip install torch==2.13.0 -e .).
set -euo pipefail
cd "$(dirname "$0")/.."
out=results/cpu
mkdir -p "$out"
rm -f "$out/default_run.jsonl"
load=$(cut -d' ' -f1 /proc/loadavg)
tm=$(mktemp)
(cd /tmp && /usr/bin/time -f "%e %U %S" -o "$tm" floorline run --output "$OLDPWD/$out/default_run.jsonl" >/dev/null)
read -r wall user sys < "$tm"
(cd /tmp && ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 \
  /usr/bin/time -f "%e %U %S" -o "$tm" floorline run --output "$OLDPWD/$out/avx2_run.jsonl.tmp" >/dev/null)
read -r wall2 user2 sys2 < "$tm"
rm -f "$tm"
dtype=$(python -c "import json; print(json.loads(open('$out/default_run.jsonl').readline())['dtype'])")
dtype_avx2=$(python -c "import json; print(json.loads(open('$out/avx2_run.jsonl.tmp').readline())['dtype'])")
rm -f "$out/avx2_run.jsonl.tmp"
{
  echo "cpu=$(python -c 'from floorline.bench import system; print(system.cpu_name())')"
  echo "cores=$(nproc)"
  echo "load_before=$load"
  echo "run_s=$wall"
  echo "run_cpu_s=$(python -c "print(round($user + $sys, 1))")"
  echo "dtype=$dtype"
  echo "run_avx2_s=$wall2"
  echo "run_avx2_cpu_s=$(python -c "print(round($user2 + $sys2, 1))")"
  echo "dtype_avx2=$dtype_avx2"
} > "$out/first_minute.txt"
cat "$out/first_minute.txt"
