"""The batch-1 W4A16 GEMV in CUDA C++, compiled at run time by NVRTC (no nvcc on the user's machine): int4 at its floor.

Why CUDA and not Triton: the Triton GEMV spends ~5 instructions a weight (164 registers, 19% occupancy, Nsight Compute
on the H200) and streams 1.0-1.6 TB/s. Here a weight costs well under two: each warp owns one 16-row tile
(int4_format's `mma` layout) and a share of its groups; a lane's 16-byte load is four tensor-core A fragments, which
one AND a pair turns into fp16 subnormals (code x 2^-24, exact), and `mma.m16n8k16` multiplies by the input (fp16,
fp32 accumulate) -- 256 weights an instruction, the tensor cores otherwise idle at batch 1; the zero point comes off
once per group and row as zero x the group's input sum, the group's scale once per 128 weights of a row, in fp32
(cuda/int4_gemv.cu says why not a packed subtraction of 1024 + zero). The input is converted once per
block into shared memory, laid out so each lane reads its B fragments for four steps with two 16-byte loads; RMSNorm's
1/rms is computed first (every block reads all of x) so the fp16 inputs are normalised (no overflow from a large
residual stream).

Fusions, as the Triton GEMV has them: RMSNorm prologue, bias, silu(gate) * up (a block holds gate tile t and up tile
t), y += W x in place (the residual stream), split-K over blocks with fp32 atomics where the output is that residual.
Launch parameters (warps a block; register prefetch of 1-4 groups or a cp.async ring of 3-8 in shared memory;
splits; or the flat kernel, a warp owning whole row blocks; or persistent blocks looping over row blocks) are tuned
per shape: a shortlist by one launch at a time after an L2 flush (_tune), then, for mode native, the shortlist timed in
the decode step itself (retune_in_step), before the step's graph is captured. Programmatic dependent launch: a block
issues its first weight loads (and reads the norm's weights and the bias), then waits for the previous kernel
(griddepcontrol), as the Triton kernels do (cuda/pdl.cuh).
Numerics: each input is split into two fp16 halves, hi + lo (about 22 bits), fed as columns 0 and 1 of the product's
B operand (mma.m16n8k16 computes 8 columns; batch 1 uses 2 of them at no extra instruction); products and sums in
fp32. An input beyond fp16's 65504 would overflow (far past any normalised or activation input seen).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
from pathlib import Path

import torch

from floorline.device import timing
from floorline.native import int4_format as F
from floorline.native import nvrtc
from floorline.native.tuner import TUNER, shape_name

SOURCE = "int4_gemv.cu"  # cuda/int4_gemv.cu

# (warps a block, groups in flight a warp, splits, row blocks a warp, cp.async stages, persistent blocks an SM, row
# tiles a block) tried per shape. Row blocks a warp = 0: the kernel int4_gemv (a block's warps share its row block's
# groups; splits > 1 split K over blocks, only where the output is added in place); > 0: int4_gemv_flat (a warp owns whole row blocks;
# many rows). Stages > 0: int4_gemv streams its groups through a cp.async ring in shared memory (that many in flight a
# warp) instead of `groups in flight` register buffers. Persistent p > 0 (register buffers only): p x SMs blocks
# (over the splits) loop over the row blocks, the inputs staged once a block and the next row block's first groups
# loaded during the last one's epilogue; 0: one block a row block (and split). Row tiles a block t > 1 (int4_gemv,
# not GLU, whose blocks always hold a gate and an up tile): t consecutive tiles share the block's staged inputs, its
# warps split t ways by tile then by groups -- the inputs read from L2 and converted once for 16 t rows, not 16 (every
# block of a 16-row tile reads all of its K slice: for q/k/v, o and down as many bytes again as ~45% of the weights)
CONFIGS = [(*c, 1) for c in [
           (4, 1, 1, 0, 0, 0), (4, 2, 1, 0, 0, 0), (8, 1, 1, 0, 0, 0), (8, 2, 1, 0, 0, 0), (8, 4, 1, 0, 0, 0),
           (16, 1, 1, 0, 0, 0), (16, 2, 1, 0, 0, 0), (4, 2, 2, 0, 0, 0), (8, 2, 2, 0, 0, 0), (8, 1, 4, 0, 0, 0),
           (8, 2, 4, 0, 0, 0), (4, 2, 4, 0, 0, 0), (8, 1, 8, 0, 0, 0), (4, 2, 1, 1, 0, 0), (8, 2, 1, 1, 0, 0),
           (4, 4, 1, 1, 0, 0), (4, 2, 1, 2, 0, 0), (8, 1, 1, 0, 4, 0), (8, 1, 1, 0, 6, 0), (4, 1, 1, 0, 8, 0),
           (16, 1, 1, 0, 3, 0), (8, 1, 2, 0, 4, 0), (4, 1, 4, 0, 6, 0),
           (8, 2, 1, 0, 0, 2), (8, 2, 1, 0, 0, 3), (16, 2, 1, 0, 0, 1), (4, 2, 1, 0, 0, 4), (4, 2, 1, 0, 0, 6),
           (4, 2, 4, 0, 0, 4), (4, 2, 4, 0, 0, 6), (8, 2, 2, 0, 0, 2), (8, 2, 4, 0, 0, 2)]] + [
    (8, 2, 1, 0, 0, 0, 2), (16, 2, 1, 0, 0, 0, 2), (16, 1, 1, 0, 0, 0, 4), (16, 2, 1, 0, 0, 0, 4),
    (8, 1, 1, 0, 4, 0, 2), (8, 2, 2, 0, 0, 0, 2), (16, 2, 2, 0, 0, 0, 4), (8, 2, 4, 0, 0, 0, 2),
    (16, 2, 4, 0, 0, 0, 4), (16, 1, 4, 0, 0, 0, 4), (8, 2, 8, 0, 0, 0, 4), (16, 2, 8, 0, 0, 0, 4),
    (8, 1, 2, 0, 0, 0, 2), (8, 1, 4, 0, 0, 0, 4), (8, 2, 4, 0, 0, 0, 4), (8, 1, 8, 0, 0, 0, 4), (16, 1, 8, 0, 0, 0, 4),
    (16, 1, 8, 0, 0, 0, 8), (16, 2, 8, 0, 0, 0, 8), (16, 1, 16, 0, 0, 0, 8), (16, 1, 16, 0, 0, 0, 16),
    (16, 2, 16, 0, 0, 0, 16)] + [
    # seven tiles a block (224 tiles = 32 x 7: qwen2.5-7b's o and down): 128 or 256 blocks, one or two on each SM
    # (54 registers a thread at ahead 1), where 8 or 16 tiles make 224 blocks, two on 92 SMs and one on 40
    (14, 1, 4, 0, 0, 0, 7), (14, 2, 4, 0, 0, 0, 7), (14, 1, 8, 0, 0, 0, 7), (14, 2, 8, 0, 0, 0, 7),
    (14, 1, 8, 0, 0, 0, 14), (14, 1, 16, 0, 0, 0, 14), (7, 1, 8, 0, 0, 0, 7)] + [
    # split-K for q/k/v (288 tiles of 28 groups: 252 blocks of 8 tiles and 4 or 2 groups, two on most SMs, where one
    # tile a block makes 288, three on 24 SMs and two on the rest; 384 tiles: 384 blocks, three on each SM)
    (16, 1, 7, 0, 0, 0, 8), (16, 2, 7, 0, 0, 0, 8), (8, 1, 7, 0, 0, 0, 8), (16, 1, 14, 0, 0, 0, 16),
    (8, 2, 4, 0, 0, 0, 4), (8, 1, 4, 0, 0, 0, 4), (8, 1, 2, 0, 0, 0, 2), (16, 1, 2, 0, 0, 0, 8)]


def unavailable(device: torch.device) -> str | None:
    """Why the CUDA GEMV cannot run on `device` (one line), or None: it needs a CUDA GPU of compute capability 8.0
    or newer (mma.m16n8k16, cvt.f16x2) and NVRTC, which CUDA builds of torch bring."""
    if (why := nvrtc.no_tensor_core_gpu(device, "the int4 CUDA GEMV")) is not None:
        return why
    try:
        _kernel(device.index if device.index is not None else torch.cuda.current_device(), _flags(),
                compile_key(CONFIGS[0]))
    except (OSError, RuntimeError) as e:
        return f"NVRTC could not build the int4 CUDA GEMV: {str(e).splitlines()[0]}"
    return None


def _flags(pro=0, glu=0, bias=0, acc=0, atomic=0, xbf16=0, ybf16=0, pdl=0, xpt=1) -> tuple:
    """The kernel's compile-time switches; xpt: float4 inputs a thread holds for the norm (ceil(K / 4 / threads))."""
    return pro, glu, bias, acc, atomic, xbf16, ybf16, pdl, xpt


