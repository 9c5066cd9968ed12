#include "pdl.cuh"
// QKN: q and k RMS-normalised per head before the rotation (Qwen3's q/k norm), by the weights qnw, knw (fp32, D).
#ifndef QKN
#define QKN 0
#endif
// D: head_dim, 128 or 64 (absent: 128). A lane loads KW 16-byte words of a K row and VW of a V row; O^T is MB
// m-blocks of 16 dims
#ifndef D
#define D 128
#endif
#if D != 128 && D != 64
#error "attn_chunk: head_dim 128 or 64"
#endif
// TL: a timeline slot (native/timeline.py) as a last argument, TLW int64 a CTA, CTAs numbered chunk first (start,
// wait returned, end, SM, then the marks of attn_cuda.MARKS: "qkv", the q/k/v prologue done, and "tiles", every
// warp's tiles done); absent: 0, no argument, the same code
#ifndef TL
#define TL 0
#endif
#if TL
#define TLW 6  // 4 + len(attn_cuda.MARKS)
#define TL_ARG , long long* __restrict__ tl
__device__ __forceinline__ long long gtimer() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void stamp(long long* tl, int i, long long t) {  // word i of this CTA's slot, thread 0
  if (threadIdx.x == 0) tl[(blockIdx.x + blockIdx.y * gridDim.x) * TLW + i] = t;
}
__device__ __forceinline__ void stamp_ends(long long* tl, long long t_start, long long t_wait) {  // and the end, SM
  unsigned sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  stamp(tl, 0, t_start); stamp(tl, 1, t_wait); stamp(tl, 2, gtimer()); stamp(tl, 3, sm);
}
#else
#define TL_ARG
#endif
#define KW (D / 32)
#define VW (D / 64)
#define MB (D / 16)
typedef unsigned short u16;
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

struct Tile {  // one tile's loads: K rows 16t + 8b + lane/4 (16 bytes at dims 32i + 8(lane%4), i < KW); V rows 16t
  uint4 k[2][KW];  // + {0,1,8,9} + 2(lane%4) (16 bytes at dims 64h + 8(lane/4), h < VW). Every load instruction covers
  uint4 v[4][VW];  // whole 32-byte sectors (a K row's 64 bytes by 4 lanes, a V row's 128 by 8): each leaves L2 once
};

__device__ __forceinline__ void load_tile(Tile& a, const u16* kb, const u16* vb, int t, int tend, int pos, int r4,
                                          int t4) {
  if (t >= tend) return;  // (warp-uniform) past the chunk or the cached positions: nothing to load
  // rows past pos - 1 (in the last tile) read row pos - 1 again: in bounds, finite, and masked out of the softmax
  const u16* k0 = kb + (long long)min(t * 16 + r4, pos - 1) * D + t4 * 8;
  const u16* k1 = kb + (long long)min(t * 16 + 8 + r4, pos - 1) * D + t4 * 8;
#pragma unroll
  for (int i = 0; i < KW; i++) {
    a.k[0][i] = ldg(k0 + i * 32);
    a.k[1][i] = ldg(k1 + i * 32);
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const u16* v = vb + (long long)min(t * 16 + 2 * t4 + (i & 1) + (i >> 1) * 8, pos - 1) * D + r4 * 8;
    a.v[i][0] = ldg(v);
#if VW > 1
    a.v[i][1] = ldg(v + 64);
#endif
  }
}

