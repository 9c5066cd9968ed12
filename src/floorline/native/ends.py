"""The decode step's two ends as kernels of their own, so the whole step is one PDL chain in one CUDA graph with the
token and the position on the device:
  _embed       the token's embedding row into the fp32 residual stream (torch's index_select and copy: two launches
               outside the chain)
  _next_token  the argmax of the logits by an atomic max of packed keys, then the next token and position, written by
               the last program (torch's argmax, copy and add: three more; its argmax alone ~9 us on the H200)
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # floorline runs without Triton; only mode native and its kernel tests need it
    triton = tl = None

from floorline.native import pdl as P

STEP_BLOCK = 1024  # elements a program of _embed and _next_token (a vocabulary of 152064: 149 programs)

if triton is not None:

    @triton.jit
    def _embed(E, stride_e, TOK, X, H, BLOCK: tl.constexpr, PDL: tl.constexpr, ZERO_NEXT: tl.constexpr = 0):
        """The step's first kernel: x (fp32) = row `tok` of the embedding E; program p copies [p BLOCK, (p + 1) BLOCK).
        tok was written by the previous step's last kernel (_next_token). ZERO_NEXT: the H floats after x zeroed too
        (the fused MLP's first output buffer, mlp.py)."""
        P.wait(PDL)
        tok = tl.load(TOK)  # int64: tok * stride_e stays exact past 2^31 elements
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        live = offs < H
        tl.store(X + offs, tl.load(E + tok * stride_e + offs, mask=live).to(tl.float32), mask=live)
        if ZERO_NEXT:
            tl.store(X + H + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=live)

    @triton.jit
    def _next_token(LOGITS, N, STATE, TOK, POS, BLOCK: tl.constexpr, PDL: tl.constexpr):
        """The step's last kernel: tok = argmax(logits) (the first index among equal maxima, as torch.argmax) and
        pos += 1, on the device. Program p takes logits [p BLOCK, (p + 1) BLOCK) and raises STATE[0] to its packed
        key (tpdist.argmax_across's: the max's fp32 bits made order-preserving << 32 | (2^32 - 1 - index)) with an
        atomic max; STATE[1] counts the programs done, and the last one writes tok and pos and resets both words for
        the next step (STATE starts as (-2^63, 0): next_token_state)."""
        P.wait(PDL)
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(LOGITS + offs, mask=offs < N, other=float("-inf"))
        m = tl.max(v, 0)
        # the first index holding the max (or a NaN: a NaN max matches nothing, and the token must stay a row)
        i = tl.min(tl.where((v == m) | (v != v), offs, N), 0).to(tl.int64)
        bits = m.to(tl.int32, bitcast=True)
        ordered = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF).to(tl.int64)  # negative floats: reverse magnitude
        tl.atomic_max(STATE, ordered * 4294967296 + (4294967295 - i))
        done = tl.atomic_add(STATE + 1, 1)  # acq_rel: the last program sees every program's atomic max
        if done == tl.num_programs(0) - 1:
            key = tl.atomic_xchg(STATE, -9223372036854775807 - 1)
            tl.store(TOK, 4294967295 - (key & 4294967295))
            tl.store(POS, tl.load(POS) + 1)
            tl.atomic_xchg(STATE + 1, 0)


def next_token_state(device) -> torch.Tensor:
    """_next_token's two int64 words: the running packed key (starts below every key) and the programs done."""
    return torch.tensor([-(2**63), 0], dtype=torch.int64, device=device)


def tri_embed(embed: torch.Tensor, tok: torch.Tensor, x: torch.Tensor, zero_next: bool = False,
              pdl: int | None = None) -> None:
    """x (fp32) = embed[tok] in one PDL launch: the GPU twin of x.copy_(embed.index_select(0, tok)[0]);
    zero_next: x is row 0 of a contiguous (rows >= 2, n) buffer whose row 1 is zeroed too."""
    pdl = P.mode("auto", x.device) if pdl is None else pdl
    n = x.numel()
    if zero_next and x.untyped_storage().nbytes() < (x.storage_offset() + 2 * n) * x.element_size():
        raise ValueError("tri_embed zero_next: x must be followed by n more floats of its buffer")
    _embed[(triton.cdiv(n, STEP_BLOCK),)](embed, embed.stride(0), tok, x, n, BLOCK=STEP_BLOCK, PDL=pdl,
                                          num_warps=4, **({"ZERO_NEXT": 1} if zero_next else {}),
                                          **P.launch_kwargs(pdl))


def tri_next_token(logits: torch.Tensor, tok: torch.Tensor, pos: torch.Tensor, state: torch.Tensor,
                   pdl: int | None = None) -> None:
    """tok = argmax(logits), pos += 1 in one PDL launch: the GPU twin of tok.copy_(logits.argmax().view(1));
    pos.add_(1). With NaN logits the token is a valid row, not necessarily torch.argmax's (the first NaN)."""
    pdl = P.mode("auto", logits.device) if pdl is None else pdl
    n = logits.numel()
    _next_token[(triton.cdiv(n, STEP_BLOCK),)](logits, n, state, tok, pos, BLOCK=STEP_BLOCK, PDL=pdl, num_warps=4,
                                               **P.launch_kwargs(pdl))
