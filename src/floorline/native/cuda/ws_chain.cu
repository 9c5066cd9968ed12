// A warp-specialised chain of dependent batch-1 GEMVs in one persistent kernel (the first prototype of
// docs/persistent-step.md's "next form"; native/ws_chain.py builds the chain and launches it).
//
// One block an SM. Warp CW (the loader) walks the block's task list and copies each task's weights -- one page of 16
// KiB, a contiguous slice of a stage's row-major W -- into the next free slot of a ring in shared memory
// (cp.async.bulk, an mbarrier a slot), ahead of every dependency: weights never depend on activations, so the DRAM
// stream does not stop where a stage waits for the one before. Warps 0..CW-1 (the consumers) take a stage's pages in
// turn; before a stage they wait (one thread, acquire loads) until the counter of the stage it reads has counted all of
// that stage's pages, stage its input vector in shared memory (RMSNorm'd where the stage has norm weights), then for
// each page: wait its slot's `full` barrier, take the page's four 2048-element segments' dot products, free the slot,
// and write the page's rows (+ the residual; or silu(gate) x up for a GLU page of rows g, g, u, u), then count the page
// on the stage's counter (release). A dependency wait past `timeout_ns` sets err and stops every later wait (the step
// finishes with wrong numbers, never hangs); the host reads err.
typedef unsigned int u32;
typedef unsigned long long u64;

#ifndef NSLOT
#define NSLOT 12  // ring slots: 12 x 16 KiB + the staged input (32 KiB) fit the H200's 227 KiB a block
#endif
#ifndef CW
#define CW 4  // consumer warps
#endif
#define SEG 2048                   // bf16 elements a segment: every K is a multiple
#define PAGE_BYTES (4 * SEG * 2)   // four segments: 16 KiB
#define KMAX 8192                  // the longest input staged
#define NT (CW * 32)               // consumer threads
#define XPT ((KMAX + NT * 4 - 1) / (NT * 4))  // float4 inputs a consumer thread stages, at most
#ifndef MMA
#define MMA 0  // 1: the pages' dot products on the tensor cores (the host stores each page's 16-B chunks rotated)
#endif
#define XWORDS (KMAX / 2 + KMAX / 512 * 8)  // MMA: the input as bf16 pairs, 8 words of padding every 256
#define XBYTES (MMA ? (2 * XWORDS + 4) * 4 : KMAX * 4)  // the staged input's bytes
#define DEPTH (NSLOT / CW)         // slots a consumer warp owns: warp w's pages go through slots w DEPTH .. + DEPTH - 1
static_assert(NSLOT % CW == 0, "each consumer warp owns NSLOT / CW slots");

struct Stage {            // 56 bytes, as ws_chain.py packs it
  const uint4* w;         // N x K bf16, row-major (GLU: blocks of rows g 2i, g 2i+1, u 2i, u 2i+1)
  const float* x;         // the input, K floats
  float* y;               // the output: N floats (GLU: N / 2)
  const float* res;       // added to y, or null
  const float* nw;        // RMSNorm weights over x, or null (x as it is)
  int k, kind;            // kind 0: y = W x (+ res); 1: GLU
  int dep, need;          // wait until counter dep has need pages (dep < 0: nothing to wait for)
};

