"""The batch-1 W4A16 GEMV in CUDA C++, compiled at run time by NVRTC (no nvcc on the user's machine): int4 at its floor.

Why CUDA and not Triton: the Triton GEMV spends ~5 instructions a weight (164 registers, 19% occupancy, Nsight Compute
on the H200) and streams 1.0-1.6 TB/s. Here a weight costs well under two: each warp owns one 16-row tile
(int4_format's `mma` layout) and a share of its groups; a lane's 16-byte load is four tensor-core A fragments, which
one AND a pair turns into fp16 subnormals (code x 2^-24, exact), and `mma.m16n8k16` multiplies by the input (fp16,
fp32 accumulate) -- 256 weights an instruction, the tensor cores otherwise idle at batch 1; the zero point comes off
once per group and row as zero x the group's input sum, the group's scale once per 128 weights of a row, in fp32
(ZERO_POINT below: the exact packed subtraction of 1024 + zero is the alternative). The input is converted once per
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
(griddepcontrol), as the Triton kernels do (pdl_wait, pdl_trigger).
Numerics: each input is split into two fp16 halves, hi + lo (about 22 bits), fed as columns 0 and 1 of the product's
B operand (mma.m16n8k16 computes 8 columns; batch 1 uses 2 of them at no extra instruction); products and sums in
fp32. An input beyond fp16's 65504 would overflow (far past any normalised or activation input seen).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
from pathlib import Path

import torch

from floorline.native import int4_format as F
from floorline.native import nvrtc

SOURCE = nvrtc.PRELUDE + r"""
typedef unsigned long long u64;

__device__ __forceinline__ u32 magic(u32 w, u32 mask) {  // (w & mask) | 0x64006400: two codes as fp16 1024 + c
#if SUMZ == 2
  return w & mask;  // two codes as fp16 subnormals: c 2^-24 (exact; the tensor cores keep fp16 subnormals)
#else
  u32 r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(w), "r"(mask), "r"(0x64006400u));
  return r;
