# the device call that made call3/ (one H200; $OUT is the call's output folder): the attention folded into the bf16 o
# GEMV for short caches (native/attn_o.py, a step-tuner candidate). Its GPU test (the step with every candidate
# against the step without, three models), then one A/B round each of qwen2.5-0.5b and llama-3.2-1b ctx 128: this
# tree against the sources before it (out/old/src: `git archive 15ff662 src`, carried)
export PYTHONUNBUFFERED=1
nvidia-smi > "$OUT/nvidia-smi.txt"
PYTHONPATH=$PWD/src TESTS_K="attention_inside_o" OUT=$OUT/tests timeout 200 bash scripts/gpu_check.sh tests | tail -6
SUITE_GROUPS=small SUITE_ONLY="qwen2.5-0.5b:native llama-3.2-1b:native:none" SUITE_SRC=out/old/src SUITE_BUDGET=300 \
  OUT=$OUT/ab timeout 330 bash scripts/gpu_check.sh suite | tail -6
