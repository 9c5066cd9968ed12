"""Decode attention in one launch: a thread-block cluster per KV head, merged through distributed shared memory.

The Triton attention (kernels.tri_attention) takes two launches a layer: (kv head, chunk) programs write partial
softmax sums, a merge kernel combines them. Measured on the H200 it costs ~6 us a layer for ~1 us of KV bytes at ctx
2048, and doing the merge in the chunk kernel's last program (an arrival counter) was slower still: the merge became one
program's serial chain (results/h200/attn_fused). Here the CTAs of one KV head form a cluster (CL CTAs, up to 16 on
Hopper) and merge through each other's shared memory (DSMEM) behind a cluster barrier: no second launch, and the merge
stays spread over the cluster's CTAs.

Per CTA (W warps) and warp: tiles of 16 cached positions before `pos`, tile t on warp t mod (CL W), two tiles an
iteration in registers; every KV load of a warp's first two tiles is issued before the wait on the q/k/v GEMV
(programmatic dependent launch): positions before `pos` were written by earlier steps. A lane loads 16-byte words
straight into tensor-core fragments (no shared memory, no shuffles):
- S = Q K^T with mma.m16n8k16 (bf16, fp32 sums): Q the A operand (rows = the KV head's G <= 8 query heads, rows 8-15
  zero), K the B operand (8 positions an n-block). The 128 dims are permuted so that a lane's 64 contiguous bytes of a
  K row are its B fragments for all 8 k-steps: k index c of step j is dim (c mod 8)/2 * 32 + 4 j + (c / 8) 2 + c mod 2;
  Q's fragments follow the same permutation (a dot product does not care about the order of its terms).
- O^T += V^T P^T: V^T the A operand (16 dims x 16 positions; a lane's 32 contiguous bytes of four V rows, paired by
  one prmt each), P^T the B operand, which is exactly S's accumulator layout converted to bf16: no data movement.
  O^T's accumulators hold all 8 query heads (32 registers a lane).
Online softmax in fp32 per query head (each S row's max over a quad of lanes). This token's k (rotated) and v enter as
one more partial of the cluster's rank 0, which also writes them to the cache. Then: the warps' partials combine in
shared memory, the CTAs' through DSMEM after a cluster barrier, each CTA finishing 1/CL of the head's outputs; with
ZERO the q/k/v rows of the head are zeroed once read (the int4 q/k/v GEMV adds into them, split-K).
Numerics as the Triton kernel: q scaled then rounded to bf16, k and v as the bf16 cache holds them, p rounded to bf16
for P V, sums and softmax in fp32.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os

import torch

from floorline.native import nvrtc

SOURCE = r"""
typedef unsigned int u32;
typedef unsigned short u16;
#define D 128
#define NT (W * 32)
#define NWT (CL * W)

__device__ __forceinline__ void pdl_trigger(int mode) {
#if PDL
  if (mode == PDL) asm volatile("griddepcontrol.launch_dependents;");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if PDL
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  pdl_trigger(3);
}
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
__device__ __forceinline__ float bf_round(float x) { return bf_lo(bf2(x, 0.f)); }
__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 sel) {
  u32 r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}
__device__ __forceinline__ void mma(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ float ld_cluster(const float* p, u32 rank) {  // p in CTA `rank`'s shared memory
  u32 a = (u32)__cvta_generic_to_shared(p), r;
  float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(r) : "memory");
  return v;
}

#define ZERO4 uint4{0u, 0u, 0u, 0u}
struct Tile {  // one tile's loads: K rows t16 + b8 + lane/4 (64 bytes at dims (lane%4)32); V rows t16 + {0,1,8,9} +
  uint4 k[2][4];  // 2(lane%4) (32 bytes at dims (lane/4)16)
  uint4 v[4][2];
};

