# the device call that made call2/ (one H200; $OUT is the call's output folder): the merge prologue loading 12 chunks
# a thread at once (MU 12; call 1: 4). Its kernel and SASS tests, then one A/B round each of llama-3.2-1b and
# qwen2.5-7b int4 ctx 2048: this tree against the sources before it (out/old/src: `git archive 15ff662 src`, carried)
export PYTHONUNBUFFERED=1
nvidia-smi > "$OUT/nvidia-smi.txt"
PYTHONPATH=$PWD/src TESTS_K="merge_inside and int4 and not kernel_step" OUT=$OUT/tests timeout 150 \
  bash scripts/gpu_check.sh tests | tail -3
SUITE_GROUPS=small SUITE_ONLY="llama-3.2-1b:native:int4" SUITE_SRC=out/old/src SUITE_BUDGET=150 OUT=$OUT/small \
  timeout 170 bash scripts/gpu_check.sh suite | tail -3
SUITE_GROUPS=native-int4 SUITE_ONLY="qwen2.5-7b:native:int4" SUITE_SRC=out/old/src SUITE_BUDGET=220 OUT=$OUT/q7 \
  timeout 240 bash scripts/gpu_check.sh suite | tail -3