#endif
}
__device__ __forceinline__ u32 hsub2(u32 a, u32 b) {
  u32 r;
  asm("sub.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
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
// fragments of steps 0..3 in a row); with SUMZ the warp's 128 inputs (one group) are summed too
__device__ __forceinline__ void put_x(float4 v, int i, u32* xs, u32* xl, float* xsum, int lane) {
  const int kl = 4 * i;
  const int b = kl >> 6, kk = kl & 63, j = kk >> 4, rr = kk & 15, up = rr >> 3, t0 = (rr & 7) >> 1;
  const int h = b * 64 + t0 * 16 + j * 4 + up * 2;
  float part = split_h2(v.x, v.y, xs[h >> 1], xl[h >> 1]);
  part += split_h2(v.z, v.w, xs[(h + 16) >> 1], xl[(h + 16) >> 1]);
#if SUMZ
  for (int o = 16; o; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
  if (lane == 0) xsum[i >> 5] = part;
#endif
}
// a fragment pair of codes: SUMZ 0: (1024 + c) - (1024 + z) = c - z exactly, by one packed subtraction;
// SUMZ 1: 1024 + c as it is, the offset (1024 + z) * sum(x) of the group taken off the fp32 sums once per group;
// SUMZ 2: c 2^-24 (an fp16 subnormal, no offset to cancel), z * sum(x) taken off once per group and row
#if SUMZ
#define FRAG(q, mask, m) magic(q, mask)
#else
#define FRAG(q, mask, m) hsub2(magic(q, mask), m)
#endif
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
  float* xsum = (float*)(xl + ng * 64);  // per group: the sum of its inputs (hi + lo), for SUMZ
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
// (scale, zero) pairs, xp the lane's B fragments (hi or lo part) of the group, xsg the group's input sum (SUMZ).
// (1024 + c) - (1024 + z) = c - z for row g; rows g + 8 sit 16x higher: 16 (c - z), scaled back. Adds into y0, y1.
__device__ __forceinline__ void group_dot(uint4 w0, uint4 w1, u32 s, u32 z, const uint4* xp, float xsg, float& y0,
                                          float& y1) {
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
#if SUMZ == 2
  y0 += bf_lo(s) * (16777216.f * (c[0] + c[1]) - bf_lo(z) * xsg);  // 2^24: the codes' subnormal scale
  y1 += bf_hi(s) * (1048576.f * (c[2] + c[3]) - bf_hi(z) * xsg);   // 2^20: rows g + 8 sit 16x higher
#else
#if SUMZ
  c[0] -= (1024.f + bf_lo(z)) * xsg;
  c[2] -= (1024.f + 16.f * bf_hi(z)) * xsg;
#endif
  y0 += bf_lo(s) * (c[0] + c[1]);  // lane (g, 0): rows g, g + 8 x columns 0 (hi), 1 (lo)
  y1 += bf_hi(s) * 0.0625f * (c[2] + c[3]);
#endif
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
// A row's finished sums into y: silu(gate) * up with GLU (v[1] the up row), the residual added in place (ACC;
// atomically with split-K), or stored (fp32, or bf16 with YBF16)
__device__ __forceinline__ void put_y(void* Y, int row, const float* v) {
#if GLU
  const float out = v[0] / (1.f + expf(-v[0])) * v[1];
#else
  const float out = v[0];
#endif
#if ATOMIC
  atomicAdd((float*)Y + row, out);
#elif ACC
  ((float*)Y)[row] += out;
#elif YBF16
  u32 bits;
  asm("{ .reg .b16 h; cvt.rn.bf16.f32 h, %1; mov.b32 %0, {h, h}; }" : "=r"(bits) : "f"(out));
  ((unsigned short*)Y)[row] = (unsigned short)bits;
#else
  ((float*)Y)[row] = out;
#endif
}
// A finished row block: each warp's partial sums (lane (g, 0) holds rows g, g + 8 of its tile) into rd, then the
// warps of each row added up (bv: the row's bias, read ahead) and row block rb written: with GLU threads 0..15 (gate
// tile t, up tile t: one output row each), else threads 0..16 RT - 1 (row i of tile rb RT + t: thread 16 t + i)
__device__ __forceinline__ void finish(float* rd, float y0, float y1, const float* bv, void* Y, int rb) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
  const int NKS = WARPS / RT;
  if (tq == 0) {
    rd[warp * 16 + g] = y0;
    rd[warp * 16 + g + 8] = y1;
  }
  __syncthreads();
#if GLU
  if (threadIdx.x < 16) {
    float v[RT];
#pragma unroll
    for (int t = 0; t < RT; t++) {
      v[t] = bv[t];
      for (int s = 0; s < NKS; s++) v[t] += rd[(s * RT + t) * 16 + threadIdx.x];  // (inputs normalised already)
    }
    put_y(Y, rb * 16 + threadIdx.x, v);
  }
#else
  if (threadIdx.x < 16 * RT) {
    const int t = threadIdx.x >> 4, i = threadIdx.x & 15;
    float v[1] = {bv[0]};
    for (int s = 0; s < NKS; s++) v[0] += rd[(s * RT + t) * 16 + i];
    put_y(Y, (rb * RT + t) * 16 + i, v);
  }
#endif
}
#define STR_(x) #x
#define STR(x) STR_(x)

// WARPS a block; RT row tiles a block (2 with GLU: gate tile t and up tile t; else RT consecutive tiles, the staged
// inputs shared by all of them); U groups in flight a warp;
// a block takes row blocks blockIdx.x, + gridDim.x, ... (a grid smaller than the row blocks: persistent blocks, the
// inputs staged once for all of them and the next row block's first groups in flight through each epilogue);
// PRO RMSNorm prologue; GLU silu(gate) * up; BIAS; ACC y += W x in place; ATOMIC split-K (gridDim.y > 1);
// XBF16 bf16 input (else fp32); YBF16 bf16 output (else fp32); PDL programmatic dependent launch (pdl_trigger);
// PERSIST: the loop over row blocks compiled in, its registers capped for 24 warps an SM (the loop's state costs ~14
// a thread: uncapped, 8-warp blocks would fit 2 an SM instead of 3)
extern "C" __global__ void __launch_bounds__(WARPS * 32, PERSIST && WARPS <= 24 ? 24 / WARPS : 1)
int4_gemv(const uint4* __restrict__ W, const u32* __restrict__ S, const u32* __restrict__ Z,
          const void* __restrict__ X, const float* __restrict__ NW, const float* __restrict__ B,
          void* Y, int N, int K, float eps) {
  extern __shared__ uint4 smem4[];
  pdl_trigger(1);
  float* red = (float*)smem4;                  // 2 x WARPS * 16 partial sums (row blocks alternate), 32 for the norm
  uint4* xs4 = smem4 + WARPS * 8 + 8;          // the block's inputs, fp16, in B-fragment order
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
  const int NKS = WARPS / RT, r = warp % RT, ks = warp / RT;
  const int NT = N / 16, NG = K / 128, KB = K / 64, NRB = GLU ? NT / 2 : NT / RT;
#if GLU
#define TILE(rb_) (r ? (rb_) + NT / 2 : (rb_))
#else
#define TILE(rb_) ((rb_) * RT + r)
#endif
  const int g0 = (int)((long long)blockIdx.y * NG / gridDim.y), g1 = (int)((long long)(blockIdx.y + 1) * NG / gridDim.y);
  const int ng = g1 - g0;
  float4 nr[XPT];
  load_nw(NW, K, nr);
  float bv[RT];  // the bias of this thread's output row (the writers in finish, split 0), read ahead
#if GLU
#define BIAS_OF(rb_)                                                                                   \
  _Pragma("unroll") for (int t = 0; t < RT; t++)                                                       \
    bv[t] = BIAS && blockIdx.y == 0 && threadIdx.x < 16 ? B[(t ? (rb_) + NT / 2 : (rb_)) * 16 + threadIdx.x] : 0.f;
#else
#define BIAS_OF(rb_) bv[0] = BIAS && blockIdx.y == 0 && threadIdx.x < 16 * RT ? B[(rb_) * RT * 16 + threadIdx.x] : 0.f;
#endif
  int rb = blockIdx.x;
  BIAS_OF(rb);
  float y0 = 0.f, y1 = 0.f;  // rows g and g + 8 of the warp's tile
#if STAGES
  // (one row block a block)
  const int tile = TILE(rb);
  const uint4* wt = W + (size_t)tile * KB * 32 + lane;
  const u32* st = S + (size_t)tile * NG * 8 + g;
  const u32* zt = Z + (size_t)tile * NG * 8 + g;
  // cp.async: a ring of STAGES groups a warp in shared memory (each lane copies, and later reads, its own words),
  // so the bytes in flight do not cost registers; the ring sits after the inputs
  uint4* ring = xs4 + ng * 32 + (ng + 3) / 4 + warp * STAGES * 64;
  u32* ringsz = (u32*)(xs4 + ng * 32 + (ng + 3) / 4 + WARPS * STAGES * 64) + warp * STAGES * 64;
  const int mine = ng > ks ? (ng - ks + NKS - 1) / NKS : 0;  // this warp's groups: g0 + ks + i * NKS
#define ISSUE(i)                                                                        \
  {                                                                                     \
    if ((i) < mine) {                                                                   \
      const int G_ = g0 + ks + (i) * NKS, slot_ = (i) % STAGES;                         \
      cp_async16(ring + slot_ * 64 + lane, wt + (size_t)(2 * G_) * 32);                 \
      cp_async16(ring + slot_ * 64 + 32 + lane, wt + (size_t)(2 * G_ + 1) * 32);        \
      cp_async4(ringsz + slot_ * 64 + lane, st + G_ * 8);                               \
      cp_async4(ringsz + slot_ * 64 + 32 + lane, zt + G_ * 8);                          \
    }                                                                                   \
    asm volatile("cp.async.commit_group;");                                             \
  }
#pragma unroll
  for (int i = 0; i < STAGES - 1; i++) ISSUE(i);  // in flight before the previous kernel is waited for
  pdl_wait();
  stage_x(X, nr, K, eps, g0, ng, xs4, red + 2 * WARPS * 16, lane, warp);
  __syncthreads();
  const uint4* xq = xs4 + (g == 1 ? ng * 16 : 0) + tq * 2;
  for (int i = 0; i < mine; i++) {
    ISSUE(i + STAGES - 1);
    asm volatile("cp.async.wait_group " STR(STAGES) " - 1;" ::: "memory");  // group i has landed
    const int slot = i % STAGES, Gl = ks + i * NKS;
#if SUMZ
    const float xsg = ((const float*)(xs4 + ng * 32))[Gl];
#else
    const float xsg = 0.f;
#endif
    group_dot(ring[slot * 64 + lane], ring[slot * 64 + 32 + lane], ringsz[slot * 64 + lane],
              ringsz[slot * 64 + 32 + lane], xq + 2 * Gl * 8, xsg, y0, y1);
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
  pdl_trigger(2);
  finish(red, y0, y1, bv, Y, rb);
#else
  // the warp's groups g0 + ks + i NKS, i < mine, through two register buffers of U groups in turn (ping-pong: no
  // copies); group i's codes at wq + i WS, its scale and zero at sq, zq + i SS (one 64-bit base, 32-bit offsets)
  const int mine = ng > ks ? (ng - ks + NKS - 1) / NKS : 0;
  constexpr int WS = 64 * NKS, SS = 8 * NKS;
  const uint4* pw;
  const u32 *ps, *pz;
#define AT(rb_)  /* the running pointers at the warp's first group of row block rb_ */                \
  {                                                                                                \
    const int t_ = TILE(rb_);                                                                      \
    pw = W + (size_t)t_ * KB * 32 + lane + (size_t)(2 * (g0 + ks)) * 32;                           \
    ps = S + (size_t)t_ * NG * 8 + g + (g0 + ks) * 8;                                              \
    pz = Z + (size_t)t_ * NG * 8 + g + (g0 + ks) * 8;                                              \
  }
  uint4 wa[U][2], wb[U][2];
  u32 sa[U], za[U], sb[U], zb[U];
#define LOADG(wv, sv, zv, i, o)  /* groups i + o + u, at the running pointers + (o + u) strides */ \
  _Pragma("unroll") for (int u = 0; u < U; u++) {                                          \
    if ((i) + (o) + u < mine) {                                                            \
      wv[u][0] = ld_stream(pw + ((o) + u) * WS);                                           \
      wv[u][1] = ld_stream(pw + ((o) + u) * WS + 32);                                      \
      sv[u] = ps[((o) + u) * SS];                                                          \
      zv[u] = pz[((o) + u) * SS];                                                          \
    }                                                                                      \
  }
  AT(rb);
  LOADG(wa, sa, za, 0, 0);  // the first weights are in flight before the previous kernel is waited for
  u32 dep = 0;
#pragma unroll
  for (int u = 0; u < U; u++)
    if (u < mine) dep ^= wa[u][0].x ^ wa[u][0].y ^ wa[u][0].z ^ wa[u][0].w ^ wa[u][1].x ^ wa[u][1].y ^ wa[u][1].z ^
                         wa[u][1].w ^ sa[u] ^ za[u];
  pdl_wait_after(dep, K);
  stage_x(X, nr, K, eps, g0, ng, xs4, red + 2 * WARPS * 16, lane, warp);
  __syncthreads();
  // B's column 0 (lanes g = 0) is x's fp16 hi part, column 1 (g = 1) its lo part; the rest repeat hi; the warp's
  // group i at xw + i XS
  const uint4* xw = xs4 + (g == 1 ? ng * 16 : 0) + tq * 2 + 16 * ks;
  constexpr int XS = 16 * NKS;
#if SUMZ
  const float* xsum = (const float*)(xs4 + ng * 32) + ks;
#define XSG(i) xsum[(i) * NKS]
#else
#define XSG(i) 0.f
#endif
#define DOTG(wv, sv, zv, i, o)                                                                   \
  _Pragma("unroll") for (int u = 0; u < U; u++) {                                                \
    if ((i) + (o) + u < mine)                                                                    \
      group_dot(wv[u][0], wv[u][1], sv[u], zv[u], px + ((o) + u) * XS, XSG((i) + (o) + u), y0, y1); \
  }
  for (int parity = 0;; parity ^= 1) {  // row blocks rb = blockIdx.x, + gridDim.x, ...
    const uint4* px = xw;
    // the next buffer's loads are in flight while this one is used; the pointers advance a round (2 U groups)
    for (int i = 0; i < mine; i += 2 * U, pw += 2 * U * WS, ps += 2 * U * SS, pz += 2 * U * SS, px += 2 * U * XS) {
      LOADG(wb, sb, zb, i, U);
      DOTG(wa, sa, za, i, 0);
      if (i + U >= mine) break;
      LOADG(wa, sa, za, i, 2 * U);
      DOTG(wb, sb, zb, i, U);
    }
    const int next = PERSIST ? rb + gridDim.x : NRB;  // wa is free here: the next row block's first groups go in flight
    if (next < NRB) {
      AT(next);
      LOADG(wa, sa, za, 0, 0);
    } else {
      pdl_trigger(2);
    }
    finish(red + parity * WARPS * 16, y0, y1, bv, Y, rb);  // (the other half is the next row block's: one barrier)
    if (next >= NRB) break;
    rb = next;
    BIAS_OF(rb);
    y0 = y1 = 0.f;
  }
#endif
}

// FLAT: one warp owns whole row blocks (a tile; with GLU the gate tile and its up tile) over all of K, no cross-warp
// sums and no block barrier after the prologue; a block's warps take row blocks wg, wg + all warps, ... and load
// U groups ahead across row-block boundaries. For the matrices with many rows (gate_up): one wave of blocks, one
// input prologue per block instead of one per tile.
extern "C" __global__ void __launch_bounds__(WARPS * 32)
int4_gemv_flat(const uint4* __restrict__ W, const u32* __restrict__ S, const u32* __restrict__ Z,
               const void* __restrict__ X, const float* __restrict__ NW, const float* __restrict__ B,
               void* Y, int N, int K, float eps) {
  extern __shared__ uint4 smem4[];
  pdl_trigger(1);
  float* red = (float*)smem4;
  uint4* xs4 = smem4 + 8;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
  const int NT = N / 16, NG = K / 128, KB = K / 64, NRB = RT == 2 ? NT / 2 : NT;
  const int TW = gridDim.x * WARPS, wg = blockIdx.x * WARPS + warp;
  const int items = wg < NRB ? ((NRB - 1 - wg) / TW + 1) * NG : 0;  // (row block, group) pairs of this warp

  uint4 w[U][RT][2];
  u32 sc[U][RT], zc[U][RT];
#define FLAT_LOAD(wv, sv, zv, j)                                                              \
  {                                                                                           \
    const int rb_ = wg + (j) / NG * TW, G_ = (j) % NG;                                        \
    _Pragma("unroll") for (int r = 0; r < RT; r++) {                                          \
      const int t_ = r ? rb_ + NT / 2 : rb_;                                                  \
      const uint4* p_ = W + ((size_t)t_ * KB + 2 * G_) * 32 + lane;                           \
      wv[r][0] = ld_stream(p_);                                                               \
      wv[r][1] = ld_stream(p_ + 32);                                                          \
      sv[r] = S[((size_t)t_ * NG + G_) * 8 + g];                                              \
      zv[r] = Z[((size_t)t_ * NG + G_) * 8 + g];                                              \
    }                                                                                         \
  }
#pragma unroll
  for (int u = 0; u < U; u++)
    if (u < items) FLAT_LOAD(w[u], sc[u], zc[u], u);
  float4 nr[XPT];
  load_nw(NW, K, nr);
  pdl_wait();
  stage_x(X, nr, K, eps, 0, NG, xs4, red, lane, warp);
  __syncthreads();
  const uint4* xbase = xs4 + (g == 1 ? NG * 16 : 0) + tq * 2;
  float y[RT][2];
#pragma unroll
  for (int r = 0; r < RT; r++) y[r][0] = y[r][1] = 0.f;
  for (int j = 0; j < items; j += U) {
    uint4 wn[U][RT][2];
    u32 sn[U][RT], zn[U][RT];
#pragma unroll
    for (int u = 0; u < U; u++)
      if (j + U + u < items) FLAT_LOAD(wn[u], sn[u], zn[u], j + U + u);
#pragma unroll
    for (int u = 0; u < U; u++) {
      if (j + u < items) {
        const int G = (j + u) % NG;
#if SUMZ
        const float xsg = ((const float*)(xs4 + NG * 32))[G];
#else
        const float xsg = 0.f;
#endif
#pragma unroll
        for (int r = 0; r < RT; r++)
          group_dot(w[u][r][0], w[u][r][1], sc[u][r], zc[u][r], xbase + 2 * G * 8, xsg, y[r][0], y[r][1]);
        if (G == NG - 1) {  // the row block is complete: lane (g, 0) writes rows g and g + 8
          const int rb = wg + (j + u) / NG * TW;
          if (tq == 0) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
              const int row = rb * 16 + g + 8 * h;
              float v[RT];
#pragma unroll
              for (int r = 0; r < RT; r++) {
                v[r] = y[r][h];
#if BIAS
                v[r] += B[r ? row + N / 2 : row];
#endif
              }
              put_y(Y, row, v);  // (no split in the flat kernel: ATOMIC never set)
            }
          }
#pragma unroll
          for (int r = 0; r < RT; r++) y[r][0] = y[r][1] = 0.f;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
      for (int r = 0; r < RT; r++) {
        w[u][r][0] = wn[u][r][0]; w[u][r][1] = wn[u][r][1]; sc[u][r] = sn[u][r]; zc[u][r] = zn[u][r];
      }
  }
  pdl_trigger(2);
}
"""

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


# how the zero point is taken off: "sub" (a packed fp16 subtraction a fragment pair; exact codes, relative
# error ~3e-7 on the H200), "sum" (codes as 1024 + c, the offset taken off once per group and row from the group's
# input sum: four fewer instructions a code word, relative error ~1e-4; measured on the H200 no faster per step:
# qwen2.5-7b int4 2.01 ms against 1.87 ms) or "subnormal" (the default: codes as fp16 subnormals c 2^-24, one AND a
# pair, no offset to cancel; z sum(x) taken off once per group and row: 78.5 SASS instructions a group against 112,
# relative error 8e-7..2e-6; H200 qwen2.5-7b int4 ctx 2048 1.745 ms against 1.781 for "sub", gate_up 21.2 us
# against 22.6; results/h200/int4/zero_point)
ZERO_POINTS = {"sub": 0, "sum": 1, "subnormal": 2}
ZERO_POINT = os.environ.get("FLOORLINE_INT4_ZERO", "subnormal")


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
    """NVRTC: SOURCE with its compile-time switches -> a cubin for `arch` (e.g. "sm_90"); config's first five
    fields, whether the sixth (persistent blocks an SM) is set (the grid itself is sized at launch) and the seventh
    (row tiles a block; 1 where absent)."""
    pro, glu, bias, acc, atomic, xbf16, ybf16, pdl, xpt = flags
    warps, ahead, stages = config[0], config[1], config[4]
    tiles = config[6] if len(config) > 6 else 1
    defines = dict(STAGES=stages, PERSIST=int(len(config) > 5 and config[5] > 0), WARPS=warps,
                   RT=2 if glu else tiles, U=ahead, PRO=pro, GLU=glu, BIAS=bias, ACC=acc, ATOMIC=atomic, XBF16=xbf16,
                   YBF16=ybf16, PDL=pdl, SUMZ=ZERO_POINTS[ZERO_POINT], XPT=xpt)
    return nvrtc.compile_cubin(SOURCE, "int4_gemv.cu", defines, arch)


def cache_dir() -> Path:
    """Where compiled cubins are kept across processes: nvrtc.cache_dir()'s int4_cuda/."""
    return nvrtc.cache_dir() / "int4_cuda"


def _cubin(flags: tuple, config: tuple, arch: str) -> bytes:
    """compile_source through the on-disk cache, keyed by the source, the switches, the config, the arch and the
    NVRTC library (a changed source or toolkit compiles anew)."""
    key = hashlib.sha256(repr((SOURCE, ZERO_POINT, flags, config, arch, torch.version.cuda)).encode()
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


_BEST: dict = {}  # (device, shape, switches) -> the tuned config
_RANKED: dict = {}  # the same keys -> the candidates, fastest first by _tune's one-launch timer
_USED: set = set()  # keys launched since the last clear (retune_in_step: the step's own shapes)
last_config = None  # the tuned config of the latest call (the bench prints it)
FIXED = None  # a config that replaces tuning (bench --int4-config, for Nsight Compute)


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
    """y (+)= W p(x) (+ bias) (or glu) for `mma`-layout int4 weights into y (kernels.tri_gemv allocates it and holds
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
    config = config or FIXED
    if config is not None:
        config = check_config(config)
    if config is None:
        key = (words.device, n, k, pro, glu, acc, bias is not None, x.dtype, y.dtype, pdl)
        if key not in _BEST:
            _RANKED[key] = _tune(words, x, y, configs_for(n, k, glu, split_ok), kw)
            _BEST[key] = _RANKED[key][0]
        config = _BEST[key]
        _USED.add(key)
    elif why := _misfit(n, glu, split_ok, config):
        raise ValueError(why)
    global last_config
    last_config = config
    launch(words, x, y, config=config, **kw)
    return y


# FLOORLINE_INT4_STEP_TUNE (default 1; 0 turns it off): mode native re-times the one-launch timer's best configs
# inside the step. Neither timer of one kernel predicts the step (the one-launch timer pays a launch's whole ramp-up,
# the chain of copies rewards what overlaps a copy of itself); the records keep the trials. Before the persistent
# configs it was measured within noise (1.738 ms against 1.748; results/h200/int4/step_tune)
STEP_TUNE = os.environ.get("FLOORLINE_INT4_STEP_TUNE", "1") != "0"


def retune_in_step(capture, state: list, top: int = 12, reps: int = 30) -> None:
    """Launch configs re-chosen where they run: for each tuned shape in turn, its `top` configs by _tune's timer,
    each timed in the whole decode step (`capture()` returns a CUDA graph of one step; medians of `reps` replays),
    the fastest kept: the neighbours a shape has in the step are other kernels, not copies of itself. `state` (the
    token and the position) is restored after every replay, so the trials leave the decode where it was: they write
    only cache positions from the current one on, which a step writes before it reads."""
    from floorline import timing

    _USED.clear()
    graph = capture()  # which shapes the step launches
    del graph
    global last_step_tuning
    last_step_tuning = {}
    for key in [k for k in _BEST if k in _USED and len(_RANKED.get(k, ())) > 1]:
        times = timing.fastest_in_step(_RANKED[key][:top], functools.partial(_BEST.__setitem__, key), capture,
                                       state, reps)
        last_step_tuning[_shape_name(key)] = {config_name(c): round(t, 4) for c, t in times.items()}


last_step_tuning: dict = {}  # shape -> {config: step ms} of the latest retune_in_step (kept in the records)


def _shape_name(key: tuple) -> str:
    from floorline.native.kernels import shape_name

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


def parse_config(text: str) -> tuple:
    """"warps,ahead,splits,flat,stages[,persist[,tiles]]" (bench --int4-config) -> a checked config tuple."""
    return check_config(tuple(int(v) for v in text.split(",")))


def tuned() -> dict:
    """The configs tuning chose in this process, by shape and switches (kept in the records)."""
    return {_shape_name(key): config_name(c) for key, c in _BEST.items()}


def _tune(words, x, y, candidates: list[tuple], kw: dict) -> list[tuple]:
    """The candidates, fastest first, one launch at a time (kernels._cold_bench: L2 evicted before each call, in a
    CUDA graph); y (which may hold the residual) is restored after. Timing them instead back to back on distinct
    weight copies (bench's chain: each launch's neighbour a copy of itself) was measured on the H200 and dropped: its
    picks (a cp.async o projection) made qwen2.5-7b's int4 step 1.723 ms against 1.678 with this timer's
    (results/h200/int4/tuner). Either ranking is only a shortlist: retune_in_step times the best in the step."""
    from floorline.native.kernels import _cold_bench

    if len(candidates) == 1:
        return candidates
    keep = y.clone()
    times = {c: _cold_bench(lambda c=c: launch(words, x, y, config=c, **kw))[0] for c in candidates}
    y.copy_(keep)
    return sorted(times, key=times.get)
