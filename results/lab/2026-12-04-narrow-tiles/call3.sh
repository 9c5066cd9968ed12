# the device call that made call3/ (one H200; $OUT is the call's output folder): the Triton GEMV's narrow tiles for a
# K that no tile divides (qwen2.5-0.5b's 896) checked against the reference, then timed in the step (qwen2.5-0.5b
# ctx 128); then `explain --mode native` of the five cells of issue 38 at these sources (the note's breakdown)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
t0=$(date +%s); left() { echo $(( 570 - ($(date +%s) - t0) )); }
nvidia-smi > "$OUT/nvidia-smi.txt"
TESTS_K="every_bf16_tile and 896" timeout 120 bash scripts/gpu_check.sh tests | tail -3
timeout 100 python3 -m floorline run --model qwen2.5-0.5b --ctx 128 --mode native --output "$OUT/runs.jsonl" >> "$OUT/runs.log" 2>&1
python3 - "$OUT/runs.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(r["model"], r["ctx"], "ms", round(r["step_ms_median"], 4), "GB/s", round(r["measured_gbps"]),
          "%", round(100 * r["fraction_of_floor_peak"], 1), round(100 * r["fraction_of_floor_measured"], 1),
          r["native_attn"], "| o_merge", r.get("native_o_merge_used"), r["source_sha256"])
    for shape, t in r["native_triton_step_tuning"].items():
        print("  ", shape, t)
PY
mkdir -p "$OUT/explain"
for cell in "qwen2.5-0.5b 128" "llama-3.2-1b 128" "qwen2.5-1.5b 2048" "llama-3.2-3b 2048" "llama-3.2-1b 2048 int4"; do
  set -- $cell
  [ $(left) -gt 60 ] || { echo "skipped explain $cell: $(left) s left"; continue; }
  timeout $(left) python3 -m floorline explain --model $1 --ctx $2 --mode native ${3:+--quant $3} \
    --out "$OUT/explain/$1_$2${3:+_$3}" > "$OUT/explain/$1_$2${3:+_$3}.log" 2>&1
  grep -A3 "ctx   mode" "$OUT/explain/$1_$2${3:+_$3}.log" | tail -1
done
