"""Tensor-parallel decode's floor: the bytes one GPU of N must read per step, and the all-reduce term.

Owns: how a model is split across N GPUs (the shard of one rank, as plain numbers), the per-GPU byte count in both of
floor.py's conventions, and the all-reduce count. Pure Python (no torch), like floor.py: native/tp_model.py cuts the
real tensors by these numbers and tests/test_tp.py checks the bytes against them to the byte.

The split (Megatron's, as gpt-fast's tp.py and HF's tp plans do it)
- q, k, v, gate, up: split by columns of the product (output rows): rank r computes its heads / its slice of the MLP.
- o, down: split by rows of the product (input columns): each rank's partial sum of the hidden vector, then one
  all-reduce of that vector (two a layer).
- KV heads follow the q heads: rank r holds q heads [r*h/N, (r+1)*h/N) and every KV head those read. kv_heads % N == 0:
  kv_heads/N each. kv_heads < N (N % kv_heads == 0): each rank holds the one KV head its q heads share, so every KV
  head (its k and v rows, its bias, its cache) is replicated N/kv_heads times and counted on every GPU that holds it.
  Otherwise a KV head's q group straddles two ranks and both hold it: counted per rank (the floor is the heaviest
  rank's); native mode refuses that case.
- lm_head: split by vocabulary, ceil(vocab/N) rows on ranks 0..N-2, the rest on the last; each rank's argmax, then one
  reduction across ranks for the token (on the device). Norms and the embedding are replicated: each rank reads the
  norm weights and gathers the token's embedding row itself.
The floor of the step is the heaviest rank's bytes (the ranks wait for each other at every all-reduce) plus
count x latency of the all-reduces: 2 a layer + 1 for the argmax.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from floorline.core import floor as F
from floorline.core.arch import Arch
from floorline.core.errors import UserError


@dataclass(frozen=True)
class Shard:
    """What rank `rank` of `n` holds, as counts and offsets into the unsharded model."""

    n: int
    rank: int
    q_first: int  # first q head
    heads: int  # q heads here
    kv_first: int  # first KV head
    kv_heads: int  # KV heads here (replicated ones included)
    inter_first: int
    inter: int  # MLP columns (gate and up rows, down input columns) here
    vocab_first: int
    vocab: int  # lm_head rows here


def shard(a: Arch, n: int, rank: int) -> Shard:
    if n < 1:
        raise UserError(f"--tp must be >= 1, got {n}")
    if not 0 <= rank < n:
        raise ValueError(f"rank {rank} of {n}")
    if a.heads % n:
        raise UserError(f"{a.name} has {a.heads} attention heads, not divisible by --tp {n}; use a --tp that divides "
                        f"{a.heads}")
    if a.intermediate % n:
        raise UserError(f"{a.name}'s MLP width {a.intermediate} is not divisible by --tp {n}; use a --tp that "
                        f"divides it")
    hq = a.heads // n
    group = a.heads // a.kv_heads  # q heads per KV head
    q0 = rank * hq
    kv0, kv_last = q0 // group, (q0 + hq - 1) // group
    vrows = math.ceil(a.vocab / n)  # ranks 0..n-2 hold ceil(vocab/n) rows, the last the rest
    v0 = min(a.vocab, rank * vrows)
    it = a.intermediate // n
    return Shard(n, rank, q0, hq, kv0, kv_last - kv0 + 1, rank * it, it, v0, min(a.vocab, v0 + vrows) - v0)


def uniform(a: Arch, n: int) -> bool:
    """Every rank holds whole KV groups (kv_heads % n == 0) or one KV head shared by its q heads (n % kv_heads == 0):
    what native mode's attention assumes (q head j of a rank reads its KV head j // (heads / kv_heads) there)."""
    return a.kv_heads % n == 0 or n % a.kv_heads == 0


def kv_copies(a: Arch, n: int) -> float:
    """KV heads held across all ranks / KV heads of the model: 1.0 when split, N/kv_heads when replicated."""
    return sum(shard(a, n, r).kv_heads for r in range(n)) / a.kv_heads


def allreduce_count(a: Arch, n: int) -> int:
    """All-reduces a decode step makes: after o and after down in every layer, and the argmax across vocab shards."""
    return 0 if n == 1 else 2 * a.layers + 1  # qwen2.5-7b: 2*28 + 1 = 57


