"""The memory floor: bytes one batch-1 decode step must move, from the architecture alone.

Owns: per-component byte counts for the two conventions and any weight bit width, and bytes -> milliseconds.
Pure Python on purpose (no torch): it is the heart of the tool and is tested to the byte against instantiated models.

Conventions
- strict: what one decode step must touch at least. Every decoder weight once (matrices, biases, norms), the lm_head
  once (tied embeddings: the shared matrix once, as lm_head), one embedding row (a separate gather, so counted even when
  tied), the final norm, the KV cache read at the context length, the new token's K and V written.
- paper: the study's W + K. All parameter bytes (the whole embedding matrix too) plus the KV read at the context.
Not counted in either: activations (a few hidden-size vectors, KB), the logits (vocab x 4 B, under 1 MB), RoPE tables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from floorline.core.arch import Arch
from floorline.core.errors import UserError

CONVENTIONS = ("strict", "paper")
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


@dataclass(frozen=True)
class WeightFormat:
    """How the decoder's matrices are stored. Everything else (embeddings, lm_head, norms, biases) stays dense.

    bits=None: unquantised, `dense_bytes` per element. bits=8 or 4: packed codes plus, per group of `group_size`
    consecutive input elements of one output row, a scale of `scale_bits` and a zero point of `zero_bits` (0 for a
    symmetric format). group_size=None: one group per output row (per-channel). Library layouts add: `pad_in` /
    `pad_out` (the stored matrix is padded up to multiples of these, and the kernel reads the padding) and
    `table_bytes` (a per-matrix constant, e.g. a code book). `name` says which library format this is.
    """

    bits: int | None = None
    group_size: int | None = 128
    scale_bits: int = 16
    zero_bits: int = 16
    dense_bytes: int = 2
    pad_in: int = 1
    pad_out: int = 1
    table_bytes: int = 0
    name: str = ""

    def __post_init__(self):
        if self.bits not in (None, 8, 4):
            raise UserError(f"weight bits {self.bits} not supported; use 16 (unquantised), 8 or 4")
        if self.group_size is not None and self.group_size <= 0:
            raise UserError(f"group size must be positive, got {self.group_size}")

    def matrix_bytes(self, out_features: int, in_features: int) -> int:
        if self.bits is None:
            return out_features * in_features * self.dense_bytes  # e.g. bf16: 2 B per element
        n = math.ceil(out_features / self.pad_out) * self.pad_out  # tinygemm: out up to a multiple of 8
        k = math.ceil(in_features / self.pad_in) * self.pad_in  # tinygemm: in up to a multiple of 1024
        g = self.group_size or k
        groups = n * math.ceil(k / g)
        # packed codes: n x k x bits / 8 (4-bit: two codes per byte; qwen2.5-7b q_proj 3584 x 3584 -> 6.42 MB);
        # each group's scale and zero, each tensor rounded up to whole bytes (4-bit zeros: two per byte);
        # plus any per-matrix table
        return (math.ceil(n * k * self.bits / 8) + math.ceil(groups * self.scale_bits / 8)
                + math.ceil(groups * self.zero_bits / 8) + self.table_bytes)


def weight_format(dtype: str = "bf16", bits: int | None = None, group_size: int | None = 128) -> WeightFormat:
    if dtype not in DTYPE_BYTES:
        raise UserError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPE_BYTES)}")
    dense = DTYPE_BYTES[dtype]
    if bits == dense * 8:
        bits = None  # --weight-bits 16 with bf16 (32 with fp32): unquantised, at the dtype's own width
    elif bits not in (None, 8, 4):
        raise UserError(f"--weight-bits {bits} with {dtype}: use {dense * 8} (unquantised), 8 or 4")
    return WeightFormat(bits=bits, group_size=group_size, dense_bytes=dense)


def decoder_matrix_shapes(a: Arch) -> list[tuple[int, int]]:
    """(out_features, in_features) of one decoder layer's matrices: q, k, v, o, gate, up, down."""
    q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
    return [(q, a.hidden), (kv, a.hidden), (kv, a.hidden), (a.hidden, q),
            (a.intermediate, a.hidden), (a.intermediate, a.hidden), (a.hidden, a.intermediate)]


def kv_bytes_per_token(a: Arch, kv_bytes: int = 2) -> int:
    # K and V (2) x layers x kv heads x head_dim x bytes; qwen2.5-7b bf16: 2*28*4*128*2 = 57,344 B
    return 2 * a.layers * a.kv_heads * a.head_dim * kv_bytes


def parameter_count(a: Arch) -> int:
    """All parameters, embedding and (untied) lm_head included; what `sum(p.numel())` of the HF model gives."""
    per_layer = sum(o * i for o, i in decoder_matrix_shapes(a))
    per_layer += (a.heads + 2 * a.kv_heads) * a.head_dim if a.qkv_bias else 0  # q, k, v biases
    per_layer += 2 * a.hidden  # input and post-attention RMSNorm weights
    emb = a.vocab * a.hidden
    return a.layers * per_layer + a.hidden + emb * (1 if a.tied else 2)  # + final norm + embedding (+ lm_head)


def components(a: Arch, ctx: int, fmt: WeightFormat = WeightFormat(), convention: str = "strict",
               kv_bytes: int | None = None) -> dict[str, int]:
    """Bytes per component for one decode step with `ctx` tokens already in the KV cache."""
    if convention not in CONVENTIONS:
        raise UserError(f"unknown convention {convention!r}; use one of {', '.join(CONVENTIONS)}")
    if ctx < 0:
        raise UserError(f"context must be >= 0, got {ctx}")
    d = fmt.dense_bytes
    kv_b = d if kv_bytes is None else kv_bytes
    matrices = a.layers * sum(fmt.matrix_bytes(o, i) for o, i in decoder_matrix_shapes(a))
    biases = a.layers * (a.heads + 2 * a.kv_heads) * a.head_dim * d if a.qkv_bias else 0
    norms = a.layers * 2 * a.hidden * d  # two RMSNorm weight vectors per layer
    emb_matrix = a.vocab * a.hidden * d  # qwen2.5-7b: 152064 x 3584 x 2 B = 1.09 GB
    c = {
        "decoder_matrices": matrices,
        "decoder_biases": biases,
        "decoder_norms": norms,
        "final_norm": a.hidden * d,
        # lm_head reads the whole vocab x hidden matrix once; when tied it is the embedding matrix, counted here once
        "lm_head": emb_matrix,
    }
    if convention == "strict":
        c["embedding_row"] = a.hidden * d  # the gather of one token's row
        c["kv_read"] = ctx * kv_bytes_per_token(a, kv_b)  # every cached K and V once
        c["kv_write"] = kv_bytes_per_token(a, kv_b)  # the new token's K and V
    else:
        c["embedding"] = 0 if a.tied else emb_matrix  # all parameter bytes: the untied embedding matrix too
        c["kv_read"] = ctx * kv_bytes_per_token(a, kv_b)
    return c


@dataclass(frozen=True)
class Floor:
    convention: str
    components: dict[str, int]

    @property
    def bytes(self) -> int:
        return sum(self.components.values())

    def ms(self, gbps: float | None) -> float | None:
        """Milliseconds to move the floor bytes at `gbps` (1e9 B/s); None when the bandwidth is unknown."""
        return None if not gbps else self.bytes / (gbps * 1e9) * 1e3


def floor(a: Arch, ctx: int, fmt: WeightFormat = WeightFormat(), convention: str = "strict") -> Floor:
    return Floor(convention, components(a, ctx, fmt, convention))