__device__ __forceinline__ u32 smem_u32(const void* p) { return (u32)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(u64* bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_wait(u64* bar, u32 parity) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tWAIT_%=:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
      "@!p bra WAIT_%=;\n\t}" ::"r"(smem_u32(bar)), "r"(parity) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u64* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(u64* bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bulk_load(void* dst, const void* src, u32 bytes, u64* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
      ::"r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void prefetch_l2(const void* src, u32 bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ u32 ld_acquire(const u32* p) {
  u32 v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ float4 ld_relaxed4(const float* p) {  // a load the compiler may not hoist out of a poll
  float4 v;
  asm volatile("ld.relaxed.gpu.global.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(p) : "memory");
  return v;
}
#define SENTINEL 0x7fbadbadu  // a NaN no arithmetic produces: "not written yet" in every output (the host fills them)
__device__ __forceinline__ bool written(float4 v) {
  return __float_as_uint(v.x) != SENTINEL && __float_as_uint(v.y) != SENTINEL && __float_as_uint(v.z) != SENTINEL &&
         __float_as_uint(v.w) != SENTINEL;
}
__device__ __forceinline__ void red_release_add(u32* p, u32 v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ u64 now_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void consumers_sync() {  // named barrier 1: the consumer warps only
  asm volatile("bar.sync 1, %0;" ::"n"(NT) : "memory");
}
__device__ __forceinline__ u32 bf16x2(float lo, float hi) {  // round to nearest: lo in the low half
  u32 d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
__device__ __forceinline__ void ldmatrix4(u32 addr, u32& a0, u32& a1, u32& a2, u32& a3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3) : "r"(addr));
}
__device__ __forceinline__ void mma_bf16(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ int pw(int j) { return j + (j >> 8) * 8; }  // a pair's padded word

__device__ __forceinline__ float dot8(uint4 w, float4 a, float4 b, float acc) {
  acc = fmaf(__uint_as_float(w.x << 16), a.x, acc);
  acc = fmaf(__uint_as_float(w.x & 0xffff0000u), a.y, acc);
  acc = fmaf(__uint_as_float(w.y << 16), a.z, acc);
  acc = fmaf(__uint_as_float(w.y & 0xffff0000u), a.w, acc);
  acc = fmaf(__uint_as_float(w.z << 16), b.x, acc);
  acc = fmaf(__uint_as_float(w.z & 0xffff0000u), b.y, acc);
  acc = fmaf(__uint_as_float(w.w << 16), b.z, acc);
  acc = fmaf(__uint_as_float(w.w & 0xffff0000u), b.w, acc);
  return acc;
}

// One warp's pages i = lo + warp, lo + warp + CW, ... < hi of a stage (indices into the block's task list). XR: the
// stage's K is one segment (2048), so every segment of every page dots the same inputs: a lane holds its 64 in
// registers for the stage instead of reading them from shared memory for each segment.
// k: the pages this warp has taken so far (its k-th page uses slot warp DEPTH + k % DEPTH for the (k / DEPTH)-th time:
// each slot has one consumer, so a parity wait is always on the slot's current phase).
template <bool XR>
__device__ __forceinline__ void stage_pages(const Stage d, const u32* tasks, int lo, int hi, int mode, float scale,
                                            unsigned char* smem, const float4* xa, const float4* xb, u64* full,
                                            u64* empty, int& k) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int rows = 4 * SEG / d.k;  // rows a page: 4 (K 2048), 2 (4096), 1 (8192)
  float4 ra[XR ? 8 : 1], rb[XR ? 8 : 1];
  if (XR) {
#pragma unroll
    for (int u = 0; u < 8; ++u) ra[u] = xa[u * 32 + lane], rb[u] = xb[u * 32 + lane];
  }
  u32 tnext = lo + warp < hi ? tasks[lo + warp] : 0u;  // the next page's task, read one page ahead
  for (int i = lo + warp; i < hi; i += CW) {
    const u32 p = tnext & 0xffffu;
    if (i + CW < hi) tnext = tasks[i + CW];
    const int slot = warp * DEPTH + k % DEPTH;
    mbar_wait(&full[slot], (k / DEPTH) & 1);
    ++k;
    if (mode == 2) {  // the stream alone: take the page, free the slot
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[slot]);
      continue;
    }
    const uint4* pg = (const uint4*)(smem + slot * PAGE_BYTES);
    // lane r < rows asks for its row's residual first: the L2 round trip runs under the dot products
    const int row = (int)p * rows + lane;
    const float rv = (d.res && lane < rows) ? __ldcg(d.res + row) : 0.f;
    float acc[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int g0 = XR ? 0 : (int)(((p * 4 + j) * SEG) % (u32)d.k) / 8;  // the segment's first group of 8 inputs
      float a[2] = {0.f, 0.f};  // two chains a segment: eight in all
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int g = g0 + u * 32 + lane;
        a[u & 1] = dot8(pg[j * (SEG / 8) + u * 32 + lane], XR ? ra[u] : xa[g], XR ? rb[u] : xb[g], a[u & 1]);
      }
      acc[j] = a[0] + a[1];
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[slot]);  // the page is read: the loader may refill the slot
#pragma unroll
    for (int j = 0; j < 4; ++j)
      for (int o = 16; o; o >>= 1) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], o);
    // every lane holds the four sums; lane r writes output r of the page (scale: the input's RMSNorm, or 1)
    if (d.kind == 1) {  // rows g 2p, g 2p+1, u 2p, u 2p+1 -> outputs 2p, 2p+1
      if (lane < 2) {
        const float g = (lane ? acc[1] : acc[0]) * scale, u = (lane ? acc[3] : acc[2]) * scale;
        d.y[2 * p + lane] = g / (1.f + __expf(-g)) * u;
      }
    } else if (lane < rows) {
      float v;
      if (rows == 4) v = lane == 0 ? acc[0] : lane == 1 ? acc[1] : lane == 2 ? acc[2] : acc[3];
      else if (rows == 2) v = lane == 0 ? acc[0] + acc[1] : acc[2] + acc[3];
      else v = (acc[0] + acc[1]) + (acc[2] + acc[3]);
      d.y[row] = v * scale + rv;
    }
  }
}

// The tensor-core form of a warp's pages (MMA 1). A page is 16 "virtual rows" of 512 weights (1 KiB each; a row of
// W is K / 512 of them), the A operand of mma.m16n8k16: a k-step of 16 reads 16 B of each virtual row by one
// ldmatrix.x4. The host stores virtual row v's 16-B chunk c at (c + v) % 64, so the eight rows of each 8x8 matrix fall
// in eight different bank groups. The B operand's 8 columns are input slices: virtual row v dots the 512 inputs from
// o(v) x 512, o(v) = v % (4 NTL) (the page starts a row, K divides 8192); an n-tile T holds o = 4T..4T+3 as hi (columns
// 0-3) and lo (4-7) bf16 halves of the fp32 input (about 16 bits of it). D[v][o(v) - 4T] + D[v][o(v) - 4T + 4] is
// virtual row v's dot; the rest of D is not used. NTL = K / 2048 n-tiles; XR: NTL 1, every page of the stage has the
// same B fragments, held in 64 registers.
template <int NTL, bool XR>
__device__ __forceinline__ void stage_pages_mma(const Stage d, const u32* tasks, int lo, int hi, int mode,
                                                float scale, unsigned char* smem, const u32* xh, const u32* xl,
                                                u64* full, u64* empty, int& k) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
  const u32* xs = gid < 4 ? xh : xl;  // this lane's B column: o = 4T + gid % 4, hi or lo
  u32 br[XR ? 32 : 1][2];
  if (XR) {
#pragma unroll
    for (int t = 0; t < 32; ++t) {
      const int j = (gid & 3) * 256 + t * 8 + tig;
      br[t][0] = xs[pw(j)], br[t][1] = xs[pw(j + 4)];
    }
  }
  const int mi = lane >> 3, v_ld = (lane & 7) + ((mi & 1) << 3), q_ld = mi >> 1;  // this lane's ldmatrix row
  u32 tnext = lo + warp < hi ? tasks[lo + warp] : 0u;
  for (int i = lo + warp; i < hi; i += CW) {
    const u32 p = tnext & 0xffffu;
    if (i + CW < hi) tnext = tasks[i + CW];
    const int slot = warp * DEPTH + k % DEPTH;
    mbar_wait(&full[slot], (k / DEPTH) & 1);
    ++k;
    if (mode == 2) {
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[slot]);
      continue;
    }
    // the rows this lane writes (lanes 0 and 16 with NTL 1, lane 0 otherwise), their residuals asked for first
    const int rows = 4 / NTL;
    const bool writer = NTL == 1 ? (lane & 15) == 0 : lane == 0;
    const int r0 = (int)p * rows + (lane >> 4), r1 = r0 + 2;  // NTL 1: rows gid/4 and 2 + gid/4 of the page
    float rv0 = 0.f, rv1 = 0.f;
    if (d.res && writer) {
      rv0 = __ldcg(d.res + (NTL == 1 ? r0 : (int)p * rows));
      if (NTL <= 2) rv1 = __ldcg(d.res + (NTL == 1 ? r1 : (int)p * rows + 1));
    }
    const u32 row_addr = smem_u32(smem + slot * PAGE_BYTES) + v_ld * 1024;
    // CH independent accumulator chains (k-step t feeds chain t % CH): one chain would serialise 32 mma latencies
    constexpr int CH = NTL == 1 ? 4 : 2;
    float acc[NTL][4], part[CH][NTL][4];
#pragma unroll
    for (int c = 0; c < CH; ++c)
#pragma unroll
      for (int T = 0; T < NTL; ++T) part[c][T][0] = part[c][T][1] = part[c][T][2] = part[c][T][3] = 0.f;
#pragma unroll
    for (int t = 0; t < 32; ++t) {  // (whole: br's index must be a constant)
      u32 a0, a1, a2, a3;
      ldmatrix4(row_addr + (((2 * t + q_ld + v_ld) & 63) << 4), a0, a1, a2, a3);
#pragma unroll
      for (int T = 0; T < NTL; ++T) {
        u32 b0, b1;
        if (XR) {
          b0 = br[t][0], b1 = br[t][1];
        } else {
          const int j = (4 * T + (gid & 3)) * 256 + t * 8 + tig;
          b0 = xs[pw(j)], b1 = xs[pw(j + 4)];
        }
        mma_bf16(part[t % CH][T], a0, a1, a2, a3, b0, b1);
      }
    }
#pragma unroll
    for (int T = 0; T < NTL; ++T)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float sum = 0.f;
#pragma unroll
        for (int c = 0; c < CH; ++c) sum += part[c][T][e];
        acc[T][e] = sum;
      }
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[slot]);  // the page is read
    // virtual rows gid (h 0) and gid + 8 (h 1): the entries of D this lane holds that are theirs
    float vh[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int v = gid + 8 * h, o = v % (4 * NTL), ch = o & 3;
      float sum = 0.f;
#pragma unroll
      for (int T = 0; T < NTL; ++T) {  // weights, not a branch: a branch on o / 4 == T becomes acc[o / 4] (local)
        const float on = (float)(o / 4 == T);
        sum += on * ((2 * tig == ch || 2 * tig == ch + 4) ? acc[T][2 * h] : 0.f);
        sum += on * ((2 * tig + 1 == ch || 2 * tig + 1 == ch + 4) ? acc[T][2 * h + 1] : 0.f);
      }
      vh[h] = sum;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // over the quad, then over the virtual rows of a row (K / 512 of them)
      vh[h] += __shfl_xor_sync(0xffffffffu, vh[h], 1);
      vh[h] += __shfl_xor_sync(0xffffffffu, vh[h], 2);
      vh[h] += __shfl_xor_sync(0xffffffffu, vh[h], 4);
      vh[h] += __shfl_xor_sync(0xffffffffu, vh[h], 8);
      if (NTL >= 2) vh[h] += __shfl_xor_sync(0xffffffffu, vh[h], 16);
    }
    if (writer) {
      if (NTL == 1) {  // lane 0: rows 0 and 2 of the page; lane 16: rows 1 and 3
        if (d.kind == 1) {  // rows 0, 1 the gates of outputs 2p, 2p+1; rows 2, 3 their ups
          const float g = vh[0] * scale;
          d.y[2 * p + (lane >> 4)] = g / (1.f + __expf(-g)) * (vh[1] * scale);
        } else {
          d.y[r0] = vh[0] * scale + rv0;
          d.y[r1] = vh[1] * scale + rv1;
        }
      } else if (NTL == 2) {
        d.y[(int)p * 2] = vh[0] * scale + rv0;
        d.y[(int)p * 2 + 1] = vh[1] * scale + rv1;
      } else {
        d.y[p] = (vh[0] + vh[1]) * scale + rv0;
      }
    }
  }
}

