"""The attention's chunk kernel in CUDA C++ (NVRTC): flash-decoding partials that stream the KV cache like a copy.

attention.tri_attention runs decode attention as two launches: (kv head, chunk) programs write partial softmax sums,
then a merge kernel combines each query head's chunks. This module is a drop-in for the first launch (the Triton
merge stays). Why: Nsight Compute of the Triton chunk kernel at ctx 16384 reads 33.6 MB in 18 us, 39.5% of DRAM
bandwidth -- its programs spend their time in the tile loop's cross-warp reductions and layout changes, not in bytes
(docs/lab/2026-12-01-nsight-compute-stalls.md).

Per CTA (W warps; grid chunk x kv head; a chunk is CHUNK cached positions) and warp: tiles of 16 positions, tile
t0 + warp, + W, + 2W, ... of the chunk, two tiles in registers at a time; both first tiles' loads issued before the
wait on the q/k/v GEMV (programmatic dependent launch): positions before `pos` were written by earlier steps. The
wait is predicated on the loaded words (cuda/pdl.cuh's pdl_wait_after) so ptxas cannot hoist it above the loads. A lane
loads 16-byte words straight into tensor-core fragments (no shared memory, no shuffles, no cross-warp step a tile):
- S = Q K^T with mma.m16n8k16 (bf16, fp32 sums): Q the A operand (rows = the KV head's G <= 8 query heads, rows 8-15
  zero), K the B operand (8 positions an n-block). The 128 dims are permuted so that a lane's four 16-byte words of a
  K row are its B fragments for all 8 k-steps: lane (r, t) holds dims 32 i + 8 t .. + 7 (i < 4) of its rows, step j's
  pairs being dims 32 (j / 2) + 8 t + 4 (j % 2) + (0, 1) and (2, 3); Q's fragments follow the same permutation (a dot
  product does not care about the order of its terms). One load instruction thus covers 64 contiguous bytes of each
  of 8 rows (its 4 lanes t): whole 32-byte sectors. (Its first version gave lane t dims 32 t .. 32 t + 31, so that each
  instruction took half of every sector it touched and each sector left L2 twice: scripts/cta_times.py measured those
  blocks streaming ~20 GB/s an SM where a plain read of the same slices gets ~31.)
- O^T += V^T P^T: V^T the A operand (16 dims x 16 positions; a lane's two 16-byte words, dims 8 r and 64 + 8 r, of
  four V rows, paired by one prmt each: a load instruction covers 128 contiguous bytes of each of 4 rows), P^T the B
  operand, which is exactly S's accumulator layout converted to bf16: no data movement.
At head_dim 64 the layout is the same with half the words: a lane's two words of a K row (4 k-steps), one of a V
row, 4 m-blocks of O^T; a row of the q/k prologue is then half a warp, and the q/k norm's sums stay in that half.
Online softmax in fp32 per query head (each S row's max over a quad of lanes), per warp; the warps' partials combine
once, in shared memory, into the chunk's partial (m, l, unnormalised o per query head: the layout and meaning of the
Triton chunk kernel's, which the merge reads). The chunk holding `pos` also rotates this token's k, writes k and v to
the cache and enters them as one more term. Numerics as the Triton kernel: q scaled then rounded to bf16, k and v as
the bf16 cache holds them, p rounded to bf16 for P V, sums and softmax in fp32.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib

import torch

from floorline.native import nvrtc
from floorline.native import timeline as T

SOURCE = "attn_chunk.cu"  # cuda/attn_chunk.cu

# warps a CTA (config's rule picks them)
WARPS = (2, 4, 8)
# head_dim the kernel takes: a lane's loads are whole 16-byte words of K's and V's rows either way
HEAD_DIMS = (128, 64)


def unavailable(device: torch.device, heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> str | None:
    """Why the CUDA chunk kernel cannot serve this model on `device` (one line), or None: it needs compute capability
    8.0 or newer (bf16 mma.m16n8k16), head_dim 128 or 64, at most 8 query heads a KV head and a bf16 cache."""
    if (why := nvrtc.no_tensor_core_gpu(device, "the CUDA attention")) is not None:
        return why
    if head_dim not in HEAD_DIMS or heads % kv_heads or heads // kv_heads > 8 or dtype != torch.bfloat16:
        return (f"head_dim {head_dim}, {heads // kv_heads} query heads a KV head, {dtype}: the CUDA attention takes "
                "128 or 64, <= 8, bf16")
    try:
        _kernel(device.index if device.index is not None else torch.cuda.current_device(),
                _defines(heads, kv_heads, 4, 128, 1, 16, 0, d=head_dim))
    except (OSError, RuntimeError) as e:
        return f"NVRTC could not build the CUDA attention: {str(e).splitlines()[0]}"
    return None


def config(length: int, kv_heads: int, sms: int, chunk: int = 0) -> tuple[int, int]:
    """(warps, chunk) for a cache of `length` positions: the chunk given (NativeOptions.attn_chunk), else the smallest
    of 128, 256 or 512 positions whose (chunk, kv head) CTAs number at most two an SM at the full length (two CTAs of
    4 warps, 225 registers a thread, fit an SM beside each other; each warp then takes at least two tiles of 16); 8
    warps where those CTAs about fill the SMs once (one CTA of 8 warps an SM), else 4 (and never more than a chunk
    gives tiles of 16). H200: qwen2.5-7b ctx 16384 step (136 CTAs of 512) 3.955 ms with 8 warps against 4.005-4.008
    with 4 (chunk 256: 4.013), same lease; llama-3.1-8b ctx 16384 bench (272 CTAs) 4 x 512 24.0 us, 8 x 512 29.4."""
    c = chunk or 128
    while not chunk and c < 512 and -(-length // c) * kv_heads > 2 * sms:
        c *= 2
    w = 8 if -(-length // c) * kv_heads <= 1.1 * sms else 4
    while w > 2 and c < 16 * w:
        w //= 2
    return w, c


def _defines(heads: int, kv_heads: int, warps: int, chunk: int, nchunk: int, gp: int, pdl: int,
             qkn: bool = False, d: int = 128, tl: bool = False) -> tuple:
    # (absent: the source's defaults, QKN 0, D 128, TL 0)
    extra = ({"QKN": 1} if qkn else {}) | ({"D": d} if d != 128 else {}) | ({"TL": 1} if tl else {})
    return tuple(dict(G=heads // kv_heads, H=heads, KVH=kv_heads, W=warps, CHUNK=chunk, NCH=nchunk, GP=gp,
                      PDL=pdl, **extra).items())


def compile_source(defines: tuple, arch: str) -> bytes:
    return nvrtc.compile_cubin(SOURCE, dict(defines), arch)


@functools.lru_cache(maxsize=None)
def _kernel(device_index: int, defines: tuple):
    major, minor = torch.cuda.get_device_capability(device_index)
    arch = f"sm_{major}{minor}"
    key = hashlib.sha256(repr((nvrtc.source_digest(SOURCE), defines, arch, torch.version.cuda)).encode()).hexdigest()
    with torch.cuda.device(device_index):
        cubin = nvrtc.cached(nvrtc.cache_dir() / "attn_cuda" / f"{key[:32]}.cubin",
                             lambda: compile_source(defines, arch))
        return torch.cuda._utils._cuda_load_module(cubin, ["attn_chunk"])["attn_chunk"]


# the marks a timeline slot of the chunks holds after (start, wait, end, sm): the q/k/v prologue done; the own token's
# scores, the q fragments and the tiles done. Its programs are numbered chunk
# first (grid (chunks, kv heads)), where Triton's chunk kernel numbers them KV head first.
MARKS = ("qkv", "tiles")
TL_WORDS = T.WORDS + len(MARKS)  # a program's words in its timeline slot (the .cu's TLW)


def chunks(qkv, cos, sin, pos, k_cache, v_cache, heads: int, scale: float, m, l, o, warps: int, chunk: int,
           pdl: int = 0, qk_norm: tuple | None = None, tl: torch.Tensor | None = None) -> None:
    """The Triton _attn_chunk's contract: RoPE of q and k at `pos` (each head RMS-normalised first by qk_norm's (q
    weights, k weights, eps): Qwen3), k and v written to the caches (kv_heads, L, head_dim) bf16 at `pos`, each
    live (chunk, kv head)'s partial softmax sums into m, l (kv_heads, stride, gp) and o (..., head_dim), fp32; stride
    at least the cache's chunks (more where AttnScratch sized them for a shorter chunk of the step tuner's). tl: a
    timeline slot (timeline.slot with MARKS) for the (chunk, kv head) programs, or None: the kernel without stamps."""
    kv_heads, stride, gp = m.shape  # (stride: chunks a KV head's partials hold, sized for the shortest candidate)
    nchunk = -(-k_cache.shape[1] // chunk)  # the chunk programs a KV head launches
    if nchunk > stride:
        raise ValueError(f"attn_cuda.chunks: {nchunk} chunks of {chunk} positions, partials for {stride}")
    if tl is not None and tl.numel() != nchunk * kv_heads * TL_WORDS:
        raise ValueError(f"attn_cuda.chunks: a timeline slot of {tl.numel()} words for {nchunk * kv_heads} "
                         f"programs of {TL_WORDS}")
    kern = _kernel(qkv.device.index, _defines(heads, kv_heads, warps, chunk, stride, gp, pdl, qk_norm is not None,
                                              k_cache.shape[2], tl is not None))
    qn, kn, eps = qk_norm if qk_norm is not None else (qkv, qkv, 0.0)  # (not read without QKN)
    vals = [ctypes.c_void_p(t.data_ptr()) for t in (qkv, cos, sin, pos, k_cache, v_cache, m, l, o)]
    vals += [ctypes.c_float(scale), ctypes.c_longlong(k_cache.stride(0)), ctypes.c_void_p(qn.data_ptr()),
             ctypes.c_void_p(kn.data_ptr()), ctypes.c_float(eps)]
    if tl is not None:
        vals.append(ctypes.c_void_p(tl.data_ptr()))
    nvrtc.launch(kern.func, (nchunk, kv_heads, 1), warps * 32, 0, torch.cuda.current_stream(qkv.device).cuda_stream,
                 vals, pdl=bool(pdl))
