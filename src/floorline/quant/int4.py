"""`int4`: floorline's own W4A16 format (native/int4_format.py) and GEMVs, the int4 path of mode `native`.

Group 128 along the input, a bf16 scale and a bf16 zero per group: w = (code - zero) * scale. On a GPU that builds
it (compute capability >= 8.0, NVRTC) the matrices take the `mma` layout and batch-1 inputs run the CUDA GEMV
(native/int4_cuda.py); elsewhere the `rows` layout and the Triton GEMV (native/gemv.py), or its torch reference
on the CPU. The quantiser is floorline's round-to-nearest (asymmetric, per group; no calibration data). More rows
(prefill) dequantise and multiply in torch.
"""

from __future__ import annotations

import functools
import importlib.util

import torch

from floorline.core import floor
from floorline.native import int4_format as F
from floorline.quant.base import Backend, Packed, dequant, rtn


@functools.lru_cache(maxsize=None)
def cuda_gemv_unavailable(device: torch.device) -> str | None:
    """Why the CUDA GEMV will not serve int4 on `device` (one line), or None."""
    from floorline.native import int4_cuda

    return int4_cuda.unavailable(device)


def layout_for(device: torch.device, out_features: int, in_features: int) -> str:
    """`mma` where the CUDA GEMV runs and the shape fits its tiles, else `rows`."""
    if device.type == "cuda" and cuda_gemv_unavailable(device) is None and F.mma_fits(out_features, in_features) \
            is None:
        return "mma"
    return "rows"


class Int4Linear(torch.nn.Module):
    def __init__(self, words, scales, zeros, bias, in_features: int, out_features: int, layout: str = "rows"):
        super().__init__()
        self.words, self.scales, self.zeros, self.bias = words, scales, zeros, bias
        self.bias_f32 = None if bias is None else bias.float()  # the GEMVs add an fp32 bias
        self.in_features, self.out_features, self.layout = in_features, out_features, layout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from floorline.native import gemv, refs  # here, not at import: gemv loads Triton

        x2 = x.reshape(-1, self.in_features)
        kw = dict(scales=self.scales, zeros=self.zeros, bias=self.bias_f32, layout=self.layout)
        if x2.shape[0] == 1 and x.is_cuda and self.layout == "mma" and x.dtype == torch.bfloat16:
            # bf16 in, bf16 out from the kernel itself: no casts around it (HF's modes call this once per matrix)
            y = torch.empty(self.out_features, device=x.device, dtype=torch.bfloat16)
            gemv.tri_gemv(self.words, x2[0], out=y, **kw)
            return y.view(*x.shape[:-1], self.out_features)
        if x2.shape[0] == 1:
            y = (gemv.tri_gemv if x.is_cuda else refs.ref_gemv)(self.words, x2[0], **kw).view(1, -1)
        else:
            y = x2.float() @ F.dequant(self.words, self.scales, self.zeros, self.layout).t()
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
    kernel = ("floorline W4A16 GEMV: CUDA (NVRTC, tensor-core mma, native/int4_cuda.py) where it builds, else Triton "
              "(native/gemv.py); torch reference on the CPU")

    def missing(self, device_type: str) -> str | None:
        if device_type == "cuda" and importlib.util.find_spec("triton") is None:
            return f"{self.name} needs Triton on a GPU: pip install triton (it comes with CUDA builds of torch)"
        return None

    def version(self) -> str | None:
        from floorline import __version__

        return __version__

    def format(self, dense_bytes: int = 2) -> floor.WeightFormat:
        # 4 bits per weight + a bf16 scale and a bf16 zero per group of 128 (either layout: the same bytes)
        return floor.WeightFormat(bits=4, group_size=F.GROUP, scale_bits=16, zero_bits=16, dense_bytes=dense_bytes,
                                  name="floorline W4A16 g128: int32 words, bf16 scale + bf16 zero")

    def supports(self, out_features: int, in_features: int) -> str | None:
        return None if in_features % F.GROUP == 0 else f"in_features must be a multiple of {F.GROUP}"

    def pack(self, linear: torch.nn.Linear, layout: str | None = None) -> Packed:
        w = linear.weight.data
        layout = layout or layout_for(w.device, linear.out_features, linear.in_features)
        codes, scales, zeros = rtn(w, F.GROUP)
        s = scales.to(torch.bfloat16)
        z = zeros.to(torch.bfloat16)  # integers 0..15: exact in bf16
        words, ts, tz = F.pack(codes, s, z, layout)
        bias = None if linear.bias is None else linear.bias.data
        m = Int4Linear(words, ts, tz, bias, linear.in_features, linear.out_features, layout)
        return Packed(m, dequant(codes, s, z), [words, ts, tz])
