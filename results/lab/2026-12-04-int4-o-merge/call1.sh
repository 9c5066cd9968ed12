# the device call that made call1/ (one H200; $OUT is the call's output folder): the int4 o GEMV with the attention's
# merge as its prologue. Its GPU tests (the kernel against the merge kernel then o for every kind of launch config,
# the step with every candidate against the step without, the SASS order), then llama-3.2-1b int4 ctx 2048 A/B: this
# tree against the sources before it (out/old/src: `git archive 15ff662 src`, carried), interleaved, two fresh
# processes a side (scripts/h200_suite.toml's small group)
export PYTHONUNBUFFERED=1
nvidia-smi > "$OUT/nvidia-smi.txt"
PYTHONPATH=$PWD/src TESTS_K="merge_inside and int4" OUT=$OUT/tests timeout 240 bash scripts/gpu_check.sh tests | tail -4
for round in 1 2; do
  SUITE_GROUPS=small SUITE_ONLY="llama-3.2-1b:native:int4" SUITE_SRC=out/old/src SUITE_BUDGET=150 OUT=$OUT/r$round \
    timeout 170 bash scripts/gpu_check.sh suite | tail -4
done
