# the device call that made call3/ (one H200; $OUT is the call's output folder): the GPU tests behind issues 38 and
# 39's correctness claims at the final sources (6f193f1e9096acbb): each small model and each 7-8B model (bf16, int4)
# against HF fp32 over greedy steps, the step replaying real tokens, every bf16 tile, the merge inside o, the
# persistent layers and their wait that cannot be met, the KV prefetch
TESTS_K="small_models_agree or agrees_with_hf_in_bf16 or cannot_be_met or merge_inside_o or replays_real_tokens or persistent_layers or kv_prefetch or every_bf16_tile" \
  OUT=$OUT timeout 560 bash scripts/gpu_check.sh tests | tail -40
