"""floorline's own batch-1 decode path (mode `native`).

  options.py     the settings that change the timed step (NativeOptions: part of the run's config and its records)
  model.py       the decode model over the HF weights (fused q/k/v and gate/up, static KV cache); tp_model.py its
                 tensor-parallel shard
  refs.py        the torch references every kernel is checked against
  gemv.py        the Triton GEMV (RMSNorm prologue; bias, residual, silu(gate) * up epilogues; bf16 and int4 `rows`)
  mlp.py         a dense layer's whole MLP in one Triton kernel
  attention.py   flash-decoding with RoPE and the KV write (Triton chunks or attn_cuda's, Triton merge)
  o_merge.py     the o GEMV with the attention's merge folded in (split by query head; the step tuner's choice)
  ends.py        the step's first and last kernels (embedding row; argmax, next token and position)
  persist.py     every decoder layer in one persistent kernel (ticketed tasks, counters; NativeOptions persist)
  int4_format.py floorline's W4A16 format; int4_cuda.py its CUDA GEMV; attn_cuda.py the CUDA attention chunks
  nvrtc.py       CUDA C++ (the .cu files under cuda/) compiled at run time, cached, launched
  pdl.py         programmatic dependent launch
  tuner.py       every launch choice: tiles tuned per shape, then re-timed inside the whole step

Imports core and device only. Under TRITON_INTERPRET=1 the Triton kernels run on the CPU (the tests)."""

import os

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"  # Triton's own switch: its kernels run on the CPU
