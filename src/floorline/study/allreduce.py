"""`floorline allreduce`: the latency of one hidden-vector all-reduce on this machine, per backend, side by side.

Owns: the measurement task a rank runs (tpdist.time_allreduce per backend: back-to-back all-reduces in one CUDA graph
on GPUs, plain calls on the CPU), its record (kind "allreduce"), and reading a latency back from such records for
`floor --tp` and `predict --tp`. The ranks are started by launcher.run_fresh like every tensor-parallel run.
On the CPU only gloo runs: a test of the plumbing, not a figure of merit.
"""

from __future__ import annotations

import statistics
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from floorline.core import records
from floorline.core.errors import UserError, not_a_file

DTYPES = ("fp32", "bf16")  # fp32: native mode's residual stream; bf16: an HF model's hidden states


@dataclass
class AllReduceConfig:
    tp: int
    numel: int  # the hidden size
    backends: list[str] = field(default_factory=lambda: ["nccl", "symm"])
    dtype: str = "fp32"
    device: str = "cuda"
    samples: int = 30
    per_sample: int = 50


def validate(cfg: AllReduceConfig) -> None:
    from floorline.device.tpdist import BACKENDS

    if cfg.tp < 2:
        raise UserError(f"--tp must be >= 2 for an all-reduce, got {cfg.tp}")
    if cfg.numel < 1:
        raise UserError(f"--hidden must be positive, got {cfg.numel}")
    if cfg.dtype not in DTYPES:
        raise UserError(f"--dtype {cfg.dtype}: use one of {', '.join(DTYPES)}")
    bad = [b for b in cfg.backends if b not in BACKENDS]
    if bad or not cfg.backends:
        raise UserError(f"unknown backend(s) {bad or cfg.backends}; use {', '.join(BACKENDS)}")
    cpu = cfg.device.startswith("cpu")
    if cpu != (cfg.backends == ["gloo"]):
        raise UserError("on the CPU use --backends gloo; on GPUs nccl and/or symm")
    if not cpu:
        import torch

        if torch.cuda.device_count() < cfg.tp:
            raise UserError(f"--tp {cfg.tp} needs {cfg.tp} CUDA GPUs, {torch.cuda.device_count()} visible here; "
                            f"between CPU processes use --device cpu (gloo)")
    if cfg.samples < 2 or cfg.per_sample < 1:
        raise UserError(f"need --samples >= 2 and --per-sample >= 1, got {cfg.samples} and {cfg.per_sample}")


def measure(cfg: AllReduceConfig) -> list[dict]:
    """Runs in each rank (the launcher's child): one record per backend (a backend that cannot run here is
    recorded invalid with the reason)."""
    import torch

    from floorline.bench import system
    from floorline.bench.models import TORCH_DTYPES
    from floorline.device import tpdist

    comm = tpdist.init(cfg.tp, "cpu" if cfg.device.startswith("cpu") else "cuda")
    name = torch.cuda.get_device_name(comm.device) if comm.device.type == "cuda" else system.cpu_name()
    out = []
    for backend in cfg.backends:
        rec = {"schema_version": records.SCHEMA_VERSION, "kind": "allreduce", "run_id": uuid.uuid4().hex,
               "backend": backend, "tp": cfg.tp, "numel": cfg.numel, "dtype": cfg.dtype,
               "message_bytes": cfg.numel * TORCH_DTYPES[cfg.dtype].itemsize, "device": comm.device.type,
               "device_name": name, "per_sample": cfg.per_sample, "in_cuda_graph":
               comm.device.type == "cuda", **system.environment()}
        try:
            ar = tpdist.AllReduce(backend, cfg.numel, TORCH_DTYPES[cfg.dtype], comm)
            us = tpdist.time_allreduce(ar, cfg.samples, cfg.per_sample)
            rec.update({"valid": True, "reason": None, "samples_us": us, "us_median": statistics.median(us),
                        "us_min": min(us)})
        except UserError as e:
            rec.update({"valid": False, "reason": str(e), "us_median": None})
        out.append(rec)
    tpdist.close()
    return out


def latency_from(paths: list[str], backend: str | None = None, tp: int | None = None) -> tuple[float, str]:
    """(median us, backend) from `floorline allreduce` records: the given backend's last valid record, else the
    fastest backend's; `tp` restricts to records of that many ranks."""
    recs = []
    for p in paths:
        if not Path(p).is_file():
            raise not_a_file(p, "give the JSON-lines output of `floorline allreduce`")
        recs += [r for r in records.read(p) if r.get("kind") == "allreduce" and r.get("valid")
                 and (tp is None or r.get("tp") == tp) and (backend is None or r.get("backend") == backend)]
    if not recs:
        want = " ".join(x for x in (backend and f"backend {backend}", tp and f"tp {tp}") if x)
        raise UserError(f"no valid all-reduce records{' for ' + want if want else ''} in {', '.join(paths)}; "
                        f"measure them with `floorline allreduce --tp N --output FILE`")
    gpu = [r for r in recs if str(r.get("device") or "").startswith("cuda")]
    if not gpu:  # the floor and predict are of GPUs: gloo between CPU processes is no NVLink all-reduce
        raise UserError(f"the all-reduce records in {', '.join(paths)} were measured between CPU processes "
                        f"({', '.join(sorted({r['backend'] for r in recs}))}); a GPU's all-reduce must be measured "
                        f"on GPUs: `floorline allreduce --tp N --output FILE` there, or give --allreduce-us")
    last = {r["backend"]: r for r in gpu}
    best = min(last.values(), key=lambda r: r["us_median"])
    return float(best["us_median"]), best["backend"]
