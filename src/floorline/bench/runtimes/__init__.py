"""Decode runtimes, one file per mode, behind one protocol (base.Runtime): prefill(prompt) then step() per token.

A runtime owns its cache and whatever it captures or compiles; it never times anything (timing.py does) and never
reads the clock. Every step() is a real next token: greedy argmax on the device, fed back as the next input.
"""

from floorline.bench.runtimes.base import Runtime
from floorline.bench.runtimes.compiled import Compiled
from floorline.bench.runtimes.eager import Eager
from floorline.bench.runtimes.graph import Graph
from floorline.bench.runtimes.native import Native
from floorline.bench.runtimes.static import Static
from floorline.core.errors import UserError
from floorline.core.modes import MODES

_BY_NAME = {r.name: r for r in (Eager, Static, Graph, Compiled, Native)}
RUNTIMES: dict[str, type[Runtime]] = {m: _BY_NAME[m] for m in MODES}  # modes.MODES is the one list (and order)
CPU_MODES = tuple(m for m, r in RUNTIMES.items() if not r.needs_cuda)


def modes_for(device_type: str, native: bool = True) -> tuple[str, ...]:
    """What `--mode all` means on this device: native where Triton is installed and `native` allows it (dense
    weights or floorline's int4)."""
    return tuple(m for m in (MODES if device_type == "cuda" else CPU_MODES)
                 if m != "native" or (native and RUNTIMES[m].available()))


# The study's pair, eager against graph-captured; on the CPU, graph's counterpart without graphs (the static cache):
# the default modes of `sweep` and `quant`.
STUDY_MODES = {"cuda": ("eager", "graph"), "cpu": ("eager", "static")}


def study_modes(device_type: str) -> list[str]:
    return list(STUDY_MODES["cuda" if device_type == "cuda" else "cpu"])


def get(mode: str, device_type: str) -> type[Runtime]:
    if mode not in RUNTIMES:
        raise UserError(f"unknown mode {mode!r}; use one of {', '.join(MODES)} or all")
    r = RUNTIMES[mode]
    if r.needs_cuda and device_type != "cuda":
        raise UserError(f"mode {mode!r} needs a CUDA GPU; on the CPU use {' or '.join(CPU_MODES)}")
    return r
