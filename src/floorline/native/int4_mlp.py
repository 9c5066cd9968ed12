"""A layer's whole int4 MLP in one CUDA kernel (cuda/int4_mlp.cu, NVRTC), for hidden sizes whose down columns fit in
shared memory: the step tuner times it against the two int4 GEMVs (gate_up, then down) and keeps the faster.

    x_out = x + down(silu(gate(n(x))) * up(n(x)))        n: RMSNorm(x) * g

Why: the two GEMVs have a kernel boundary between them, which on a small model costs as much as the bytes (llama-3.2-1b
int4 on the H200: gate_up 6.9 us and down 3.7 us a layer against ~6 us of bytes, docs/lab/2026-12-03-small-models-
baseline.md). Split over the intermediate dimension, as mlp.py splits the bf16 MLP, no block needs another's output:
block b owns 16-row blocks [rb0, rb1) of the intermediate rows (the `mma` layout's tiles, shared out evenly), computes
their h = silu(gate) * up on the tensor cores as int4_gemv's GLU does (phase 1), then multiplies down's columns of those
rows by h (phase 2) and adds the hidden-long result into the next residual buffer with fp32 atomics.

down stays in the `mma` layout the two-GEMV path reads (no copy): its columns come as 64-input blocks of 16-row tiles,
so block b's rows touch at most KBS of them (two for four row blocks that cross a boundary). Each is copied whole into
shared memory by cp.async before the wait on the previous kernel, and h is staged as that block's tensor-core B
fragments with zeros outside [rb0, rb1): a 64-input block two blocks share is read by both (the second read from L2)
and each adds only its own rows. Scale and zero of down's group come off per block, the zero point as zero x the sum of
this block's h over the group's columns (the terms add up over the blocks). Napkin math, llama-3.2-1b (hidden 2048,
intermediate 8192), one block an SM: 512 row blocks over 132 blocks, 3-4 each; gate_up 2 x 64 x 2048 / 2 = 128 KB a
block streamed through registers, down's 2 slots 2 x 128 tiles x 576 B = 144 KB of shared memory.

The residual: three fp32 buffers in turn, as the bf16 fused MLP (mlp.py): layer l reads B[l % 3], adds into B[(l + 1) %
3] (zeroed), zeroes B[(l + 2) % 3]; block 0 adds x itself.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib

import torch

from floorline.native import int4_format as F
from floorline.native import nvrtc

SOURCE = "int4_mlp.cu"
# (blocks an SM, K slices a gate/up tile in phase 1, groups in flight a warp, unit): what the step tuner times against
# the two GEMVs, where plan() fits them. Warps a block = 2 x (row blocks a block at most) x K slices. unit: the row
# blocks are shared out in units of 1 (the most even split; a block's rows then usually cross one of down's 64-input
# blocks, which it reads whole beside its neighbour) or 4 (whole 64-input blocks: none read twice, fewer blocks where
# they do not divide evenly).
CANDIDATES = [(1, 1, 2, 4), (1, 2, 2, 4), (1, 2, 4, 4), (1, 1, 2, 1), (1, 2, 2, 1), (1, 2, 4, 1), (2, 1, 2, 1),
              (2, 2, 2, 1), (2, 2, 2, 4)]
SMEM_BLOCK = 227 * 1024  # the H100/H200 opt-in limit a block (plan() takes the GPU's own at launch)
SMEM_SM = 228 * 1024  # and an SM's, of which each resident block also holds 1 KB
MAX_WARPS = 16  # (20 and 32 warps spilled at 4 groups ahead: offline SASS, sm_90)


def plan(hidden: int, inter: int, sms: int, config: tuple, smem_block: int = SMEM_BLOCK,
         smem_sm: int = SMEM_SM) -> dict | str:
    """The launch of `config` for an MLP of `hidden` x `inter` on `sms` SMs: grid, LMAX (row blocks a block at most),
    KBS (down's 64-input blocks a block's rows span at most), warps, shared bytes; or why it does not fit (a str)."""
    per_sm, nks, ahead, unit = config
    if hidden % F.GROUP or inter % F.GROUP:
        return f"hidden {hidden} and intermediate {inter} must be multiples of {F.GROUP}"
    nrb = inter // F.TILE
    grid = min(nrb // unit, per_sm * sms)
    spans = [(unit * (b * (nrb // unit) // grid), unit * ((b + 1) * (nrb // unit) // grid)) for b in range(grid)]
    lmax = max(r1 - r0 for r0, r1 in spans)
    kbs = max((r1 - 1) // 4 - r0 // 4 + 1 for r0, r1 in spans)
    warps = 2 * lmax * nks
    if warps > MAX_WARPS:
        return f"{warps} warps a block (row blocks {lmax} x 2 x {nks} slices): more than {MAX_WARPS}"
    smem = shared_bytes(hidden, warps, kbs)
    if smem > smem_block or per_sm * (smem + 1024) > smem_sm:
        return f"{smem} bytes of shared memory a block, {per_sm} an SM: more than the GPU holds"
    return dict(grid=grid, lmax=lmax, kbs=kbs, warps=warps, smem=smem, nks=nks, ahead=ahead, unit=unit)


def shared_bytes(hidden: int, warps: int, kbs: int) -> int:
    """A block's dynamic shared memory, in 16-byte words as the kernel lays it out: partial sums (warps x 16 + 32
    floats), n(x) as fp16 hi + lo with its group sums, h (kbs x 16 words as fp16 hi + lo, kbs x 16 as fp32), down's kbs
    slots (a slot: each of hidden / 16 tiles' 32 code words, 2 scale and 2 zero words)."""
    groups = hidden // F.GROUP
    words = warps * 4 + 8 + groups * 32 + -(-groups // 4) + kbs * 32 + kbs * (hidden // 16) * 36
    return 16 * words


def fitting(hidden: int, inter: int, sms: int, smem_block: int = SMEM_BLOCK, smem_sm: int = SMEM_SM) -> list[tuple]:
    """The candidates plan() fits for this shape (none: the two GEMVs only)."""
    return [c for c in CANDIDATES if isinstance(plan(hidden, inter, sms, c, smem_block, smem_sm), dict)]


def name(c: tuple) -> str:
    """A candidate as the records name it: "x1 k1 ahead2 u4" (blocks an SM, K slices, groups ahead, unit)."""
    return "x{} k{} ahead{} u{}".format(*c)


def compile_source(defines: dict, arch: str) -> bytes:
    return nvrtc.compile_cubin(SOURCE, defines, arch)


def _defines(hidden: int, p: dict, pdl: int) -> dict:
    return dict(WARPS=p["warps"], LMAX=p["lmax"], NKS=p["nks"], U=p["ahead"], KBS=p["kbs"], HID=hidden,
                XPT=-(-hidden // (4 * p["warps"] * 32)), PRO=1, XBF16=0, PDL=pdl)


@functools.lru_cache(maxsize=None)
def _kernel(device_index: int, defines: tuple):
    major, minor = torch.cuda.get_device_capability(device_index)
    arch = f"sm_{major}{minor}"
    d = dict(defines)
    key = hashlib.sha256(repr((nvrtc.source_digest(SOURCE), defines, arch, torch.version.cuda)).encode()).hexdigest()
    with torch.cuda.device(device_index):
        cubin = nvrtc.cached(nvrtc.cache_dir() / "int4_mlp" / f"{key[:32]}.cubin", lambda: compile_source(d, arch))
        return torch.cuda._utils._cuda_load_module(cubin, ["int4_mlp"])["int4_mlp"]


@functools.lru_cache(maxsize=None)
def gpu(device_index: int) -> tuple:
    """(SMs, shared bytes a block may opt into, shared bytes an SM) of a GPU."""
    p = torch.cuda.get_device_properties(device_index)
    return (p.multi_processor_count, getattr(p, "shared_memory_per_block_optin", SMEM_BLOCK),
            getattr(p, "shared_memory_per_multiprocessor", SMEM_SM))


def launch(gate_up: dict, down: dict, x, out, zero, norm_w, eps: float, config: tuple, pdl: int = 0) -> None:
    """out (zeros) += x + the MLP of x; zero[:] = 0, in one launch on the current stream (graph-capturable).
    gate_up, down: the model's fused int4 matrices in the `mma` layout ({"w", "scales", "zeros"}); x, out, zero: three
    distinct fp32 vectors of hidden; norm_w fp32."""
    words = gate_up["w"]
    inter, hidden = words.shape[0] * F.TILE // 2, words.shape[1] // 2
    dev = words.device.index
    p = plan(hidden, inter, *gpu(dev)[:1], config, *gpu(dev)[1:])
    if isinstance(p, str):
        raise ValueError(f"int4 fused MLP {name(config)}: {p}")
    kern = _kernel(dev, tuple(sorted(_defines(hidden, p, pdl).items())))
    if p["smem"] > 48 * 1024 and kern._max_shared_mem_bytes < p["smem"]:
        kern.set_shared_memory_config(p["smem"])
    ptr = lambda t: ctypes.c_void_p(t.data_ptr())  # noqa: E731
    vals = [ptr(words), ptr(gate_up["scales"]), ptr(gate_up["zeros"]), ptr(down["w"]), ptr(down["scales"]),
            ptr(down["zeros"]), ptr(x), ptr(norm_w), ptr(out), ptr(zero), ctypes.c_int(inter), ctypes.c_int(p["unit"]),
            ctypes.c_float(eps)]
    nvrtc.launch(kern.func, (p["grid"], 1, 1), p["warps"] * 32, p["smem"],
                 torch.cuda.current_stream(words.device).cuda_stream, vals, pdl=bool(pdl))


def retune_in_step(net, capture, state: list, reps: int = 30) -> None:
    """The fused int4 MLP (each candidate plan() fits) against the two GEMVs (None), timed in the whole step
    (timing.fastest_in_step), the fastest kept in net.int4_mlp. Each candidate is compiled first, outside any graph
    capture (one launch into scratch vectors)."""
    from floorline.device import timing
    from floorline.native.tuner import TUNER

    if not net.int4_mlp_cands:
        return
    lay = net.layers[0]
    scratch = torch.zeros(3, net.hidden, device=lay["ffn_norm"].device, dtype=torch.float32)

    def warm():
        if net.int4_mlp is not None:
            launch(lay["gate_up"], lay["down"], scratch[0], scratch[1], scratch[2], lay["ffn_norm"], net.eps,
                   net.int4_mlp, net.pdl)

    times = timing.fastest_in_step([None] + net.int4_mlp_cands, lambda c: setattr(net, "int4_mlp", c), capture, state,
                                   reps, warm=warm)
    TUNER.step_tuning["int4_mlp"] = {("two GEMVs" if c is None else name(c)): round(t, 4) for c, t in times.items()}
