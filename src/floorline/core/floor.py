"""The memory floor: bytes one batch-1 decode step must move, from the architecture alone.

Owns: per-component byte counts for the two conventions and any weight bit width, and bytes -> milliseconds.
Pure Python on purpose (no torch): it is the heart of the tool and is tested to the byte against instantiated models.

Conventions
- strict: what one decode step must touch at least. Every decoder weight once (matrices, biases, norms), the lm_head
  once (tied embeddings: the shared matrix once, as lm_head), one embedding row (a separate gather, so counted even when
  tied), the final norm, the KV cache read at the context length, the new token's K and V written. A MoE layer: its
  router and the top-k experts a token is routed to (and a shared expert). A sliding-window layer reads at most its
  window of the cache.
- paper: the study's W + K. All parameter bytes (the whole embedding matrix and every expert too) plus the KV read.
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


GROUP_DEFAULT = 128  # elements a scale/zero group, when a quantised format does not say (GPTQ's and AWQ's default)


def group_option(given: int | str | None, bits: int | None, dtype: str = "bf16",
                 flags: tuple[str, str] = ("--group-size", "--weight-bits 4")) -> int | None:
    """The group size weight_format takes from a user's option: not given (None) -> GROUP_DEFAULT; "row" -> None (one
    group per output row). Given for unquantised matrices it would change nothing, so it is refused as a mistake."""
    if given is None:
        return GROUP_DEFAULT
    if bits in (None, DTYPE_BYTES.get(dtype, 2) * 8):
        raise UserError(f"{flags[0]} sets the groups of quantised matrices: add {flags[1]} (or 8), or drop {flags[0]}")
    return None if given == "row" else given


def decoder_matrix_shapes(a: Arch) -> list[tuple[int, int]]:
    """(out_features, in_features) of one dense decoder layer's matrices: q, k, v, o, gate, up, down."""
    return attention_shapes(a) + mlp_shapes(a.intermediate, a.hidden)


def attention_shapes(a: Arch) -> list[tuple[int, int]]:
    """q, k, v, o of one layer (Phi-3's fused qkv_proj holds the same rows as these three)."""
    q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
    return [(q, a.hidden), (kv, a.hidden), (kv, a.hidden), (a.hidden, q)]


def mlp_shapes(intermediate: int, hidden: int) -> list[tuple[int, int]]:
    """gate, up, down of a gated MLP or of one expert (SwiGLU, GeGLU; fused gate_up: the same rows)."""
    return [(intermediate, hidden), (intermediate, hidden), (hidden, intermediate)]


# ------------------------------------------------------------------------------------------------ per layer
def expert_bytes(a: Arch, fmt: WeightFormat, d: int) -> int:
    """One routed expert: gate, up, down in `fmt` (+ gpt-oss's biases on gate_up and down, 2 I + H at d bytes).
    qwen3-30b-a3b bf16: 3 x 768 x 2048 x 2 B = 9.4 MB; gpt-oss-20b mxfp4: 3 x 2880 x 2880 x (1/2 + 1/32) B = 13.2 MB."""
    w = sum(fmt.matrix_bytes(o, i) for o, i in mlp_shapes(a.expert_intermediate, a.hidden))
    return w + ((2 * a.expert_intermediate + a.hidden) * d if a.expert_bias else 0)


def router_bytes(a: Arch, d: int) -> int:
    # one layer's router: experts x hidden (+ one bias per expert, gpt-oss); qwen3-30b-a3b: 128 x 2048 x 2 B = 0.5 MB
    return (a.experts * a.hidden + (a.experts if a.expert_bias else 0)) * d


def shared_expert_bytes(a: Arch, fmt: WeightFormat, d: int) -> int:
    # a shared expert's three matrices and its gate (hidden -> 1 output: hidden weights), Qwen2-MoE
    if not a.shared_intermediate:
        return 0
    return sum(fmt.matrix_bytes(o, i) for o, i in mlp_shapes(a.shared_intermediate, a.hidden)) + a.hidden * d


def expert_format(name: str, dense_bytes: int = 2) -> WeightFormat:
    """A checkpoint's expert storage. mxfp4 (OCP microscaling, gpt-oss): 4-bit e2m1 codes, two a byte, and one 8-bit
    power-of-two scale (e8m0) per 32 consecutive inputs, no zero point: 4.25 bits a weight."""
    if name == "mxfp4":
        return WeightFormat(bits=4, group_size=32, scale_bits=8, zero_bits=0, dense_bytes=dense_bytes, name="mxfp4")
    return WeightFormat(dense_bytes=dense_bytes)


def experts_read(a: Arch, fmt: WeightFormat, asked: str | None = None) -> WeightFormat | None:
    """How a step reads `a`'s routed experts (None: as `fmt`, or a dense model). `asked` (`floor --experts`): bf16 is
    2 bytes a weight whatever the dtype, or mxfp4. Else as the checkpoint stores them where the matrices are not
    quantised: gpt-oss's mxfp4; a bf16 checkpoint's experts in the run's dtype, as a run builds them."""
    if not a.experts:
        return None
    if asked:
        return expert_format(asked, 2)
    return expert_format(a.expert_format, fmt.dense_bytes) if fmt.bits is None else None


def kv_positions_read(a: Arch, i: int, ctx: int) -> int:
    """Cached positions layer i's attention reads with `ctx` tokens in the cache. A sliding layer's query sees the
    `window` latest tokens itself included (transformers: kv_idx > q_idx - window), so window - 1 cached ones;
    gemma-3-1b at ctx 2048: 511 of 2048 on its 22 local layers."""
    return min(ctx, a.window - 1) if a.is_sliding(i) else ctx