__device__ __forceinline__ void stamp(u64* trace, int stage, int k) {  // trace: the block's stamps, or null
  if (trace) trace[stage * 5 + k] = clock64();
}

extern "C" __global__ void __launch_bounds__((CW + 1) * 32, 1)
ws_chain(const Stage* __restrict__ st, int nstage, const u32* __restrict__ tasks, const int* __restrict__ off,
         u32* cnt, u32* err, float eps, u64 timeout_ns, int mode, u64* trace, int ahead, int sent,
         int one_fence) {
  // mode (diagnostics, wrong numbers): 1 no dependency waits; 2 no waits and no arithmetic (the stream alone).
  // trace (or null): SM clocks a (block, stage): 0 the consumers reach it, 1 its input is ready, 2 staged, 3 warp 0
  // has done its pages; 4 the loader arms its first page.
  // ahead: the loader asks the L2 for page i + ahead when it arms page i (0: no prefetch), so DRAM keeps streaming
  // while the ring is full and the consumers wait on a dependency.
  // sent: the inputs are polled for the host's SENTINEL instead of a counter (no release, no counter round trip: the
  // poll is the load). The block's task list is copied to shared memory first.
  extern __shared__ __align__(1024) unsigned char smem[];
  float4* xa = (float4*)(smem + NSLOT * PAGE_BYTES);  // the staged input's first halves (KMAX / 8)
  float4* xb = xa + KMAX / 8;                            // and second halves
  u32* xh = (u32*)xa;                                    // MMA: the input's bf16 hi pairs (padded, pw)
  u32* xl = xh + XWORDS + 4;                             // and lo pairs (4 words on: other banks than hi's)
  float* red = (float*)(smem + NSLOT * PAGE_BYTES + XBYTES);  // 32 floats: the norm's partial sums
  u64* full = (u64*)(red + 32);
  u64* empty = full + NSLOT;
  int* abort_flag = (int*)(empty + NSLOT);
  int* taken = abort_flag + 1;  // the loader's count of pages armed for each consumer warp
  u32* stk = (u32*)(taken + 8);  // the block's task list

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int* my = off + blockIdx.x * (nstage + 1);
  const int base = my[0], ntask = my[nstage] - base;
  u64* tr = trace ? trace + (size_t)blockIdx.x * nstage * 5 : nullptr;
  for (int i = tid; i < ntask; i += blockDim.x) stk[i] = tasks[base + i];
  if (tid == 0) {
    for (int i = 0; i < NSLOT; ++i) {
      mbar_init(&full[i], 1);
      mbar_init(&empty[i], 1);
    }
    *abort_flag = 0;
    for (int w = 0; w < CW; ++w) taken[w] = 0;
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();

  if (warp == CW) {  // the loader
    if (lane == 0) {
      int last = -1, lo = 0;
      for (int j = NSLOT; j < ahead && j < ntask; ++j) {
        const u32 t = stk[j];
        prefetch_l2((const unsigned char*)st[t >> 16].w + (size_t)(t & 0xffffu) * PAGE_BYTES, PAGE_BYTES);
      }
      for (int i = 0; i < ntask; ++i) {
        if (ahead > 0 && i + ahead < ntask && i + ahead >= NSLOT) {
          const u32 t = stk[i + ahead];
          prefetch_l2((const unsigned char*)st[t >> 16].w + (size_t)(t & 0xffffu) * PAGE_BYTES, PAGE_BYTES);
        }
        const u32 t = stk[i];
        if ((int)(t >> 16) != last) {  // a stage's first page: its pages go to warps 0, 1, ... in turn
          last = t >> 16, lo = i;
          stamp(tr, last, 4);
        }
        const int w = (i - lo) % CW, k = taken[w]++;
        const int slot = w * DEPTH + k % DEPTH;
        if (k >= DEPTH) mbar_wait(&empty[slot], ((k / DEPTH) - 1) & 1);
        mbar_expect_tx(&full[slot], PAGE_BYTES);
        bulk_load(smem + slot * PAGE_BYTES, (const unsigned char*)st[t >> 16].w + (size_t)(t & 0xffffu) * PAGE_BYTES,
                  PAGE_BYTES, &full[slot]);
      }
    }
    return;
  }

  int k = 0;  // this warp's pages so far
  for (int s = 0; s < nstage; ++s) {
    const int lo = my[s] - base, hi = my[s + 1] - base;
    if (lo == hi) continue;
    const Stage d = st[s];
    if (tid == 0) stamp(tr, s, 0);
    float4 v[XPT], g[XPT];  // the norm's weights read before the wait (they depend on nothing)
#pragma unroll
    for (int u = 0; u < XPT; ++u) {
      const int e = (u * NT + tid) * 4;
      g[u] = (d.nw && e < d.k) ? __ldg((const float4*)(d.nw + e)) : make_float4(1.f, 1.f, 1.f, 1.f);
    }
    const bool poll = sent && d.dep >= 0 && mode == 0;  // the loads below are the wait
    if (tid == 0 && d.dep >= 0 && !*abort_flag && mode == 0 && !sent) {
      const u64 t0 = now_ns();
      while (ld_acquire(cnt + d.dep) < (u32)d.need) {
        if (now_ns() - t0 > timeout_ns) {
          atomicCAS(err, 0u, 1u + (u32)s);  // the first stage that waited too long
          *abort_flag = 1;
          break;
        }
      }
    }
    consumers_sync();
    if (tid == 0) stamp(tr, s, 1);
    // the input, staged (through L2: other blocks wrote it in this launch), in halves: elements 8g..8g+3 at xa[g],
    // 8g+4..8g+7 at xb[g], so a lane's two reads of its 8 inputs are each contiguous across the warp. With RMSNorm,
    // x * w is staged and 1 / rms(x) multiplies each output (one pass, one barrier).
    if (poll) {
      const u64 t0 = now_ns();
      for (bool ok = false; !ok;) {
        ok = true;
#pragma unroll
        for (int u = 0; u < XPT; ++u) {
          const int e = (u * NT + tid) * 4;
          if (e < d.k) v[u] = ld_relaxed4(d.x + e), ok = ok && written(v[u]);
        }
        if (!ok && (*abort_flag || now_ns() - t0 > timeout_ns)) {
          atomicCAS(err, 0u, 1u + (u32)s);
          *abort_flag = 1;
          break;
        }
      }
    } else {
#pragma unroll
      for (int u = 0; u < XPT; ++u) {  // every load issued before the first store: one L2 round trip, not XPT
        const int e = (u * NT + tid) * 4;
        if (e < d.k) v[u] = __ldcg((const float4*)(d.x + e));
      }
    }
    float ss = 0.f;
#pragma unroll
    for (int u = 0; u < XPT; ++u) {
      const int e = (u * NT + tid) * 4;
      if (e < d.k) {
        const float4 x = v[u];
        ss += x.x * x.x + x.y * x.y + x.z * x.z + x.w * x.w;
        const float4 y = make_float4(x.x * g[u].x, x.y * g[u].y, x.z * g[u].z, x.w * g[u].w);
        if (MMA) {  // elements e..e+3: pairs e/2, e/2+1, as hi and lo = bf16(x - hi)
          const u32 h01 = bf16x2(y.x, y.y), h23 = bf16x2(y.z, y.w);
          const u32 l01 = bf16x2(y.x - __uint_as_float(h01 << 16), y.y - __uint_as_float(h01 & 0xffff0000u));
          const u32 l23 = bf16x2(y.z - __uint_as_float(h23 << 16), y.w - __uint_as_float(h23 & 0xffff0000u));
          *(uint2*)(xh + pw(e >> 1)) = make_uint2(h01, h23);
          *(uint2*)(xl + pw(e >> 1)) = make_uint2(l01, l23);
        } else {
          ((e & 4) ? xb : xa)[e >> 3] = y;
        }
      }
    }
    for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (lane == 0) red[warp] = ss;
    consumers_sync();
    float scale = 1.f;
    if (d.nw) {
      float tot = 0.f;
      for (int w = 0; w < CW; ++w) tot += red[w];
      scale = rsqrtf(tot / d.k + eps);
    }
    if (tid == 0) stamp(tr, s, 2);
    if (MMA) {
      if (d.k == 2048) stage_pages_mma<1, true>(d, stk, lo, hi, mode, scale, smem, xh, xl, full, empty, k);
      else if (d.k == 4096) stage_pages_mma<2, false>(d, stk, lo, hi, mode, scale, smem, xh, xl, full, empty, k);
      else stage_pages_mma<4, false>(d, stk, lo, hi, mode, scale, smem, xh, xl, full, empty, k);
    } else if (d.k == SEG) {
      stage_pages<true>(d, stk, lo, hi, mode, scale, smem, xa, xb, full, empty, k);
    } else {
      stage_pages<false>(d, stk, lo, hi, mode, scale, smem, xa, xb, full, empty, k);
    }
    if (tid == 0) stamp(tr, s, 3);
    // the stage's pages of this block are written: count them. one_fence: once a block, by thread 0 after the
    // consumers' barrier (the release orders the other warps' stores through it); else once a warp (lane 0 after
    // __syncwarp). A release waits for its thread's stores to reach L2.
    if (sent) continue;
    if (one_fence) {
      consumers_sync();
      if (tid == 0) red_release_add(cnt + s, (u32)(hi - lo));
    } else {
      __syncwarp();
      if (lane == 0 && lo + warp < hi) red_release_add(cnt + s, (u32)((hi - lo - warp + CW - 1) / CW));
    }
  }
}
