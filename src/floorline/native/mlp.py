"""A layer's whole MLP in one kernel, split over the intermediate dimension (mode native's dense step; NativeOptions
mlp=gemv runs gate_up then down as two GEMVs instead).

    x_out = x + down(silu(gate(n(x))) * up(n(x)))        n: RMSNorm(x) * g

The two-GEMV MLP (gate_up, then down) has a kernel boundary between them: down needs every element of
silu(gate) * up, so it waits for all of gate_up's programs to finish and its own to ramp up (about 3 us a layer on the
H200, by a probe of the step whose down kernel skipped that wait). Split the other way, as tensor parallelism splits
an MLP over GPUs, no program needs another's output: program p owns a contiguous range of intermediate rows j,
computes h_j = silu(g_j) u_j from gate row j and up row j (dot products with n(x): hidden columns each), and adds h_j
times row j of down^T into a private fp32 vector of `hidden` partial sums. The rows are shared out evenly: program p
of P takes rows [p I / P, (p + 1) I / P) in tiles of BJ, the last one masked where short (whole tiles a program, and
tiles strided over the programs, measured slower: docs/lab/2026-12-02-fused-mlp.md). At its end it adds that vector
into the next residual buffer with fp32 atomics (hidden atomics a program, a few hundred programs a layer). down is
stored transposed, (intermediate, hidden), so a program's rows are contiguous; gate rows j and up rows j come from
the same fused (2 intermediate, hidden) matrix as the two-GEMV path's.

The residual cannot be updated in place (a program would add into x while another still reads it), so the step
rotates three fp32 buffers: layer l reads B[l % 3] (q/k/v, o adds into it in place as before, this kernel reads it),
adds into B[(l + 1) % 3], which was zeroed earlier, and zeroes B[(l + 2) % 3] (last read by layer l - 1, done) for
layer l + 1. Program 0 also adds x itself. The step's embedding kernel zeroes B[1] for layer 0.

Bytes: the same weights as the two GEMVs (3 intermediate x hidden bf16), x once a program (hidden fp32, from L2), and
`hidden` fp32 atomics a program instead of the intermediate vector's write and read.

kv_prefetch (a step-tuner choice, KV_PREFETCH): each program, as it leaves, asks the L2 for its share of the next
layer's K and V at positions 0..pos-1 (one prefetch.global.L2 a 128-byte line; a hint, no arithmetic changes), so
the next attention's chunk programs, which become resident late in the q/k/v GEMV, find their cache in L2 rather
than DRAM. H200, the step tuner's trials (ms a step, off / on / on evict_last): qwen2.5-1.5b ctx 2048 (2 KV heads)
1.0876 / 1.0712 / 1.0913 and 1.0812 / 1.0645 / 1.0812; llama-3.2-3b ctx 2048 1.9084 / 2.0363 / 2.0321, qwen3-8b
3.9677 / 3.9918 / 3.993, llama-3.1-8b 3.8513 / 3.8674 / 3.8628 (8 KV heads each: 8.4 MB a layer queued ahead of the
q/k/v GEMV's loads), qwen2.5-7b 3.4868 / 3.6557 / 3.6541; llama-3.2-1b ctx 128 0.7606 / 0.798 / 0.8039
(docs/lab/2026-12-04-kv-prefetch.md).
"""

from __future__ import annotations

import torch

from floorline.device import timing
from floorline.native import INTERPRET
from floorline.native import pdl as P
from floorline.native import timeline as T
from floorline.native.refs import rmsnorm
from floorline.native.tuner import TUNER

try:
    import triton
    import triton.language as tl
except ImportError:
    triton = tl = None

