#include "int4_ops.cuh"
// A layer's whole int4 MLP in one kernel (int4_mlp.py says why and how): block b owns the 16-row blocks [rb0, rb1) of
// the intermediate dimension, computes h = silu(gate) * up for their rows (phase 1: gate_up's tiles of those rows on
// the tensor cores, as int4_gemv's GLU does), then adds down's columns of those rows times h into the next residual
// buffer (phase 2). In the `mma` layout down's columns come as 64-input blocks: a block's rows touch at most KBS of
// them, each copied into shared memory (cp.async) before the wait on the previous kernel; h is staged as one such
// block's B fragments, zero for rows outside [rb0, rb1), so a 64-input block shared with a neighbour adds only this
// block's rows (the zero point's term takes the sum of this block's h of the group, which adds up over the blocks).
//
// Compile-time: WARPS (a block: 2 LMAX NKS), LMAX (row blocks a block at most), NKS (phase 1's K slices a tile), U
// (groups in flight a warp), KBS (down's 64-input blocks a block's rows span at most), HID (hidden), XPT, PRO = 1,
// PDL. Residual: x = XI (read), XO (zeros) += x (block 0) + down(h), XZ = 0 (the next layer's buffer, as mlp.py).
#ifndef MLP_EXP
#define MLP_EXP 0
#endif
#define TT (2 * LMAX)  // phase 1's tiles a block: gate tiles of its row blocks, then their up tiles
#define NG (HID / 128)  // gate_up's groups a row
#define NTD (HID / 16)  // down's 16-row tiles
#define TPW ((NTD + WARPS - 1) / WARPS)  // down tiles a warp
#define DSLOT (NTD * 36)  // a 64-input block of down in shared memory: a tile's 32 code words, then 2 scale + 2 zero

