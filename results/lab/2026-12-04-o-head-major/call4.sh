# the device call that made call4/ (one H200; $OUT is the call's output folder), at the final kernel sources:
# `floorline explain` of qwen3-8b ctx 2048 and llama-3.2-1b ctx 128 (mode native), one fresh process each
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
timeout 150 python3 -m floorline explain --model qwen3-8b --ctx 2048 --mode native --out "$OUT/explain_qwen3-8b" \
  > "$OUT/explain.log" 2>&1
timeout 90 python3 -m floorline explain --model llama-3.2-1b --ctx 128 --mode native --out "$OUT/explain_llama-3.2-1b" \
  >> "$OUT/explain.log" 2>&1
grep -E "native |_gemv |_mlp |_attn|_next|_embed|place" "$OUT/explain.log" | cut -c1-150