# (rows a tile BJ, warps, programs per SM): the candidates the step re-times (retune_in_step); the first is used until
# then. Each program keeps the next tile's 3 BJ rows in flight while it uses this one's. Offline SASS (sm_90, hidden
# 4096): 102, 86, 159, 214 and 249 registers, no spills. Left out: BJ 8 (spills hundreds of bytes), (4, 32, 1) (spills;
# ~10 ms a step in every re-timing), (2, 32, 1) and (1, 16, 1) (no spills, but 10.7-11.8 and 4.7-5.3 ms a step). On
# the H200 the step takes (4, 16, 1) for qwen2.5-7b and (2, 16, 1) for llama-3.1-8b (docs/lab/2026-12-02-fused-mlp.md).
CANDIDATES = [(4, 16, 1), (2, 16, 1), (2, 8, 1), (4, 8, 1), (2, 4, 2)]
# Small hidden sizes (HP, the padded hidden, at most the key): a tile of those rows holds fewer bytes, so the five
# above keep only 24-48 KB of weights in flight an SM (llama-3.2-1b's MLP reached 83% of the bandwidth, qwen3-8b's
# 98%). These keep 72-96 KB in flight with more rows a tile or more programs an SM, each program of at most 8 warps
# (16-warp programs lost in every small model's step). The first H200 probe (docs/lab/2026-12-03-small-tiles.md)
# took (4, 4, 2) for llama-3.2-1b, qwen2.5-1.5b and qwen2.5-0.5b: steps 1.4-5.7% faster than with the best of the
# five above. Offline SASS (sm_90), registers and no spills: HP 2048 (4, 4, 2) 217, (8, 8, 1) 231, (2, 2, 4) 247;
# HP 1024 (8, 4, 2) 224, (4, 2, 4) 214, (4, 4, 3) 124; every program of a launch fits the SMs' registers at once.
SMALL = {2048: [(4, 4, 2), (8, 8, 1), (2, 2, 4)], 1024: [(8, 4, 2), (4, 2, 4), (4, 4, 3)]}


def ref_mlp(gate_up: torch.Tensor, down_t: torch.Tensor, x: torch.Tensor, norm_w: torch.Tensor, eps: float):
    """The torch reference (fp32): x + down_t^T (silu(g) * u), [g; u] = gate_up n(x)."""
    gu = gate_up.float() @ rmsnorm(x, norm_w, eps)
    g, u = gu.chunk(2)
    return x.float() + (torch.nn.functional.silu(g) * u) @ down_t.float()