__device__ __forceinline__ void load_tile(Tile& a, const u16* kb, const u16* vb, int t, int pos, int r4, int t4) {
  if (t * 16 >= pos) return;  // (warp-uniform) past the cached positions: nothing to load
  // rows past pos - 1 (in the last tile) read row pos - 1 again: in bounds, finite, and masked out of the softmax
  const u16* k0 = kb + (long long)min(t * 16 + r4, pos - 1) * D + t4 * 32;
  const u16* k1 = kb + (long long)min(t * 16 + 8 + r4, pos - 1) * D + t4 * 32;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    a.k[0][i] = ldg(k0 + i * 8);
    a.k[1][i] = ldg(k1 + i * 8);
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const u16* v = vb + (long long)min(t * 16 + 2 * t4 + (i & 1) + (i >> 1) * 8, pos - 1) * D + r4 * 16;
    a.v[i][0] = ldg(v);
    a.v[i][1] = ldg(v + 8);
  }
}

// the online softmax of one tile: m, l (query head lane/4; l this lane's share), o (O^T fragments: dims
// (lane/4)16 + 2mb (+1 for o[mb][2..3]), query heads 2(lane%4) (+1 for o[mb][1], o[mb][3]))
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

// grid (CL x KVH): cluster kvh = blockIdx.x / CL, rank blockIdx.x % CL
extern "C" __global__ void __launch_bounds__(NT, 1) attn_decode(
    float* __restrict__ qkv, const float* __restrict__ cosT, const float* __restrict__ sinT,
    const int* __restrict__ posp, u16* __restrict__ kc, u16* __restrict__ vc, float* __restrict__ out, float scale,
    long long skh) {
  __shared__ __align__(16) u16 qs[8 * D];  // q x scale, rotated, bf16 [head][dim] (heads past G zero)
  __shared__ float kn[D], vn[D], snew[8];
  __shared__ float wm[W][8], wl[W][8];
  __shared__ __align__(16) float wo[W][8][D];
  __shared__ float cm[8], cl[8];
  __shared__ __align__(16) float co[8][D];
  pdl_trigger(1);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, r4 = lane >> 2, t4 = lane & 3;
  const int kvh = blockIdx.x / CL, rank = blockIdx.x % CL;
  const int pos = *posp;
  const int T = (pos + 15) >> 4;  // tiles of cached positions 0..pos-1
  const u16* kb = kc + kvh * skh;
  const u16* vb = vc + kvh * skh;
  int ta = rank * W + warp;
  Tile A, B;
  load_tile(A, kb, vb, ta, pos, r4, t4);  // before the wait: written by earlier steps
  load_tile(B, kb, vb, ta + NWT, pos, r4, t4);
  const float* cs = cosT + (long long)pos * D;  // the rotation's tables are constant
  const float* sn = sinT + (long long)pos * D;
  pdl_wait();
  for (int e = tid; e < (G + 2) * D; e += NT) {  // rows: G query heads, k, v of this KV head
    const int row = e / D, d = e % D;
    const int src = row < G ? kvh * G + row : row == G ? H + kvh : H + KVH + kvh;
    float x = qkv[src * D + d];
    if (row <= G) {
      const float pr = qkv[src * D + (d + D / 2) % D];
      x = x * cs[d] + (d < D / 2 ? -pr : pr) * sn[d];
    }
    if (row < G) {
      qs[row * D + d] = (u16)(bf2(x * scale, 0.f) & 0xffffu);
    } else if (row == G) {
      const u32 h = bf2(x, 0.f) & 0xffffu;
      kn[d] = bf_lo(h);
      if (rank == 0) kc[kvh * skh + (long long)pos * D + d] = (u16)h;
    } else {
      const u32 h = bf2(x, 0.f) & 0xffffu;
      vn[d] = bf_lo(h);
      if (rank == 0) vc[kvh * skh + (long long)pos * D + d] = (u16)h;
    }
  }
  for (int e = G * D + tid; e < 8 * D; e += NT) qs[e] = 0;
  __syncthreads();
  for (int g = warp; rank == 0 && g < G; g += W) {  // this token's score for query head g
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < D / 32; i++) s += bf_lo(qs[g * D + lane * (D / 32) + i]) * kn[lane * (D / 32) + i];
#pragma unroll
    for (int off = 16; off; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) snew[g] = s;
  }
  u32 q[16];  // A fragments, permuted dims: q words r4 D/2 + t4 16 + i
  {
    const uint4* qp = reinterpret_cast<const uint4*>(qs + r4 * D + t4 * 32);
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const uint4 w = qp[i];
      q[4 * i] = w.x; q[4 * i + 1] = w.y; q[4 * i + 2] = w.z; q[4 * i + 3] = w.w;
    }
  }
  float m = -1e30f, l = 0.f, o[8][4];
