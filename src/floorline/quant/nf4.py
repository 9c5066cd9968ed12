"""`nf4`: bitsandbytes 4-bit NormalFloat (Linear4bit, compute in the model's dtype; its batch-1 GEMV kernel).

Stored per matrix: two 4-bit codes per byte (uint8), one fp32 absmax per block of 64 consecutive weights, and the
16-entry fp32 code book. No double quantisation (compress_statistics=False, transformers' default for nf4).
The quantiser is the library's own (blockwise absmax, nearest NF4 level): it runs on random or real weights alike.
"""

from __future__ import annotations

import torch

from floorline.core import floor
from floorline.quant.base import Backend, Packed

BLOCK = 64


class NF4(Backend):
    name = "nf4"
    library = "bitsandbytes"
    dist = "bitsandbytes"
    extra = "nf4"
    devices = ("cuda", "cpu")
    dtypes = ("bf16", "fp16")
    quantiser = "bitsandbytes quantize_4bit (blockwise absmax 64, nearest NF4 level)"
    kernel = "bitsandbytes gemv_4bit"

    def format(self, dense_bytes: int = 2) -> floor.WeightFormat:
        # 4 bits per weight + a 4-byte absmax per 64 weights (0.5 bit/weight) + a 64-byte code book per matrix
        return floor.WeightFormat(bits=4, group_size=BLOCK, scale_bits=32, zero_bits=0, table_bytes=16 * 4,
                                  dense_bytes=dense_bytes, name="bitsandbytes nf4, block 64, fp32 absmax")

    def supports(self, out_features: int, in_features: int) -> str | None:
        # blocks run over the flattened matrix; whole rows of blocks keep the accounting per row exact
        return None if in_features % BLOCK == 0 else f"in_features must be a multiple of {BLOCK}"

    def pack(self, linear: torch.nn.Linear) -> Packed:
        import bitsandbytes as bnb

        w = linear.weight.data
        m = bnb.nn.Linear4bit(linear.in_features, linear.out_features, bias=linear.bias is not None,
                              compute_dtype=w.dtype, compress_statistics=False, quant_type="nf4", device="meta")
        m.weight = bnb.nn.Params4bit(w, requires_grad=False, quant_type="nf4", compress_statistics=False,
                                     blocksize=BLOCK)
        if linear.bias is not None:
            m.bias = torch.nn.Parameter(linear.bias.data, requires_grad=False)
        m = m.to(w.device)  # Params4bit quantises on .to(device), even on the device it is already on
        qs = m.weight.quant_state
        return Packed(m, reference(m.weight.data, qs.absmax, qs.code, tuple(w.shape)),
                      [m.weight.data, qs.absmax, qs.code])


def reference(packed: torch.Tensor, absmax: torch.Tensor, code: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """floorline's own NF4 dequantisation: the high nibble is the first weight of a byte; code[nibble] * absmax."""
    b = packed.reshape(-1).to(torch.int64)
    nib = torch.stack([b >> 4, b & 0xF], dim=1).reshape(-1)
    vals = code.float()[nib].reshape(-1, BLOCK) * absmax.float().reshape(-1, 1)
    return vals.reshape(shape)
