"""Programmatic dependent launch (PDL, Hopper and newer): a kernel's programs start, and load what never depends on
the previous kernel (their first weight tiles, norm weights, biases, RoPE tables), while that kernel finishes; they
wait (griddepcontrol.wait) before touching its outputs, then let the next kernel launch (griddepcontrol.
launch_dependents) -- one kernel ahead, its programs resident and their first loads in flight while this one runs.

Every native kernel takes PDL as a compile-time switch: 0 (plain stream order) or 1, and is launched with the
launch_pdl attribute when it is on. On the H200, qwen2.5-7b ctx 2048, letting the next kernel launch once this one has
waited (what PDL 1 does) against after its main loop: 1.739 against 1.840 ms int4, 3.769 against 3.838 ms bf16;
against at its start, which chains waiting programs over the SMs, slower again (docs/lab/2026-12-01-pdl-after-wait.md).

That was every kernel at once. One kernel may instead let the next launch before it waits (EARLY, the switch 2): a
kernel whose programs are all resident and waiting long before their predecessor ends (the attention's chunks and
merge, the fused MLP) otherwise holds back the next kernel's launch, and so its weight loads, until that end. It is
safe for the same reason PDL is: a program touches the previous kernel's outputs only after its wait, and that wait
returns once the previous grid has ended, whose own wait returned once its predecessor had ended, and so on; before
its wait a program reads only constants (weights, norm weights, tables, the position, the cache before it). Nor can
it starve a kernel: a kernel launches once every program of the one before it has started, so every program that the
chain waits on is already resident. Which kernels trigger early is the step tuner's choice (retune_early_in_step),
by role (ROLES).
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # floorline runs without Triton; only mode native and its kernel tests need it
    triton = tl = None

from floorline.core.errors import UserError

# NativeOptions.pdl: auto = on where the GPU has it, the step tuner choosing which kernels trigger early; after-wait =
# on, every kernel after its wait; off = plain stream order
CHOICES = ("auto", "after-wait", "off")
EARLY = 2  # the kernels' PDL switch for a kernel that lets the next one launch before its own wait
# the kernels of a layer by role, in step order: the q/k/v GEMV, the attention's chunks and merge, o (the GEMV, or
# o_merge with the merge inside), the fused MLP, or the two MLP GEMVs
ROLES = ("qkv", "chunks", "merge", "o", "mlp", "gate_up", "down")


def supported(device) -> bool:
    """Whether `device` runs programmatic dependent launch: a CUDA GPU of compute capability 9.0 or newer (never the
    interpreter, where the kernels run on the CPU)."""
    from floorline.native import INTERPRET

    device = torch.device(device)
    return (not INTERPRET and triton is not None and device.type == "cuda" and torch.cuda.is_available()
            and torch.cuda.get_device_capability(device)[0] >= 9)


def mode(choice: str, device) -> int:
    """The kernels' PDL switch for NativeOptions.pdl `choice` on `device`: 1 where it is `auto` or `after-wait` and
    supported, else 0 (early triggers are switched per kernel: switch)."""
    if choice not in CHOICES:
        raise UserError(f"pdl={choice!r}: use {' or '.join(CHOICES)}")
    return int(choice != "off" and supported(device))


def switch(pdl: int, role: str, early: frozenset) -> int:
    """The PDL switch of the kernel in `role` (ROLES): EARLY where PDL is on and `early` names the role, else pdl."""
    if role not in ROLES:
        raise ValueError(f"unknown kernel role {role!r}: one of {', '.join(ROLES)}")
    return EARLY if pdl and role in early else pdl


def early_candidates(roles: list[str], singles: dict | None = None) -> list[frozenset]:
    """The early-trigger sets the step tuner times: with `singles` None, none, then each role alone; given the
    singles' times ({frozenset: ms}, the empty set among them), the union of the roles that beat none alone, where
    two or more did (one more trial), else nothing more."""
    if singles is None:
        return [frozenset()] + [frozenset([r]) for r in roles]
    base = singles[frozenset()]
    win = frozenset(r for s, t in singles.items() if len(s) == 1 and t < base for r in s)
    return [win] if len(win) > 1 else []


def early_name(early: frozenset) -> str:
    """An early-trigger set in words, in step order ("none" for the empty set)."""
    return "+".join(r for r in ROLES if r in early) or "none"


def retune_early_in_step(net, capture, state: list, roles: list[str], reps: int = 30) -> None:
    """Which of the step's kernels (`roles`) let the next launch before their wait: none and each role alone timed
    in the whole step (timing.fastest_in_step), the fastest kept in net.early; where two roles or more were faster
    alone than none, a second round times none, the fastest and the union of those roles again, and its fastest is
    kept instead (recorded as "again ..."). Each set's kernels are compiled first by one plain step outside any
    capture (fastest_in_step puts the token and position back; the cache position it writes, a step rewrites
    before it reads)."""
    from floorline.device import timing
    from floorline.native.tuner import TUNER

    if not net.pdl or not roles:
        return

    def use(early):
        net.early = early

    first = timing.fastest_in_step(early_candidates(roles), use, capture, state, reps, warm=net.step)
    record = {early_name(s): round(t, 4) for s, t in first.items()}
    more = early_candidates(roles, first)
    if more:  # the choice is among the second round's own timings (fastest_in_step leaves its fastest in place)
        again = timing.fastest_in_step([frozenset(), min(first, key=first.get)] + more, use, capture, state, reps,
                                       warm=net.step)
        record |= {f"again {early_name(s)}": round(t, 4) for s, t in again.items()}
    TUNER.step_tuning["pdl_early"] = record


def launch_kwargs(pdl: int) -> dict:
    """The Triton launch's keyword for a PDL kernel."""
    return {"launch_pdl": True} if pdl else {}


if triton is not None:

    @triton.jit
    def wait(PDL: tl.constexpr):
        """Wait for the previous kernel, then let the next one launch (PDL 1); let it launch, then wait (PDL 2:
        EARLY); nothing without PDL."""
        if PDL == 2:
            tl.extra.cuda.gdc_launch_dependents()
            tl.extra.cuda.gdc_wait()
        elif PDL:
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()
