"""The quantised-backend protocol and what every backend shares.

A backend says whether its library is here (`missing`), how its format is stored (`format`: the floor's byte
accounting), and turns one nn.Linear into its own module (`pack`), returning with it the weights that module should
compute with, dequantised independently of the library's kernel (the reference the check compares against).

Shared here: the decoder's linears, round-to-nearest quantisation (no calibration data), int4 packing into int32
words, the per-layer correctness check, and `convert`, which does all of it to a model layer by layer.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import math
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from floorline.core import floor
from floorline.core.errors import UserError
from floorline.native import int4_format

GROUP = int4_format.GROUP  # every int4 backend quantises with groups of 128 inputs (the study's setting)
CHECK_ROWS = (1, 64)  # decode (batch 1) and a prefill-sized input: some libraries take another path for many rows
CHECK_TOLERANCE = 1e-2  # relative error of y = x W^T against the fp32 reference; bf16 rounding gives ~2e-3


class QuantCheckError(Exception):
    """A converted layer that does not compute what its dequantised weights say: the backend is not timed."""


@dataclass
class Packed:
    module: torch.nn.Module  # takes (..., in) activations, returns (..., out), bias included
    reference: torch.Tensor  # (out, in) fp32: the weights the module should apply, dequantised by floorline
    tensors: list[torch.Tensor]  # what the module stores for the matrix (codes, scales, zeros, tables): the bytes


class Backend:
    name = ""
    library = ""  # the import name
    dist = ""  # the pip distribution, for its version
    extra = ""  # floorline's optional extra that installs it
    devices: tuple[str, ...] = ("cuda",)
    dtypes: tuple[str, ...] = ("bf16",)  # activation dtypes its kernels take
    quantiser = ""  # how weights become codes (no calibration data anywhere)
    kernel = ""  # which kernel runs the batch-1 product
    check_tolerance = CHECK_TOLERANCE  # the format's bound on the check's relative error

    def install_hint(self) -> str:
        return f"pip install 'floorline[{self.extra}]'"

    def missing(self, device_type: str) -> str | None:
        """Why this backend cannot run here (one line naming the fix), or None. Imports nothing heavy."""
        if device_type not in self.devices:
            return (f"{self.name} needs a CUDA GPU (its kernels are CUDA-only); on the CPU use --quant nf4, int4 "
                    f"or none")
        if importlib.util.find_spec(self.library) is None:
            return f"{self.name} needs {self.dist}: {self.install_hint()}"
        return None

    def version(self) -> str | None:
        try:
            return importlib.metadata.version(self.dist)
        except importlib.metadata.PackageNotFoundError:
            return None

    def format(self, dense_bytes: int = 2) -> floor.WeightFormat:
        raise NotImplementedError

    def supports(self, out_features: int, in_features: int) -> str | None:
        """Why this matrix shape cannot be stored in the format, or None."""
        return None

    def begin(self, shapes: list[tuple[int, int]], device: torch.device) -> None:
        """Before the first pack: the (out, in) shapes to come (for shared scratch buffers)."""

    def pack(self, linear: torch.nn.Linear) -> Packed:
        raise NotImplementedError


# ------------------------------------------------------------------------------------------------- the model side
LINEAR_NAMES = (("self_attn", ("q_proj", "k_proj", "v_proj", "o_proj")), ("mlp", ("gate_proj", "up_proj", "down_proj")))


def decoder_linears(model: torch.nn.Module) -> Iterator[tuple[str, torch.nn.Module, str, torch.nn.Module]]:
    """(name, parent, attribute, module) of each decoder matrix, layer by layer: q, k, v, o, gate, up, down.
    lm_head and the embedding are not among them: they stay dense."""
    for i, layer in enumerate(model.get_decoder().layers):  # (a multimodal model's: its language model's)
        for sub, names in LINEAR_NAMES:
            parent = getattr(layer, sub)
            for n in names:
                yield f"layers.{i}.{sub}.{n}", parent, n, getattr(parent, n)


def tensor_bytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


# --------------------------------------------------------------------------------------------- quantisation math
def rtn(w: torch.Tensor, group: int, symmetric: bool = False, min_zero: int = 0) -> tuple[torch.Tensor, ...]:
    """Round-to-nearest int4, per group of `group` inputs of each output row. No calibration data.

    Returns codes (out, in) uint8 in [0, 15], scales (out, in/group) fp32, zeros (out, in/group) int32, with
    w ~ (code - zero) * scale. Asymmetric: scale = (max - min) / 15, zero = round(-min / scale). Symmetric: scale =
    max|w| / 7, zero = 8. `min_zero`: GPTQ stores zero - 1, so it needs zero >= 1.
    """
    out_f, in_f = w.shape
    if in_f % group:
        raise UserError(f"in_features {in_f} is not a multiple of the group size {group}")
    wg = w.float().reshape(out_f, in_f // group, group)
    if symmetric:
        scale = (wg.abs().amax(-1) / 7).clamp(min=1e-8)
        zero = torch.full_like(scale, 8, dtype=torch.int32)
    else:
        lo, hi = wg.amin(-1).clamp(max=0), wg.amax(-1).clamp(min=0)  # the range always holds 0
        scale = ((hi - lo) / 15).clamp(min=1e-8)
        zero = torch.round(-lo / scale).clamp(min_zero, 15).to(torch.int32)
    codes = torch.round(wg / scale[..., None] + zero[..., None]).clamp(0, 15).to(torch.uint8)
    return codes.reshape(out_f, in_f), scale, zero


def dequant(codes: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor) -> torch.Tensor:
    """(code - zero) * scale in fp32, groups along the input dimension: the reference for (out, in) codes."""
    g = codes.shape[1] // scales.shape[1]
    return (codes.float() - zeros.float().repeat_interleave(g, 1)) * scales.float().repeat_interleave(g, 1)


def pack_int4_int32(codes: torch.Tensor, dim: int) -> torch.Tensor:
    """Eight 4-bit codes per int32 along `dim`, the first code in the lowest bits (GPTQ's qweight / qzeros)."""
    c = codes.to(torch.int64).movedim(dim, -1)
    c = c.reshape(*c.shape[:-1], c.shape[-1] // 8, 8)
    words = (c << (4 * torch.arange(8, device=c.device))).sum(-1)  # < 2**32: fits int64
    words = torch.where(words >= 2 ** 31, words - 2 ** 32, words)  # the same bits as a signed int32
    return words.to(torch.int32).movedim(-1, dim).contiguous()


# ------------------------------------------------------------------------------------------------------ the check
def check_linear(module: torch.nn.Module, reference: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype,
                 seed: int = 0) -> float:
    """Worst relative error ||y - y_ref|| / ||y_ref|| over CHECK_ROWS random inputs, y_ref = x W_ref^T + b in fp32."""
    dev = reference.device
    gen = torch.Generator(device=dev).manual_seed(seed)
    worst = 0.0
    for rows in CHECK_ROWS:
        x = torch.randn(1, rows, reference.shape[1], generator=gen, device=dev).to(dtype)
        want = x.float() @ reference.t()
        if bias is not None:
            want = want + bias.float()
        got = module(x).float()
        if got.shape != want.shape:
            raise QuantCheckError(f"output shape {tuple(got.shape)}, expected {tuple(want.shape)}")
        if not torch.isfinite(got).all():
            return math.inf
        worst = max(worst, ((got - want).norm() / want.norm().clamp(min=1e-30)).item())
    return worst


@dataclass
class Conversion:
    """What `convert` did: every figure comes from the converted tensors and the checks."""

    backend: str
    layers: int = 0
    seconds: float = 0.0
    stored_bytes: int = 0  # bytes of the decoder matrices as the backend stores them (codes, scales, zeros, tables)
    max_check_error: float = 0.0
    worst_layer: str = ""
    quant_error: float = 0.0  # ||W_ref - W|| / ||W|| over all matrices: what the format loses, not a bug


def convert(model: torch.nn.Module, backend: Backend, dtype: torch.dtype, check: bool = True,
            log: Callable[[str], None] = lambda s: None) -> Conversion:
    """Replace every decoder matrix by the backend's module, checking each against its reference as it goes.
    The bf16 weights of a matrix are released once it is replaced, so memory peaks at one matrix above the model."""
    items = list(decoder_linears(model))
    shapes = [(m.out_features, m.in_features) for _, _, _, m in items]
    for (name, _, _, m), (o, i) in zip(items, shapes):
        why = backend.supports(o, i)
        if why:
            raise UserError(f"{backend.name} cannot store {name} ({o} x {i}): {why}")
    backend.begin(shapes, next(model.parameters()).device)
    res = Conversion(backend.name)
    t0 = time.perf_counter()
    err_num = err_den = 0.0
    for idx, (name, parent, attr, lin) in enumerate(items):
        with torch.no_grad():
            w = lin.weight.float()  # before pack: a backend may quantise the module in place (torchao)
            p = backend.pack(lin)
            err_num += (p.reference - w).pow(2).sum().item()
            err_den += w.pow(2).sum().item()
            del w
            if check:
                e = check_linear(p.module, p.reference, lin.bias, dtype, seed=idx)
                if not e <= backend.check_tolerance:
                    raise QuantCheckError(f"{name}: relative error {e:.3g} against its dequantised weights "
                                          f"(bound {backend.check_tolerance})")
                if e > res.max_check_error:
                    res.max_check_error, res.worst_layer = e, name
        setattr(parent, attr, p.module)
        res.stored_bytes += tensor_bytes(p.tensors)
        res.layers += 1
        items[idx] = None  # the list held the dense module too: drop it so its weight is freed now
        del p, lin
        if (idx + 1) % 28 == 0:
            log(f"{backend.name}: {idx + 1}/{len(items)} matrices converted")
    if next(model.parameters()).device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    res.seconds = time.perf_counter() - t0
    res.quant_error = math.sqrt(err_num / err_den) if err_den else 0.0
    return res
