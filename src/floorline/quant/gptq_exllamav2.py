"""`gptq-exllamav2`: GPTQ int4, group 128, run by ExLlamaV2's kernels (fp16 activations only).

Stored per matrix (GPTQ's layout, no act-order, so no g_idx): qweight int32 (in/8, out), eight codes per word;
scales fp16 (in/128, out); qzeros int32 (in/128, out/8), eight 4-bit zeros per word, stored as zero - 1 (GPTQ's
convention: ExLlamaV2 adds the 1 back). make_q_matrix shuffles qweight in place into ExLlamaV2's order.
The quantiser is floorline's round-to-nearest (asymmetric, per group): GPTQ proper needs calibration data.
Prefill-sized inputs (more than ExLlamaV2's 50 rows) are dequantised into one shared fp16 scratch and multiplied by
cuBLAS, as ExLlamaV2 does; batch-1 decode runs its q4 GEMV kernel.
"""

from __future__ import annotations

import torch

from floorline.core import floor
from floorline.quant.base import GROUP, Backend, Packed, dequant, pack_int4_int32, rtn


class ExLlamaV2Linear(torch.nn.Module):
    def __init__(self, tensors: dict, scratch: torch.Tensor, in_features: int, out_features: int):
        super().__init__()
        from exllamav2.ext import exllamav2_ext, make_q_matrix

        self.in_features, self.out_features = in_features, out_features
        self.tensors, self.scratch = tensors, scratch  # the kernel holds raw pointers: keep them alive
        self.ext = exllamav2_ext
        self.handle = make_q_matrix(tensors, scratch, max_dq_rows=in_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, self.in_features)
        y = torch.empty(x2.shape[0], self.out_features, dtype=torch.float16, device=x.device)
        self.ext.gemm_half_q_half(x2, self.handle, y, False)
        return y.view(*x.shape[:-1], self.out_features)

    def __del__(self):
        h, self.handle = getattr(self, "handle", None), None
        if h is not None:
            self.ext.free_q_matrix(h)


class GptqExllamaV2(Backend):
    name = "gptq-exllamav2"
    library = "exllamav2"
    dist = "exllamav2"
    extra = "exllamav2"
    dtypes = ("fp16",)
    quantiser = "floorline round-to-nearest, asymmetric int4, group 128 (GPTQ format, no calibration)"
    kernel = "ExLlamaV2 gemm_half_q_half (GPTQ path)"

    def __init__(self):
        self.scratch = None

    def format(self, dense_bytes: int = 2) -> floor.WeightFormat:
        # 4 bits per weight + per group of 128: an fp16 scale (16 bits) and a 4-bit zero
        return floor.WeightFormat(bits=4, group_size=GROUP, scale_bits=16, zero_bits=4, dense_bytes=dense_bytes,
                                  name="GPTQ int4 g128: int32 qweight, fp16 scales, 4-bit zeros")

    def supports(self, out_features: int, in_features: int) -> str | None:
        if in_features % GROUP or out_features % 8:
            return f"needs in_features a multiple of {GROUP} and out_features a multiple of 8"
        return None

    def begin(self, shapes, device) -> None:
        # one fp16 scratch for the prefill path's dequantised matrix, as large as the largest matrix
        self.scratch = torch.empty(max(o * i for o, i in shapes), dtype=torch.float16, device=device)

    def pack(self, linear: torch.nn.Linear) -> Packed:
        w = linear.weight.data
        if self.scratch is None or self.scratch.numel() < w.numel():  # pack without begin(): a scratch of its own
            self.begin([tuple(w.shape)], w.device)  # (earlier modules keep theirs alive)
        codes, scales, zeros = rtn(w, GROUP, min_zero=1)
        s16 = scales.half()
        t = {"qweight": pack_int4_int32(codes.t(), 0),  # (in/8, out)
             "qzeros": pack_int4_int32((zeros - 1).t(), 1),  # (groups, out/8), zero - 1
             "scales": s16.t().contiguous()}  # (groups, out)
        if linear.bias is not None:
            t["bias"] = linear.bias.data.half()
        ref = dequant(codes, s16, zeros)
        stored = [t["qweight"], t["qzeros"], t["scales"]]
        m = ExLlamaV2Linear(t, self.scratch, linear.in_features, linear.out_features)
        return Packed(m, ref, stored)
