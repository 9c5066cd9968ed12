"""Quantised decode backends, one module each, behind one protocol (base.Backend): missing? / format / pack.

`none` (alias `bf16`) is the unquantised reference: no conversion, the run's dtype throughout. Every other backend
converts the decoder's matrices after the model is built (random or local weights, no calibration data) and checks
each against its dequantised weights before anything is timed; lm_head, embeddings and norms stay dense.
"""

from __future__ import annotations

from floorline.core import records
from floorline.core.errors import UserError
from floorline.quant.awq_marlin import AwqMarlin
from floorline.quant.base import Backend, Conversion, QuantCheckError, convert, decoder_linears
from floorline.quant.gemlite import Int4Gemlite
from floorline.quant.gptq_exllamav2 import GptqExllamaV2
from floorline.quant.int4 import Int4Native
from floorline.quant.nf4 import NF4
from floorline.quant.tinygemm import Int4Tinygemm

REFERENCE = records.QUANT_REFERENCE
ALIASES = {"bf16": REFERENCE, "none": REFERENCE}
BACKENDS: dict[str, type[Backend]] = {b.name: b for b in (NF4, GptqExllamaV2, AwqMarlin, Int4Tinygemm, Int4Gemlite,
                                                           Int4Native)}
NAMES = ("bf16", *BACKENDS)  # the order of every table

__all__ = ["Backend", "Conversion", "QuantCheckError", "convert", "decoder_linears", "canonical", "get", "NAMES",
           "BACKENDS", "REFERENCE", "label"]


def canonical(name: str) -> str:
    """The name records carry: `none` for the reference, else the backend's name; a UserError for anything else."""
    name = (name or REFERENCE).strip()
    if name in ALIASES:
        return REFERENCE
    if name not in BACKENDS:
        raise UserError(f"unknown quant backend {name!r}; use one of {', '.join(NAMES)} (or none)")
    return name


def get(name: str) -> Backend | None:
    """A fresh backend object, or None for the unquantised reference."""
    name = canonical(name)
    return None if name == REFERENCE else BACKENDS[name]()


label = records.quant_label  # how tables name a backend (bf16 for the reference)
