"""A run's configuration: what one `floorline run` (or one cell of a study) measures, validated once.

RunConfig holds every setting that changes the timed path, mode native's included (NativeOptions); each is written
into the run's records. Also here: the defaults that depend on the device, the modes `all` means, and the cache and
memory a cell needs (the KV cache is sized to the run: the prompt, warm-up, timed steps and the energy window).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field, replace

import torch

from floorline import quant
from floorline.bench import models, runtimes
from floorline.core import floor
from floorline.core.arch import Arch, native_refusal, quant_refusal
from floorline.core.errors import UserError
from floorline.native.options import NativeOptions

ENERGY_WINDOW_S = 2.0  # NVML's energy counter updates about every 100 ms: measure over seconds, not a 30-step window
ENERGY_MAX_TOKENS = 512  # cache room reserved for the energy window
SLACK_TOKENS = 8  # cache room for a runtime's prepare steps (graph: 2, compile: 3)


@dataclass
class RunConfig:
    model: str
    ctxs: list[int]  # one cell per context x mode; the model is built once
    modes: list[str]
    dtype: str = "bf16"
    device: str = "auto"
    warmup: int = 5
    steps: int = 30
    seed: int = 0
    prefill_chunk: int = 1024
    quant: str = "none"  # a quant backend (quant.NAMES) or none
    attn: str = "sdpa"  # transformers attention implementation: sdpa or eager
    energy: bool = True  # the ~2 s NVML energy window after the timed steps (GPU only)
    threads: int = 0  # torch CPU threads in the measuring process; 0: torch's own choice
    kernels: bool = False  # also time the chain of decoder matrices alone (one record of kind "kernels")
    tp: int = 1  # tensor parallelism over this many GPUs: one process per rank (launcher.run_fresh), tp.py's floor
    allreduce: str = "auto"  # the all-reduce of a tp run: nccl or symm on GPUs, gloo on the CPU; auto: nccl / gloo
    native: NativeOptions = field(default_factory=NativeOptions)  # mode native's settings (--native)

    def __post_init__(self):  # from a worker's JSON spec: a dict; from a command line: "mlp=gemv,pdl=off"
        if isinstance(self.native, dict):
            self.native = NativeOptions(**self.native)
        elif isinstance(self.native, str) or self.native is None:
            self.native = NativeOptions.parse(self.native)


PREFILL_CHUNK = {"cuda": 1024, "cpu": 256}  # the CPU's smaller chunks: a prefill progress line that moves


def with_defaults(cfg: RunConfig, device_type: str) -> RunConfig:
    """Fill what depends on the device: dtype `auto` (models.default_dtype), prefill chunk None (PREFILL_CHUNK)."""
    return replace(cfg, dtype=models.default_dtype(device_type) if cfg.dtype == "auto" else cfg.dtype,
                   prefill_chunk=PREFILL_CHUNK[device_type] if cfg.prefill_chunk is None else cfg.prefill_chunk)


def expand_modes(modes: list[str], device: torch.device, quant_name: str | None = None,
                 native: bool | None = None, arch: Arch | None = None) -> list[str]:
    """`all` -> this device's modes: native with Triton, for dense weights or floorline's int4 (unless `native`), on a
    model native runs (`arch`: arch.native_refusal)."""
    native = quant.canonical(quant_name) in ("none", "int4") if native is None else native
    native = native and (arch is None or native_refusal(arch) is None)
    out: list[str] = []
    for m in modes:
        for name in runtimes.modes_for(device.type, native) if m == "all" else [m]:
            runtimes.get(name, device.type)  # unknown mode, or graph/compile on the CPU: a UserError
            if name not in out:
                out.append(name)
    return out


def energy_tokens(cfg: RunConfig, a: Arch, ctx: int, energy: bool) -> int:
    """Cache room for the energy window: ENERGY_MAX_TOKENS, less where the model's max position comes first."""
    return max(0, min(ENERGY_MAX_TOKENS, a.max_pos - ctx - cfg.warmup - cfg.steps - SLACK_TOKENS)) if energy else 0


