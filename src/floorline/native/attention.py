"""Decode attention of mode native, batch 1: flash-decoding with RoPE and the KV write folded in, two launches a layer.

1. chunks: one program per (kv head, chunk of the cache) rotates q and k at the current position (read from the
   device: graph-safe); the chunk holding the position writes k and v into the cache; every program scores all query
   heads of its group with tensor cores over its chunk and writes partial softmax sums (m, l, o). Triton's
   _attn_chunk, or attn_cuda's CUDA kernel (at head_dim 128 from ATTN_CUDA_FROM positions, where it measured
   faster; elsewhere, where the step tuner measures it faster in the step).
2. merge: each query head's chunks combined (Triton's _attn_merge), in `split` programs of `warps` warps a head, each
   a share of its dims: many small programs that fit beside a chunk program and start before the chunks end.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # floorline runs without Triton; only mode native and its kernel tests need it
    triton = tl = None

from floorline.core.errors import UserError
from floorline.native import INTERPRET
from floorline.native import pdl as P
from floorline.native import timeline as T

ATTN_CHUNK = 64  # cache positions per attention program (the least; more at long contexts)
ATTN_BL = 64  # positions per inner tile
ATTN_STAGES = 3  # the tile loop's software-pipeline depth (Triton's default for a loop)

if triton is not None:

    @triton.jit
    def _rope(QKV, cos, sin, rows, d, mask, D: tl.constexpr, NW=None, NWP=None, EPS: tl.constexpr = 0.0):
        """Rows `rows` (head indices) of the fused q/k/v vector, rotated by the position's cos, sin (D,) (HF's
        rotate_half layout). NW, NWP (D,) given: each row RMS-normalised first and scaled by the norm's weights, NW
        in d order, NWP in the partner's (d + D/2) % D order (Qwen3's q/k norm)."""
        x = tl.load(QKV + rows[:, None] * D + d[None, :], mask=mask, other=0.0)
        partner = tl.load(QKV + rows[:, None] * D + ((d + D // 2) % D)[None, :], mask=mask, other=0.0)
        if NW is not None:
            r = tl.rsqrt(tl.sum(x * x, 1) / D + EPS)[:, None]
            x = x * r * NW[None, :]
            partner = partner * r * NWP[None, :]
        sign = tl.where(d < D // 2, -1.0, 1.0)
        return x * cos[None, :] + sign[None, :] * partner * sin[None, :]

    @triton.jit
    def _attn_tile(q, k, v, live, m, l, acc, DOT_F32: tl.constexpr):
        """One tile of positions into the online softmax: k, v (BL, D) with dead rows zeroed, live (BL,) masks them."""
        if DOT_F32:  # the interpreter multiplies bf16 operands of tl.dot as raw bits: give it fp32
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        s = tl.dot(q, tl.trans(k))
        s = tl.where(live[None, :], s, -1e30)
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.where(live[None, :], tl.exp(s - m_new[:, None]), 0.0)
        alpha = tl.exp(m - m_new)
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        return m_new, l, acc

    @triton.jit
    def _attn_chunk(QKV, COS, SIN, POS, KC, VC, MO, LO, OO, scale, stride_kh, NCHUNK,
                    H: tl.constexpr, KVH: tl.constexpr, G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr,
                    CHUNK: tl.constexpr, BL: tl.constexpr, DOT_F32: tl.constexpr, PDL: tl.constexpr,
                    STAGES: tl.constexpr = 3, QN=None, KN=None, QK_EPS: tl.constexpr = 0.0, TL=None):
        """RoPE, KV write and one chunk of flash-decoding for one KV head: program (kv head, chunk). The chunk's first
        tile of cached positions is loaded before waiting on the previous kernel (the q/k/v GEMV): positions before
        `pos` were written by earlier steps, and `pos` itself by the last kernel of the previous step. QN, KN (D,):
        q's and k's per-head RMSNorm weights (Qwen3), applied before the rotation; None: no norm (not compiled). TL:
        a timeline slot (timeline.py; None: not compiled)."""
        if TL is not None:
            t_start = T.now()
        kvh = tl.program_id(0)
        c = tl.program_id(1)
        pos = tl.load(POS)
        start = c * CHUNK
        d = tl.arange(0, D)
        rl = start + tl.arange(0, BL)
        old = rl < pos  # (all false for a chunk past the position: no bytes moved)
        base = kvh * stride_kh + rl[:, None] * D + d[None, :]
        k0 = tl.load(KC + base, mask=old[:, None], other=0.0)
        v0 = tl.load(VC + base, mask=old[:, None], other=0.0)
        cos = tl.load(COS + pos * D + d)  # the rotation's tables are constant: read before the wait too
        sin = tl.load(SIN + pos * D + d)
        qn, qnp, kn, knp = None, None, None, None
        if QN is not None:  # and so are the q/k norm's weights
            qn, qnp = tl.load(QN + d), tl.load(QN + (d + D // 2) % D)
            kn, knp = tl.load(KN + d), tl.load(KN + (d + D // 2) % D)
        P.wait(PDL)
        if TL is not None:
            t_wait = T.now()
        if start <= pos:  # chunks past the position write nothing: the merge reads only the live ones
            g = tl.arange(0, GP)
            one = tl.arange(0, 1)
            q = _rope(QKV, cos, sin, kvh * G + g, d, (g < G)[:, None], D, qn, qnp, QK_EPS)  # the group's q heads
            q = (q * scale).to(KC.dtype.element_ty)
            # this position's k (rotated) and v, rounded as the cache holds them; the chunk holding the
            # position writes them to the cache, and every program uses the registers, not the cache, for it
            k_new = _rope(QKV, cos, sin, H + kvh + one, d, one[:, None] >= 0, D, kn, knp, QK_EPS)
            k_new = k_new.to(KC.dtype.element_ty)
            v_new = tl.load(QKV + (H + KVH + kvh + one)[:, None] * D + d[None, :]).to(VC.dtype.element_ty)
            if pos < start + CHUNK:
                tl.store(KC + kvh * stride_kh + pos * D + d[None, :] + one[:, None] * 0, k_new)
                tl.store(VC + kvh * stride_kh + pos * D + d[None, :] + one[:, None] * 0, v_new)
            if DOT_F32:
                q = q.to(tl.float32)
            m = tl.full([GP], -1e30, dtype=tl.float32)
            l = tl.zeros([GP], dtype=tl.float32)
            acc = tl.zeros([GP, D], dtype=tl.float32)
            k = tl.where((rl == pos)[:, None], k_new, k0)
            v = tl.where((rl == pos)[:, None], v_new, v0)
            m, l, acc = _attn_tile(q, k, v, rl <= pos, m, l, acc, DOT_F32)
            # the chunk's further tiles, STAGES deep in Triton's software pipeline (3: its default for any loop)
            for off in tl.range(BL, CHUNK, BL, num_stages=STAGES):
                rl = start + off + tl.arange(0, BL)
                old = rl < pos
                base = kvh * stride_kh + rl[:, None] * D + d[None, :]
                k = tl.where((rl == pos)[:, None], k_new, tl.load(KC + base, mask=old[:, None], other=0.0))
                v = tl.where((rl == pos)[:, None], v_new, tl.load(VC + base, mask=old[:, None], other=0.0))
                m, l, acc = _attn_tile(q, k, v, rl <= pos, m, l, acc, DOT_F32)
            o = (kvh * NCHUNK + c) * GP + g
            real = g < G  # only the group's real query heads are written (GP pads it to the tensor-core tile)
            tl.store(MO + o, m, mask=real)
            tl.store(LO + o, l, mask=real)
            tl.store(OO + o[:, None] * D + d[None, :], acc, mask=real[:, None])
        if TL is not None:
            T.put(TL, t_start, t_wait)

    @triton.jit
    def _attn_merge(MO, LO, OO, OUT, POS, NCHUNK, ZP, ZN, G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr,
                    CHUNK: tl.constexpr, CB: tl.constexpr, PDL: tl.constexpr, ZB: tl.constexpr, DB: tl.constexpr,
                    TL=None):
        """The chunks' partial softmax sums of one query head, merged: program (h, j) merges dims [j DB, (j + 1) DB)
        of query head h (DB = D: one program a head). The position is read before the wait (it changes only between
        steps); each block of CB chunks has its maxima, sums and partial outputs loaded before any is used (one round
        trip to L2, not one per dependent load). ZB > 0: program (h, 0) also zeroes ZP[h ZB, (h + 1) ZB) below ZN --
        the q/k/v vector, read by the chunks (all finished once the wait returns), which the next layer's int4 q/k/v
        GEMV adds into (split-K). TL: a timeline slot (timeline.py; None: not compiled)."""
        if TL is not None:
            t_start = T.now()
        h = tl.program_id(0)
        kvh = h // G
        nlive = tl.load(POS) // CHUNK + 1  # chunks holding positions 0..pos
        P.wait(PDL)
        if TL is not None:
            t_wait = T.now()
        d = tl.program_id(1) * DB + tl.arange(0, DB)
        cs = tl.arange(0, CB)
        m_run = tl.max(tl.full([CB], -1e30, dtype=tl.float32), 0)
        den = tl.sum(tl.zeros([CB], dtype=tl.float32), 0)
        num = tl.zeros([DB], dtype=tl.float32)
        for c0 in range(0, nlive, CB):
            cm = (c0 + cs) < nlive
            o = (kvh * NCHUNK + c0 + cs) * GP + h % G
            mc = tl.load(MO + o, mask=cm, other=-1e30)
            lc = tl.load(LO + o, mask=cm, other=0.0)
            oc = tl.load(OO + o[:, None] * D + d[None, :], mask=cm[:, None], other=0.0)
            m_new = tl.maximum(m_run, tl.max(mc, 0))
            a = tl.exp(m_run - m_new)
            w = tl.where(cm, tl.exp(mc - m_new), 0.0)
            den = den * a + tl.sum(w * lc, 0)
            num = num * a + tl.sum(oc * w[:, None], 0)
            m_run = m_new
        tl.store(OUT + h * D + d, num / den)
        if ZB > 0:
            if tl.program_id(1) == 0:
                z = h * ZB + tl.arange(0, ZB)
                tl.store(ZP + z, tl.zeros([ZB], dtype=tl.float32), mask=z < ZN)
        if TL is not None:
            T.put(TL, t_start, t_wait)


def attn_chunk_len(length: int, kv_heads: int, sms: int) -> int:
    """Cache positions per Triton attention program: a power of two in [64, 512], small enough that the (kv head,
    chunk) programs fill the GPU about 1.5 times over at the full length, large enough that the partials (one fp32 row
    per query head per chunk) stay a small fraction of the KV bytes. NativeOptions.attn_chunk fixes it instead."""
    c = ATTN_CHUNK
    while c < 512 and length * kv_heads >= 3 * c * sms:  # (length / 2c) * kv_heads programs >= 1.5 * sms
        c *= 2
    return c


# `auto` takes the CUDA chunk kernel for caches of at least this many positions. H200, native bf16 steps, one process
# a cell, Triton / CUDA: qwen2.5-7b ctx 2048 3.683 / 3.709 ms, ctx 8192 3.919 / 3.921, ctx 16384 4.089 / 4.006;
# llama-3.1-8b ctx 16384 4.616 / 4.548; with the CUDA kernel's loads of whole sectors, qwen2.5-7b ctx 8192 3.860 /
# 3.824, ctx 2048 3.715 / 3.722; llama-3.1-8b ctx 2048 4.072 / 4.059 (ties at 2048; docs/lab/2026-12-02-attention.md).
# With the q/k norm in the CUDA kernel, qwen3-8b ctx 16384 4.979 / 4.393, ctx 2048 3.883 / 3.880
# (docs/lab/2026-12-03-attn-cluster.md)
ATTN_CUDA_FROM = 8192
ATTN_CUDA_RULE_HEAD_DIM = 128  # the head_dim ATTN_CUDA_FROM was measured at; others start from Triton's (tuner's pick)
CUDA_CHUNK_MIN = 64  # attn_cuda's warps each take tiles of 16 positions: a smaller chunk leaves its warps idle


def attn_backend(device, heads: int, kv_heads: int, head_dim: int, dtype, length: int, want: str = "auto",
                 chunk: int = 0) -> str:
    """Which kernel computes the attention's chunks of a `length`-position cache: "cuda" (attn_cuda, where the GPU and
    shapes allow it) or "triton". want (NativeOptions.attn_kernel): auto (cuda at ATTN_CUDA_RULE_HEAD_DIM from
    ATTN_CUDA_FROM positions, where it measured faster; at head_dim 64, measured at 2048 positions and below only,
    Triton's, with the CUDA chunks among the step tuner's candidates), cuda or triton. The merge is Triton's either
    way. Both normalise q and k where the model has a q/k norm (Qwen3). A fixed chunk below CUDA_CHUNK_MIN positions
    runs in Triton's only."""
    if want not in ("auto", "cuda", "triton"):
        raise UserError(f"attn_kernel={want!r}: use auto, cuda or triton (the attention's chunk kernel)")
    small = 0 < chunk < CUDA_CHUNK_MIN
    if want == "cuda" and small:
        raise UserError(f"attn_kernel=cuda takes chunks of at least {CUDA_CHUNK_MIN} positions, not {chunk}; use "
                        f"attn_kernel=triton or auto")
    if want == "triton" or small or INTERPRET or torch.device(device).type != "cuda":
        return "triton"
    if want == "auto" and (length < ATTN_CUDA_FROM or head_dim != ATTN_CUDA_RULE_HEAD_DIM):
        return "triton"
    from floorline.native import attn_cuda

    why = attn_cuda.unavailable(torch.device(device), heads, kv_heads, head_dim, dtype)
    if why is None:
        return "cuda"
    if want == "cuda":
        raise UserError(f"attn_kernel=cuda: {why}; use attn_kernel=triton or auto")
    return "triton"