#pragma unroll
  for (int mb = 0; mb < 8; mb++) o[mb][0] = o[mb][1] = o[mb][2] = o[mb][3] = 0.f;
  for (; ta < T; ta += 2 * NWT) {
    attend(A, q, ta, pos, lane, m, l, o);
    load_tile(A, kb, vb, ta + 2 * NWT, pos, r4, t4);
    if (ta + NWT < T) {
      attend(B, q, ta + NWT, pos, lane, m, l, o);
      load_tile(B, kb, vb, ta + 3 * NWT, pos, r4, t4);
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
    wo[warp][2 * t4][r4 * 16 + 2 * mb] = o[mb][0];
    wo[warp][2 * t4][r4 * 16 + 2 * mb + 1] = o[mb][2];
    wo[warp][2 * t4 + 1][r4 * 16 + 2 * mb] = o[mb][1];
    wo[warp][2 * t4 + 1][r4 * 16 + 2 * mb + 1] = o[mb][3];
  }
  __syncthreads();
  for (int e = tid; e < G * D; e += NT) {  // this CTA's partial: its warps (and on rank 0 this token)
    const int g = e / D, d = e % D;
    float M = rank == 0 ? snew[g] : -1e30f;
#pragma unroll
    for (int w = 0; w < W; w++) M = fmaxf(M, wm[w][g]);
    float L = 0.f, O = 0.f;
    if (rank == 0) {
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
    co[g][d] = O;
    if (d == 0) {
      cm[g] = M;
      cl[g] = L;
    }
  }
  cluster_sync();  // every CTA's partial written (and every read of q, k, v done)
  const int per = (G * D + CL - 1) / CL;
  for (int e = rank * per + tid; e < min((rank + 1) * per, G * D); e += NT) {
    const int g = e / D, d = e % D;
    float mc[CL], lc[CL], oc[CL];
#pragma unroll
    for (int c = 0; c < CL; c++) {
      mc[c] = ld_cluster(&cm[g], c);
      lc[c] = ld_cluster(&cl[g], c);
      oc[c] = ld_cluster(&co[g][d], c);
    }
    float M = mc[0];
#pragma unroll
    for (int c = 1; c < CL; c++) M = fmaxf(M, mc[c]);
    float L = 0.f, O = 0.f;
#pragma unroll
    for (int c = 0; c < CL; c++) {
      const float f = __expf(mc[c] - M);
      L += f * lc[c];
      O += f * oc[c];
    }
    out[(kvh * G + g) * D + d] = O / L;
  }
#if ZERO
  for (int e = rank * NT + tid; e < (G + 2) * D; e += CL * NT) {
    const int row = e / D;
    const int dst = row < G ? kvh * G * D + e : row == G ? (H + kvh) * D + e - G * D : (H + KVH + kvh) * D + e - (G + 1) * D;
    qkv[dst] = 0.f;
  }
#endif
  cluster_sync();  // no CTA leaves while another may still read its shared memory
}
"""

# CTAs a cluster (a KV head's) and warps a CTA (FLOORLINE_ATTN_CLUSTER, FLOORLINE_ATTN_WARPS)
CLUSTER = int(os.environ.get("FLOORLINE_ATTN_CLUSTER", "16"))
WARPS = int(os.environ.get("FLOORLINE_ATTN_WARPS", "4"))


def unavailable(device: torch.device, heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> str | None:
    """Why the cluster attention cannot serve this model on `device` (one line), or None: it needs Hopper or newer
    (clusters, distributed shared memory), head_dim 128, at most 8 query heads a KV head and a bf16 cache."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return "no CUDA GPU"
    if torch.cuda.get_device_capability(device) < (9, 0):
        return "thread-block clusters need compute capability 9.0 or newer"
    if head_dim != 128 or heads % kv_heads or heads // kv_heads > 8 or dtype != torch.bfloat16:
        return f"head_dim {head_dim}, {heads // kv_heads} query heads a KV head, {dtype}: the kernel takes 128, <= 8, bf16"
    if CLUSTER not in (2, 4, 8, 16) or WARPS not in (2, 4, 8):
        return f"FLOORLINE_ATTN_CLUSTER={CLUSTER}, FLOORLINE_ATTN_WARPS={WARPS}: use 2, 4, 8 or 16 and 2, 4 or 8"
    try:
        _kernel(device.index if device.index is not None else torch.cuda.current_device(),
                _defines(heads, kv_heads, 0, 0))
    except (OSError, RuntimeError) as e:
        return f"NVRTC could not build the cluster attention: {str(e).splitlines()[0]}"
    return None


def _defines(heads: int, kv_heads: int, pdl: int, zero: int) -> tuple:
    return tuple(dict(G=heads // kv_heads, H=heads, KVH=kv_heads, CL=CLUSTER, W=WARPS, PDL=pdl, ZERO=zero).items())


def compile_source(defines: tuple, arch: str) -> bytes:
    return nvrtc.compile_cubin(SOURCE, "attn_decode.cu", dict(defines), arch)


@functools.lru_cache(maxsize=None)
def _kernel(device_index: int, defines: tuple):
    major, minor = torch.cuda.get_device_capability(device_index)
    arch = f"sm_{major}{minor}"
    key = hashlib.sha256(repr((SOURCE, defines, arch, torch.version.cuda)).encode()).hexdigest()
    with torch.cuda.device(device_index):
        cubin = nvrtc.cached(nvrtc.cache_dir() / "attn_cuda" / f"{key[:32]}.cubin",
                             lambda: compile_source(defines, arch))
        kern = torch.cuda._utils._cuda_load_module(cubin, ["attn_decode"])["attn_decode"]
        if CLUSTER > 8:
            torch.cuda._utils._check_cuda(nvrtc.libcuda().cuFuncSetAttribute(
                kern.func, nvrtc.NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1))
        return kern


def attention(qkv, cos, sin, pos, k_cache, v_cache, heads: int, scale: float, out, zero_qkv: bool = False, pdl=0):
    """tri_attention's contract in one launch: RoPE of q and k at `pos`, k and v written to the caches (kv_heads, L,
    128) bf16 at `pos`, the attention of q over positions 0..pos into `out` (heads x 128, fp32); with zero_qkv the
    KV head's q/k/v rows of `qkv` (fp32) are zeroed once read."""
    kv_heads = k_cache.shape[0]
    dev = qkv.device.index
    kern = _kernel(dev, _defines(heads, kv_heads, pdl, int(zero_qkv)))
    vals = [ctypes.c_void_p(t.data_ptr()) for t in (qkv, cos, sin, pos, k_cache, v_cache, out)]
    vals += [ctypes.c_float(scale), ctypes.c_longlong(k_cache.stride(0))]
    nvrtc.launch(kern.func, (CLUSTER * kv_heads, 1, 1), WARPS * 32, 0, torch.cuda.current_stream(qkv.device).cuda_stream,
                 vals, pdl=bool(pdl), cluster=CLUSTER)
    return out
