"""A prototype of the warp-specialised persistent step (docs/persistent-step.md, "the next form"): the GEMVs of a
dense decoder's layers (q/k/v, o, gate_up, down, with RMSNorm, residuals and silu(gate) x up) as one persistent CUDA
kernel (cuda/ws_chain.cu, NVRTC), a loader warp streaming every block's weight pages into a shared-memory ring ahead of
the dependencies, consumer warps waiting only for their input vectors. It asks one question before the whole step is
built: does the weight stream stay at the copy bandwidth across the stages' dependencies? Attention is not in it: o
reads the first `hidden` outputs of q/k/v in its place.

    python -m floorline.native.ws_chain --layers 16            # llama-3.2-1b's GEMV shapes, checked, then timed

Every K must be a multiple of 2048 (llama-3.2-1b's 2048 and 8192; the prototype's limit)."""

from __future__ import annotations

import argparse
import ctypes
import functools
import hashlib
import json
import statistics
import struct
import sys
from dataclasses import dataclass, field

import torch

from floorline.native import nvrtc

SOURCE = "ws_chain.cu"
SEG = 2048  # bf16 elements a segment (cuda/ws_chain.cu)
PAGE = 4 * SEG * 2  # bytes a page: 16 KiB
KMAX = 8192


XWORDS = KMAX // 2 + KMAX // 512 * 8  # cuda/ws_chain.cu: the input's bf16 pairs with their padding (mma)


SENTINEL = 0x7FBADBAD  # cuda/ws_chain.cu: "not written yet", a NaN no arithmetic produces


def shared_bytes(nslot: int, mma: bool, tasks: int) -> int:
    """The ring (nslot pages), the staged input (KMAX floats; mma: its hi and lo bf16 pairs, padded), 32 floats, two
    mbarriers a slot, a flag, the loader's count a consumer warp (at most 8), the block's task list."""
    x = (2 * XWORDS + 4) * 4 if mma else KMAX * 4
    return nslot * PAGE + x + 32 * 4 + 2 * nslot * 8 + 4 + 4 * 8 + 4 * tasks