CHUNK_LEAST = 16  # the smallest chunk the step tuner tries: one tensor-core tile of positions


def is_cuda(choice: tuple) -> bool:
    """Whether an attention choice (AttnScratch.use) is the CUDA chunks', ("cuda", chunk, warps), not Triton's
    (chunk, warps)."""
    return choice[0] == "cuda"


def chunk_candidates(chunk: int, warps: int) -> list[tuple[int, int]]:
    """(chunk, warps) of the Triton chunk kernel that the step tuner times (retune_in_step): the rule's (first), then
    halves and quarters of its chunk, with 8 and 4 warps. Short caches leave the rule's chunk programs too few to
    fill the GPU (llama-3.2-1b ctx 128: 8 kv heads x 3 chunks of 64), and each program walks its tiles one after
    another after its wait; smaller chunks are more programs of fewer tiles, for a longer merge."""
    out = [(chunk, warps)]
    for c in (chunk // 2, chunk // 4):
        if c >= CHUNK_LEAST:
            out += [(c, w) for w in (8, 4) if (c, w) not in out]
    return out


def retune_in_step(scratch: AttnScratch, capture, state: list, warm, reps: int = 30) -> dict:
    """The Triton attention's (chunk, warps), or the CUDA chunks, chosen in the whole decode step: each of
    scratch.cands compiled by `warm()` (one attention launch outside any graph capture: over the current position,
    which a step rewrites before it reads it), then timed (timing.fastest_in_step), the fastest kept in `scratch`.
    Returns the trials ({candidate: ms}; empty where nothing was timed) for o_merge.retune_finals_in_step.
    Nothing to time from ATTN_CUDA_FROM positions (the CUDA chunks), with attn_kernel=cuda or a fixed chunk
    (NativeOptions attn_kernel, attn_chunk) or in the interpreter; attn_kernel=triton times Triton's candidates
    only."""
    from floorline.device import timing
    from floorline.native.tuner import TUNER

    if len(scratch.cands) < 2:
        return {}
    times = timing.fastest_in_step(scratch.cands, scratch.use, capture, state, reps, warm=warm)
    TUNER.step_tuning["attn"] = {cand_name(c): round(t, 4) for c, t in times.items()}
    return times


def cand_name(c: tuple) -> str:
    """A step-tuner attention candidate as the records name it: "chunk 64 w8" (Triton's), "cuda chunk 256 w8"."""
    return ("cuda " if is_cuda(c) else "") + "chunk {} w{}".format(*c[-2:])


# (programs a query head, warps a program) of the merge: each program a quarter of the head's dims, one warp, small
# enough to sit beside a chunk program that fills most of an SM's registers and to start before the chunks end. H200:
# qwen2.5-7b ctx 16384 3.969 ms against 4.005 with one 4-warp program a head, llama-3.1-8b 4.546 against 4.604
MERGE = (4, 1)


def merge_launch(head_dim: int, merge: tuple[int, int] = MERGE) -> tuple[int, int]:
    """(programs a query head, warps a program) of the merge for this head_dim: `merge`, its split halved until a
    program's share of the dims is a power of two of at least 16."""
    split, warps = merge
    while split > 1 and head_dim // split < 16:
        split //= 2
    return split, warps


class AttnScratch:
    """The flash-decoding partials for a cache of `length` positions: static buffers a CUDA graph can keep, and the
    kernels' launch parameters. kernel (NativeOptions.attn_kernel) picks the chunk kernel the step starts from
    (attn_backend; with auto the step tuner may switch to the other, retune_in_step); chunk (0: sized to the GPU) the
    positions a chunk program covers. Triton: tile, warps and pipeline stages of the tile loop
    default to ATTN_BL, 8 warps and ATTN_STAGES. CUDA: warps by attn_cuda.config's rule. pdl: the kernels' PDL switch
    (pdl.mode). merge: (programs a head, warps) of the merge (MERGE).
    """

    def __init__(self, heads: int, kv_heads: int, head_dim: int, length: int, device, chunk: int = 0,
                 tile: int | None = None, warps: int | None = None, stages: int | None = None,
                 dtype=torch.bfloat16, kernel: str = "auto", merge: tuple[int, int] = MERGE, pdl: int | None = None):
        device = torch.device(device)
        self.g = heads // kv_heads
        self.gp = max(16, triton.next_power_of_2(self.g)) if triton is not None else 16
        self.pdl = P.mode("auto", device) if pdl is None else pdl
        sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1
        self.backend = attn_backend(device, heads, kv_heads, head_dim, dtype, length, kernel, chunk)
        self.length, self.fixed_tile = length, tile
        self.cands = []  # (chunk, warps), or ("cuda", chunk, warps), the step tuner times; empty: nothing to choose
        if self.backend == "cuda":
            from floorline.native import attn_cuda

            w, c = attn_cuda.config(length, kv_heads, sms, chunk)
            self.chunk, self.warps = c, warps or w
        else:
            self.chunk = chunk or (ATTN_CHUNK if INTERPRET else attn_chunk_len(length, kv_heads, sms))
            self.warps = warps or 8  # measured on the H200 (a sweep of the kernel: 7.1 us against 8.0 with 4)
            if not (chunk or warps or INTERPRET or device.type != "cuda"):
                self.cands = chunk_candidates(self.chunk, self.warps) + self._cuda_cand(
                    kernel, heads, kv_heads, head_dim, dtype, length, sms, device)
        self.merge = merge_launch(head_dim, merge)
        self.stages = stages or ATTN_STAGES
        self.use(("cuda", self.chunk, self.warps) if self.backend == "cuda" else (self.chunk, self.warps))
        # the partials' buffers hold the most chunks any candidate has (their stride, NCHUNK, is theirs)
        least = min([self.chunk] + [c[-2] for c in self.cands])
        shape = (kv_heads, -(-length // least), self.gp)
        self.m = torch.empty(shape, device=device, dtype=torch.float32)
        self.l = torch.empty(shape, device=device, dtype=torch.float32)
        self.o = torch.empty(*shape, head_dim, device=device, dtype=torch.float32)
        self.out = torch.empty(heads * head_dim, device=device, dtype=torch.float32)

    @staticmethod
    def _cuda_cand(kernel, heads, kv_heads, head_dim, dtype, length, sms, device) -> list[tuple]:
        """With attn_kernel auto where Triton's chunks are the start (below ATTN_CUDA_FROM positions, and at any length
        for head_dim 64), the CUDA chunks (at attn_cuda.config's chunk and
        warps) as one more candidate for the step tuner, where they build. Triton's chunks of 64 run two programs an
        SM: where a step's live (chunk, KV head) programs outnumber them, the chunk holding the position starts in a
        second wave (qwen3-8b from position 2112: 4.009 ms a step against 3.956 with the CUDA chunks; llama-3.1-8b
        3.881 / 3.827, llama-3.2-3b 1.934 / 1.898: docs/lab/2026-12-03-step-timeline.md), while at ctx 2048 the
        CUDA chunks were 0.8% (llama-3.1-8b) and 1.0% (llama-3.2-3b) slower in the same process
        (docs/lab/2026-12-04-attn-second-wave.md). The tuner times both where the step runs, so each cell keeps
        whichever is faster there. Beside the rule's (chunk, warps): the same chunk on 8 warps where the rule gave
        fewer, and half the chunk on 4 warps (twice the CTAs); from a chunk of 128, each warp then walks half the
        tiles of 16 positions after the wait (one each at 128). On the H200 at ctx 2048 the half chunk was the
        fastest attention in 5 of 6 processes of 8-KV-head cells, by 0.2-0.8% of a step
        (docs/lab/2026-12-04-o-head-major.md)."""
        from floorline.native import attn_cuda

        if kernel != "auto" or attn_cuda.unavailable(device, heads, kv_heads, head_dim, dtype) is not None:
            return []
        w, c = attn_cuda.config(length, kv_heads, sms)
        cands = [("cuda", c, w)]
        if w != 8:
            cands.append(("cuda", c, 8))
        if c // 2 >= CUDA_CHUNK_MIN:
            cands.append(("cuda", c // 2, 4))
        return cands

    def use(self, choice: tuple) -> None:
        """Run with (chunk, warps) of the Triton chunks, or ("cuda", chunk, warps) of the CUDA ones: positions a chunk
        program covers and its warps (a step-tuner candidate)."""
        self.backend = "cuda" if is_cuda(choice) else "triton"
        self.chunk, self.warps = choice[-2:]
        self.tile = min(self.fixed_tile or ATTN_BL, self.chunk)
        self.nchunk = -(-self.length // self.chunk)  # the chunk programs a kv head launches

    def choice(self) -> tuple:
        """The choice in use, as use() takes it: ("cuda", chunk, warps) or (chunk, warps)."""
        return ("cuda", self.chunk, self.warps) if self.backend == "cuda" else (self.chunk, self.warps)

    def name(self) -> str:
        merge = "" if self.merge == (1, 4) else f", merge {self.merge[0]} x w{self.merge[1]}"
        if self.backend == "cuda":
            return f"cuda chunk {self.chunk} w{self.warps}{merge}"
        return f"chunk {self.chunk} tile {self.tile} w{self.warps} s{self.stages}{merge}"


def tri_attention(qkv, cos, sin, pos, k_cache, v_cache, heads, scale, scratch: AttnScratch, zero_qkv: bool = False,
                  qk_norm: tuple | None = None, merge: bool = True, pdl: tuple[int, int] | None = None):
    """RoPE of q and k at `pos`, k and v written to the caches (kv_heads, L, D) at `pos`, and the attention of q over
    positions 0..pos: the GPU twin of refs.ref_rope_kv then refs.ref_attention. Two launches: the chunks (Triton's
    _attn_chunk or attn_cuda's, as scratch.backend says), then the merge; with zero_qkv the merge also zeroes qkv
    (fp32) once it is read. qk_norm (q weights, k weights, eps): each q and k head RMS-normalised before RoPE.
    merge False: the chunks only, their partials left in `scratch` for o_merge.tri_o_merge (returns None). pdl: the
    chunks' and the merge's PDL switches (pdl.switch; None: scratch.pdl for both)."""
    if zero_qkv and not merge:
        raise ValueError("tri_attention: zero_qkv is the merge's work; keep merge=True with it")
    kv_heads, _, d = k_cache.shape
    pdl_c, pdl_m = (0, 0) if INTERPRET else pdl or (scratch.pdl, scratch.pdl)
    norm = dict(QN=qk_norm[0], KN=qk_norm[1], QK_EPS=float(qk_norm[2])) if qk_norm is not None else {}
    if scratch.backend == "cuda":
        from floorline.native import attn_cuda

        attn_cuda.chunks(qkv, cos, sin, pos, k_cache, v_cache, heads, scale, scratch.m, scratch.l, scratch.o,
                         scratch.warps, scratch.chunk, pdl_c, qk_norm,
                         T.slot("chunks", kv_heads * scratch.nchunk, attn_cuda.MARKS))
    else:
        _attn_chunk[(kv_heads, scratch.nchunk)](qkv, cos, sin, pos, k_cache, v_cache, scratch.m, scratch.l,
                                                scratch.o, scale, k_cache.stride(0), scratch.m.shape[1], H=heads,
                                                KVH=kv_heads, G=scratch.g, GP=scratch.gp, D=d, CHUNK=scratch.chunk,
                                                BL=scratch.tile, DOT_F32=INTERPRET, PDL=pdl_c, STAGES=scratch.stages,
                                                num_warps=scratch.warps, **norm, **P.launch_kwargs(pdl_c),
                                                **T.launch_kwargs("chunks", kv_heads * scratch.nchunk))
    if not merge:
        return None
    zb = triton.next_power_of_2(-(-qkv.numel() // heads)) if zero_qkv else 0
    split, mwarps = scratch.merge
    _attn_merge[(heads, split)](scratch.m, scratch.l, scratch.o, scratch.out, pos, scratch.m.shape[1], qkv, qkv.numel(),
                                G=scratch.g, GP=scratch.gp, D=d, CHUNK=scratch.chunk,
                                CB=min(64, triton.next_power_of_2(scratch.nchunk)), PDL=pdl_m, ZB=zb, DB=d // split,
                                num_warps=mwarps, **P.launch_kwargs(pdl_m), **T.launch_kwargs("merge", heads * split))
    return scratch.out
