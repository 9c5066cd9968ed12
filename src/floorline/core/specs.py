"""GPU spec table (datasheet peak memory bandwidth, with its source) and detection of the current GPU by name.

Owns: the table and name matching. Pure Python. Measuring the achievable bandwidth lives in bandwidth.py.
Figures: ../shared/facts/gpus.md (vendor datasheets). Datasheet peaks overstate what can be reached; every run also
measures its achievable bandwidth (bandwidth.py), and an unknown GPU runs on that figure alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from floorline.core.errors import UserError


@dataclass(frozen=True)
class GpuSpec:
    key: str  # what --gpu takes
    name: str
    memory: str
    peak_gbps: float  # datasheet peak, 1e9 B/s
    source: str
    pattern: str  # regex matched against torch.cuda.get_device_name(), case-insensitive
    note: str = ""


GPUS: list[GpuSpec] = [
    GpuSpec("h100-sxm", "H100 SXM5", "80 GB HBM3", 3350, "NVIDIA H100 datasheet", r"h100(?!.*(pcie|nvl)).*(sxm|hbm3)|h100$"),
    GpuSpec("h100-pcie", "H100 PCIe", "80 GB HBM2e", 2000, "NVIDIA H100 PCIe product brief", r"h100.*pcie"),
    GpuSpec("h100-nvl", "H100 NVL", "94 GB HBM3", 3900, "NVIDIA H100 datasheet", r"h100.*nvl"),
    GpuSpec("h200", "H200 (SXM)", "141 GB HBM3e", 4800, "NVIDIA H200 datasheet", r"(?<!g)h200(?!.*nvl)"),
    GpuSpec("gh200", "GH200 (HBM3e)", "144 GB", 4900, "NVIDIA GH200 datasheet", r"gh200.*(144|hbm3e)"),
    GpuSpec("gh200-hbm3", "GH200 (HBM3)", "96 GB", 4000, "NVIDIA GH200 announcement", r"gh200"),
    GpuSpec("b200", "B200", "180-192 GB HBM3e", 8000, "NVIDIA B200 / HGX datasheets", r"b200",
            note="HGX SKUs 7.7 TB/s"),
    GpuSpec("a100-80gb-sxm", "A100 80GB SXM4", "80 GB HBM2e", 2039, "NVIDIA A100 datasheet", r"a100.*sxm.*80"),
    GpuSpec("a100-80gb-pcie", "A100 80GB PCIe", "80 GB HBM2e", 1935, "NVIDIA A100 datasheet", r"a100.*80"),
    GpuSpec("a100-40gb", "A100 40GB", "40 GB HBM2", 1555, "NVIDIA A100 datasheet", r"a100"),
    GpuSpec("l40s", "L40S", "48 GB GDDR6", 864, "NVIDIA L40S datasheet", r"l40s"),
    GpuSpec("l4", "L4", "24 GB GDDR6", 300, "NVIDIA L4 datasheet", r"\bl4\b"),
    GpuSpec("rtx-4090", "RTX 4090", "24 GB GDDR6X", 1008, "NVIDIA RTX 4090 specifications", r"rtx 4090(?!.*laptop)"),
    GpuSpec("rtx-6000-ada", "RTX 6000 Ada", "48 GB GDDR6", 960, "NVIDIA RTX 6000 Ada datasheet", r"rtx 6000 ada"),
    GpuSpec("jetson-agx-orin-64gb", "Jetson AGX Orin 64GB", "64 GB LPDDR5", 204.8,
            "NVIDIA Jetson AGX Orin datasheet", r"orin(?!.*nano)"),
    GpuSpec("jetson-orin-nano-8gb", "Jetson Orin Nano 8GB", "8 GB LPDDR5", 68, "NVIDIA Jetson Orin Nano datasheet",
            r"orin.*nano", note='102 GB/s in "Super" mode'),
    GpuSpec("jetson-agx-thor", "Jetson AGX Thor T5000", "128 GB LPDDR5X", 273, "NVIDIA Jetson Thor datasheet", r"thor"),
    GpuSpec("dgx-spark", "DGX Spark (GB10)", "128 GB LPDDR5X", 273, "NVIDIA DGX Spark specifications", r"gb10"),
]
BY_KEY = {g.key: g for g in GPUS}


def lookup(key: str) -> GpuSpec:
    """A spec by its --gpu key (case-insensitive), or the start of one key alone ('rtx-40'); a device name such as
    'NVIDIA L4' also works. A start that several keys share ('a100', 'h100') is one line naming them."""
    starts = [k for k in BY_KEY if k.startswith(key.lower())]
    if key.lower() not in BY_KEY and len(starts) > 1:
        raise UserError(f"--gpu {key!r} names {len(starts)} GPUs ({', '.join(starts)}); give one of them")
    g = BY_KEY.get(key.lower()) or (BY_KEY[starts[0]] if starts else detect(key))
    if g is None:
        raise UserError(f"unknown GPU {key!r}; known: {', '.join(BY_KEY)}")
    return g


def detect(device_name: str) -> GpuSpec | None:
    """Match a CUDA device name ('NVIDIA H100 80GB HBM3', 'NVIDIA A100-SXM4-80GB', ...); None when unknown."""
    n = device_name.lower().replace("nvidia", "").replace("geforce", "").replace("-", " ").strip()
    for g in GPUS:
        if re.search(g.pattern.replace("-", " "), n):
            return g
    return None
