# the device call that made call5/ (one H200, the lease of call 4, a minute later; $OUT is the call's output folder):
# qwen3-8b ctx 2048 again, a second fresh `floorline run --mode native` process (the call then printed the record's
# step time, bandwidth and early-trigger trials with a python one-liner)
export PYTHONPATH=$PWD/src; timeout 140 python3 -m floorline run --model qwen3-8b --ctx 2048 --mode native --output "$OUT/runs.jsonl" > "$OUT/runs.log" 2>&1