extern "C" __global__ void __launch_bounds__(WARPS * 32)
int4_mlp(const uint4* __restrict__ WGU, const u32* __restrict__ SGU, const u32* __restrict__ ZGU,
         const uint4* __restrict__ WD, const u32* __restrict__ SD, const u32* __restrict__ ZD,
         const float* __restrict__ XI, const float* __restrict__ NW, float* XO, float* XZ, int I, int unit,
         float eps) {
  extern __shared__ uint4 smem4[];
  float* red = (float*)smem4;                   // phase 1: WARPS x 16 partial sums; then 32 for the norm
  uint4* xs4 = smem4 + WARPS * 4 + 8;           // n(x) as fp16 hi + lo, B-fragment order, and its group sums
  uint4* hs4 = xs4 + NG * 32 + (NG + 3) / 4;    // h: KBS x (8 uint4 hi, 8 lo), then KBS x 64 fp32 (hi + lo)
  float* hv = (float*)(hs4 + KBS * 16);
  uint4* dsm = hs4 + KBS * 32;                  // down: KBS slots of DSLOT
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
  const int NRB = I / 16, KBD = I / 64, NGD = I / 128;
  // the block's row blocks, shared out evenly in units of `unit` (4: whole 64-input blocks of down, none read twice)
  const int rb0 = unit * (int)((long long)blockIdx.x * (NRB / unit) / gridDim.x);
  const int rb1 = unit * (int)((long long)(blockIdx.x + 1) * (NRB / unit) / gridDim.x);
  const int kb0 = rb0 / 4, nkb = (rb1 - 1) / 4 - kb0 + 1;

  // phase 1: warp (tile tt, K slice ks); tiles tt < LMAX the gate rows of row block rb0 + tt, the rest the up rows
  const int tt = warp % TT, ks = warp / TT, li = tt % LMAX;
  const int tile = (rb0 + li) + (tt >= LMAX ? NRB : 0);
  const int mine = rb0 + li < rb1 && MLP_EXP != 3 ? (NG - ks + NKS - 1) / NKS : 0;  // this warp's groups: ks + i NKS
  const uint4* pw = WGU + (size_t)tile * (HID / 64) * 32 + lane + (size_t)(2 * ks) * 32;
  const u32* ps = SGU + (size_t)tile * NG * 8 + g + ks * 8;
  const u32* pz = ZGU + (size_t)tile * NG * 8 + g + ks * 8;
  uint4 wa[U][2];
  u32 sa[U], za[U];
#define MLP_LOAD(wv, sv, zv, i0)                                   \
  _Pragma("unroll") for (int u = 0; u < U; u++) {                  \
    const int i_ = (i0) + u;                                       \
    if (i_ < mine) {                                               \
      wv[u][0] = ld_stream(pw + (size_t)i_ * NKS * 64);            \
      wv[u][1] = ld_stream(pw + (size_t)i_ * NKS * 64 + 32);       \
      sv[u] = ps[i_ * NKS * 8];                                    \
      zv[u] = pz[i_ * NKS * 8];                                    \
    }                                                              \
  }
  if (MLP_EXP == 5 || MLP_EXP == 6) MLP_LOAD(wa, sa, za, 0);
  // down's blocks first (cp.async, L2 only): the bytes a block reads last are in flight from its start
  for (int i = threadIdx.x; i < nkb * DSLOT; i += WARPS * 32) {
    const int s = i / DSLOT, r = i - s * DSLOT, T = r / 36, c = r - T * 36, kb = kb0 + s;
    const void* src = c < 32 ? (const void*)(WD + ((size_t)T * KBD + kb) * 32 + c)
                             : (const void*)((c < 34 ? SD : ZD) + ((size_t)T * NGD + kb / 2) * 8 + (c & 1) * 4);
    cp_async16(dsm + i, src);
  }
  asm volatile("cp.async.commit_group;");
  for (int i = threadIdx.x; i < KBS * 32; i += WARPS * 32) hs4[i] = make_uint4(0, 0, 0, 0);

  if (MLP_EXP != 5 && MLP_EXP != 6) MLP_LOAD(wa, sa, za, 0);
  float4 nr[XPT];
  load_nw(NW, HID, nr);
  u32 dep = 0;
#pragma unroll
  for (int u = 0; u < U; u++)
    if (u < mine) dep ^= wa[u][0].x ^ wa[u][0].y ^ wa[u][0].z ^ wa[u][0].w ^ wa[u][1].x ^ wa[u][1].y ^ wa[u][1].z ^
                         wa[u][1].w ^ sa[u] ^ za[u];
  pdl_wait_after(dep, HID);
  stage_x(XI, nr, HID, eps, 0, NG, xs4, red + WARPS * 16, lane, warp);
  for (int i = blockIdx.x * WARPS * 32 + threadIdx.x; i < HID; i += gridDim.x * WARPS * 32) XZ[i] = 0.f;
  __syncthreads();
  const uint4* xq = xs4 + (g == 1 ? NG * 16 : 0) + tq * 2;
  const float* xsum = (const float*)(xs4 + NG * 32);
  float y0 = 0.f, y1 = 0.f;
  for (int i = 0; i < mine; i += U) {
    uint4 wb[U][2];
    u32 sb[U], zb[U];
    MLP_LOAD(wb, sb, zb, i + U);
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int G = ks + (i + u) * NKS;
      if (i + u < mine) group_dot(wa[u][0], wa[u][1], sa[u], za[u], xq + 2 * G * 8, xsum[G], y0, y1);
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      wa[u][0] = wb[u][0]; wa[u][1] = wb[u][1]; sa[u] = sb[u]; za[u] = zb[u];
    }
  }
  if (tq == 0) {
    red[warp * 16 + g] = y0;
    red[warp * 16 + g + 8] = y1;
  }
  __syncthreads();
  // h of the block's rows into its 64-input blocks' B fragments (fp16 hi + lo, put_x's order), and hi + lo as fp32
  // (each warp sums a block's in phase 2: a shared-memory atomic here was a compare-and-swap loop 64 threads deep)
  if (threadIdx.x < (rb1 - rb0) * 16) {
    const int l = threadIdx.x >> 4, r = threadIdx.x & 15;
    float gs = 0.f, us = 0.f;
    for (int s = 0; s < NKS; s++) {
      gs += red[(s * TT + l) * 16 + r];
      us += red[(s * TT + LMAX + l) * 16 + r];
    }
    const float h = gs / (1.f + expf(-gs)) * us;
    const int rb = rb0 + l, slot = rb / 4 - kb0, kk = (rb & 3) * 16 + r;
    const int j = kk >> 4, rr = kk & 15, up = rr >> 3, t0 = (rr & 7) >> 1;
    const int half = t0 * 16 + j * 4 + up * 2 + (rr & 1);
    const u32 hb = f2h2(h, 0.f) & 0xFFFFu;
    float hf, unused;
    h2f2(hb, hf, unused);
    const u32 lb = f2h2(h - hf, 0.f) & 0xFFFFu;
    float lf;
    h2f2(lb, lf, unused);
    unsigned short* hh = (unsigned short*)(hs4 + slot * 16);
    hh[half] = (unsigned short)hb;
    hh[64 + half] = (unsigned short)lb;
    hv[slot * 64 + kk] = hf + lf;
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
  if (MLP_EXP == 1) return;

  // phase 2: warp w adds down tiles w, w + WARPS, ... of each staged 64-input block times h
  float y[TPW][2];
#pragma unroll
  for (int i = 0; i < TPW; i++) y[i][0] = y[i][1] = 0.f;
  for (int s = 0; s < nkb; s++) {
    const uint4* hp = hs4 + s * 16 + (g == 1 ? 8 : 0) + tq * 2;
    const uint4 xa = hp[0], xb = hp[1];
    const u32 bx[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
    float hsg = hv[s * 64 + lane] + hv[s * 64 + 32 + lane];  // the zero point's term: this block's h of the group
    for (int o = 16; o; o >>= 1) hsg += __shfl_xor_sync(0xffffffffu, hsg, o);
    const uint4* slot = dsm + s * DSLOT;
#pragma unroll
    for (int i = 0; i < TPW; i++) {
      const int T = warp + i * WARPS;
      if (T < NTD) {
        const uint4 w = slot[T * 36 + lane];
        const u32 sw = ((const u32*)(slot + T * 36 + 32))[g], zw = ((const u32*)(slot + T * 36 + 34))[g];
        const u32 q[4] = {w.x, w.y, w.z, w.w};
        float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int j = 0; j < 4; j++) {
          const u32 qh = q[j] >> 8;
          mma(c, q[j] & 0x000F000Fu, q[j] & 0x00F000F0u, qh & 0x000F000Fu, qh & 0x00F000F0u, bx[2 * j], bx[2 * j + 1]);
        }
        y[i][0] += bf_lo(sw) * (16777216.f * (c[0] + c[1]) - bf_lo(zw) * hsg);  // as group_dot: codes x 2^-24
        y[i][1] += bf_hi(sw) * (1048576.f * (c[2] + c[3]) - bf_hi(zw) * hsg);   // rows g + 8: 16x higher
      }
    }
  }
#if MLP_EXP == 4 || MLP_EXP == 6
  __syncthreads();  // (down's slots are read: their space takes the block's sums)
  float* yo = (float*)dsm;
  if (tq == 0) {
#pragma unroll
    for (int i = 0; i < TPW; i++) {
      const int T = warp + i * WARPS;
      if (T < NTD) {
        const int r0 = T * 16 + g;
        yo[r0] = y[i][0] + (blockIdx.x == 0 ? XI[r0] : 0.f);
        yo[r0 + 8] = y[i][1] + (blockIdx.x == 0 ? XI[r0 + 8] : 0.f);
      }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < HID / 4; i += WARPS * 32) {
    const float4 v = ((const float4*)yo)[i];
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(XO + 4 * i), "f"(v.x), "f"(v.y), "f"(v.z),
                 "f"(v.w) : "memory");
  }
  return;
#endif
  if (tq == 0 && (MLP_EXP != 2 || blockIdx.x == 0)) {
#pragma unroll
    for (int i = 0; i < TPW; i++) {
      const int T = warp + i * WARPS;
      if (T < NTD) {
        const int r0 = T * 16 + g;
        atomicAdd(XO + r0, y[i][0] + (blockIdx.x == 0 ? XI[r0] : 0.f));  // block 0 carries the residual itself
        atomicAdd(XO + r0 + 8, y[i][1] + (blockIdx.x == 0 ? XI[r0 + 8] : 0.f));
      }
    }
  }
}
