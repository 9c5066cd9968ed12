"""`int4-tinygemm`: torchao Int4WeightOnlyConfig with int4_packing_format="tile_packed_to_4d" (tinygemm, bf16 only).

Stored per matrix: qdata int32, the codes tiled for tinygemm's tensor-core kernel, and scale_and_zero bf16
(in/128, out, 2): a scale and a float-domain zero per group, w = (code - 8) * scale + zero. torchao pads the matrix
to in a multiple of 1024 and out a multiple of 8 before packing, and the kernel reads the padding: qwen2.5-7b's 3584
inputs are stored as 4096 (+14%). The quantiser is torchao's own (tinygemm's asymmetric min/max, per group).
"""

from __future__ import annotations

import math

import torch

from floorline.core import floor
from floorline.quant.base import GROUP, Backend, Packed

PAD_IN, PAD_OUT = 1024, 8  # Int4TilePackedTo4dTensor.from_hp: find_multiple(in, 1024), find_multiple(out, ntile 8)


class Int4Tinygemm(Backend):
    name = "int4-tinygemm"
    library = "torchao"
    dist = "torchao"
    extra = "torchao"
    quantiser = "torchao's tinygemm quantiser (asymmetric min/max per group of 128, float zero point)"
    kernel = "torch aten._weight_int4pack_mm (tinygemm)"

    def format(self, dense_bytes: int = 2) -> floor.WeightFormat:
        # 4 bits per padded weight + a bf16 scale and a bf16 zero per group of 128 of the padded matrix
        return floor.WeightFormat(bits=4, group_size=GROUP, scale_bits=16, zero_bits=16, pad_in=PAD_IN,
                                  pad_out=PAD_OUT, dense_bytes=dense_bytes,
                                  name="torchao tinygemm int4 g128 (tile_packed_to_4d), bf16 scale+zero, padded")

    def supports(self, out_features: int, in_features: int) -> str | None:
        return None if in_features % GROUP == 0 else f"in_features must be a multiple of {GROUP}"

    def pack(self, linear: torch.nn.Linear) -> Packed:
        from torchao.quantization import Int4WeightOnlyConfig, quantize_

        w = linear.weight.data
        ref = reference(w)
        # set_inductor_config=False: torchao would otherwise retune inductor for every mode, compile included
        quantize_(linear, Int4WeightOnlyConfig(group_size=GROUP, int4_packing_format="tile_packed_to_4d",
                                               set_inductor_config=False))
        q = linear.weight
        return Packed(linear, ref, [q.qdata, q.scale_and_zero])


def reference(w: torch.Tensor) -> torch.Tensor:
    """The dequantised weights from torchao's own quantisation primitives (the ones from_hp calls), in fp32:
    (code - 8) * scale + zero on the padded matrix, cut back to (out, in)."""
    from torchao.quantization.quant_primitives import (
        MappingType,
        _choose_qparams_affine_tinygemm,
        _quantize_affine_tinygemm,
    )

    out_f, in_f = w.shape
    wp = torch.nn.functional.pad(w, (0, math.ceil(in_f / PAD_IN) * PAD_IN - in_f,
                                     0, math.ceil(out_f / PAD_OUT) * PAD_OUT - out_f))
    scale, zero = _choose_qparams_affine_tinygemm(wp, MappingType.ASYMMETRIC, (1, GROUP), torch.int32, 0, 15,
                                                  scale_dtype=w.dtype, zero_point_dtype=w.dtype)
    codes = _quantize_affine_tinygemm(wp, [1, GROUP], scale, zero, torch.int32, 0, 15)
    scale = scale.float().reshape(wp.shape[0], -1).repeat_interleave(GROUP, 1)
    zero = zero.float().reshape(wp.shape[0], -1).repeat_interleave(GROUP, 1)
    return ((codes.float() - 8) * scale + zero)[:out_f, :in_f]