if triton is not None:

    @triton.jit
    def _tile_sum(wgu, wd, xn, half, BJ: tl.constexpr):
        """A tile's share of down(h): its gate and up rows (wgu) dotted with n(x), h = silu(g) u, then h^T times its
        rows of down^T (wd): a (hidden,) fp32 vector (_mlp's loop body, and persist.py's MLP task's)."""
        s = tl.sum(wgu.to(tl.float32) * xn[None, :], 1)  # (2 BJ,): gate sums then up sums
        s2 = tl.reshape(s, [2, BJ])
        g = tl.sum(tl.where(half == 0, s2, 0.0), 0)
        u = tl.sum(tl.where(half == 1, s2, 0.0), 0)
        h = g / (1.0 + tl.exp(-g)) * u
        return tl.sum(h[:, None] * wd.to(tl.float32), 0)

    @triton.jit
    def _kv_line(i, lh, L, KVH: tl.constexpr, D: tl.constexpr):
        """Line i of a KV prefetch's 2 KVH lh lines (K's heads, then V's; lh lines a head, 64 elements a line, heads L
        D elements apart): (0 for K or 1 for V, its first element's offset in that cache); past the last, (0, 0)."""
        live = i < 2 * KVH * lh
        kv = i // (KVH * lh)
        r = i - kv * (KVH * lh)
        h = r // lh
        return tl.where(live, kv, 0), tl.where(live, h * L * D + (r - h * lh) * 64, 0)

    @triton.jit
    def _kv_prefetch(PK, PV, POS, L, pid, npr, KVH: tl.constexpr, D: tl.constexpr, LAST: tl.constexpr,
                     PB: tl.constexpr):
        """Ask the L2 for a KV cache's positions 0..pos-1 (K and V: (KVH, L, D) bf16 each, 64 elements a 128-byte
        line), one prefetch.global.L2 a line, PB lines a program a round, spread over the npr programs. A hint: no
        result depends on it. LAST: with the evict_last policy."""
        pos = tl.load(POS)
        lh = (pos * D + 63) // 64  # a head's lines
        lane = tl.arange(0, PB)
        for base in range(pid * PB, 2 * KVH * lh, npr * PB):
            kv, off = _kv_line(base + lane, lh, L, KVH, D)
            p = tl.where(kv == 0, PK + off, PV + off)
            if LAST:
                tl.inline_asm_elementwise("prefetch.global.L2::evict_last [$1];\n\tmov.u32 $0, 0;", "=r,l", [p],
                                          dtype=tl.int32, is_pure=False, pack=1)
            else:
                tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [p],
                                          dtype=tl.int32, is_pure=False, pack=1)

    @triton.jit
    def _mlp(WGU, WDT, X, NW, XO, XZ, H, I, eps, BJ: tl.constexpr, HP: tl.constexpr, PDL: tl.constexpr,
             TWO: tl.constexpr = 0, TL=None, PK=None, PV=None, PPOS=None, PL=0, PKVH: tl.constexpr = 0,
             PD: tl.constexpr = 0, PLAST: tl.constexpr = 0, PB: tl.constexpr = 0):
        if TL is not None:  # a timeline slot (timeline.py; None: not compiled)
            t_start = T.now()
        pid = tl.program_id(0)
        npr = tl.num_programs(0)
        # this program's intermediate rows [r0, r1), in tiles of BJ (the last one masked where short)
        r0 = pid * I // npr
        r1 = (pid + 1) * I // npr
        t0 = 0
        t1 = tl.cdiv(r1 - r0, BJ)
        step = 1
        rk = tl.arange(0, HP)
        km = rk < H
        i = tl.arange(0, 2 * BJ)  # a tile's gate rows, then its up rows (I rows further)
        jg = r0 + i % BJ  # each gate/up tile row's intermediate row
        jd = r0 + tl.arange(0, BJ)  # each down^T tile row's
        gu_rows = (jg + (i // BJ) * I)[:, None] * H + rk[None, :]
        d_rows = jd[:, None] * H + rk[None, :]
        # the first tile is requested before the wait: weights never depend on the previous kernel
        wgu = tl.load(WGU + gu_rows, mask=km[None, :] & (jg < r1)[:, None], other=0.0, eviction_policy="evict_first")
        wd = tl.load(WDT + d_rows, mask=km[None, :] & (jd < r1)[:, None], other=0.0, eviction_policy="evict_first")
        if TWO:  # the second tile too (TWO): the loop then asks for a tile once it has used one
            wgu2 = tl.load(WGU + gu_rows + BJ * H, mask=km[None, :] & (jg + BJ < r1)[:, None], other=0.0,
                           eviction_policy="evict_first")
            wd2 = tl.load(WDT + d_rows + BJ * H, mask=km[None, :] & (jd + BJ < r1)[:, None], other=0.0,
                          eviction_policy="evict_first")
        P.wait(PDL)
        if TL is not None:
            t_wait = T.now()
        x = tl.load(X + rk, mask=km, other=0.0)
        xn = x * tl.load(NW + rk, mask=km, other=0.0) / tl.sqrt(tl.sum(x * x, 0) / H + eps)
        y = tl.where(pid == 0, x, 0.0)  # program 0 carries the residual itself
        tl.store(XZ + rk, tl.zeros([HP], dtype=tl.float32), mask=km & (rk % npr == pid))  # the next layer's buffer
        half = tl.arange(0, 2)[:, None]
        if TWO:  # two tiles a trip, each buffer refilled once used: the loop carries both without copying either
            for t in range(t0, t1, 2):
                y += _tile_sum(wgu, wd, xn, half, BJ)
                tl.debug_barrier()  # each buffer's next tile asked for only once it is used: two tiles held, not three
                wgu = tl.load(WGU + gu_rows + 2 * BJ * H, mask=km[None, :] & (jg + (t + 2) * BJ < r1)[:, None],
                              other=0.0, eviction_policy="evict_first")
                wd = tl.load(WDT + d_rows + 2 * BJ * H, mask=km[None, :] & (jd + (t + 2) * BJ < r1)[:, None],
                             other=0.0, eviction_policy="evict_first")
                y += _tile_sum(wgu2, wd2, xn, half, BJ)  # rows of zeros where t + 1 is past the last tile
                tl.debug_barrier()
                wgu2 = tl.load(WGU + gu_rows + 3 * BJ * H, mask=km[None, :] & (jg + (t + 3) * BJ < r1)[:, None],
                               other=0.0, eviction_policy="evict_first")
                wd2 = tl.load(WDT + d_rows + 3 * BJ * H, mask=km[None, :] & (jd + (t + 3) * BJ < r1)[:, None],
                              other=0.0, eviction_policy="evict_first")
                gu_rows += 2 * BJ * H
                d_rows += 2 * BJ * H
        else:
            for t in range(t0, t1, step):
                # the next tile's rows, masked past r1 (a short last tile: rows of zeros, h = 0)
                mg = km[None, :] & (jg + (t + 1) * BJ < r1)[:, None]
                md = km[None, :] & (jd + (t + 1) * BJ < r1)[:, None]
                wgu2 = tl.load(WGU + gu_rows + step * BJ * H, mask=mg, other=0.0, eviction_policy="evict_first")
                wd2 = tl.load(WDT + d_rows + step * BJ * H, mask=md, other=0.0, eviction_policy="evict_first")
                y += _tile_sum(wgu, wd, xn, half, BJ)
                wgu = wgu2
                wd = wd2
                gu_rows += step * BJ * H
                d_rows += step * BJ * H
        tl.atomic_add(XO + rk, y, mask=km, sem="relaxed")
        if PK is not None:  # the next layer's KV cache asked of the L2 as this program leaves (kv_prefetch)
            _kv_prefetch(PK, PV, PPOS, PL, pid, npr, PKVH, PD, PLAST, PB)
        if TL is not None:
            T.put(TL, t_start, t_wait)


def fitting(inter: int, hidden: int = 0) -> list:
    """The candidates whose tile divides the intermediate size (one-row tiles if none does), with SMALL's for a
    hidden size that pads to at most their key, and SMALL_TWO's."""
    hp = triton.next_power_of_2(hidden) if hidden and triton is not None else 1 << 30
    cands = CANDIDATES + [c for top, cs in sorted(SMALL.items(), reverse=True) if hp <= top for c in cs]
    cands += [c for c in SMALL_TWO if hp <= 2048]
    return [c for c in cands if inter % c[0] == 0] or [(1, 16, 1)]


TWO = 1  # a candidate's fourth element: _mlp's TWO (its first two tiles requested before the wait)
# Hidden sizes up to 2048: the one TWO form that was fastest in a step (llama-3.2-1b, 0.767 against 0.781 ms a step for
# the best one-tile form in the same process; docs/lab/2026-12-03-mlp-two-tiles.md). Every other TWO form lost in
# every cell, at 7-8B by 3.5% or more.
SMALL_TWO = [(2, 4, 2, TWO)]


def name(c: tuple) -> str:
    """A candidate as the records name it: "bj4 w16 x1", "bj4 w16 x1 two"."""
    return f"bj{c[0]} w{c[1]} x{c[2]}" + (" two" if len(c) > 3 and c[3] else "")


def _sms(dev) -> int:
    return torch.cuda.get_device_properties(dev).multi_processor_count


def tri_mlp(gate_up: torch.Tensor, down_t: torch.Tensor, x: torch.Tensor, out: torch.Tensor, zero: torch.Tensor,
            norm_w: torch.Tensor, eps: float, config: tuple | None = None, pdl: int | None = None,
            prefetch: tuple | None = None) -> None:
    """out += ref_mlp(...) (out holds zeros: the result lands there) and zero[:] = 0, in one launch. x, out, zero:
    three distinct fp32 vectors of `hidden`; gate_up (2 intermediate, hidden) and down_t (intermediate, hidden) bf16.
    config: (BJ, warps, programs an SM), else the tuner's choice; pdl: the kernels' PDL switch (None: where the GPU
    has it). prefetch (k cache, v cache, position, mode): each program, as it leaves, asks the L2 for its share of
    the caches' positions 0..pos-1 ((kv heads, length, head_dim) bf16 each; mode KV_PREFETCH 1, or 2 with
    evict_last); None: nothing asked (not compiled)."""
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
    key = (h, inter)
    bj, warps, per_sm, *two = config or TUNER.mlp_choice.get(key) or fitting(inter, h)[0]
    pdl = (P.mode("auto", x.device) if pdl is None else pdl) if not INTERPRET else 0
    args = (gate_up, down_t, x, norm_w, out, zero, h, inter, eps)
    pf = {}
    if prefetch is not None:
        kc, vc, pos, pf_mode = prefetch
        if INTERPRET or pf_mode not in (1, 2) or kc.shape != vc.shape or kc.dtype != torch.bfloat16 or kc.dim() != 3:
            raise ValueError("tri_mlp: prefetch takes (k, v, pos, 1 or 2) with bf16 (kv heads, length, head_dim) "
                             "caches, on a GPU")
        pf = dict(PK=kc, PV=vc, PPOS=pos, PL=kc.shape[1], PKVH=kc.shape[0], PD=kc.shape[2], PLAST=pf_mode - 1)
    warm = (h, inter, gate_up.dtype, pdl, pf.get("PLAST", -1))
    if warm not in TUNER.mlp_warm and not INTERPRET and not torch.cuda.is_current_stream_capturing():
        for c in fitting(inter, h):  # compiled now, not while the step tuner captures a graph
            _mlp.warmup(*args, BJ=c[0], HP=triton.next_power_of_2(h), PDL=pdl, TWO=c[3] if len(c) > 3 else 0,
                        num_warps=c[1], grid=(1,), **(dict(pf, PB=32 * c[1]) if pf else {}), **P.launch_kwargs(pdl))
        TUNER.mlp_warm.add(warm)
    TUNER.used.add(("mlp", key))
    progs = per_sm if INTERPRET else _sms(x.device) * per_sm  # the interpreter: as many programs as per_sm says
    _mlp[(progs,)](*args, BJ=bj, HP=triton.next_power_of_2(h), PDL=pdl, TWO=two[0] if two else 0, num_warps=warps,
                   **(dict(pf, PB=32 * warps) if pf else {}), **P.launch_kwargs(pdl), **T.launch_kwargs("mlp", progs))


def retune_in_step(capture, state: list, reps: int = 30) -> None:
    """Each fused-MLP shape the step launches (one capture first, as gemv.retune_in_step finds its shapes), its
    candidates timed in the whole step (timing.fastest_in_step, as the GEMV tiles are), the fastest kept."""
    TUNER.step_tuning["mlp"] = trials = {}
    TUNER.clear_used()
    graph = capture()  # which shapes this step launches (not another model's earlier in the process)
    del graph
    for kind, key in sorted(TUNER.used):
        if kind != "mlp":
            continue
        use = lambda c, key=key: TUNER.mlp_choice.__setitem__(key, c)  # noqa: E731
        times = timing.fastest_in_step(fitting(key[1], key[0]), use, capture, state, reps)
        trials[f"{key[1]}x{key[0]} mlp"] = {name(c): round(t, 4) for c, t in times.items()}


# the step tuner's choices, as the records name them: off, the next layer's KV asked of the L2, the same evict_last
PREFETCH_NAMES = {0: "off", 1: "on", 2: "on evict_last"}
KV_PREFETCH = tuple(PREFETCH_NAMES)


def kv_prefetch_fits(net) -> bool:
    """Whether a layer's whole KV cache (both caches, every position the run holds) fits in a quarter of the GPU's L2:
    the one layer's worth that kv_prefetch asks for must outlast the next q/k/v GEMV's weights streaming through."""
    dev = net.k_cache.device
    if INTERPRET or dev.type != "cuda" or net.k_cache.dtype != torch.bfloat16:
        return False
    return 2 * net.k_cache[0].nbytes <= torch.cuda.get_device_properties(dev).L2_cache_size // 4


def retune_prefetch_in_step(net, capture, state: list, reps: int = 30) -> None:
    """The fused MLP asking the L2 for the next layer's KV cache (KV_PREFETCH: off, on, on with evict_last), each
    timed in the whole step (timing.fastest_in_step), the fastest kept in net.kv_prefetch."""
    if not (net.fused_mlp and net.ops == "triton" and not net.persist_on and len(net.layers) > 1
            and kv_prefetch_fits(net)):
        return
    lay = net.layers[0]
    junk = torch.zeros(3, net.hidden, device=net.k_cache.device, dtype=torch.float32)

    def warm():  # one launch into scratch vectors: compiles every tile's variant for this mode, outside a capture
        if net.kv_prefetch:
            tri_mlp(lay["gate_up"]["w"], lay["down_t"], junk[0], junk[1], junk[2], lay["ffn_norm"], net.eps,
                    pdl=net.pdl, prefetch=(net.k_cache[1], net.v_cache[1], net.pos, net.kv_prefetch))

    times = timing.fastest_in_step(list(KV_PREFETCH), lambda c: setattr(net, "kv_prefetch", c), capture, state, reps,
                                   warm=warm)
    TUNER.step_tuning["kv_prefetch"] = {PREFETCH_NAMES[c]: round(t, 4) for c, t in times.items()}
