"""A layer's whole MLP in one kernel, split over the intermediate dimension (mode native's dense step; off with
FLOORLINE_FUSED_MLP=0).

    x_out = x + down(silu(gate(n(x))) * up(n(x)))        n: RMSNorm(x) * g

The two-GEMV MLP (gate_up, then down) has a kernel boundary between them: down needs every element of
silu(gate) * up, so it waits for all of gate_up's programs to finish and its own to ramp up (about 3 us a layer on the
H200 by the step's probe, FLOORLINE_PROBE_NO_WAIT=down). Split the other way, as tensor parallelism splits an MLP
over GPUs, no program needs another's output: program p owns a contiguous range of intermediate rows j, computes
h_j = silu(g_j) u_j from gate row j and up row j (dot products with n(x): hidden columns each), and adds h_j times
row j of down^T into a private fp32 vector of `hidden` partial sums. At its end it adds that vector into the next
residual buffer with fp32 atomics (hidden atomics a program, a few hundred programs a layer). down is stored
transposed, (intermediate, hidden), so a program's rows are contiguous; gate rows j and up rows j come from the same
fused (2 intermediate, hidden) matrix as the two-GEMV path's.

The residual cannot be updated in place (a program would add into x while another still reads it), so the step
rotates three fp32 buffers: layer l reads B[l % 3] (q/k/v, o adds into it in place as before, this kernel reads it),
adds into B[(l + 1) % 3], which was zeroed earlier, and zeroes B[(l + 2) % 3] (last read by layer l - 1, done) for
layer l + 1. Program 0 also adds x itself. The step's embedding kernel zeroes B[1] for layer 0.

Bytes: the same weights as the two GEMVs (3 intermediate x hidden bf16), x once a program (hidden fp32, from L2), and
`hidden` fp32 atomics a program instead of the intermediate vector's write and read.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import torch

from floorline.native import kernels as K

try:
    import triton
    import triton.language as tl
except ImportError:
    triton = tl = None

# (rows a tile BJ, warps, programs per SM): the candidates the step re-times (retune_in_step); the first is used until
# then. Each program keeps the next tile's 3 BJ rows in flight while it uses this one's. Offline SASS (sm_90, hidden
# 3584): 105, 86, 215, 249 registers; BJ 8 spills (hundreds of bytes) and was left out, and so was (4, 32, 1) (16 bytes
# spilled: ~10 ms a step on the H200, never taken). On the H200 the step took (4, 16, 1) for both models
# (session16/fused-mlp: 3.481 ms against 3.536-3.802 for the others).
CANDIDATES = [(4, 16, 1), (2, 16, 1), (4, 8, 1), (2, 4, 2)]
_CHOICE: dict = {}  # (hidden, intermediate): the candidate in use
last_step_tuning: dict = {}
_USED: set = set()  # (hidden, intermediate) of tri_mlp's launches since retune_in_step cleared it
_WARM: set = set()  # (hidden, intermediate, dtype, PDL mode, q/k/v fused, bias): every candidate compiled
_FITS: dict = {}  # _WARM's key + a candidate: its programs fit an SM together (the grid barrier's condition)


def enabled() -> bool:
    """Whether the native step runs each dense MLP as one kernel (this module): FLOORLINE_FUSED_MLP, 1 (the default)
    or 0 (gate_up then down, two GEMVs). On the H200, ctx 2048 bf16: qwen2.5-7b 3.610 -> 3.475 ms, llama-3.1-8b
    3.891 -> 3.789 (results/h200/session16/fused-mlp/)."""
    v = os.environ.get("FLOORLINE_FUSED_MLP", "1")
    if v not in ("0", "1"):
        from floorline.errors import UserError

        raise UserError(f"FLOORLINE_FUSED_MLP={v!r}: use 0 or 1")
    return v == "1"


def qkv_enabled() -> bool:
    """Whether the fused MLP's kernel also computes the next layer's q/k/v (after a grid barrier, its weights requested
    before it): FLOORLINE_FUSED_QKV, 1 (the default) or 0 (a GEMV of its own each layer)."""
    v = os.environ.get("FLOORLINE_FUSED_QKV", "1")
    if v not in ("0", "1"):
        from floorline.errors import UserError

        raise UserError(f"FLOORLINE_FUSED_QKV={v!r}: use 0 or 1")
    return v == "1"


def o_enabled() -> bool:
    """Whether the fused MLP's kernel also computes its layer's o projection first (x += W_o a, a grid barrier, then
    the MLP): FLOORLINE_FUSED_O, 1 or 0 (the default: the o GEMV of its own)."""
    v = os.environ.get("FLOORLINE_FUSED_O", "0")
    if v not in ("0", "1"):
        from floorline.errors import UserError

        raise UserError(f"FLOORLINE_FUSED_O={v!r}: use 0 or 1")
    return v == "1"


def ref_mlp(gate_up: torch.Tensor, down_t: torch.Tensor, x: torch.Tensor, norm_w: torch.Tensor, eps: float):
    """The torch reference (fp32): x + down_t^T (silu(g) * u), [g; u] = gate_up n(x)."""
    gu = gate_up.float() @ K.rmsnorm(x, norm_w, eps)
    g, u = gu.chunk(2)
    return x.float() + (torch.nn.functional.silu(g) * u) @ down_t.float()


if triton is not None:

    @triton.jit
    def _w_tile(W, r0, r1, t, rk, km, K, B: tl.constexpr):
        """Tile t (B rows) of a program's rows [r0, r1) of W (row stride K), bf16 (B, KP); rows past r1 read
        nothing."""
        rows = r0 + t * B + tl.arange(0, B)
        return tl.load(W + rows[:, None] * K + rk[None, :], mask=(rows < r1)[:, None] & km[None, :], other=0.0,
                       eviction_policy="evict_first")

    @triton.jit
    def _bias_rows(B, r0, r1, QR: tl.constexpr):
        """The bias of a program's rows [r0, r1) (at most QR), requested early: the output's rows are set to it
        before the sums are added into them (an atomic add each, fire and forget), so no bias load sits on the path
        from a tile's sums to its store."""
        rows = r0 + tl.arange(0, QR)
        return tl.load(B + rows, mask=rows < r1, other=0.0), rows

    @triton.jit
    def _rows_out(w, xn, rinv, Y, rows, r1, ADD: tl.constexpr):
        """Rows `rows` of W v from their weights w (rows, KP): the sums times rinv, stored, or (ADD) added into Y's
        rows (the bias or the residual already there)."""
        y = tl.sum(w.to(tl.float32) * xn[None, :], 1) * rinv
        if ADD:
            tl.atomic_add(Y + rows, y, mask=rows < r1, sem="relaxed")
        else:
            tl.store(Y + rows, y, mask=rows < r1)

    @triton.jit
    def _gemv_rows(W, X, NW, Y, r0, r1, K, eps, pre, rk, km, PRE: tl.constexpr, B: tl.constexpr,
                   NORM: tl.constexpr, ADD: tl.constexpr):
        """Rows [r0, r1) of y = W v: v = RMSNorm(x) with weight NW where NORM (the 1/rms applied to the sums, as the
        GEMV's PRO_RMSNORM), else x; stored, or added into Y (ADD: Y holds the bias or the residual; every thread
        of the program is past a barrier since it was put there). pre: the first PRE rows' weights, already
        requested; the rest streamed in tiles of B rows, the next requested while one is used (the first before x
        is read). x is read from L2 (.cg): other programs may have written it in this kernel."""
        q0 = r0 + PRE
        w = _w_tile(W, q0, r1, 0, rk, km, K, B)  # in flight while x and the first rows' sums are done
        x = tl.load(X + rk, mask=km, other=0.0, cache_modifier=".cg")
        if NORM:
            xn = x * tl.load(NW + rk, mask=km, other=0.0)
            rinv = 1.0 / tl.sqrt(tl.sum(x * x, 0) / K + eps)
        else:
            xn = x
            rinv = 1.0
        _rows_out(pre, xn, rinv, Y, r0 + tl.arange(0, PRE), r1, ADD)
        for t in range(0, tl.cdiv(r1 - q0, B)):
            w2 = _w_tile(W, q0, r1, t + 1, rk, km, K, B)
            _rows_out(w, xn, rinv, Y, q0 + t * B + tl.arange(0, B), r1, ADD)
            w = w2

    @triton.jit
    def _grid_sync(SYNC, npr):
        """Every program of the grid past this point only once all have reached it (all are resident: one or two
        an SM, launched as many as that). SYNC: an arrival count (SYNC[0]) and a generation (SYNC[32], its own
        128-byte line). Thread barrier first: every thread's atomics of this program are issued before the arrival
        (acq_rel), whose release orders them before it; the last to arrive resets the count and bumps the
        generation (release); the others poll it (acquire) until it moves. No reset between launches is needed."""
        tl.debug_barrier()
        gen = tl.atomic_add(SYNC + 32, 0, sem="relaxed", scope="gpu")  # read before arriving
        old = tl.atomic_add(SYNC, 1, sem="acq_rel", scope="gpu")
        if old == npr - 1:
            tl.atomic_xchg(SYNC, 0, sem="relaxed", scope="gpu")
            tl.atomic_add(SYNC + 32, 1, sem="release", scope="gpu")
        else:
            cur = gen
            while cur == gen:
                cur = tl.atomic_add(SYNC + 32, 0, sem="acquire", scope="gpu")
        tl.debug_barrier()

    @triton.jit
    def _mlp(WGU, WDT, X, NW, XO, XZ, H, I, eps, TILES, WQ, QNW, QB, QY, NQ, SYNC, WO, A, KO,
             BJ: tl.constexpr, HP: tl.constexpr, PDL: tl.constexpr, QKV: tl.constexpr = 0, PRE: tl.constexpr = 16,
             BQ: tl.constexpr = 8, HAS_QB: tl.constexpr = 0, QR: tl.constexpr = 64, O: tl.constexpr = 0,
             KOP: tl.constexpr = 16):
        if PDL == 1:
            tl.extra.cuda.gdc_launch_dependents()
        pid = tl.program_id(0)
        npr = tl.num_programs(0)
        t0 = pid * TILES // npr  # this program's tiles of BJ intermediate rows: [t0, t1)
        t1 = (pid + 1) * TILES // npr
        rk = tl.arange(0, HP)
        km = rk < H
        i = tl.arange(0, 2 * BJ)  # a tile's gate rows, then its up rows (I rows further)
        gu_rows = (t0 * BJ + i % BJ + (i // BJ) * I)[:, None] * H + rk[None, :]
        d_rows = (t0 * BJ + tl.arange(0, BJ))[:, None] * H + rk[None, :]
        live = km[None, :] & ((tl.zeros([1, 1], dtype=tl.int32) + t0) < t1)
        if O:  # this layer's o first, x += W_o a: this program's rows of it, the first PRE requested before the wait
            o0 = pid * H // npr
            o1 = (pid + 1) * H // npr
            rko = tl.arange(0, KOP)
            kmo = rko < KO
            opre = _w_tile(WO, o0, o1, 0, rko, kmo, KO, PRE)
        else:  # the first tile is requested before the wait: weights never depend on the previous kernel
            wgu = tl.load(WGU + gu_rows, mask=live, other=0.0, eviction_policy="evict_first")
            wd = tl.load(WDT + d_rows, mask=live, other=0.0, eviction_policy="evict_first")
        K._pdl_wait(PDL)
        if QKV and HAS_QB:  # the next layer's bias, for QY once the adds are in (QY: last read by this layer's
            bq, bqr = _bias_rows(QB, pid * NQ // npr, (pid + 1) * NQ // npr, QR)  # attention, done: waited on)
        if O:  # x's rows += o's (each row one program's); then every row in before x is read whole
            _gemv_rows(WO, A, A, X, o0, o1, KO, eps, opre, rko, kmo, PRE, BQ, 0, 1)
            wgu = tl.load(WGU + gu_rows, mask=live, other=0.0, eviction_policy="evict_first")
            wd = tl.load(WDT + d_rows, mask=live, other=0.0, eviction_policy="evict_first")
            _grid_sync(SYNC, npr)
            x = tl.load(X + rk, mask=km, other=0.0, cache_modifier=".cg")
        else:
            x = tl.load(X + rk, mask=km, other=0.0)
        xn = x * tl.load(NW + rk, mask=km, other=0.0) / tl.sqrt(tl.sum(x * x, 0) / H + eps)
        y = tl.where(pid == 0, x, 0.0)  # program 0 carries the residual itself
        tl.store(XZ + rk, tl.zeros([HP], dtype=tl.float32), mask=km & (rk % npr == pid))  # the next layer's buffer
        half = tl.arange(0, 2)[:, None]
        for t in range(t0, t1):
            more = km[None, :] & ((tl.zeros([1, 1], dtype=tl.int32) + t + 1) < t1)
            wgu2 = tl.load(WGU + gu_rows + BJ * H, mask=more, other=0.0, eviction_policy="evict_first")
            wd2 = tl.load(WDT + d_rows + BJ * H, mask=more, other=0.0, eviction_policy="evict_first")
            s = tl.sum(wgu.to(tl.float32) * xn[None, :], 1)  # (2 BJ,): gate sums then up sums
            s2 = tl.reshape(s, [2, BJ])
            g = tl.sum(tl.where(half == 0, s2, 0.0), 0)
            u = tl.sum(tl.where(half == 1, s2, 0.0), 0)
            h = g / (1.0 + tl.exp(-g)) * u
            y += tl.sum(h[:, None] * wd.to(tl.float32), 0)
            wgu = wgu2
            wd = wd2
            gu_rows += BJ * H
            d_rows += BJ * H
        if PDL == 2:  # FLOORLINE_PDL=late: after the main loop
            tl.extra.cuda.gdc_launch_dependents()
        if QKV:  # the next layer's q/k/v weights requested now, in flight while the adds and the barrier run
            q0 = pid * NQ // npr
            q1 = (pid + 1) * NQ // npr
            pre = _w_tile(WQ, q0, q1, 0, rk, km, H, PRE)
        tl.atomic_add(XO + rk, y, mask=km, sem="relaxed")
        if QKV:  # once every program's adds are in, XO is the next layer's residual: its q/k/v, this program's rows
            if HAS_QB:
                tl.store(QY + bqr, bq, mask=bqr < q1)
            _grid_sync(SYNC, npr)
            _gemv_rows(WQ, XO, QNW, QY, q0, q1, H, eps, pre, rk, km, PRE, BQ, 1, HAS_QB)

    @triton.jit
    def _rows_first(W, X, NW, B, Y, N, KD, eps, KP: tl.constexpr, PDL: tl.constexpr, PRE: tl.constexpr,
                    BQ: tl.constexpr, NORM: tl.constexpr, HAS_B: tl.constexpr, ADD: tl.constexpr, QR: tl.constexpr):
        """_mlp's q/k/v or o phase as a kernel of its own, its first rows requested before the wait: a layer's q/k/v
        where the previous MLP did not compute it (layer 0), and under the interpreter, which cannot run
        _grid_sync, each phase. ADD: Y holds the residual (o); HAS_B: Y's rows are set to the bias first."""
        if PDL == 1:
            tl.extra.cuda.gdc_launch_dependents()
        pid = tl.program_id(0)
        npr = tl.num_programs(0)
        rk = tl.arange(0, KP)
        km = rk < KD
        r0 = pid * N // npr
        r1 = (pid + 1) * N // npr
        pre = _w_tile(W, r0, r1, 0, rk, km, KD, PRE)
        if HAS_B:
            b, br = _bias_rows(B, r0, r1, QR)
        K._pdl_wait(PDL)
        if HAS_B:
            tl.store(Y + br, b, mask=br < r1)
            tl.debug_barrier()  # the bias stores before any thread's adds into them
        _gemv_rows(W, X, NW, Y, r0, r1, KD, eps, pre, rk, km, PRE, BQ, NORM, ADD or HAS_B)


def fitting(inter: int) -> list:
    """The candidates whose tile divides the intermediate size (one-row tiles if none does)."""
    return [c for c in CANDIDATES if inter % c[0] == 0] or [(1, 16, 1)]


def _sms(dev) -> int:
    return torch.cuda.get_device_properties(dev).multi_processor_count


class NextQKV(NamedTuple):
    """The next layer's q/k/v, for the MLP kernel to compute once its residual is complete (FLOORLINE_FUSED_QKV):
    w (rows, hidden) bf16, bias (rows,) fp32 or None, norm_w (hidden,) fp32 (its RMSNorm), out (rows,) fp32."""
    w: torch.Tensor
    bias: torch.Tensor | None
    norm_w: torch.Tensor
    out: torch.Tensor


def sync_words(device) -> torch.Tensor:
    """The grid barrier's state (_grid_sync): an arrival count and a generation, on separate 128-byte lines."""
    return torch.zeros(64, dtype=torch.int32, device=device)


def q_tiles(warps: int, hp: int) -> tuple[int, int]:
    """(PRE, BQ): the q/k/v rows a program requests before the grid barrier (128 bf16 weights a thread: 64 registers)
    and the rows of each later tile (half as many, two in flight). Offline SASS (sm_90, hidden 4096 padded): (4, 16,
    1) 110 registers, (2, 16, 1) 116, (4, 8, 1) 216, no spills; 24 rows before the barrier at 16 warps spill."""
    pre = max(2, 4096 * warps // hp)
    return pre, pre // 2


def _fits(kern, warps: int, per_sm: int, dev) -> bool:
    """Whether `per_sm` programs of the compiled kernel fit on one SM together (registers, threads, shared memory):
    the grid barrier needs every program resident at once. Unknown (no register count): no."""
    getattr(kern, "_init_handles", lambda: None)()  # (Triton reads the register count when it loads the module)
    n_regs = getattr(kern, "n_regs", None)
    if not n_regs:
        return False
    props = torch.cuda.get_device_properties(dev)
    regs = -(-n_regs // 8) * 8 * 32 * warps * per_sm  # allocated in 8s a thread
    shared = getattr(kern.metadata, "shared", 0) * per_sm
    return (regs <= getattr(props, "regs_per_multiprocessor", 65536)
            and 32 * warps * per_sm <= getattr(props, "max_threads_per_multi_processor", 2048)
            and shared <= getattr(props, "shared_memory_per_multiprocessor", 228 * 1024))


def _check_qkv(q: NextQKV, h: int) -> None:
    rows = q.w.shape[0]
    if q.w.shape != (rows, h) or not q.w.is_contiguous() or q.out.dtype != torch.float32 or q.out.numel() != rows:
        raise ValueError(f"NextQKV: a contiguous (rows, {h}) matrix and an fp32 output of its rows, not "
                         f"{tuple(q.w.shape)} and {tuple(q.out.shape)}")
    if q.norm_w.dtype != torch.float32 or (q.bias is not None and q.bias.dtype != torch.float32):
        raise ValueError("NextQKV: the norm weight and the bias in fp32")


def tri_rows(w: torch.Tensor, x: torch.Tensor, y: torch.Tensor, eps: float = 1e-6, norm_w=None, bias=None,
             add: bool = False, kind: str = "qkv") -> None:
    """y = w RMSNorm(x) (+ bias) (norm_w given), or y += w x (add): the MLP kernel's q/k/v or o phase as a kernel
    of its own (_rows_first), one program an SM, 16 warps (the interpreter: 3 programs, 1-row tiles, so that a program
    streams tiles past its first). w (rows, k) bf16 contiguous; x (k,), y (rows,) fp32; `kind` names it for
    FLOORLINE_PROBE_NO_WAIT."""
    rows, k = w.shape
    if not w.is_contiguous() or x.numel() != k or y.numel() != rows or y.dtype != torch.float32:
        raise ValueError(f"tri_rows: a contiguous (rows, k) matrix, x of k and an fp32 y of rows, not "
                         f"{tuple(w.shape)}, {tuple(x.shape)} and {tuple(y.shape)} {y.dtype}")
    kp = triton.next_power_of_2(k)
    warps = 16
    pre, bq = (2, 1) if K.INTERPRET else q_tiles(warps, kp)
    pdl = K._pdl_for(kind)
    progs = 3 if K.INTERPRET else _sms(x.device)
    _rows_first[(progs,)](w, x, norm_w if norm_w is not None else x, bias if bias is not None else y, y, rows, k,
                          eps, KP=kp, PDL=pdl, PRE=pre, BQ=bq, NORM=norm_w is not None, HAS_B=bias is not None,
                          ADD=add, QR=triton.next_power_of_2(-(-rows // progs)), num_warps=warps, **K._launch(pdl))


def tri_mlp(gate_up: torch.Tensor, down_t: torch.Tensor, x: torch.Tensor, out: torch.Tensor, zero: torch.Tensor,
            norm_w: torch.Tensor, eps: float, config: tuple | None = None, qkv: NextQKV | None = None,
            o: tuple | None = None, sync: torch.Tensor | None = None) -> None:
    """out += ref_mlp(...) (out holds zeros: the result lands there) and zero[:] = 0, in one launch. x, out, zero:
    three distinct fp32 vectors of `hidden`; gate_up (2 intermediate, hidden) and down_t (intermediate, hidden) bf16.
    o = (w_o, a): first x += w_o a (this layer's attention output projection), in the same launch before a grid
    barrier; qkv: then also the next layer's q/k/v of out (NextQKV), after another. Both need every program resident
    at once (one or two an SM) and `sync`, the barrier's words (sync_words()); under the interpreter, or where a
    candidate's programs do not fit an SM together, tri_rows runs them before / after instead."""
    i2, h = gate_up.shape
    inter = i2 // 2
    if down_t.shape != (inter, h) or not (gate_up.is_contiguous() and down_t.is_contiguous()):
        raise ValueError(f"tri_mlp: contiguous gate_up (2I, H) and down_t (I, H), not {tuple(gate_up.shape)} and "
                         f"{tuple(down_t.shape)}")
    vecs = (x, out, zero)
    if any(v.dtype != torch.float32 or v.numel() != h for v in vecs) or len({v.data_ptr() for v in vecs}) < 3:
        raise ValueError(f"tri_mlp: x, out and zero must be three distinct fp32 vectors of {h}")
    if 2 * inter * h >= 2**31:  # the kernel's int32 offsets
        raise ValueError(f"tri_mlp: gate_up of {2 * inter} x {h} is past the kernel's int32 offsets")
    if qkv is not None:
        _check_qkv(qkv, h)
    wo, a = o if o is not None else (gate_up, x)  # (dummies where the o phase is off)
    if o is not None and (wo.shape[0] != h or not wo.is_contiguous() or a.numel() != wo.shape[1]
                          or a.dtype != torch.float32):
        raise ValueError(f"tri_mlp: o = (a contiguous ({h}, k) matrix, fp32 a of k), not {tuple(wo.shape)} and "
                         f"{tuple(a.shape)} {a.dtype}")
    if (o is not None or qkv is not None) and (sync is None or sync.dtype != torch.int32 or sync.numel() < 64):
        raise ValueError("tri_mlp: the o and q/k/v phases need the grid barrier's words: sync=sync_words(device)")
    key = (h, inter)
    bj, warps, per_sm = config or _CHOICE.get(key) or fitting(inter)[0]
    if inter % bj:
        raise ValueError(f"tri_mlp: intermediate {inter} is not a multiple of {bj}")
    pdl = K._pdl_for("mlp")
    hp = triton.next_power_of_2(h)
    q = qkv or NextQKV(gate_up, None, x, out)  # (dummies where the q/k/v phase is off)
    sync = sync if sync is not None else out
    args = (gate_up, down_t, x, norm_w, out, zero, h, inter, eps)
    qargs = (q.w, q.norm_w, q.bias if q.bias is not None else q.out, q.out, q.w.shape[0], sync, wo, a, wo.shape[1])

    def consts(c, fq: bool, fo: bool) -> dict:
        pre, bq = q_tiles(c[1], hp) if fq or fo else (16, 8)
        qr = triton.next_power_of_2(-(-q.w.shape[0] // (_sms(x.device) * c[2]))) if fq else 64
        return dict(BJ=c[0], HP=hp, PDL=pdl, QKV=int(fq), PRE=pre, BQ=bq, HAS_QB=fq and qkv.bias is not None,
                    QR=qr, O=int(fo), KOP=triton.next_power_of_2(wo.shape[1]) if fo else 16, num_warps=c[1],
                    **K._launch(pdl))

    want_q, want_o = qkv is not None and not K.INTERPRET, o is not None and not K.INTERPRET
    warm = (h, inter, gate_up.dtype, pdl, want_q, qkv is not None and qkv.bias is not None, want_o)
    if warm not in _WARM and not K.INTERPRET and not torch.cuda.is_current_stream_capturing():
        for c in fitting(inter):  # compiled now, not while the step tuner captures a graph
            _FITS[warm + c] = fits = not (want_q or want_o) or _fits(
                _mlp.warmup(*args, inter // c[0], *qargs, **consts(c, want_q, want_o), grid=(1,)), c[1], c[2],
                x.device)
            if not fits:  # this candidate runs the MLP alone, tri_rows before and after it
                _mlp.warmup(*args, inter // c[0], *qargs, **consts(c, False, False), grid=(1,))
        _WARM.add(warm)
    c = (bj, warps, per_sm)
    fused = (want_q or want_o) and _FITS.get(warm + c, False)
    _USED.add(key)
    if o is not None and not fused:
        tri_rows(wo, a, x, add=True, kind="o")
    progs = per_sm if K.INTERPRET else _sms(x.device) * per_sm  # the interpreter: as many programs as per_sm says
    _mlp[(progs,)](*args, inter // bj, *qargs, **consts(c, want_q and fused, want_o and fused))
    if qkv is not None and not fused:
        tri_qkv(qkv, out, eps)


def tri_qkv(q: NextQKV, x: torch.Tensor, eps: float) -> None:
    """q.out = q.w RMSNorm(x) (+ q.bias), one launch (tri_rows): the q/k/v of a layer the previous MLP's kernel did
    not compute."""
    _check_qkv(q, x.numel())
    tri_rows(q.w, x, q.out, eps, norm_w=q.norm_w, bias=q.bias)


def barrier_fits() -> dict:
    """For the records: each candidate compiled with the o and / or q/k/v phase, whether its programs fit an SM
    together (if not, that candidate runs the MLP alone, tri_rows before / after it)."""
    return {f"{k[1]}x{k[0]}{' o' if k[6] else ''}{' qkv' if k[4] else ''} bj{k[-3]} w{k[-2]} x{k[-1]}": v
            for k, v in _FITS.items() if k[4] or k[6]}


def retune_in_step(capture, state: list, reps: int = 30) -> None:
    """Each fused-MLP shape the step launches (one capture first, as kernels.retune_in_step finds its shapes), its
    candidates timed in the whole step (timing.fastest_in_step, as the GEMV tiles are), the fastest kept."""
    from floorline import timing

    global last_step_tuning
    last_step_tuning = {}
    _USED.clear()
    graph = capture()  # which shapes this step launches (not another model's earlier in the process)
    del graph
    for key in sorted(_USED):
        use = lambda c, key=key: _CHOICE.__setitem__(key, c)  # noqa: E731
        times = timing.fastest_in_step(fitting(key[1]), use, capture, state, reps)
        last_step_tuning[f"{key[1]}x{key[0]} mlp"] = {f"bj{c[0]} w{c[1]} x{c[2]}": round(t, 4)
                                                      for c, t in times.items()}