def rotate(w: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """The tensor-core pages' layout: each 16 KiB page as 16 rows of 64 chunks of 16 B, chunk c of row v stored at
    (c + v) % 64 (so ldmatrix's 8 rows fall in 8 bank groups); inverse undoes it."""
    shape = w.shape
    pg = w.reshape(-1, 16, 64, 8)
    out = torch.empty_like(pg)
    for v in range(16):
        out[:, v] = torch.roll(pg[:, v], shifts=-v if inverse else v, dims=1)
    return out.reshape(shape)


@functools.lru_cache(maxsize=None)
def _kernel(device_index: int, nslot: int, cw: int, mma: bool):
    major, minor = torch.cuda.get_device_capability(device_index)
    arch = f"sm_{major}{minor}"
    key = hashlib.sha256(repr((nvrtc.source_digest(SOURCE), nslot, cw, mma, arch, torch.version.cuda)).encode()
                         ).hexdigest()
    with torch.cuda.device(device_index):
        cubin = nvrtc.cached(nvrtc.cache_dir() / "ws_chain" / f"{key[:32]}.cubin",
                             lambda: nvrtc.compile_cubin(SOURCE, dict(NSLOT=nslot, CW=cw, MMA=int(mma)), arch))
        return torch.cuda._utils._cuda_load_module(cubin, ["ws_chain"])["ws_chain"]


@dataclass
class Chain:
    """The stages of `layers` dense layers and their buffers, on one device; h[0] the input, h[-1] the output."""
    layers: int
    hidden: int
    qkv: int
    inter: int
    weights: list = field(default_factory=list)  # per layer: (w_qkv, w_o, w_gu packed, w_down, ln1, ln2)
    h: list = field(default_factory=list)
    bufs: list = field(default_factory=list)  # per layer: (qkv out, h1, act)
    table: torch.Tensor | None = None
    tasks: torch.Tensor | None = None
    off: torch.Tensor | None = None
    cnt: torch.Tensor | None = None
    err: torch.Tensor | None = None
    stages: int = 0
    mma: bool = False  # the weights' pages rotated for the tensor-core consumers (rotate())
    outputs: torch.Tensor | None = None  # every stage's output, one buffer (filled with SENTINEL for a polled launch)
    tmax: int = 0  # the most tasks a block holds

    def weight_bytes(self) -> int:
        return sum(w.numel() * w.element_size() for lw in self.weights for w in lw[:4])


def glu_pack(wg: torch.Tensor, wu: torch.Tensor) -> torch.Tensor:
    """Rows g 2i, g 2i+1, u 2i, u 2i+1 for every i: a 16 KiB page (K = 2048) holds both halves of two outputs."""
    i, k = wg.shape
    return torch.cat([wg.view(i // 2, 2, k), wu.view(i // 2, 2, k)], dim=1).reshape(2 * i, k).contiguous()


def build(layers: int, hidden: int, qkv: int, inter: int, device, sms: int, seed: int = 0, mma: bool = False) -> Chain:
    """Random bf16 weights (scaled by 1/sqrt(K)), the stage table, every block's task list (pages dealt round-robin
    over the blocks in stage order, so each block's share of a stage differs by at most one)."""
    for k in (hidden, inter):
        if k % SEG or k > KMAX:
            raise ValueError(f"K={k}: the prototype takes K a multiple of {SEG} up to {KMAX}")
    g = torch.Generator(device=device).manual_seed(seed)
    c = Chain(layers, hidden, qkv, inter, mma=mma)

    def rnd(n, k):
        return (torch.randn(n, k, device=device, generator=g) / k ** 0.5).to(torch.bfloat16)

    def laid(w):
        return rotate(w) if mma else w

    per = qkv + hidden + inter + hidden  # a layer's outputs: q/k/v, h1, act, the next h
    c.outputs = torch.empty(layers * per, device=device)
    views = [c.outputs[l * per:(l + 1) * per].split([qkv, hidden, inter, hidden]) for l in range(layers)]
    c.h = [torch.randn(hidden, device=device, generator=g)] + [v[3] for v in views]
    for _ in range(layers):
        ln1 = 1 + 0.1 * torch.randn(hidden, device=device, generator=g)
        ln2 = 1 + 0.1 * torch.randn(hidden, device=device, generator=g)
        c.weights.append((laid(rnd(qkv, hidden)), laid(rnd(hidden, hidden)),
                          laid(glu_pack(rnd(inter, hidden), rnd(inter, hidden))), laid(rnd(hidden, inter)), ln1, ln2))
    c.bufs = [v[:3] for v in views]
    rows = []  # (w, x, y, res, nw, k, kind, dep, need), pages
    for l, (wq, wo, wgu, wd, ln1, ln2) in enumerate(c.weights):
        q, h1, act = c.bufs[l]
        s = 4 * l
        prev = (s - 1, wd_pages(c, l - 1)) if l else (-1, 0)
        rows.append(((wq, c.h[l], q, None, ln1, hidden, 0, *prev), pages(wq)))
        rows.append(((wo, q, h1, c.h[l], None, hidden, 0, s, pages(wq)), pages(wo)))
        rows.append(((wgu, h1, act, None, ln2, hidden, 1, s + 1, pages(wo)), pages(wgu)))
        rows.append(((wd, act, c.h[l + 1], h1, None, inter, 0, s + 2, pages(wgu)), pages(wd)))
    c.stages = len(rows)
    packed = b"".join(struct.pack("<QQQQQiiii", *[t.data_ptr() if t is not None else 0 for t in r[:5]], *r[5:])
                      for r, _ in rows)
    c.table = torch.frombuffer(bytearray(packed), dtype=torch.uint8).to(device)
    dealt = [[[] for _ in range(c.stages)] for _ in range(sms)]
    nxt = 0
    for s, (_, n) in enumerate(rows):
        for p in range(n):
            dealt[nxt % sms][s].append((s << 16) | p)
            nxt += 1
    flat, off = [], []
    for b in range(sms):
        for s in range(c.stages):
            off.append(len(flat))
            flat += dealt[b][s]
        off.append(len(flat))
    c.tmax = max(off[(b + 1) * (c.stages + 1) - 1] - off[b * (c.stages + 1)] for b in range(sms))
    c.tasks = torch.tensor(flat, dtype=torch.int64).to(torch.int32).to(device)
    c.off = torch.tensor(off, dtype=torch.int32, device=device)
    c.cnt = torch.zeros(c.stages, dtype=torch.int32, device=device)
    c.err = torch.zeros(1, dtype=torch.int32, device=device)
    return c


def pages(w: torch.Tensor) -> int:
    n = w.numel() * w.element_size()
    if n % PAGE:
        raise ValueError(f"a matrix of {n} bytes is not whole 16 KiB pages")
    return n // PAGE


def wd_pages(c: Chain, l: int) -> int:
    return pages(c.weights[l][3])


def launch(c: Chain, nslot: int, cw: int, eps: float = 1e-5, timeout_ns: int = 1_000_000_000, mode: int = 0,
           trace: torch.Tensor | None = None, ahead: int = 0, sent: bool = False, one_fence: bool = False) -> None:
    """Zero the counters (sent: fill the outputs with SENTINEL instead), then the kernel: one block an SM (the task
    lists were dealt for that many)."""
    dev = c.table.device.index
    kern = _kernel(dev, nslot, cw, c.mma)
    smem = shared_bytes(nslot, c.mma, c.tmax)
    if kern._max_shared_mem_bytes < smem:
        kern.set_shared_memory_config(smem)
    if sent:
        c.outputs.view(torch.int32).fill_(SENTINEL - (1 << 32) if SENTINEL >= 1 << 31 else SENTINEL)
    else:
        c.cnt.zero_()
    blocks = c.off.numel() // (c.stages + 1)
    vals = [ctypes.c_void_p(c.table.data_ptr()), ctypes.c_int(c.stages), ctypes.c_void_p(c.tasks.data_ptr()),
            ctypes.c_void_p(c.off.data_ptr()), ctypes.c_void_p(c.cnt.data_ptr()), ctypes.c_void_p(c.err.data_ptr()),
            ctypes.c_float(eps), ctypes.c_uint64(timeout_ns), ctypes.c_int(mode),
            ctypes.c_void_p(trace.data_ptr() if trace is not None else 0), ctypes.c_int(ahead), ctypes.c_int(int(sent)),
            ctypes.c_int(int(one_fence))]
    nvrtc.launch(kern.func, (blocks, 1, 1), (cw + 1) * 32, smem, torch.cuda.current_stream(dev).cuda_stream, vals)


def reference(c: Chain, eps: float = 1e-5) -> torch.Tensor:
    """The chain in fp32 torch over the same bf16 weights: the output h."""
    def norm(x, w):
        return x * torch.rsqrt(x.pow(2).mean() + eps) * w

    def w(t):
        return (rotate(t, inverse=True) if c.mma else t).float()

    h = c.h[0].clone()
    for wq, wo, wgu, wd, ln1, ln2 in c.weights:
        wq, wo, wgu, wd = w(wq), w(wo), w(wgu), w(wd)
        q = wq @ norm(h, ln1)
        h1 = h + wo @ q[:c.hidden]
        gu = (wgu @ norm(h1, ln2)).view(-1, 4)
        act = (torch.nn.functional.silu(gu[:, :2]) * gu[:, 2:]).reshape(-1)
        h = h1 + wd @ act
    return h


KINDS = ("q/k/v", "o", "gate_up", "down")


def traced(c: Chain, nslot: int, cw: int, mode: int, ahead: int, sent: bool, one_fence: bool) -> dict:
    """One launch with the kernel's clock stamps: per stage kind, the median over blocks and layers of the wait for
    the input, the staging, warp 0's pages, and how long before the staging ended the loader had armed the stage's
    first page (negative: after), in us (SM clocks over the launch's own duration in cycles and ms)."""
    blocks = c.off.numel() // (c.stages + 1)
    tr = torch.zeros(blocks, c.stages, 5, dtype=torch.int64, device=c.table.device)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    launch(c, nslot, cw, mode=mode, trace=tr, ahead=ahead, sent=sent, one_fence=one_fence)
    b.record()
    torch.cuda.synchronize()
    t = tr.cpu().double()
    seen = t[:, :, 0] > 0
    span = max((t[i, :, :4][seen[i]].max() - t[i, :, :4][seen[i]].min()).item() for i in range(blocks))
    us = a.elapsed_time(b) * 1e3 / span  # us a cycle
    out = {"us_per_cycle": us}
    for k, name in enumerate(KINDS):
        sl = slice(k, c.stages, 4)
        m = seen[:, sl]
        tt = t[:, sl]
        out[name] = {f: statistics.median(((tt[..., j] - tt[..., i])[m] * us).tolist())
                     for f, i, j in (("wait", 0, 1), ("stage", 1, 2), ("pages", 2, 3), ("loader_lead", 4, 2))}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m floorline.native.ws_chain", description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--qkv", type=int, default=3072)
    p.add_argument("--inter", type=int, default=8192)
    p.add_argument("--nslot", type=int, nargs="+", default=[12, 8, 4])
    p.add_argument("--cw", type=int, nargs="+", default=[4, 8])
    p.add_argument("--samples", type=int, default=50)
    p.add_argument("--mode", type=int, nargs="+", default=[0],
                   help="0 the chain; diagnostics (wrong numbers): 1 no dependency waits, 2 neither waits nor arithmetic")
    p.add_argument("--out", help="a jsonl file for the records (raw samples kept)")
    p.add_argument("--mma", type=int, nargs="+", default=[0, 1], help="0 fp32 FMA consumers, 1 tensor-core consumers")
    p.add_argument("--ahead", type=int, nargs="+", default=[0],
                   help="pages ahead of the ring the loader asks the L2 for (0: none)")
    p.add_argument("--sent", type=int, nargs="+", default=[0],
                   help="0 counters, 1 inputs polled for a sentinel (no release, no counter round trip)")
    p.add_argument("--one-fence", type=int, nargs="+", default=[0],
                   help="1: one release a block and stage (thread 0 after a barrier), 0: one a warp and stage")
    p.add_argument("--trace", action="store_true", help="one more launch a cell with the kernel's clock stamps")
    a = p.parse_args(argv)
    from floorline.bench.bandwidth import achievable_bandwidth
    from floorline.device import timing

    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    bw = achievable_bandwidth(dev)
    rows = []
    for mma in a.mma:
        c = build(a.layers, a.hidden, a.qkv, a.inter, dev, sms, mma=bool(mma))
        ref = reference(c)
        nbytes = c.weight_bytes()
        floor_ms = nbytes / (bw["gbps"] * 1e9) * 1e3
        print(f"{a.layers} layers, {nbytes / 1e6:.1f} MB of weights, {c.stages} stages, {c.tasks.numel()} pages, "
              f"{sms} blocks, {'tensor-core' if mma else 'FMA'} consumers; lease {bw['gbps']:.0f} GB/s "
              f"({bw['pattern']}): floor {floor_ms:.4f} ms")
        for mode, cw, nslot, ahead, sent, one in [(m, w, n, h, bool(t), bool(f)) for m in a.mode for w in a.cw
                                                  for n in a.nslot for h in a.ahead for t in a.sent
                                                  for f in a.one_fence if n % w == 0]:
            c.err.zero_()
            for h in c.h[1:]:
                h.fill_(float("nan"))
            launch(c, nslot, cw, mode=mode, ahead=ahead, sent=sent, one_fence=one)
            torch.cuda.synchronize()
            rel = ((c.h[-1] - ref).norm() / ref.norm()).item()
            err = int(c.err.item())
            ms = timing.time_captured(lambda: launch(c, nslot, cw, mode=mode, ahead=ahead, sent=sent, one_fence=one),
                                      3, a.samples, dev)
            med = statistics.median(ms)
            row = dict(layers=a.layers, hidden=a.hidden, qkv=a.qkv, inter=a.inter, mma=mma, nslot=nslot, cw=cw,
                       mode=mode, ahead=ahead, sent=sent, one_fence=one, rel_err=rel, err=err, ms_median=med, ms=ms, weight_bytes=nbytes,
                       lease_gbps=bw["gbps"], gbps=nbytes / (med * 1e-3) / 1e9, us_per_layer=med * 1e3 / a.layers,
                       fraction_of_lease=floor_ms / med, sources=nvrtc.source_digest(SOURCE)[:16])
            if a.trace:
                row["trace"] = traced(c, nslot, cw, mode, ahead, sent, one)
            rows.append(row)
            print(f"mma {mma} sent {int(sent)} one fence {int(one)} mode {mode} cw {cw} nslot {nslot:2d} ahead {ahead:2d}: {med:.4f} ms "
                  f"({row['us_per_layer']:.2f} us a layer), {row['gbps']:.0f} GB/s = "
                  f"{100 * row['fraction_of_lease']:.1f}% of the lease; rel err {rel:.2e}, err word {err}")
            for k in KINDS if a.trace else ():
                print("    " + k + ": " + ", ".join(f"{f} {v:.2f}" for f, v in row["trace"][k].items()) + " us")
            if a.out:
                with open(a.out, "a") as f:
                    f.write(json.dumps(row) + "\n")
    return 0 if all(r["rel_err"] < 1e-2 and r["err"] == 0 for r in rows if r["mode"] == 0) else 1


if __name__ == "__main__":
    sys.exit(main())
