"""One rank of a tensor-parallel measured run: what measure.py asks when RunConfig.tp > 1.

Owns: the options a tp run accepts (validate), joining the group (join: the launcher started one process per rank),
the record keys of the split and of the all-reduce measured in the session, and building the model a rank decodes:
the whole model for mode native (native/tp_model.py cuts the rank's shard at the runtime), or HF transformers' own
tensor parallelism for the HF modes (from_pretrained with the model's tp plan; random weights are written once by
rank 0 into the launcher's scratch folder and read back sharded by every rank).
"""

from __future__ import annotations

import os
import statistics

import torch

from floorline.core import tp
from floorline.core.arch import Arch
from floorline.core.errors import UserError
from floorline.device import tpdist

HF_TP_MODES = ("eager", "static", "graph")  # compile: not with DTensor-sharded modules here


def backend(cfg, device_type: str) -> str:
    if cfg.allreduce == "auto":
        return "nccl" if device_type == "cuda" else "gloo"
    return cfg.allreduce


def validate(cfg, a: Arch, device_type: str | None) -> None:
    if cfg.tp < 1:
        raise UserError(f"--tp must be >= 1, got {cfg.tp}")
    if cfg.allreduce not in ("auto", *tpdist.BACKENDS):
        raise UserError(f"--allreduce {cfg.allreduce}: use auto, {', '.join(tpdist.BACKENDS)}")
    if cfg.tp == 1:
        return
    tp.shard(a, cfg.tp, 0)  # heads and MLP width divide: else a UserError naming the fix
    native = "native" in cfg.modes
    if native and len(cfg.modes) > 1:
        raise UserError("with --tp, mode native and HF modes build different models; run them separately "
                        "(--mode native, then --mode eager,graph)")
    if not native and any(m not in HF_TP_MODES for m in cfg.modes if m != "all"):
        raise UserError(f"with --tp, HF transformers' tensor parallelism runs {', '.join(HF_TP_MODES)}; use those "
                        f"or --mode native")
    if native and not tp.uniform(a, cfg.tp):
        raise UserError(f"native --tp {cfg.tp}: {a.name}'s {a.kv_heads} KV heads can neither be split nor shared "
                        f"evenly; use a --tp that divides {a.kv_heads} or is a multiple of it")
    if cfg.quant not in ("none", None):
        raise UserError("--tp runs dense weights for now; drop --quant")
    if native and cfg.allreduce == "gloo":
        raise UserError("mode native runs on GPUs: use --allreduce nccl or symm")
    if device_type == "cpu" and cfg.allreduce not in ("auto", "gloo"):
        raise UserError(f"--allreduce {cfg.allreduce} needs GPUs; on the CPU the ranks use gloo")


def join(cfg, device: torch.device) -> tuple[tpdist.Comm, torch.device]:
    comm = tpdist.init(cfg.tp, device.type)
    comm.backend = backend(cfg, device.type)
    return comm, comm.device


def record_base(cfg, a: Arch, comm: tpdist.Comm, dtype: torch.dtype = torch.float32) -> dict:
    """The split, and one all-reduce of the hidden vector timed here with the run's backend (fp32: native's residual
    stream; the HF modes reduce bf16 hidden states, so their term is an upper bound)."""
    ar = tpdist.AllReduce(comm.backend, a.hidden, dtype, comm)
    us = tpdist.time_allreduce(ar, samples=20, per_sample=50)
    f = tp.floor(a, 0, cfg.tp)
    return {**tp.record_fields(f, statistics.median(us), comm.backend), "allreduce_samples_us": us,
            "tp_rank": comm.rank}


def build(cfg, a: Arch, device: torch.device, comm: tpdist.Comm) -> torch.nn.Module:
    from floorline.bench import models

    if "native" in cfg.modes:  # the whole model; the runtime cuts the shard
        return models.build(a, device, cfg.dtype, cfg.seed, cfg.attn)
    return build_hf_tp(cfg, a, device, comm)


def build_hf_tp(cfg, a: Arch, device: torch.device, comm: tpdist.Comm) -> torch.nn.Module:
    """HF transformers' own tensor parallelism: from_pretrained with the model's tp plan over the group's ranks."""
    import torch.distributed as dist
    import transformers
    from transformers import AutoModelForCausalLM

    from floorline.bench import models

    path = a.path
    if path is None:  # random weights: rank 0 writes them once, every rank loads its shard
        path = os.path.join(os.environ.get("FLOORLINE_TP_SCRATCH") or _no_scratch(), f"{a.name}-{cfg.seed}")
        if comm.rank == 0 and not os.path.isdir(path):
            models.build_random(a, device, cfg.dtype, cfg.seed, cfg.attn).save_pretrained(path)
            torch.cuda.empty_cache() if device.type == "cuda" else None
        dist.barrier()
    if hasattr(transformers, "DistributedConfig"):  # 5.17+: DistributedConfig(tp_size=N) with the model's plan
        kw = {"distributed_config": transformers.DistributedConfig(tp_size=comm.size)}
    else:  # older: the tp_plan keyword
        kw = {"tp_plan": "auto"}
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=models.TORCH_DTYPES[cfg.dtype], use_safetensors=True,
                                                     local_files_only=True, attn_implementation=cfg.attn, **kw)
    except (ValueError, NotImplementedError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise UserError(f"transformers {transformers.__version__} could not shard {a.name} over {comm.size} "
                        f"ranks ({first}); use --mode native") from None
    dist.barrier()
    return model.eval().requires_grad_(False)


def _no_scratch() -> str:
    raise UserError("HF tensor parallelism with random weights needs the launcher's scratch folder; run through "
                    "`floorline run --tp N` (or sweep / ab), not the worker alone")
