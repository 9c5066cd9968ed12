"""Programmatic dependent launch (PDL, Hopper and newer): a kernel's programs start, and load what never depends on
the previous kernel (their first weight tiles, norm weights, biases, RoPE tables), while that kernel finishes; they
wait (griddepcontrol.wait) before touching its outputs, then let the next kernel launch (griddepcontrol.
launch_dependents) -- one kernel ahead, its programs resident and their first loads in flight while this one runs.

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
