# the device call that made call2/ (one H200; $OUT is the call's output folder): at the final sources (the whole-row
# tiles; glu keeps two rows at least), the GPU test of every bf16 tile for the glu shapes, then qwen2.5-0.5b ctx 128
# A/B: this tree against the sources before the whole-row tiles (out/old/src: `git archive e3e5e68 src`, carried),
# interleaved, two fresh processes a side (scripts/h200_suite.toml's small group)
export PYTHONUNBUFFERED=1
nvidia-smi > "$OUT/nvidia-smi.txt"
PYTHONPATH=$PWD/src TESTS_K="every_bf16_tile and gate_up" OUT=$OUT/tests timeout 80 bash scripts/gpu_check.sh tests | tail -2
for round in 1 2; do
  SUITE_GROUPS=small SUITE_ONLY="qwen2.5-0.5b:native" SUITE_SRC=out/old/src SUITE_BUDGET=130 OUT=$OUT/r$round \
    bash scripts/gpu_check.sh suite | tail -4
done