def components(a: Arch, ctx: int, n: int, rank: int, fmt: F.WeightFormat = F.WeightFormat(),
               convention: str = "strict", kv_bytes: int | None = None) -> dict[str, int]:
    """Bytes rank `rank` of `n` moves in one decode step, by floor.py's components. n == 1 gives floor.components."""
    if convention not in F.CONVENTIONS:
        raise UserError(f"unknown convention {convention!r}; use one of {', '.join(F.CONVENTIONS)}")
    if ctx < 0:
        raise UserError(f"context must be >= 0, got {ctx}")
    if n == 1:
        return F.components(a, ctx, fmt, convention, kv_bytes)
    if a.experts or any(a.sliding) or a.qk_norm or a.o_bias or a.sinks or a.layer_norms != 2:
        raise UserError(f"--tp {n}: the tensor-parallel split is accounted for dense Llama-style layers; {a.name} "
                        f"({a.family}) has {_extras(a)}; use --tp 1")
    s = shard(a, n, rank)
    d = fmt.dense_bytes
    kv_b = d if kv_bytes is None else kv_bytes
    q, kv = s.heads * a.head_dim, s.kv_heads * a.head_dim
    # one layer's shard, (out, in): q, k, v and gate, up keep whole rows of their inputs (column split);
    # o and down keep all output rows over this rank's input columns (row split).
    # qwen2.5-7b N=2 bf16: q 1792x3584, k/v 256x3584, o 3584x1792, gate/up 9472x3584, down 3584x9472 = 233 MB a layer
    shapes = [(q, a.hidden), (kv, a.hidden), (kv, a.hidden), (a.hidden, q),
              (s.inter, a.hidden), (s.inter, a.hidden), (a.hidden, s.inter)]
    per_token_kv = 2 * a.layers * kv * kv_b  # K and V x layers x this rank's KV heads x head_dim x bytes
    emb_matrix = a.vocab * a.hidden * d  # replicated: any token's row may be asked for
    lm_shard = s.vocab * a.hidden * d  # qwen2.5-7b N=2: 76032 x 3584 x 2 B = 545 MB
    c = {
        "decoder_matrices": a.layers * sum(fmt.matrix_bytes(o, i) for o, i in shapes),
        "decoder_biases": a.layers * (q + 2 * kv) * d if a.qkv_bias else 0,  # q/k/v biases follow their rows
        "decoder_norms": a.layers * 2 * a.hidden * d,  # replicated: every rank normalises the whole hidden vector
        "final_norm": a.hidden * d,
        "lm_head": lm_shard,
    }
    if convention == "strict":
        c["embedding_row"] = a.hidden * d  # every rank gathers the token's row itself
        c["kv_read"] = ctx * per_token_kv
        c["kv_write"] = per_token_kv
    else:
        # every parameter byte resident on this GPU: the whole embedding (tied: the lm_head shard is part of it,
        # counted in lm_head, so the rest here)
        c["embedding"] = emb_matrix - lm_shard if a.tied else emb_matrix
        c["kv_read"] = ctx * per_token_kv
    return c


def _extras(a: Arch) -> str:
    have = [("experts", a.experts), ("sliding windows", any(a.sliding)), ("q/k norms", a.qk_norm),
            ("an o_proj bias", a.o_bias), ("attention sinks", a.sinks), ("four norms a layer", a.layer_norms != 2)]
    return ", ".join(w for w, on in have if on)


@dataclass(frozen=True)
class TPFloor(F.Floor):
    """The heaviest rank's floor plus the all-reduce term (count x latency, when a latency is known)."""

    n: int = 1
    rank: int = 0  # the heaviest rank (the first of equals)
    allreduce_count: int = 0
    kv_copies: float = 1.0

    def allreduce_ms(self, allreduce_us: float | None) -> float | None:
        return None if allreduce_us is None else self.allreduce_count * allreduce_us / 1e3

    def total_ms(self, gbps: float | None, allreduce_us: float | None) -> float | None:
        """Bytes at `gbps` plus the all-reduces at `allreduce_us` each; None when either is unknown (N > 1)."""
        mem = self.ms(gbps)
        ar = self.allreduce_ms(allreduce_us) if self.allreduce_count else 0.0
        return None if mem is None or ar is None else mem + ar


def floor(a: Arch, ctx: int, n: int, fmt: F.WeightFormat = F.WeightFormat(), convention: str = "strict") -> TPFloor:
    """Per-GPU floor for tensor parallelism over n GPUs (n == 1: floor.floor's bytes, no all-reduce)."""
    if n < 1:
        raise UserError(f"--tp must be >= 1, got {n}")
    per_rank = [components(a, ctx, n, r, fmt, convention) for r in range(n)]
    heaviest = max(range(n), key=lambda r: (sum(per_rank[r].values()), -r))
    return TPFloor(convention, per_rank[heaviest], n=n, rank=heaviest, allreduce_count=allreduce_count(a, n),
                   kv_copies=kv_copies(a, n))


def record_fields(f: TPFloor, allreduce_us: float | None, backend: str | None) -> dict:
    """What a record of an N-GPU cell carries about the split and the all-reduce term."""
    return {"tp": f.n, "tp_floor_rank": f.rank, "tp_kv_copies": f.kv_copies, "allreduce_count": f.allreduce_count,
            "allreduce_us": allreduce_us, "allreduce_backend": backend,
            "allreduce_ms": f.allreduce_ms(allreduce_us) if f.allreduce_count else 0.0}
