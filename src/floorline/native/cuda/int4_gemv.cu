#include "int4_ops.cuh"
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