def compile_source(flags: tuple, config: tuple, arch: str) -> bytes:
    """NVRTC: cuda/int4_gemv.cu with its compile-time switches -> a cubin for `arch` (e.g. "sm_90"); config's first five
    fields, whether the sixth (persistent blocks an SM) is set (the grid itself is sized at launch) and the seventh
    (row tiles a block; 1 where absent)."""
    pro, glu, bias, acc, atomic, xbf16, ybf16, pdl, xpt = flags
    warps, ahead, stages = config[0], config[1], config[4]
    tiles = config[6] if len(config) > 6 else 1
    defines = dict(STAGES=stages, PERSIST=int(len(config) > 5 and config[5] > 0), WARPS=warps,
                   RT=2 if glu else tiles, U=ahead, PRO=pro, GLU=glu, BIAS=bias, ACC=acc, ATOMIC=atomic, XBF16=xbf16,
                   YBF16=ybf16, PDL=pdl, XPT=xpt)
    return nvrtc.compile_cubin(SOURCE, defines, arch)


def cache_dir() -> Path:
    """Where compiled cubins are kept across processes: nvrtc.cache_dir()'s int4_cuda/."""
    return nvrtc.cache_dir() / "int4_cuda"


def _cubin(flags: tuple, config: tuple, arch: str) -> bytes:
    """compile_source through the on-disk cache, keyed by the source, the switches, the config, the arch and the
    NVRTC library (a changed source or toolkit compiles anew)."""
    key = hashlib.sha256(repr((nvrtc.source_digest(SOURCE), flags, config, arch, torch.version.cuda)).encode()
                         ).hexdigest()
    return nvrtc.cached(cache_dir() / f"{key[:32]}.cubin", lambda: compile_source(flags, config, arch))


