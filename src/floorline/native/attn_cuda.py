"""The attention's chunk kernel in CUDA C++ (NVRTC): flash-decoding partials that stream the KV cache like a copy.

kernels.tri_attention runs decode attention as two launches: (kv head, chunk) programs write partial softmax sums,
then a merge kernel combines each query head's chunks. This module is a drop-in for the first launch (the Triton
merge stays). Why: Nsight Compute of the Triton chunk kernel at ctx 16384 (results/h200/ncu_stalls) reads 33.6 MB in
18 us, 39.5% of DRAM bandwidth -- its programs spend their time in the tile loop's cross-warp reductions and layout
changes, not in bytes.

Per CTA (W warps; grid chunk x kv head; a chunk is CHUNK cached positions) and warp: tiles of 16 positions, tile
t0 + warp, + W, + 2W, ... of the chunk, two tiles in registers at a time; both first tiles' loads issued before the
wait on the q/k/v GEMV (programmatic dependent launch): positions before `pos` were written by earlier steps. The
wait is predicated on the loaded words (nvrtc.PRELUDE's pdl_wait_after) so ptxas cannot hoist it above the loads. A lane
loads 16-byte words straight into tensor-core fragments (no shared memory, no shuffles, no cross-warp step a tile):
- S = Q K^T with mma.m16n8k16 (bf16, fp32 sums): Q the A operand (rows = the KV head's G <= 8 query heads, rows 8-15
  zero), K the B operand (8 positions an n-block). The 128 dims are permuted so that a lane's four 16-byte words of a
  K row are its B fragments for all 8 k-steps: lane (r, t) holds dims 32 i + 8 t .. + 7 (i < 4) of its rows, step j's
  pairs being dims 32 (j / 2) + 8 t + 4 (j % 2) + (0, 1) and (2, 3); Q's fragments follow the same permutation (a dot
  product does not care about the order of its terms). One load instruction thus covers 64 contiguous bytes of each
  of 8 rows (its 4 lanes t): whole 32-byte sectors. (Sessions 9-10 gave lane t dims 32 t .. 32 t + 31, so that each
  instruction took half of every sector it touched and each sector left L2 twice: scripts/cta_times.py measured those
  blocks streaming ~20 GB/s an SM where a plain read of the same slices gets ~31.)
- O^T += V^T P^T: V^T the A operand (16 dims x 16 positions; a lane's two 16-byte words, dims 8 r and 64 + 8 r, of
  four V rows, paired by one prmt each: a load instruction covers 128 contiguous bytes of each of 4 rows), P^T the B
  operand, which is exactly S's accumulator layout converted to bf16: no data movement.
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
import os

import torch

from floorline.native import env_pair, nvrtc

SOURCE = nvrtc.PRELUDE + r"""
typedef unsigned short u16;
#define D 128
#define NT (W * 32)
#define CT (CHUNK / 16)

