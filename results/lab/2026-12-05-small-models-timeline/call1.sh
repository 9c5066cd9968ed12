# the device call that made call1/ (one H200; $OUT is the call's output folder; sources 68207eeb0979cebd, commit
# 92ba816): the step timeline's GPU tests, the stamps of three cells (scripts/timeline.py through gpu_check's timeline
# stage: llama-3.2-1b ctx 128, qwen2.5-0.5b ctx 128 over the CUDA chunks, qwen3-8b ctx 2048) and `floorline explain
# --mode native` of the small models' cells and qwen3-8b's. The device returns at most 8 files a call: the explain
# records, the plots, the timeline JSONs and two explain logs did not come back (their summary lines did, in the
# call's printed tail: call1/summary.txt)
OUT=$OUT TESTS_K="timeline or cuda_attention_loads" timeout 590 bash scripts/gpu_check.sh tests timeline explain 2>&1 | tail -80