def kv_bytes_per_token(a: Arch, kv_bytes: int = 2) -> int:
    # K and V (2) x layers x kv heads x head_dim x bytes; qwen2.5-7b bf16: 2*28*4*128*2 = 57,344 B
    return 2 * a.layers * a.kv_heads * a.head_dim * kv_bytes


def kv_read_bytes(a: Arch, ctx: int, kv_bytes: int = 2) -> int:
    # per layer: positions read x K and V x kv heads x head_dim x bytes (ctx x kv_bytes_per_token when none slides)
    per_layer_token = 2 * a.kv_heads * a.head_dim * kv_bytes
    return sum(kv_positions_read(a, i, ctx) for i in range(a.layers)) * per_layer_token


def _attention_extras(a: Arch) -> dict[str, int]:
    """Parameters (elements) of one layer beside its matrices: biases, norms, q/k norms, sinks."""
    q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
    return {
        "decoder_biases": ((q + 2 * kv) if a.qkv_bias else 0) + (a.hidden if a.o_bias else 0),  # q, k, v (+ o) biases
        "decoder_norms": a.layer_norms * a.hidden,  # input + post-attention RMSNorm (Gemma 3: + pre/post MLP)
        "qk_norms": 2 * a.head_dim if a.qk_norm else 0,  # one head_dim vector for q's heads, one for k's
        "attention_sinks": a.heads if a.sinks else 0,  # one sink logit per query head (gpt-oss)
    }


def parameter_count(a: Arch) -> int:
    """All parameters, embedding and (untied) lm_head included; what `sum(p.numel())` of the HF model gives: the paper
    convention's weights (every parameter) at one byte an element with nothing cached, so the count and the bytes come
    from the same formulas."""
    return sum(components(a, 0, WeightFormat(dense_bytes=1), "paper").values())


def components(a: Arch, ctx: int, fmt: WeightFormat = WeightFormat(), convention: str = "strict",
               kv_bytes: int | None = None, experts: WeightFormat | None = None) -> dict[str, int]:
    """Bytes per component for one decode step with `ctx` tokens already in the KV cache. `experts`: how the
    routed experts are stored (default: as `fmt`). Keys beyond the dense Llama layer's appear only when the model has
    them (qk_norms, attention_sinks, router, experts, shared_expert)."""
    if convention not in CONVENTIONS:
        raise UserError(f"unknown convention {convention!r}; use one of {', '.join(CONVENTIONS)}")
    if ctx < 0:
        raise UserError(f"context must be >= 0, got {ctx}")
    d = fmt.dense_bytes
    kv_b = d if kv_bytes is None else kv_bytes
    n_moe = a.n_moe
    dense_mlp = sum(fmt.matrix_bytes(o, i) for o, i in mlp_shapes(a.intermediate, a.hidden))
    # every layer's q, k, v, o; the gated MLP of each layer that is not MoE
    matrices = (a.layers * sum(fmt.matrix_bytes(o, i) for o, i in attention_shapes(a))
                + (a.layers - n_moe) * dense_mlp)
    extras = {k: a.layers * v * d for k, v in _attention_extras(a).items()}
    emb_matrix = a.vocab * a.hidden * d  # qwen2.5-7b: 152064 x 3584 x 2 B = 1.09 GB
    c = {
        "decoder_matrices": matrices,
        "decoder_biases": extras["decoder_biases"],
        "decoder_norms": extras["decoder_norms"],
        "final_norm": a.hidden * d,
        # lm_head reads the whole vocab x hidden matrix once; when tied it is the embedding matrix, counted here once
        # (Gemma's embedding scale, sqrt(hidden), is a constant: no bytes)
        "lm_head": emb_matrix,
    }
    for k in ("qk_norms", "attention_sinks"):
        if extras[k]:
            c[k] = extras[k]
    if n_moe:
        per_expert = expert_bytes(a, experts or fmt, d)
        c["router"] = n_moe * router_bytes(a, d)  # every router reads all its rows to score the experts
        # strict: the top-k experts a token is routed to, in each MoE layer (qwen3-30b-a3b: 48 x 8 x 9.4 MB = 3.6 GB);
        # paper: all of them, as every parameter counts (48 x 128 x 9.4 MB = 58 GB)
        c["experts"] = n_moe * (a.top_k if convention == "strict" else a.experts) * per_expert
        if a.shared_intermediate:
            c["shared_expert"] = n_moe * shared_expert_bytes(a, fmt, d)
    if convention == "strict":
        c["embedding_row"] = a.hidden * d  # the gather of one token's row
        c["kv_read"] = kv_read_bytes(a, ctx, kv_b)  # every cached K and V a layer attends to, once
        c["kv_write"] = kv_bytes_per_token(a, kv_b)  # the new token's K and V
    else:
        c["embedding"] = 0 if a.tied else emb_matrix  # all parameter bytes: the untied embedding matrix too
        c["kv_read"] = kv_read_bytes(a, ctx, kv_b)
    return c


def routed_components(a: Arch, ctx: int, experts_read: float, fmt: WeightFormat = WeightFormat(),
                      experts: WeightFormat | None = None) -> dict[str, int]:
    """The strict floor with the experts a step was seen to read (`experts_read`, summed over the MoE layers: the
    distinct experts the routers chose) in place of top-k a layer: the floor of the routing that happened."""
    c = components(a, ctx, fmt, "strict", experts=experts)
    if a.n_moe:
        c["experts"] = round(experts_read * expert_bytes(a, experts or fmt, fmt.dense_bytes))
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


def floor(a: Arch, ctx: int, fmt: WeightFormat = WeightFormat(), convention: str = "strict",
          experts: WeightFormat | None = None) -> Floor:
    return Floor(convention, components(a, ctx, fmt, convention, experts=experts))
