"""`awq-marlin`: int4 through the Marlin kernel (fp16 activations only).

Marlin ships in vLLM's wheel (hundreds of MB), in gptqmodel (source only) and in IST-DASLab's `marlin` (source only,
not on PyPI). floorline uses IST-DASLab's package when it is importable (`marlin` + its `marlin_cuda` extension,
built from source next to the local torch). That kernel is symmetric: no zero points, so the format is GPTQ-style
symmetric int4 (code - 8) * scale with an fp16 scale per group of 128 inputs; AWQ's zero points have no slot in it.
Stored per matrix: B int32 (in/16, out*2), eight codes per word in Marlin's tile order; s fp16 (in/128, out) in
Marlin's scale order. The quantiser is floorline's round-to-nearest (symmetric, per group): no calibration data.
The permutations are the library's own (`marlin._perm`, `marlin._scale_perm`), applied on the GPU here because
`Layer.pack` works in numpy on the CPU (minutes for a 7B model).
"""

from __future__ import annotations

import importlib.util

import torch

from floorline.core import floor
from floorline.quant.base import GROUP, Backend, Packed, dequant, pack_int4_int32, rtn

TILE = 16


class MarlinLinear(torch.nn.Module):
    def __init__(self, B: torch.Tensor, s: torch.Tensor, bias: torch.Tensor | None, in_features: int,
                 out_features: int):
        super().__init__()
        import marlin

        self.mul = marlin.mul
        self.in_features, self.out_features = in_features, out_features
        self.B, self.s, self.bias = B, s, bias
        # Marlin's reduction scratch: out/128 x 16 ints, zero between calls (the kernel leaves it zeroed)
        self.workspace = torch.zeros(out_features // 128 * 16, dtype=torch.int32, device=B.device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, self.in_features)
        y = torch.empty(x2.shape[0], self.out_features, dtype=x.dtype, device=x.device)
        self.mul(x2, self.B, y, self.s, self.workspace)
        if self.bias is not None:
            y += self.bias
        return y.view(*x.shape[:-1], self.out_features)


class AwqMarlin(Backend):
    name = "awq-marlin"
    library = "marlin"
    dist = "marlin"
    extra = "marlin"
    dtypes = ("fp16",)
    quantiser = "floorline round-to-nearest, symmetric int4, group 128 (Marlin has no zero points)"
    kernel = "IST-DASLab Marlin (marlin_cuda.mul)"

    def install_hint(self) -> str:
        return ("pip install git+https://github.com/IST-DASLab/marlin (not on PyPI: builds its CUDA kernel against "
                "your torch); vLLM's and gptqmodel's Marlin are not wired in")

    def missing(self, device_type: str) -> str | None:
        why = super().missing(device_type)
        if why is None and importlib.util.find_spec("marlin_cuda") is None:
            why = f"{self.name}: the marlin package is here but its marlin_cuda extension is not built; " \
                  f"{self.install_hint()}"
        return why

    def format(self, dense_bytes: int = 2) -> floor.WeightFormat:
        # 4 bits per weight + an fp16 scale per group of 128; symmetric: no zeros
        return floor.WeightFormat(bits=4, group_size=GROUP, scale_bits=16, zero_bits=0, dense_bytes=dense_bytes,
                                  name="Marlin int4 symmetric g128: int32 tiles, fp16 scales")

    def supports(self, out_features: int, in_features: int) -> str | None:
        if in_features % 128 or out_features % 256:
            return "Marlin needs in_features a multiple of 128 and out_features a multiple of 256"
        return None

    def pack(self, linear: torch.nn.Linear) -> Packed:
        import marlin

        w = linear.weight.data
        n, k = w.shape
        codes, scales, zeros = rtn(w, GROUP, symmetric=True)  # codes (n, k), zero 8
        s16 = scales.half()
        ref = dequant(codes, s16, zeros)
        # Layer.pack's layout: codes (k, n) -> 16x16 tiles -> the kernel's permutation -> 8 codes per int32
        perm = marlin._perm.to(w.device)
        t = codes.t().to(torch.int64).reshape(k // TILE, TILE, n // TILE, TILE).permute(0, 2, 1, 3)
        t = t.reshape(k // TILE, n * TILE)
        t = t.reshape(-1, perm.numel())[:, perm].reshape(t.shape)
        B = pack_int4_int32(t, 1)  # Layer.pack's `q |= res[:, i::8] << 4 * i`: code 8j + i in nibble i of word j
        sp = torch.tensor(marlin._scale_perm, device=w.device)
        s = s16.t().contiguous().reshape(-1, sp.numel())[:, sp].reshape(-1, n).contiguous()
        bias = None if linear.bias is None else linear.bias.data.half()
        return Packed(MarlinLinear(B, s, bias, k, n), ref, [B, s])
