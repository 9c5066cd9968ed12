"""`int4-gemlite`: gemlite A16W4 (Triton kernels), group 128, bf16 activations.

Stored per matrix: W_q, two codes per byte packed into int32 words along the input; scales bf16 (in/128, out);
zeros bf16 (in/128, out) holding -zero * scale (gemlite's fma mode: w = code * scale + zero'). The quantiser is
floorline's round-to-nearest (asymmetric, per group); gemlite packs whatever codes it is given. Its Triton kernels
autotune on the first call of each shape (about a minute for a 7B model's shapes), during conversion's check.
"""

from __future__ import annotations

import torch

from floorline.core import floor
from floorline.quant.base import GROUP, Backend, Packed, rtn


class Int4Gemlite(Backend):
    name = "int4-gemlite"
    library = "gemlite"
    dist = "gemlite"
    extra = "gemlite"
    quantiser = "floorline round-to-nearest, asymmetric int4, group 128"
    kernel = "gemlite Triton GEMV (A16W4)"
    # gemlite dequantises in bf16: code * scale and zero' are each up to ~8x a weight and each rounds to 2^-9 of
    # itself, so a weight can be off by ~2^-5 of its size; measured 1.8% on qwen2.5-7b's q_proj (a wrong layout: ~140%)
    check_tolerance = 5e-2

    def format(self, dense_bytes: int = 2) -> floor.WeightFormat:
        # 4 bits per weight + a bf16 scale and a bf16 (-zero * scale) per group of 128
        return floor.WeightFormat(bits=4, group_size=GROUP, scale_bits=16, zero_bits=16, dense_bytes=dense_bytes,
                                  name="gemlite A16W4 g128: int32-packed codes, bf16 scales and zeros")

    def supports(self, out_features: int, in_features: int) -> str | None:
        return None if in_features % GROUP == 0 else f"in_features must be a multiple of {GROUP}"

    def pack(self, linear: torch.nn.Linear) -> Packed:
        from gemlite import DType, GemLiteLinear

        w = linear.weight.data
        codes, scales, zeros = rtn(w, GROUP)
        s = scales.to(w.dtype)
        z = zeros.to(w.dtype)
        m = GemLiteLinear(4, group_size=GROUP, in_features=linear.in_features, out_features=linear.out_features,
                          input_dtype=DType.BF16, output_dtype=DType.BF16)
        bias = None if linear.bias is None else linear.bias.data
        m.pack(codes, s, z, bias)
        # what the kernel applies: code * scale + bf16(-zero * scale), as pack() computes it
        g = s.float().repeat_interleave(GROUP, 1)
        zs = (-z.float() * s.float()).to(w.dtype).float().repeat_interleave(GROUP, 1)
        ref = codes.float() * g + zs
        return Packed(m, ref, [m.W_q, m.scales, m.zeros])
