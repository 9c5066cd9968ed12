# the device call that made call4.tgz (one H200; $OUT is the call's output folder), at the final sources (the
# product's kernels as at 15ff662; the timeline's summary with each launch's longest work): `explain --mode native`
# of qwen2.5-0.5b ctx 128 (its breakdown since the whole-row tiles), then the step timeline of qwen2.5-0.5b and
# llama-3.2-1b ctx 128; everything tarred (a call returns 8 files)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
R=$OUT/call4; mkdir -p $R/explain
nvidia-smi > "$R/nvidia-smi.txt"
timeout 150 python3 -m floorline explain --model qwen2.5-0.5b --ctx 128 --mode native \
  --out "$R/explain/qwen2.5-0.5b_128" > "$R/explain/qwen2.5-0.5b_128.log" 2>&1
grep -A3 "ctx   mode" "$R/explain/qwen2.5-0.5b_128.log" | tail -1
OUT=$R TIMELINE_CELLS="qwen2.5-0.5b:128 llama-3.2-1b:128" timeout 300 bash scripts/gpu_check.sh timeline | tail -30
cd $OUT && tar czf call4.tgz call4 && rm -rf call4
