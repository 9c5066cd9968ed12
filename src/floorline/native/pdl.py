"""Programmatic dependent launch (PDL, Hopper and newer): a kernel's programs start, and load what never depends on
the previous kernel (their first weight tiles, norm weights, biases, RoPE tables), while that kernel finishes; they
wait (griddepcontrol.wait) before touching its outputs, then let the next kernel launch (griddepcontrol.
launch_dependents) -- one kernel ahead, its programs resident and their first loads in flight while this one runs.
A kernel may instead wait on counters its predecessor's programs raise (wait_count, raise_count: the q/k/v GEMV ->
the attention's chunks -> their merge, NativeModel.handoff), for the rows it needs rather than the whole grid's end.

Every native kernel takes PDL as a compile-time switch: 0 (plain stream order) or 1, and is launched with the
launch_pdl attribute when it is on. On the H200, qwen2.5-7b ctx 2048, letting the next kernel launch once this one has
waited (what PDL 1 does) against after its main loop: 1.739 against 1.840 ms int4, 3.769 against 3.838 ms bf16;
against at its start, which chains waiting programs over the SMs, slower again (docs/lab/2026-12-01-pdl-after-wait.md).
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # floorline runs without Triton; only mode native and its kernel tests need it
    triton = tl = None

from floorline.core.errors import UserError

CHOICES = ("auto", "off")  # NativeOptions.pdl: auto = on where the GPU has it


def supported(device) -> bool:
    """Whether `device` runs programmatic dependent launch: a CUDA GPU of compute capability 9.0 or newer (never the
    interpreter, where the kernels run on the CPU)."""
    from floorline.native import INTERPRET

    device = torch.device(device)
    return (not INTERPRET and triton is not None and device.type == "cuda" and torch.cuda.is_available()
            and torch.cuda.get_device_capability(device)[0] >= 9)


def mode(choice: str, device) -> int:
    """The kernels' PDL switch for NativeOptions.pdl `choice` on `device`: 1 where it is `auto` and supported, else 0."""
    if choice not in CHOICES:
        raise UserError(f"pdl={choice!r}: use {' or '.join(CHOICES)}")
    return int(choice == "auto" and supported(device))


def launch_kwargs(pdl: int) -> dict:
    """The Triton launch's keyword for a PDL kernel."""
    return {"launch_pdl": True} if pdl else {}


if triton is not None:

    @triton.jit
    def wait(PDL: tl.constexpr):
        """Wait for the previous kernel, then let the next one launch (PDL 1); nothing without PDL."""
        if PDL:
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()

    @triton.jit
    def acquire(C, GPU: tl.constexpr):
        """Counter C read with acquire semantics at GPU scope (the stores its raisers made before their release are
        seen after it); under the interpreter a plain load."""
        if GPU:
            c = tl.inline_asm_elementwise("ld.global.acquire.gpu.b32 $0, [$1];", "=r,l", [C], dtype=tl.int32,
                                          is_pure=False, pack=1)
        else:
            c = tl.load(C)
        return c

    @triton.jit
    def wait_count(C, target, ERR, PDL: tl.constexpr, GPU: tl.constexpr):
        """The handoff in place of wait(): until counter C reaches `target` (raised by the previous kernel's programs
        after their stores), then let the next kernel launch. No deadlock: under PDL this kernel launched only once
        every program of the previous one had started, and those wait on nothing more. A wait past a second (a bug:
        a wrong target) sets ERR[0] = 1 and goes on: the runtime raises one line, never a hang. Under the
        interpreter the previous kernel has ended: one read."""
        c = acquire(C, GPU)
        if GPU:
            t0 = tl.extra.cuda.globaltimer()
            t = t0
            while (c < target) & (t - t0 < 1_000_000_000):
                c = acquire(C, GPU)
                t = tl.extra.cuda.globaltimer()
        if c < target:
            tl.atomic_xchg(ERR, 1)
        if PDL:
            tl.extra.cuda.gdc_launch_dependents()

    @triton.jit
    def raise_count(C, n):
        """Counter C += n once this program's stores are done (bar.sync, then one release add at GPU scope)."""
        tl.debug_barrier()
        tl.atomic_add(C, n, sem="release", scope="gpu")

