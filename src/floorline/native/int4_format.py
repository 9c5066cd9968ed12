"""floorline's W4A16 int4 format: group 128 along the input, a bf16 scale and a bf16 zero per group; two layouts.

w = (code - zero) * scale, codes 0..15 (round-to-nearest, asymmetric; quant/int4.py quantises). The same bytes in
either layout: N*K/2 of codes, N*K/128 * 2 of scales and as many of zeros (floor.py counts them).

`rows` (the Triton GEMV's, native/gemv.py): words int32 (N, K/8), row-major along K; in each group of 128 inputs
  code j (bits 4j..4j+3) of the group's word i (0..15) is input 16j + i. scales, zeros bf16 (N, K/128).
`mma` (the CUDA GEMV's, native/int4_cuda.py): 16-row tiles, each read as tensor-core A fragments with no shuffles.
  words int32 (N/16, K/64 * 128): per tile and 64-input block, 32 lanes x 4 words (one 16-byte load a lane); word j
  of lane (g, t) = (lane // 4, lane % 4) holds the eight codes of mma.m16n8k16 step j (inputs k0 = 64b + 16j + ...):
    nibble  0: row g, k0+2t    1: row g+8, k0+2t    2: row g, k0+2t+8    3: row g+8, k0+2t+8
    nibble  4: row g, k0+2t+1  5: row g+8, k0+2t+1  6: row g, k0+2t+9    7: row g+8, k0+2t+9
  so one and-or (LOP3) of the word, or of the word >> 8, drops two codes into the mantissas of an fp16 pair (the
  magic number 1024; rows g+8 land 16x larger, an exact power of two the kernel folds into their scale).
  scales, zeros bf16 (N/16, K/128 * 16): per tile and group its 16 rows in the order 0, 8, 1, 9, ..., 7, 15, so lane g
  reads the pair (row g, row g+8) as one 32-bit word.
Both stack by rows (fusing q/k/v or gate/up is a concatenation along dim 0), the `mma` layout in whole tiles.
"""

from __future__ import annotations

import torch

GROUP = 128  # inputs per scale and zero
WORDS_PER_GROUP = GROUP // 8  # `rows`: word i of a group holds its inputs i, i + 16, ..., i + 112
TILE = 16  # `mma`: rows per tile
LAYOUTS = ("rows", "mma")


def pack_words(codes: torch.Tensor) -> torch.Tensor:
    """(..., 8) codes 0..15 -> int32 words, code i in bits 4i..4i+3."""
    shifts = torch.arange(0, 32, 4, device=codes.device, dtype=torch.int64)
    v = (codes.to(torch.int64) << shifts).sum(-1)
    return torch.where(v >= 1 << 31, v - (1 << 32), v).to(torch.int32)  # two's complement of the top bit


def unpack_words(words: torch.Tensor) -> torch.Tensor:
    """int32 words (...) -> (..., 8) codes, code i from bits 4i..4i+3."""
    shifts = torch.arange(0, 32, 4, device=words.device, dtype=torch.int32)
    return (words.unsqueeze(-1) >> shifts) & 0xF


def mma_fits(n: int, k: int) -> str | None:
    """Why an (n, k) matrix cannot take the `mma` layout, or None."""
    if n % TILE or k % GROUP:
        return f"the mma layout needs rows a multiple of {TILE} and inputs a multiple of {GROUP} ({n}x{k})"
    return None


def pack(codes: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, layout: str):
    """codes (N, K) 0..15, scales and zeros (N, K/128) -> (words, scales, zeros) in `layout`."""
    n, k = codes.shape
    if layout == "rows":
        order = codes.reshape(n, k // GROUP, 8, WORDS_PER_GROUP).transpose(2, 3)  # [row, group, word i, code j]
        return pack_words(order).reshape(n, k // 8), scales, zeros
    if layout != "mma":
        raise ValueError(f"unknown int4 layout {layout!r}: one of {LAYOUTS}")
    if (why := mma_fits(n, k)) is not None:
        raise ValueError(why)
    nt, kb = n // TILE, k // 64
    # codes[16t + 8h + g, 64b + 16j + 8u + 2t' + o] -> [t, b, g, t', j, (o, u, h)]: nibble h + 2u + 4o
    c = codes.reshape(nt, 2, 8, kb, 4, 2, 4, 2)  # t, h, g, b, j, u, t', o
    c = c.permute(0, 3, 2, 6, 4, 7, 5, 1)  # t, b, g, t', j, o, u, h
    words = pack_words(c.reshape(nt, kb, 8, 4, 4, 8)).reshape(nt, kb * 128)
    return words, _tile_pairs(scales), _tile_pairs(zeros)


def _tile_pairs(t: torch.Tensor) -> torch.Tensor:
    """(N, G) per-row values -> (N/16, G * 16): per tile and group rows 0, 8, 1, 9, ..., 7, 15."""
    n, g = t.shape
    return t.reshape(n // TILE, 2, 8, g).permute(0, 3, 2, 1).reshape(n // TILE, g * TILE).contiguous()


def _untile_pairs(t: torch.Tensor) -> torch.Tensor:
    nt, gt = t.shape
    g = gt // TILE
    return t.reshape(nt, g, 8, 2).permute(0, 3, 2, 1).reshape(nt * TILE, g)


def codes_of(words: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, layout: str = "rows"):
    """The inverse of pack: (codes (N, K) int32, scales (N, K/128), zeros (N, K/128))."""
    if layout == "rows":
        n, kw = words.shape
        c = unpack_words(words).reshape(n, kw // WORDS_PER_GROUP, WORDS_PER_GROUP, 8).transpose(2, 3)
        return c.reshape(n, kw * 8), scales, zeros
    nt, w = words.shape
    kb = w // 128
    c = unpack_words(words.reshape(nt, kb, 8, 4, 4))  # t, b, g, t', j, (o, u, h)
    c = c.reshape(nt, kb, 8, 4, 4, 2, 2, 2).permute(0, 7, 2, 1, 4, 6, 3, 5)  # t, h, g, b, j, u, t', o
    return c.reshape(nt * TILE, kb * 64), _untile_pairs(scales), _untile_pairs(zeros)


def dequant(words: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, layout: str = "rows") -> torch.Tensor:
    """fp32 (N, K) weights of either layout: (code - zero) * scale."""
    codes, s, z = codes_of(words, scales, zeros, layout)
    g = codes.shape[1] // s.shape[1]
    return (codes.float() - z.float().repeat_interleave(g, 1)) * s.float().repeat_interleave(g, 1)