__device__ __forceinline__ uint4 ldg(const u16* p) {  // 16 bytes, not kept in L1 (streamed once)
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}
__device__ __forceinline__ u32 word(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }
__device__ __forceinline__ u32 bf2(float lo, float hi) {  // two floats -> bf16x2 (lo in the low half), round to nearest
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ float bf_lo(u32 w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 sel) {
  u32 r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}
__device__ __forceinline__ void mma(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

struct Tile {  // one tile's loads: K rows 16t + 8b + lane/4 (16 bytes at dims 32i + 8(lane%4), i < 4); V rows 16t +
  uint4 k[2][4];  // {0,1,8,9} + 2(lane%4) (16 bytes at dims 64h + 8(lane/4), h < 2). Every load instruction covers whole
  uint4 v[4][2];  // 32-byte sectors (a K row's 64 bytes by 4 lanes, a V row's 128 by 8): each sector leaves L2 once
};

__device__ __forceinline__ void load_tile(Tile& a, const u16* kb, const u16* vb, int t, int tend, int pos, int r4,
                                          int t4) {
  if (t >= tend) return;  // (warp-uniform) past the chunk or the cached positions: nothing to load
  // rows past pos - 1 (in the last tile) read row pos - 1 again: in bounds, finite, and masked out of the softmax
  const u16* k0 = kb + (long long)min(t * 16 + r4, pos - 1) * D + t4 * 8;
  const u16* k1 = kb + (long long)min(t * 16 + 8 + r4, pos - 1) * D + t4 * 8;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    a.k[0][i] = ldg(k0 + i * 32);
    a.k[1][i] = ldg(k1 + i * 32);
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const u16* v = vb + (long long)min(t * 16 + 2 * t4 + (i & 1) + (i >> 1) * 8, pos - 1) * D + r4 * 8;
    a.v[i][0] = ldg(v);
    a.v[i][1] = ldg(v + 64);
  }
}

// the online softmax of one tile: m, l (query head lane/4; l this lane's share), o (O^T fragments: dims
// 64(mb/4) + 8(lane/4) + 2(mb%4) (+1 for o[mb][2..3]), query heads 2(lane%4) (+1 for o[mb][1], o[mb][3]))
__device__ __forceinline__ void attend(const Tile& a, const u32* q, int t, int pos, int lane, float& m, float& l,
                                       float (&o)[8][4]) {
  const int t4 = lane & 3;
  float s[2][4];
#pragma unroll
  for (int b = 0; b < 2; b++) {
    s[b][0] = s[b][1] = s[b][2] = s[b][3] = 0.f;
#pragma unroll
    for (int j = 0; j < 8; j++) mma(s[b], q[2 * j], 0u, q[2 * j + 1], 0u, word(a.k[b][j / 2], (2 * j) % 4),
                                    word(a.k[b][j / 2], (2 * j) % 4 + 1));
  }
  float mt = -1e30f;
#pragma unroll
  for (int b = 0; b < 2; b++)
#pragma unroll
    for (int e = 0; e < 2; e++) {
      if (t * 16 + b * 8 + 2 * t4 + e >= pos) s[b][e] = -1e30f;
      mt = fmaxf(mt, s[b][e]);
    }
  mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
  mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
  const float mn = fmaxf(m, mt), alpha = __expf(m - mn);
  m = mn;
  float p[2][2], sum = 0.f;
#pragma unroll
  for (int b = 0; b < 2; b++)
#pragma unroll
    for (int e = 0; e < 2; e++) {
      p[b][e] = t * 16 + b * 8 + 2 * t4 + e < pos ? __expf(s[b][e] - mn) : 0.f;
      sum += p[b][e];
    }
  l = l * alpha + sum;
  const u32 p0 = bf2(p[0][0], p[0][1]), p1 = bf2(p[1][0], p[1][1]);
  const float a0 = __shfl_sync(0xffffffffu, alpha, 8 * t4), a1 = __shfl_sync(0xffffffffu, alpha, 8 * t4 + 4);
#pragma unroll
  for (int mb = 0; mb < 8; mb++) {
    o[mb][0] *= a0; o[mb][1] *= a1; o[mb][2] *= a0; o[mb][3] *= a1;
    const u32 w0 = word(a.v[0][mb / 4], mb % 4), w1 = word(a.v[1][mb / 4], mb % 4);
    const u32 w8 = word(a.v[2][mb / 4], mb % 4), w9 = word(a.v[3][mb / 4], mb % 4);
    mma(o[mb], prmt(w0, w1, 0x5410), prmt(w0, w1, 0x7632), prmt(w8, w9, 0x5410), prmt(w8, w9, 0x7632), p0, p1);
  }
}

// grid (NCH, KVH): chunk blockIdx.x of KV head blockIdx.y. Partials at ((kvh NCH + c) GP + g): m, l; o (D floats)
extern "C" __global__ void __launch_bounds__(NT) attn_chunk(
    const float* __restrict__ qkv, const float* __restrict__ cosT, const float* __restrict__ sinT,
    const int* __restrict__ posp, u16* __restrict__ kc, u16* __restrict__ vc, float* __restrict__ mo,
    float* __restrict__ lo, float* __restrict__ oo, float scale, long long skh) {
  __shared__ __align__(16) u16 qs[8 * D];  // q x scale, rotated, bf16 [head][dim] (heads past G zero)
  __shared__ float kn[D], vn[D], snew[8];
  __shared__ float wm[W][8], wl[W][8];
  __shared__ __align__(16) float wo[W][8][D];
  pdl_trigger(1);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, r4 = lane >> 2, t4 = lane & 3;
  const int c = blockIdx.x, kvh = blockIdx.y;
  const int pos = *posp;
  const int start = c * CHUNK;
  if (start > pos) return;  // a chunk past the position: the merge reads only chunks 0..pos/CHUNK
  const bool own = pos < start + CHUNK;  // this chunk holds pos: this token's k and v are its to write and enter
  const int T = (pos + 15) >> 4;  // tiles of cached positions 0..pos-1
  const int tend = min(T, c * CT + CT);
  const u16* kb = kc + kvh * skh;
  const u16* vb = vc + kvh * skh;
  int ta = c * CT + warp;
  Tile A = {}, B = {};
  load_tile(A, kb, vb, ta, tend, pos, r4, t4);  // before the wait: written by earlier steps
  load_tile(B, kb, vb, ta + W, tend, pos, r4, t4);
  const float* cs = cosT + (long long)pos * D;  // the rotation's tables are constant
  const float* sn = sinT + (long long)pos * D;
  pdl_wait_after(A.k[0][0].x ^ B.k[0][0].x ^ A.v[0][0].x ^ B.v[0][0].x, pos + 33);
  // q (rotated, x scale, bf16) of the G query heads into shared memory, four dims a thread; the owner also the
  // rotated k and the v of this token (rounded as the cache holds them), written to the cache
  for (int e = tid; e < (own ? G + 2 : G) * (D / 4); e += NT) {
    const int row = e / (D / 4), d = (e % (D / 4)) * 4;
    const int src = row < G ? kvh * G + row : row == G ? H + kvh : H + KVH + kvh;
    float4 x = *reinterpret_cast<const float4*>(qkv + src * D + d);
    if (row <= G) {
      const float4 pr = *reinterpret_cast<const float4*>(qkv + src * D + (d + D / 2) % D);
      const float4 cv = *reinterpret_cast<const float4*>(cs + d), sv = *reinterpret_cast<const float4*>(sn + d);
      const float sg = d < D / 2 ? -1.f : 1.f;
      x = make_float4(x.x * cv.x + sg * pr.x * sv.x, x.y * cv.y + sg * pr.y * sv.y, x.z * cv.z + sg * pr.z * sv.z,
                      x.w * cv.w + sg * pr.w * sv.w);
    }
    if (row < G) {
      *reinterpret_cast<uint2*>(qs + row * D + d) = make_uint2(bf2(x.x * scale, x.y * scale),
                                                               bf2(x.z * scale, x.w * scale));
    } else {
      const u32 h0 = bf2(x.x, x.y), h1 = bf2(x.z, x.w);
      float* dst = row == G ? kn : vn;
      dst[d] = bf_lo(h0); dst[d + 1] = bf_lo(h0 >> 16); dst[d + 2] = bf_lo(h1); dst[d + 3] = bf_lo(h1 >> 16);
      u16* cache = (row == G ? kc : vc) + kvh * skh + (long long)pos * D + d;
      *reinterpret_cast<uint2*>(cache) = make_uint2(h0, h1);
    }
  }
  for (int e = G * D / 4 + tid; e < 8 * D / 4; e += NT) *reinterpret_cast<uint2*>(qs + 4 * e) = make_uint2(0u, 0u);
  __syncthreads();
  if (own) {
    for (int g = warp; g < G; g += W) {  // this token's score for query head g
      float s = 0.f;
#pragma unroll
      for (int i = 0; i < D / 32; i++) s += bf_lo(qs[g * D + lane * (D / 32) + i]) * kn[lane * (D / 32) + i];
#pragma unroll
      for (int off = 16; off; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
      if (lane == 0) snew[g] = s;
    }
  }
  u32 q[16];  // A fragments, the dims permuted as K's: q words 4i..4i+3 hold dims 32i + 8 t4 .. + 7 of head r4
  {
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const uint4 w = *reinterpret_cast<const uint4*>(qs + r4 * D + i * 32 + t4 * 8);
      q[4 * i] = w.x; q[4 * i + 1] = w.y; q[4 * i + 2] = w.z; q[4 * i + 3] = w.w;
    }
  }
  float m = -1e30f, l = 0.f, o[8][4];
#pragma unroll
  for (int mb = 0; mb < 8; mb++) o[mb][0] = o[mb][1] = o[mb][2] = o[mb][3] = 0.f;
  for (; ta < tend; ta += 2 * W) {
    attend(A, q, ta, pos, lane, m, l, o);
    load_tile(A, kb, vb, ta + 2 * W, tend, pos, r4, t4);
    if (ta + W < tend) {
      attend(B, q, ta + W, pos, lane, m, l, o);
      load_tile(B, kb, vb, ta + 3 * W, tend, pos, r4, t4);
    }
  }
  pdl_trigger(2);
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  if (t4 == 0) {
    wm[warp][r4] = m;
    wl[warp][r4] = l;
  }
#pragma unroll
  for (int mb = 0; mb < 8; mb++) {
    const int d = (mb / 4) * 64 + r4 * 8 + 2 * (mb % 4);
    wo[warp][2 * t4][d] = o[mb][0];
    wo[warp][2 * t4][d + 1] = o[mb][2];
    wo[warp][2 * t4 + 1][d] = o[mb][1];
    wo[warp][2 * t4 + 1][d + 1] = o[mb][3];
  }
  __syncthreads();
  const long long part = ((long long)kvh * NCH + c) * GP;
  for (int e = tid; e < G * D; e += NT) {  // the chunk's partial: its warps' (and the owner's this token)
    const int g = e / D, d = e % D;
    float M = own ? snew[g] : -1e30f;
#pragma unroll
    for (int w = 0; w < W; w++) M = fmaxf(M, wm[w][g]);
    float L = 0.f, O = 0.f;
    if (own) {
      const float f = __expf(snew[g] - M);
      L = f;
      O = f * vn[d];
    }
#pragma unroll
    for (int w = 0; w < W; w++) {
      const float f = __expf(wm[w][g] - M);
      L += f * wl[w][g];
      O += f * wo[w][g][d];
    }
    oo[(part + g) * D + d] = O;
    if (d == 0) {
      mo[part + g] = M;
      lo[part + g] = L;
    }
  }
}
"""

# warps a CTA and cache positions a chunk (FLOORLINE_ATTN_CUDA="warps,chunk" fixes them; else config's rule)
WARPS = (2, 4, 8)


def unavailable(device: torch.device, heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> str | None:
    """Why the CUDA chunk kernel cannot serve this model on `device` (one line), or None: it needs compute capability
    8.0 or newer (bf16 mma.m16n8k16), head_dim 128, at most 8 query heads a KV head and a bf16 cache."""
    if (why := nvrtc.no_tensor_core_gpu(device, "the CUDA attention")) is not None:
        return why
    if head_dim != 128 or heads % kv_heads or heads // kv_heads > 8 or dtype != torch.bfloat16:
        return (f"head_dim {head_dim}, {heads // kv_heads} query heads a KV head, {dtype}: the CUDA attention takes "
                "128, <= 8, bf16")
    try:
        _kernel(device.index if device.index is not None else torch.cuda.current_device(),
                _defines(heads, kv_heads, 4, 128, 1, 16, 0))
    except (OSError, RuntimeError) as e:
        return f"NVRTC could not build the CUDA attention: {str(e).splitlines()[0]}"
    return None


def config(length: int, kv_heads: int, sms: int) -> tuple[int, int]:
    """(warps, chunk) for a cache of `length` positions: FLOORLINE_ATTN_CUDA="w,c" if set, else the smallest chunk of
    128, 256 or 512 positions whose (chunk, kv head) CTAs number at most two an SM at the full length (two CTAs of 4
    warps, 225 registers a thread, fit an SM beside each other; each warp then takes at least two tiles of 16), with
    8 warps where those CTAs about fill the SMs once (one CTA of 8 warps an SM), else 4. H200 (results/h200/
    attn_cuda): qwen2.5-7b ctx 16384 step (136 CTAs of 512) 3.955 ms with 8 warps against 4.005-4.008 with 4 (chunk
    256: 4.013), same lease; llama-3.1-8b ctx 16384 bench (272 CTAs) 4 x 512 24.0 us, 8 x 512 29.4."""
    fixed = env_pair("FLOORLINE_ATTN_CUDA")
    if fixed:
        from floorline.errors import UserError

        w, c = fixed
        if w not in WARPS or c not in (64, 128, 256, 512, 1024) or c < 16 * w:
            raise UserError(f"FLOORLINE_ATTN_CUDA={os.environ['FLOORLINE_ATTN_CUDA']!r}: use 'warps,chunk' with warps "
                            "2, 4 or 8 and chunk 64, 128, 256, 512 or 1024 cache positions, at least 16 x warps")
        return w, c
    c = 128
    while c < 512 and -(-length // c) * kv_heads > 2 * sms:
        c *= 2
    return (8 if -(-length // c) * kv_heads <= 1.1 * sms else 4), c


def _defines(heads: int, kv_heads: int, warps: int, chunk: int, nchunk: int, gp: int, pdl: int) -> tuple:
    return tuple(dict(G=heads // kv_heads, H=heads, KVH=kv_heads, W=warps, CHUNK=chunk, NCH=nchunk, GP=gp,
                      PDL=pdl).items())


def compile_source(defines: tuple, arch: str) -> bytes:
    return nvrtc.compile_cubin(SOURCE, "attn_chunk.cu", dict(defines), arch)


@functools.lru_cache(maxsize=None)
def _kernel(device_index: int, defines: tuple):
    major, minor = torch.cuda.get_device_capability(device_index)
    arch = f"sm_{major}{minor}"
    key = hashlib.sha256(repr((SOURCE, defines, arch, torch.version.cuda)).encode()).hexdigest()
    with torch.cuda.device(device_index):
        cubin = nvrtc.cached(nvrtc.cache_dir() / "attn_cuda" / f"{key[:32]}.cubin",
                             lambda: compile_source(defines, arch))
        return torch.cuda._utils._cuda_load_module(cubin, ["attn_chunk"])["attn_chunk"]


def chunks(qkv, cos, sin, pos, k_cache, v_cache, heads: int, scale: float, m, l, o, warps: int, chunk: int,
           pdl: int = 0) -> None:
    """The Triton _attn_chunk's contract: RoPE of q and k at `pos`, k and v written to the caches (kv_heads, L, 128)
    bf16 at `pos`, each live (chunk, kv head)'s partial softmax sums into m, l (kv_heads, nchunk, gp) and o (...,
    128), fp32."""
    kv_heads, nchunk, gp = m.shape
    kern = _kernel(qkv.device.index, _defines(heads, kv_heads, warps, chunk, nchunk, gp, pdl))
    vals = [ctypes.c_void_p(t.data_ptr()) for t in (qkv, cos, sin, pos, k_cache, v_cache, m, l, o)]
    vals += [ctypes.c_float(scale), ctypes.c_longlong(k_cache.stride(0))]
    nvrtc.launch(kern.func, (nchunk, kv_heads, 1), warps * 32, 0, torch.cuda.current_stream(qkv.device).cuda_stream,
                 vals, pdl=bool(pdl))