@functools.lru_cache(maxsize=None)
def _kernel(device_index: int, flags: tuple, config: tuple):
    """The loaded kernel of `flags` and `config` (compile_key's: what compiles; launch() sizes the grid)."""
    major, minor = torch.cuda.get_device_capability(device_index)
    with torch.cuda.device(device_index):
        cubin = _cubin(flags, config, f"sm_{major}{minor}")
        name = "int4_gemv_flat" if config[3] else "int4_gemv"
        return torch.cuda._utils._cuda_load_module(cubin, [name])[name]


def compile_key(config: tuple) -> tuple:
    """What of a launch config the compiled code depends on: all but the persistent grid's size (set or not); the
    row tiles a block where more than one."""
    tiles = config[6] if len(config) > 6 else 1
    return (*config[:5], int(config[5] > 0)) + ((tiles,) if tiles > 1 else ())


def shared_bytes(k: int, config: tuple) -> int:
    """Dynamic shared memory of one block: partial sums (warps x 16 + 32 floats) and the block's inputs as two fp16
    halves (hi, lo)."""
    warps, _, split, flat, stages = config[:5]
    groups = -(-(k // F.GROUP) // split)
    ring = warps * stages * (64 * 16 + 64 * 4)  # a slot: 64 16-byte words and 64 scale/zero words a warp
    # partial sums: two halves of warps x 16 floats (consecutive row blocks alternate), + 32 for the norm
    return (8 if flat else warps * 8 + 8) * 16 + 2 * groups * F.GROUP * 2 + 16 * -(-groups // 4) + ring


def launch(words, x, y, *, scales, zeros, n: int, k: int, config: tuple, pro=0, norm_w=None, eps=1e-6, bias=None,
           glu=False, acc=False, pdl=0) -> None:
    """One launch on the current stream (graph-capturable). words/scales/zeros in the `mma` layout; x fp32 or bf16
    (k); y fp32 (or bf16 when neither acc nor split), n rows (n/2 with glu); norm_w and bias fp32."""
    warps, _, split, flat, _, persist, tiles = config  # (7 fields: CONFIGS' or check_config's)
    flags = _flags(pro, int(glu), int(bias is not None), int(acc), int(split > 1), int(x.dtype == torch.bfloat16),
                   int(y.dtype == torch.bfloat16), pdl, -(-k // (4 * warps * 32)) if pro else 1)
    dev = words.device.index
    kern = _kernel(dev, flags, compile_key(config))
    smem = shared_bytes(k, config)
    if smem > 48 * 1024 and kern._max_shared_mem_bytes < smem:
        kern.set_shared_memory_config(smem)
    dummy = ctypes.c_void_p(y.data_ptr())
    ptrs = [ctypes.c_void_p(t.data_ptr()) if t is not None else dummy
            for t in (words, scales, zeros, x, norm_w, bias, y)]
    vals = ptrs + [ctypes.c_int(n), ctypes.c_int(k), ctypes.c_float(eps)]
    blocks = n // F.TILE // (2 if glu else tiles)  # row blocks: tiles, gate/up tile pairs, or `tiles` tiles
    if flat:
        gx = -(-blocks // (warps * flat))
    elif persist:  # persistent: p blocks an SM over the splits, each looping over row blocks
        gx = min(blocks, max(1, persist * _sms(dev) // split))
    else:
        gx = blocks
    nvrtc.launch(kern.func, (gx, split, 1), warps * 32, smem, torch.cuda.current_stream(words.device).cuda_stream,
                 vals, pdl=bool(pdl))


@functools.lru_cache(maxsize=None)
def _sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def configs_for(n: int, k: int, glu: bool, split_ok: bool) -> list[tuple]:
    """CONFIGS that fit the shape: every warp has a group to read, splits only where the product is added in place
    (the residual, or q/k/v into an output the attention zeroes after use; with the norm each block still reads all
    of x for its sum of squares, and stages only its own groups), row tiles a block that divide the tiles and the
    warps, shared memory within the device's opt-in limit (checked at launch)."""
    groups = k // F.GROUP
    out = []
    for cfg in CONFIGS:
        warps, ahead, split, flat, stages, persist, tiles = cfg
        if _misfit(n, glu, split_ok, cfg):
            continue
        blocks = n // F.TILE // (2 if glu else tiles)
        slices = warps // (2 if glu else tiles)
        if not flat and groups // split < slices:
            continue
        if flat and blocks < 4 * warps * flat:  # a flat grid needs row blocks for many warps
            continue
        if shared_bytes(k, cfg) > 200 * 1024:
            continue
        out.append(cfg)
    return out or [(2 if glu else 1, 1, 1, 0, 0, 0, 1)]


def _misfit(n: int, glu: bool, split_ok: bool, cfg: tuple) -> str | None:
    """Why a launch config cannot compute this GEMV (None: it can), for tuning's candidates and for a given config
    alike: split-K adds partial sums into an output that holds the residual or zeros (split_ok), without glu and not in
    the flat kernel; row tiles a block divide the tiles and the warps, without glu or the flat kernel."""
    warps, _, split, flat, _, _, tiles = cfg
    if split > 1 and (not split_ok or flat):
        return ("split-K adds partial sums into the output: it needs a residual (or a zeroed output), no glu, not the "
                "flat kernel")
    if tiles > 1 and (glu or flat or (n // F.TILE) % tiles or warps % tiles):
        return f"{config_name(cfg)}: row tiles a block divide the tiles and the warps, without glu or flat"
    return None


def gemv(words, x, y, *, scales, zeros, pro=0, norm_w=None, eps=1e-6, bias=None, acc=False, glu=False, config=None,
         pdl=0):
    """y (+)= W p(x) (+ bias) (or glu) for `mma`-layout int4 weights into y (gemv.tri_gemv allocates it and holds
    the contract: fp32, or bf16 for a plain product; acc adds into y, the residual stream). The launch config is
    tuned once per shape (cold L2, in a CUDA graph) unless given."""
    n, k = words.shape[0] * F.TILE, words.shape[1] // 2
    if norm_w is not None and norm_w.dtype != torch.float32:
        norm_w = norm_w.float()
    if bias is not None and bias.dtype != torch.float32:
        bias = bias.float()
    if x.dtype not in (torch.float32, torch.bfloat16):
        x = x.float()
    kw = dict(scales=scales, zeros=zeros, n=n, k=k, pro=pro, norm_w=norm_w, eps=eps, bias=bias, glu=glu, acc=acc,
              pdl=pdl)
    split_ok = acc and not glu  # the output holds the residual, or zeros (q/k/v: the attention zeroes it)
    if config is not None:
        config = check_config(config)
    if config is None:
        key = (words.device, n, k, pro, glu, acc, bias is not None, x.dtype, y.dtype, pdl)
        if key not in TUNER.int4_best:
            TUNER.int4_ranked[key] = _tune(words, x, y, configs_for(n, k, glu, split_ok), kw)
            TUNER.int4_best[key] = TUNER.int4_ranked[key][0]
        config = TUNER.int4_best[key]
        TUNER.used.add(("int4", key))
    elif why := _misfit(n, glu, split_ok, config):
        raise ValueError(why)
    TUNER.int4_last = config
    launch(words, x, y, config=config, **kw)
    return y


def retune_in_step(capture, state: list, top: int = 12, reps: int = 30) -> None:
    """Launch configs re-chosen where they run: for each tuned shape in turn, its `top` configs by _tune's timer,
    each timed in the whole decode step (`capture()` returns a CUDA graph of one step; medians of `reps` replays),
    the fastest kept: the neighbours a shape has in the step are other kernels, not copies of itself. `state` (the
    token and the position) is restored after every replay, so the trials leave the decode where it was: they write
    only cache positions from the current one on, which a step writes before it reads. Neither timer of one kernel
    predicts the step (the one-launch timer pays a launch's whole ramp-up, a chain of copies rewards what overlaps a
    copy of itself); the records keep the trials."""
    TUNER.step_tuning["int4"] = trials = {}
    TUNER.clear_used()
    graph = capture()  # which shapes the step launches
    del graph
    best, ranked = TUNER.int4_best, TUNER.int4_ranked
    for key in [k for k in best if ("int4", k) in TUNER.used and len(ranked.get(k, ())) > 1]:
        times = timing.fastest_in_step(ranked[key][:top], functools.partial(best.__setitem__, key), capture, state,
                                       reps)
        trials[_shape_name(key)] = {config_name(c): round(t, 4) for c, t in times.items()}


def _shape_name(key: tuple) -> str:
    _, n, k, pro, glu, acc, *_ = key
    return shape_name(n, k, pro, glu, acc)


def config_name(cfg: tuple) -> str:
    """A launch config in words: warps, groups ahead (registers) or cp.async stages, then splits (int4_gemv) or row
    blocks a warp (flat), then persistent blocks an SM (p, where set), then row tiles a block (t, where more than 1)."""
    warps, ahead, split, flat, stages, persist, tiles = check_config(cfg)
    return (f"w{warps} " + (f"async{stages}" if stages else f"ahead{ahead}")
            + (f" flat{flat}" if flat else f" k{split}") + (f" p{persist}" if persist else "")
            + (f" t{tiles}" if tiles > 1 else ""))


def check_config(config: tuple) -> tuple:
    """A given launch config as seven fields (five: not persistent, six: one row tile a block); persistent blocks
    take the register buffers (the cp.async ring and the flat kernel do one row block a block: rows past the grid
    would go unwritten)."""
    if len(config) not in (5, 6, 7):
        raise ValueError(f"an int4 config is warps,ahead,splits,flat,stages[,persist[,tiles]], not {config!r}")
    config = (*config, 0, 1, 1)[:7] if len(config) == 5 else (*config, 1)[:7]
    if config[6] < 1:
        raise ValueError(f"{config!r}: row tiles a block is 1 or more")
    if config[5] and (config[3] or config[4]):
        raise ValueError(f"{config!r}: persistent blocks take the register buffers (flat and stages 0)")
    return config


def tuned() -> dict:
    """The configs tuning chose in this process, by shape and switches (kept in the records)."""
    return {_shape_name(key): config_name(c) for key, c in TUNER.int4_best.items()}


def _tune(words, x, y, candidates: list[tuple], kw: dict) -> list[tuple]:
    """The candidates, fastest first, one launch at a time (tuner.cold_bench: L2 evicted before each call, in a
    CUDA graph); y (which may hold the residual) is restored after. Timing them instead back to back on distinct
    weight copies (a chain: each launch's neighbour a copy of itself) was measured on the H200 and dropped: its picks
    (a cp.async o projection) made qwen2.5-7b's int4 step 1.723 ms against 1.678 with this timer's
    (docs/lab/2026-12-01-int4-persistent-blocks.md). Either ranking is only a shortlist: retune_in_step times the best
    in the step."""
    if len(candidates) == 1:
        return candidates
    keep = y.clone()
    times = {c: TUNER.cold_bench(lambda c=c: launch(words, x, y, config=c, **kw))[0] for c in candidates}
    y.copy_(keep)
    return sorted(times, key=times.get)
