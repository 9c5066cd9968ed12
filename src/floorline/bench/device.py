"""The device a run measures: resolving --device, what a record says about it, and its last-level cache."""

from __future__ import annotations

from pathlib import Path

import torch

from floorline.bench import system
from floorline.core import specs
from floorline.core.errors import UserError


def resolve_device(spec: str) -> torch.device:
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        d = torch.device(spec)
    except RuntimeError:
        raise UserError(f"unknown device {spec!r}; use auto, cpu, cuda or cuda:N") from None
    if d.type not in ("cpu", "cuda"):
        raise UserError(f"device {spec!r} is not supported; use auto, cpu, cuda or cuda:N")
    if d.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"device {spec!r} asked for, but no CUDA GPU is visible; use --device cpu")
        if (d.index or 0) >= torch.cuda.device_count():
            raise UserError(f"device {spec!r}: only {torch.cuda.device_count()} CUDA device(s) visible")
    return d


def cache_bytes(device: torch.device) -> int:
    """Last-level cache: the GPU's L2, the CPU's largest cache level; 0 when unknown."""
    if device.type == "cuda":
        return getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
    best = 0
    for p in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        t = p.read_text().strip()
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
        try:
            best = max(best, int(t.rstrip("KMG")) * mult)
        except ValueError:
            pass
    return best


def device_info(device: torch.device) -> dict:
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        spec = specs.detect(name)
    else:
        name, spec = system.cpu_name(), None
    return {"device": str(device), "device_name": name, "gpu_key": spec.key if spec else None,
            "peak_gbps": spec.peak_gbps if spec else None, "peak_source": spec.source if spec else None}
