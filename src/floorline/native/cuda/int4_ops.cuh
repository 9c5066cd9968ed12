// The int4 GEMV's building blocks (int4_gemv.cu, int4_mlp.cu): fp16 hi + lo inputs staged in B-fragment order, the
// RMSNorm prologue, one group of a 16-row tile on the tensor cores, streaming loads and cp.async. Compile-time switches
// they read: WARPS, XPT, PRO, XBF16 (int4_cuda.py and int4_mlp.py define them).
#pragma once
#include "pdl.cuh"
typedef unsigned long long u64;

__device__ __forceinline__ u32 f2h2(float lo, float hi) {
  u32 r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ void h2f2(u32 h, float& a, float& b) {
  asm("{ .reg .b16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h; }" : "=f"(a), "=f"(b) : "r"(h));
}
// a, b = fp16 hi + fp16 lo; returns the sum of the four halves as the product will see them
__device__ __forceinline__ float split_h2(float a, float b, u32& hi, u32& lo) {
  float ah, bh, al, bl;
  hi = f2h2(a, b);
  h2f2(hi, ah, bh);
  lo = f2h2(a - ah, b - bh);
  h2f2(lo, al, bl);
  return (ah + al) + (bh + bl);
}
// input i*4 .. i*4+3 of the block (local index i) into shared memory, as fp16 hi + lo in B-fragment order: input k
// of local 64-block b, kk = k % 64, is half b*64 + t*16 + j*4 + u*2 + o for kk = 16j + 8u + 2t + o (lane t's B
// fragments of steps 0..3 in a row); the warp's 128 inputs (one group) are summed too (the zero point's term)
__device__ __forceinline__ void put_x(float4 v, int i, u32* xs, u32* xl, float* xsum, int lane) {
  const int kl = 4 * i;
  const int b = kl >> 6, kk = kl & 63, j = kk >> 4, rr = kk & 15, up = rr >> 3, t0 = (rr & 7) >> 1;
  const int h = b * 64 + t0 * 16 + j * 4 + up * 2;
  float part = split_h2(v.x, v.y, xs[h >> 1], xl[h >> 1]);
  part += split_h2(v.z, v.w, xs[(h + 16) >> 1], xl[(h + 16) >> 1]);
  for (int o = 16; o; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
  if (lane == 0) xsum[i >> 5] = part;
}
// a fragment pair of codes as fp16 subnormals, c 2^-24 (exact; the tensor cores keep fp16 subnormals), by one AND;
// the zero point comes off once per group and row as z * sum(x). (The alternatives, codes as 1024 + c with the zero
// taken off by a packed subtraction or from the group sum, ran 112 SASS instructions a group against 78.5 and were
// slower in the step: docs/lab/2026-12-01-int4-cuda-gemv.md.)
#define FRAG(q, mask, m) ((q) & (mask))  // (m: see group_dot)
__device__ __forceinline__ uint4 ld_stream(const uint4* p) {  // weights: read once, no L1 allocation
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}
__device__ __forceinline__ float bf_lo(u32 p) { return __int_as_float(p << 16); }
__device__ __forceinline__ float bf_hi(u32 p) { return __int_as_float(p & 0xFFFF0000u); }
__device__ __forceinline__ void mma(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ float4 load_x(const void* X, int i) {  // inputs i*4 .. i*4+3 as fp32
#if XBF16
  uint2 v = ((const uint2*)X)[i];
  return make_float4(bf_lo(v.x), bf_hi(v.x), bf_lo(v.y), bf_hi(v.y));
#else
  return ((const float4*)X)[i];
#endif
}
// The norm's weights into registers (XPT float4 a thread), before the wait on the previous kernel: they are constant
__device__ __forceinline__ void load_nw(const float* NW, int K, float4* nr) {
#if PRO
#pragma unroll
  for (int t = 0; t < XPT; t++) {
    const int i = threadIdx.x + t * WARPS * 32;
    if (i < K / 4) nr[t] = ((const float4*)NW)[i];
  }
#endif
}

// The block's inputs, groups [g0, g0 + ng), into shared memory as fp16 hi + lo (put_x); with PRO RMSNorm first:
// all of x is read once into registers (XPT float4 a thread, beside the norm's weights nr from load_nw), its sum of
// squares reduced over the block (red: WARPS floats), then the block's own groups normalised from the registers (all
// of them, or a split-K slice: a q/k/v product accumulated into a zeroed output).
__device__ __forceinline__ void stage_x(const void* X, const float4* nr, int K, float eps, int g0, int ng, uint4* xs4,
                                        float* red, int lane, int warp) {
  u32* xs = (u32*)xs4;
  u32* xl = xs + ng * 64;
  float* xsum = (float*)(xl + ng * 64);  // per group: the sum of its inputs (hi + lo), for the zero point
#if PRO
  float4 xr[XPT];
  float ss = 0.f;
#pragma unroll
  for (int t = 0; t < XPT; t++) {
    const int i = threadIdx.x + t * WARPS * 32;
    if (i < K / 4) {
      xr[t] = load_x(X, i);
      ss += xr[t].x * xr[t].x + xr[t].y * xr[t].y + xr[t].z * xr[t].z + xr[t].w * xr[t].w;
    }
  }
  for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (lane == 0) red[warp] = ss;
  __syncthreads();
  ss = 0.f;
  for (int i = 0; i < WARPS; i++) ss += red[i];
  const float rinv = rsqrtf(ss / K + eps);
#pragma unroll
  for (int t = 0; t < XPT; t++) {
    const int i = threadIdx.x + t * WARPS * 32;  // (a warp's 32 float4 are one group: the test is warp-uniform)
    if (i < K / 4 && i >= g0 * 32 && i < (g0 + ng) * 32) {  // split-K: only the block's own groups are staged
      const float4 v = make_float4(xr[t].x * nr[t].x * rinv, xr[t].y * nr[t].y * rinv, xr[t].z * nr[t].z * rinv,
                                   xr[t].w * nr[t].w * rinv);
      put_x(v, i - g0 * 32, xs, xl, xsum, lane);
    }
  }
#else
  for (int i = threadIdx.x; i < ng * 32; i += WARPS * 32) put_x(load_x(X, g0 * 32 + i), i, xs, xl, xsum, lane);
#endif
}

// One group (128 inputs) of one 16-row tile: w0, w1 the lane's words of its two 64-input blocks, sz its rows'
// (scale, zero) pairs, xp the lane's B fragments (hi or lo part) of the group, xsg the group's input sum.
// s (c - z x) for row g; rows g + 8 sit 16x higher (their codes' bits 4..7), scaled back. Adds into y0, y1.
__device__ __forceinline__ void group_dot(uint4 w0, uint4 w1, u32 s, u32 z, const uint4* xp, float xsg, float& y0,
                                          float& y1) {
  // m0, m1 (1024 + zero as fp16 pairs) are unused by FRAG; computed still because without them ptxas allocates
  // registers differently in some launch configs (scripts/sass_same.py), and the measured kernels are these
  const u32 m0 = f2h2(1024.f + bf_lo(z), 1024.f + bf_lo(z));
  const u32 m1 = f2h2(1024.f + 16.f * bf_hi(z), 1024.f + 16.f * bf_hi(z));
  float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int blk = 0; blk < 2; blk++) {
    const uint4 xa = xp[blk * 8], xb = xp[blk * 8 + 1], w = blk ? w1 : w0;
    const u32 q[4] = {w.x, w.y, w.z, w.w};
    const u32 bx[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const u32 qh = q[j] >> 8;
      mma(c, FRAG(q[j], 0x000F000Fu, m0), FRAG(q[j], 0x00F000F0u, m1), FRAG(qh, 0x000F000Fu, m0),
          FRAG(qh, 0x00F000F0u, m1), bx[2 * j], bx[2 * j + 1]);
    }
  }
  // lane (g, 0): rows g, g + 8 x columns 0 (hi), 1 (lo)
  y0 += bf_lo(s) * (16777216.f * (c[0] + c[1]) - bf_lo(z) * xsg);  // 2^24: the codes' subnormal scale
  y1 += bf_hi(s) * (1048576.f * (c[2] + c[3]) - bf_hi(z) * xsg);   // 2^20: rows g + 8 sit 16x higher
}
__device__ __forceinline__ u32 smem_addr(const void* p) {
  u64 a;
  asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
  return (u32)a;
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {  // to shared memory, L2 only
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}
