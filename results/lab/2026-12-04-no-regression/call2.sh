# the device call that made call2/ (one H200; $OUT is the call's output folder): issue 38's no-regression cells at the
# final sources (6f193f1e9096acbb): qwen2.5-7b and llama-3.1-8b, ctx 2048 and 16384 bf16, ctx 2048 int4, one fresh
# `floorline run --mode native` process each (scripts/h200_suite.toml's groups native, native-int4, native-long)
export PYTHONUNBUFFERED=1
nvidia-smi > "$OUT/nvidia-smi.txt"
SUITE_GROUPS="native,native-int4,native-long" SUITE_BUDGET=560 OUT=$OUT bash scripts/gpu_check.sh suite | tail -20