def cache_len(cfg: RunConfig, a: Arch, ctx: int, energy: bool) -> int:
    return ctx + cfg.warmup + cfg.steps + SLACK_TOKENS + energy_tokens(cfg, a, ctx, energy)


def memory_need(cfg: RunConfig, a: Arch, ctx: int, energy: bool) -> tuple[int, int]:
    """(weight bytes, KV-cache bytes) a cell allocates: every parameter (and, for mode native's fused MLP on dense
    weights, its transposed copy of each down matrix), and the cache sized by cache_len."""
    dense = floor.weight_format(cfg.dtype).dense_bytes
    weights = floor.parameter_count(a) * dense
    if "native" in cfg.modes and quant.get(cfg.quant) is None and cfg.native.mlp == "fused" and cfg.tp == 1:
        weights += a.layers * a.intermediate * a.hidden * dense  # down^T: (intermediate, hidden) a layer
    return weights, cache_len(cfg, a, ctx, energy) * floor.kv_bytes_per_token(a, dense)


def weight_format(cfg: RunConfig) -> floor.WeightFormat:
    """How the decoder matrices of a run are stored: the quant backend's format, or dense in the run's dtype."""
    backend = quant.get(cfg.quant)
    dense = floor.weight_format(cfg.dtype)
    return backend.format(dense.dense_bytes) if backend else dense


def validate(cfg: RunConfig, a: Arch, device_type: str | None = None) -> None:
    if cfg.dtype not in models.TORCH_DTYPES:
        raise UserError(f"unknown dtype {cfg.dtype!r}; use one of {', '.join(models.TORCH_DTYPES)}")
    backend = quant.get(cfg.quant)
    if "native" in cfg.modes and importlib.util.find_spec("triton") is None:
        raise UserError("mode native needs Triton: pip install 'floorline[native]' (CUDA builds of torch bring it)")
    if "native" in cfg.modes and native_refusal(a):
        raise UserError(native_refusal(a))
    if "native" in cfg.modes and backend is not None and backend.name != "int4":
        raise UserError(f"mode native runs dense weights or floorline's own int4; use --quant int4 or none, "
                        f"not {backend.name}")
    if backend is not None:
        if quant_refusal(a, backend.name):
            raise UserError(quant_refusal(a, backend.name))
        why = backend.missing(device_type) if device_type else None
        if why:  # (first: a CUDA-only backend on the CPU is not fixed by its dtype)
            raise UserError(why)
        if cfg.dtype not in backend.dtypes:
            raise UserError(f"{backend.name} runs {'/'.join(backend.dtypes)} activations; use --dtype "
                            f"{backend.dtypes[0]}")
    if not cfg.ctxs or min(cfg.ctxs) <= 0:
        raise UserError(f"--ctx must be positive numbers of tokens, got {cfg.ctxs}")
    if cfg.steps < 2 or cfg.warmup < 0:
        raise UserError(f"need --steps >= 2 and --warmup >= 0, got {cfg.steps} and {cfg.warmup}")
    if cfg.attn not in models.ATTN_IMPLEMENTATIONS:
        raise UserError(f"unknown attention {cfg.attn!r}; use one of {', '.join(models.ATTN_IMPLEMENTATIONS)}")
    if cfg.tp != 1 or cfg.allreduce != "auto":
        from floorline.bench import tp_run

        tp_run.validate(cfg, a, device_type)
    if cfg.threads < 0:
        raise UserError(f"--threads must be >= 0 (0: torch's choice), got {cfg.threads}")
    if cfg.prefill_chunk <= 0:
        raise UserError(f"--prefill-chunk must be positive, got {cfg.prefill_chunk}")
    decode = cfg.warmup + cfg.steps + SLACK_TOKENS
    if max(cfg.ctxs) + decode > a.max_pos:
        raise UserError(f"--ctx {max(cfg.ctxs)} + {decode} decode tokens passes {a.name}'s max position "
                        f"{a.max_pos}; use --ctx {a.max_pos - decode} or less")