// the online softmax of one tile: m, l (query head lane/4; l this lane's share), o (O^T fragments: dims
// 64(mb/4) + 8(lane/4) + 2(mb%4) (+1 for o[mb][2..3]), query heads 2(lane%4) (+1 for o[mb][1], o[mb][3]))
__device__ __forceinline__ void attend(const Tile& a, const u32* q, int t, int pos, int lane, float& m, float& l,
                                       float (&o)[MB][4]) {
  const int t4 = lane & 3;
  float s[2][4];
#pragma unroll
  for (int b = 0; b < 2; b++) {
    s[b][0] = s[b][1] = s[b][2] = s[b][3] = 0.f;
#pragma unroll
    for (int j = 0; j < D / 16; j++) mma(s[b], q[2 * j], 0u, q[2 * j + 1], 0u, word(a.k[b][j / 2], (2 * j) % 4),
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
  for (int mb = 0; mb < MB; mb++) {
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
    float* __restrict__ lo, float* __restrict__ oo, float scale, long long skh, const float* __restrict__ qnw,
    const float* __restrict__ knw, float eps TL_ARG) {
#if TL
  const long long t_start = gtimer();
#endif
  __shared__ __align__(16) u16 qs[8 * D];  // q x scale, rotated, bf16 [head][dim] (heads past G zero)
  __shared__ float kn[D], vn[D], snew[8];
  __shared__ float wm[W][8], wl[W][8];
  __shared__ __align__(16) float wo[W][8][D];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, r4 = lane >> 2, t4 = lane & 3;
  const int c = blockIdx.x, kvh = blockIdx.y;
  const int pos = *posp;
  const int start = c * CHUNK;
  if (start > pos) {  // a chunk past the position: the merge reads only chunks 0..pos/CHUNK
#if TL
    stamp_ends(tl, t_start, 0);  // wait and marks 0: it left without waiting
    stamp(tl, 4, 0); stamp(tl, 5, 0);
#endif
    return;
  }
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
#if TL
  const long long t_wait = gtimer();
#endif
  // q (rotated, x scale, bf16) of the G query heads into shared memory, four dims a thread; the owner also the
  // rotated k and the v of this token (rounded as the cache holds them), written to the cache
  // (a warp's 32 lanes hold one row's 128 dims in every pass, half a warp's one row's 64: the q/k norm's sum is a
  // warp's, or a half's)
  for (int e = tid; e < (own ? G + 2 : G) * (D / 4); e += NT) {
    const int row = e / (D / 4), d = (e % (D / 4)) * 4;
    const int src = row < G ? kvh * G + row : row == G ? H + kvh : H + KVH + kvh;
    float4 x = *reinterpret_cast<const float4*>(qkv + src * D + d);
    if (row <= G) {
      float4 pr = *reinterpret_cast<const float4*>(qkv + src * D + (d + D / 2) % D);
#if QKN
      float ss = x.x * x.x + x.y * x.y + x.z * x.z + x.w * x.w;
      // (D 64: a row is a half-warp's 16 lanes, each half live whole or not at all: the shuffles stay in it)
      const unsigned half = D == 128 ? 0xffffffffu : lane < 16 ? 0x0000ffffu : 0xffff0000u;
#pragma unroll
      for (int off = D / 8; off; off >>= 1) ss += __shfl_xor_sync(half, ss, off);
      const float r = rsqrtf(ss / D + eps);  // 1 / rms over the head's D dims, as the Triton kernel's _rope
      const float* nw = row < G ? qnw : knw;
      const float4 w = *reinterpret_cast<const float4*>(nw + d);
      const float4 wp = *reinterpret_cast<const float4*>(nw + (d + D / 2) % D);
      x = make_float4(x.x * r * w.x, x.y * r * w.y, x.z * r * w.z, x.w * r * w.w);
      pr = make_float4(pr.x * r * wp.x, pr.y * r * wp.y, pr.z * r * wp.z, pr.w * r * wp.w);
#endif
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
#if TL
  stamp(tl, 4, gtimer());
#endif
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
  u32 q[D / 8];  // A fragments, the dims permuted as K's: q words 4i..4i+3 hold dims 32i + 8 t4 .. + 7 of head r4
  {
#pragma unroll
    for (int i = 0; i < KW; i++) {
      const uint4 w = *reinterpret_cast<const uint4*>(qs + r4 * D + i * 32 + t4 * 8);
      q[4 * i] = w.x; q[4 * i + 1] = w.y; q[4 * i + 2] = w.z; q[4 * i + 3] = w.w;
    }
  }
  float m = -1e30f, l = 0.f, o[MB][4];
#pragma unroll
  for (int mb = 0; mb < MB; mb++) o[mb][0] = o[mb][1] = o[mb][2] = o[mb][3] = 0.f;
  for (; ta < tend; ta += 2 * W) {
    attend(A, q, ta, pos, lane, m, l, o);
    load_tile(A, kb, vb, ta + 2 * W, tend, pos, r4, t4);
    if (ta + W < tend) {
      attend(B, q, ta + W, pos, lane, m, l, o);
      load_tile(B, kb, vb, ta + 3 * W, tend, pos, r4, t4);
    }
  }
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  if (t4 == 0) {
    wm[warp][r4] = m;
    wl[warp][r4] = l;
  }
#pragma unroll
  for (int mb = 0; mb < MB; mb++) {
    const int d = (mb / 4) * 64 + r4 * 8 + 2 * (mb % 4);
    wo[warp][2 * t4][d] = o[mb][0];
    wo[warp][2 * t4][d + 1] = o[mb][2];
    wo[warp][2 * t4 + 1][d] = o[mb][1];
    wo[warp][2 * t4 + 1][d + 1] = o[mb][3];
  }
  __syncthreads();
#if TL
  stamp(tl, 5, gtimer());
#endif
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
#if TL
  __syncthreads();  // every thread's stores of the partial issued
  stamp_ends(tl, t_start, t_wait);
#endif
}
