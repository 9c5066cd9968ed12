"""GGUF / ggml storage types and the floor of a model stored in them (pure Python, no torch).

Owns: bits per weight of ggml's block formats, `--bpw` parsing (a number or a type name), and the floor when the
weights are given as an average width (`--bpw`) or as a total size (llama-bench's model_size). floor.py stays the
accounting of record; this module rescales its per-component bytes.

Bits per weight are the block layouts of ggml (ggml-common.h: bytes per block / weights per block), e.g. Q4_0 is
32 weights in 16 B of 4-bit codes + a 2 B fp16 scale = 18 B / 32 = 4.5 bits; Q4_K is 256 weights in 128 B of codes +
12 B of 6-bit sub-block scales and mins + two fp16 = 144 B / 256 = 4.5 bits; Q6_K 210 B / 256 = 6.5625 bits.
Mixes such as Q4_K_M (Q4_K matrices with some Q6_K: attn_v, ffn_down halves, output) have no fixed width: their
average is 8 x file bytes / parameters (llama.cpp prints it as "BPW" when it loads a file, llama-bench reports the
bytes), which `--bpw` takes as a number.
"""

from __future__ import annotations

import math

from floorline.core import floor
from floorline.core.arch import Arch
from floorline.core.errors import UserError

# type -> (bytes per block, weights per block), ggml's block structs (ggml-common.h)
BLOCKS: dict[str, tuple[int, int]] = {
    "F32": (4, 1), "F16": (2, 1), "BF16": (2, 1),
    "Q4_0": (18, 32), "Q4_1": (20, 32), "Q5_0": (22, 32), "Q5_1": (24, 32), "Q8_0": (34, 32),
    "Q2_K": (84, 256), "Q3_K": (110, 256), "Q4_K": (144, 256), "Q5_K": (176, 256), "Q6_K": (210, 256),
    "IQ4_NL": (18, 32), "IQ4_XS": (136, 256), "IQ3_XXS": (98, 256), "IQ2_XXS": (66, 256), "IQ2_XS": (74, 256),
    "TQ1_0": (54, 256), "TQ2_0": (66, 256), "MXFP4": (17, 32),
}
MIXES = ("Q2_K_S", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M")
WEIGHT_KEYS = ("decoder_matrices", "decoder_biases", "decoder_norms", "final_norm", "lm_head", "embedding_row",
               "embedding", "qk_norms", "attention_sinks", "router", "experts", "shared_expert")
# what a GGUF type quantises (routers, norms, biases and sinks stay f32 / f16 in llama.cpp's files)
MATRIX_KEYS = ("decoder_matrices", "lm_head", "embedding_row", "embedding", "experts", "shared_expert")


def bits_per_weight(type_name: str) -> float:
    """Bits per weight of a ggml storage type ('Q4_K', 'q8_0', 'f16')."""
    t = type_name.strip().upper()
    if t in BLOCKS:
        nbytes, n = BLOCKS[t]
        return nbytes * 8 / n
    if t in MIXES:
        raise UserError(f"{type_name} mixes several ggml types; give its average bits per weight as a number "
                        f"(8 x GGUF file bytes / parameters; llama.cpp prints it as BPW when it loads the file)")
    raise UserError(f"unknown ggml type {type_name!r}; use a number or one of {', '.join(BLOCKS)}")


def parse_bpw(spec: str) -> tuple[float, str]:
    """`--bpw 4.85` or `--bpw Q4_K`: (bits per weight, label)."""
    try:
        bpw = float(spec)
        label = f"bpw{bpw:g}"
    except ValueError:
        bpw, label = bits_per_weight(spec), spec.strip().lower()
    if not 1.0 <= bpw <= 32.0 or not math.isfinite(bpw):
        raise UserError(f"--bpw must be between 1 and 32 bits per weight, got {spec}")
    return bpw, label


def kv_element_bytes(type_name: str) -> float:
    """Bytes per cached element of a llama.cpp KV type (type_k / type_v: f16, q8_0, q4_0, ...)."""
    return bits_per_weight(type_name) / 8


def _rescale(c: dict[str, int], keys: tuple[str, ...], dense_bytes: int, bytes_per_element: float) -> dict[str, int]:
    return {k: (math.ceil(v / dense_bytes * bytes_per_element) if k in keys else v) for k, v in c.items()}


def _kv(a: Arch, ctx: int, k_bytes: float, v_bytes: float) -> tuple[int, int]:
    per_layer_token = a.kv_heads * a.head_dim * (k_bytes + v_bytes)  # K and V of one layer, one position
    positions = sum(floor.kv_positions_read(a, i, ctx) for i in range(a.layers))  # sliding layers: their window
    return math.ceil(positions * per_layer_token), math.ceil(a.layers * per_layer_token)


def floor_at_bpw(a: Arch, ctx: int, bpw: float, dtype: str = "bf16", convention: str = "strict") -> floor.Floor:
    """Every weight matrix (decoder, lm_head, embedding) at `bpw` bits per weight; norms, biases and the KV cache
    at `dtype`, as llama.cpp keeps them (its norms are f32: a few hundred KB on a 7B model)."""
    dense = floor.weight_format(dtype).dense_bytes
    c = floor.components(a, ctx, floor.weight_format(dtype), convention)
    return floor.Floor(convention, _rescale(c, MATRIX_KEYS, dense, bpw / 8))


def floor_from_size(a: Arch, ctx: int, weight_bytes: int, n_params: int | None, type_k: str = "f16",
                    type_v: str = "f16", convention: str = "strict") -> floor.Floor:
    """The floor when only the total weight bytes are known (llama-bench's model_size): every parameter at the
    file's average bytes per parameter (weight_bytes / n_params), so the paper convention's weights are exactly
    weight_bytes; strict leaves out the untied embedding matrix but one row at that average. KV at its llama.cpp
    types."""
    n = n_params or floor.parameter_count(a)
    c = floor.components(a, ctx, floor.weight_format("fp16"), convention)  # 2 B per element: counts x 2
    c = _rescale(c, WEIGHT_KEYS, 2, weight_bytes / n)
    read, write = _kv(a, ctx, kv_element_bytes(type_k), kv_element_bytes(type_v))
    c["kv_read"] = read
    if "kv_write" in c:
        c["kv_write"] = write
    return floor.Floor(convention, c)


def format_floor(a: Arch, ctx: int, dtype: str, convention: str, weight_bits: int | None = None,
                 group_size: int = 128, bpw: float | None = None) -> floor.Floor:
    """The floor with the weight matrices as a server holds them: `bpw` bits per weight (GGUF-style), or intN with
    groups (`weight_bits`), or dense `dtype`; norms, biases and the KV cache at `dtype`."""
    if bpw is not None:
        return floor_at_bpw(a, ctx, bpw, dtype, convention)
    return floor.floor(a, ctx, floor.weight_format(dtype, weight_bits, group_size), convention)
