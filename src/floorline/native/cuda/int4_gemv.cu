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
// XBF16 bf16 input (else fp32); YBF16 bf16 output (else fp32); PDL programmatic dependent launch (pdl.cuh);
// PERSIST: the loop over row blocks compiled in, its registers capped for 24 warps an SM (the loop's state costs ~14
// a thread: uncapped, 8-warp blocks would fit 2 an SM instead of 3)
extern "C" __global__ void __launch_bounds__(WARPS * 32, PERSIST && WARPS <= 24 ? 24 / WARPS : 1)
int4_gemv(const uint4* __restrict__ W, const u32* __restrict__ S, const u32* __restrict__ Z,
          const void* __restrict__ X, const float* __restrict__ NW, const float* __restrict__ B,
          void* Y, int N, int K, float eps) {
  extern __shared__ uint4 smem4[];
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
    const float xsg = ((const float*)(xs4 + ng * 32))[Gl];
    group_dot(ring[slot * 64 + lane], ring[slot * 64 + 32 + lane], ringsz[slot * 64 + lane],
              ringsz[slot * 64 + 32 + lane], xq + 2 * Gl * 8, xsg, y0, y1);
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
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
  const float* xsum = (const float*)(xs4 + ng * 32) + ks;
#define XSG(i) xsum[(i) * NKS]
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
        const float xsg = ((const float*)(xs4 + NG * 32))[G];
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
}
