"""The kernel-level view of `--kernels`: the model's decoder matrices alone, called in a chain at batch 1, against their bytes.

Each matrix is called once per chain on its own fixed random input (1, 1, in): no attention, norms, cache or
sampling between them, so the chain's time is the matrices' kernels (plus their own casts, pads and bias adds) and
the gap to their bytes at the measured bandwidth is kernel quality alone. On a GPU the whole chain is captured
once in a CUDA graph and each replay is one sample (no launch overhead); on the CPU each sample is one plain chain.
"""

from __future__ import annotations

import uuid

import torch

from floorline.bench import models
from floorline.core import floor, stats
from floorline.core.records import SCHEMA_VERSION
from floorline.device.timing import time_captured
from floorline.quant.base import decoder_linears

WARMUP = 3
SAMPLES = 30


def chain_record(ses, failed: str | None = None) -> dict:
    """One record of kind "kernels" for the session's (converted) model."""
    a, cfg = ses.arch, ses.cfg
    c = floor.components(a, 0, ses.fmt)
    matrix_bytes, bias_bytes = c["decoder_matrices"], c["decoder_biases"]
    rec = {k: ses.base.get(k) for k in ("schema_version", "model", "model_path", "model_config_sha256", "quant",
                                        "dtype", "device", "device_name", "gpu_key", "peak_gbps", "measured_gbps", "quant_format",
                                        "quant_library", "quant_version", "quant_kernel", "torch_version")}
    rec.update({"schema_version": SCHEMA_VERSION, "kind": "kernels", "run_id": uuid.uuid4().hex, "mode": "kernels",
                "ctx": None, "matrices": a.layers * 7, "chain_bytes": matrix_bytes + bias_bytes,
                "chain_matrix_bytes": matrix_bytes, "valid": failed is None, "reason": failed})
    if failed:
        return rec
    try:
        samples = chain_samples(ses.model, ses.device, models.TORCH_DTYPES[cfg.dtype], cfg.seed)
    except Exception as e:  # a kernel that cannot be captured or run: recorded, so a resume does not retry forever
        msg = (str(e).strip().splitlines() or [""])[0][:300]
        rec.update({"valid": False, "reason": f"crash: {type(e).__name__}: {msg}"})
        return rec
    s = stats.summarize(samples)
    ms = s["step_ms_median"]
    rec.update({"chain_ms_median": ms, "chain_ms_p90": s["step_ms_p90"], "samples_ms": samples,
                "achieved_gbps": rec["chain_bytes"] / (ms * 1e-3) / 1e9,
                "floor_ms_measured": rec["chain_bytes"] / (rec["measured_gbps"] * 1e9) * 1e3})
    rec["fraction_of_floor_measured"] = rec["floor_ms_measured"] / ms
    return rec


def chain_samples(model: torch.nn.Module, device: torch.device, dtype: torch.dtype, seed: int) -> list[float]:
    mods = [m for _, _, _, m in decoder_linears(model)]
    gen = torch.Generator(device=device).manual_seed(seed)
    inputs = {}
    for m in mods:  # one random batch-1 input per input width, made once: never zeros
        if m.in_features not in inputs:
            inputs[m.in_features] = torch.randn(1, 1, m.in_features, generator=gen, device=device).to(dtype)

    def chain() -> None:
        for m in mods:
            m(inputs[m.in_features])

    with torch.inference_mode():
        return time_captured(chain, WARMUP, SAMPLES, device)  # warm-up (autotuners, workspaces) before capture
