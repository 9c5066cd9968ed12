"""`int4`: floorline's own W4A16 format and GEMV kernel (native/kernels.py), the int4 path of mode `native`.

Packed format, per (out, in) matrix, groups of 128 along the input:
  words  int32 (out, in/8): in each group of 128 inputs, code j (bits 4j..4j+3) of the group's word i (0..15) is
         input 16j + i of the group, so the kernel reads each code's inputs as one contiguous vector
  scales bf16 (out, in/128), zeros bf16 (out, in/128): w = (code - zero) * scale; zeros hold the integer zero point
Row-major along the input, so fusing matrices (q/k/v, gate/up) is a row concatenation. The quantiser is floorline's
round-to-nearest (asymmetric, per group; no calibration data). Batch-1 inputs run the Triton GEMV on a GPU and its
torch reference on the CPU; more rows (prefill) dequantise and multiply in torch.
"""

from __future__ import annotations

import importlib.util

import torch

from floorline import floor
from floorline.quant.base import Backend, Packed, dequant, pack_int4_int32, rtn

GROUP = 128


def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """(out, in) codes 0..15 -> the words above: each group's 128 codes reordered so that word i takes inputs
    i, i + 16, ..., i + 112, then eight to a word, the first lowest (the inverse of kernels.dequant_int4)."""
    n, k = codes.shape
    order = codes.reshape(n, k // GROUP, 8, GROUP // 8).transpose(2, 3).reshape(n, k)
    return pack_int4_int32(order, 1)


class Int4Linear(torch.nn.Module):
    def __init__(self, words, scales, zeros, bias, in_features: int, out_features: int):
        super().__init__()
        self.words, self.scales, self.zeros, self.bias = words, scales, zeros, bias
        self.in_features, self.out_features = in_features, out_features
        from floorline.native import kernels  # here, not at import: it loads Triton

        self.kernels = kernels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        K = self.kernels
        x2 = x.reshape(-1, self.in_features)
        kw = dict(scales=self.scales, zeros=self.zeros, bias=self.bias)
        if x2.shape[0] == 1:
            y = (K.tri_gemv if x.is_cuda else K.ref_gemv)(self.words, x2[0], **kw).view(1, -1)
        else:
            y = x2.float() @ K.dequant_int4(self.words, self.scales, self.zeros).t()
            if self.bias is not None:
                y = y + self.bias.float()
        return y.to(x.dtype).view(*x.shape[:-1], self.out_features)


class Int4Native(Backend):
    name = "int4"
    library = "triton"
    dist = "triton"
    extra = "native"
    devices = ("cuda", "cpu")
    dtypes = ("bf16", "fp16", "fp32")
    quantiser = "floorline round-to-nearest, asymmetric int4, group 128"
    kernel = "floorline Triton W4A16 GEMV (native/kernels.py); torch reference on the CPU"

    def missing(self, device_type: str) -> str | None:
        if device_type == "cuda" and importlib.util.find_spec("triton") is None:
            return f"{self.name} needs Triton on a GPU: pip install triton (it comes with CUDA builds of torch)"
        return None

    def version(self) -> str | None:
        from floorline import __version__

        return __version__

    def format(self, dense_bytes: int = 2) -> floor.WeightFormat:
        # 4 bits per weight + a bf16 scale and a bf16 zero per group of 128
        return floor.WeightFormat(bits=4, group_size=GROUP, scale_bits=16, zero_bits=16, dense_bytes=dense_bytes,
                                  name="floorline W4A16 g128: int32 words along K, bf16 scale + bf16 zero")

    def supports(self, out_features: int, in_features: int) -> str | None:
        return None if in_features % GROUP == 0 else f"in_features must be a multiple of {GROUP}"

    def pack(self, linear: torch.nn.Linear) -> Packed:
        w = linear.weight.data
        codes, scales, zeros = rtn(w, GROUP)
        s = scales.to(torch.bfloat16)
        z = zeros.to(torch.bfloat16)  # integers 0..15: exact in bf16
        words = pack_int4(codes)
        bias = None if linear.bias is None else linear.bias.data
        m = Int4Linear(words, s, z, bias, linear.in_features, linear.out_features)
        return Packed(m, dequant(codes, s, z), [words, s, z])
