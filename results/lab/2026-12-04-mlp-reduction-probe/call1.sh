# the device call that made call1/ (one H200; $OUT is the call's output folder): probe.diff applied to the device's
# copy of the sources, then probe.py for five cells, one process each
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
D=results/lab/2026-12-04-mlp-reduction-probe
git apply $D/probe.diff || patch -p1 < $D/probe.diff
nvidia-smi > "$OUT/nvidia-smi.txt"
t0=$(date +%s); left() { echo $(( 560 - ($(date +%s) - t0) )); }
for cell in "qwen3-8b 2048" "llama-3.2-1b 128" "qwen2.5-0.5b 128" "llama-3.2-3b 2048" "qwen2.5-7b 2048"; do
  set -- $cell
  [ $(left) -gt 80 ] || { echo "skipped $cell: $(left) s left"; continue; }
  timeout $(left) python3 $D/probe.py $1 $2 3 >> "$OUT/probe.jsonl" 2>> "$OUT/probe.log"
  grep "GB/s:" "$OUT/probe.log" | tail -1
done
