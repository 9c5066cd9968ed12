"""The process group of a tensor-parallel run, and the all-reduces a decode step makes inside it.

Owns: joining the group a launcher started (launcher.run_fresh sets FLOORLINE_TP_RANK / _SIZE and MASTER_ADDR / _PORT
for each rank), the all-reduce backends behind one small interface, the argmax across vocabulary shards, and timing
one all-reduce. NCCL on GPUs (gloo on the CPU, for the tests). The symmetric-memory backend is torch's one-shot
all-reduce: every rank loads its peers' buffers over NVLink and sums them itself, no multicast (the launcher keeps
NVLS / multicast off for its children).

One rank per process; rank r uses cuda:r of the GPUs it sees (all of them: peer access needs it).
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from floorline.core.errors import UserError

ENV_RANK, ENV_SIZE = "FLOORLINE_TP_RANK", "FLOORLINE_TP_SIZE"
BACKENDS = ("nccl", "symm", "gloo")  # symm: torch symmetric memory's one-shot all-reduce (CUDA, peer loads)
INIT_TIMEOUT_S = 600  # a rank that never joins (it crashed while building) fails the others after this
_COMM: "Comm | None" = None


@dataclass
class Comm:
    rank: int
    size: int
    device: torch.device
    group: object  # the default process group
    backend: str = "nccl"  # the all-reduce a tp run's model uses (tp_run.join sets it from --allreduce)

    @property
    def group_name(self) -> str:
        return self.group.group_name


def env_rank() -> tuple[int, int] | None:
    """(rank, size) when this process is a rank of a tensor-parallel run, else None."""
    if ENV_RANK not in os.environ:
        return None
    return int(os.environ[ENV_RANK]), int(os.environ[ENV_SIZE])


def init(size: int, device_type: str) -> Comm:
    """Join the group the launcher started: nccl on cuda:rank, gloo on the CPU."""
    global _COMM
    if _COMM is not None:  # one group for the process's life (an A/B session runs two tp configs in it)
        if _COMM.size != size:
            raise UserError(f"this process is a rank of {_COMM.size}, not {size}; give every --tp arm one size")
        return _COMM
    got = env_rank()
    if got is None or got[1] != size:
        raise UserError(f"--tp {size} needs one process per rank, started by floorline (run, sweep, ab, allreduce "
                        f"do it); this process is {'not a rank' if got is None else f'one of {got[1]}'}")
    rank, _ = got
    if device_type == "cuda":
        if torch.cuda.device_count() < size:
            raise UserError(f"--tp {size} needs {size} GPUs in one process's view, {torch.cuda.device_count()} "
                            f"visible; leave CUDA_VISIBLE_DEVICES unset or list {size} GPUs")
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", rank=rank, world_size=size, device_id=device,
                                timeout=datetime.timedelta(seconds=INIT_TIMEOUT_S))
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=size,
                                timeout=datetime.timedelta(seconds=INIT_TIMEOUT_S))
    _COMM = Comm(rank, size, device, dist.group.WORLD)
    return _COMM


def current() -> Comm | None:
    return _COMM


def close() -> None:
    """Leave the group together: a barrier first, so no rank tears its connections down while a peer still has an
    operation in flight (gloo then aborts the peer: "terminate called without an active exception")."""
    global _COMM
    if dist.is_initialized():
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()
    _COMM = None


# ---------------------------------------------------------------------------------------------------- all-reduce
def symm_available(device: torch.device) -> str | None:
    """Why the symmetric-memory one-shot all-reduce cannot run here, or None."""
    if device.type != "cuda":
        return "symm needs CUDA GPUs (peer loads over NVLink)"
    if not hasattr(torch.ops.symm_mem, "one_shot_all_reduce_out"):
        return f"this torch ({torch.__version__}) has no symm_mem.one_shot_all_reduce_out"
    return None


class AllReduce:
    """Sum of a fixed vector over the ranks. Write the rank's part into `src`, call run(), read the sum in `dst`.
    Every call reads and writes the same buffers, so a CUDA graph can hold it."""

    def __init__(self, backend: str, numel: int, dtype: torch.dtype, comm: Comm):
        if backend not in BACKENDS:
            raise UserError(f"unknown all-reduce backend {backend!r}; use one of {', '.join(BACKENDS)}")
        if (backend == "gloo") != (comm.device.type == "cpu"):
            raise UserError(f"all-reduce backend {backend} on {comm.device.type}: use gloo on the CPU, nccl or symm "
                            f"on GPUs")
        self.backend, self.comm = backend, comm
        self.calls = 0
        if backend == "symm":
            why = symm_available(comm.device)
            if why:
                raise UserError(f"{why}; use --allreduce nccl")
            import torch.distributed._symmetric_memory as symm_mem

            if hasattr(symm_mem, "enable_symm_mem_for_group"):  # needed before torch 2.9, harmless after
                symm_mem.enable_symm_mem_for_group(comm.group_name)
            # two source buffers, used alternately: a peer may still be loading the one of the previous call when
            # this rank writes its next part (the one-shot kernel's barrier is at its start)
            self._srcs = [symm_mem.empty(numel, dtype=dtype, device=comm.device) for _ in range(2)]
            for b in self._srcs:
                b.zero_()
                symm_mem.rendezvous(b, comm.group_name)
            self.dst = torch.zeros(numel, dtype=dtype, device=comm.device)
        else:
            self.dst = torch.zeros(numel, dtype=dtype, device=comm.device)
            self._srcs = [self.dst]  # in place

    @property
    def src(self) -> torch.Tensor:
        return self._srcs[self.calls % len(self._srcs)]

    @property
    def in_place(self) -> bool:
        return self.src is self.dst

    def run(self) -> torch.Tensor:
        src = self.src
        self.calls += 1
        if self.backend == "symm":
            return torch.ops.symm_mem.one_shot_all_reduce_out(src, "sum", self.comm.group_name, self.dst)
        dist.all_reduce(self.dst)
        return self.dst


_LOW = 1 << 32


def argmax_across(logits: torch.Tensor, first: int, key: torch.Tensor) -> torch.Tensor:
    """The vocabulary-wide argmax from each rank's shard of the logits (its rows start at `first`), on the device:
    one all-reduce MAX of a packed int64 key, (the max's fp32 bits made order-preserving) << 32 | (2^32 - 1 - index),
    so the larger value wins and, among equals, the smaller index (torch.argmax's first occurrence). `key`: a fixed
    (1,) int64 buffer. Returns the token as a (1,) int64 tensor."""
    v, i = logits.max(0)
    bits = v.reshape(1).view(torch.int32)
    ordered = torch.where(bits >= 0, bits, bits ^ 0x7FFFFFFF).to(torch.int64)  # negative floats: reverse magnitude
    key.copy_(ordered * _LOW + (_LOW - 1 - (i.reshape(1) + first)))
    dist.all_reduce(key, op=dist.ReduceOp.MAX)
    return _LOW - 1 - (key & (_LOW - 1))


def time_allreduce(ar: AllReduce, samples: int = 30, per_sample: int = 50, warmup: int = 3) -> list[float]:
    """Microseconds per all-reduce, one value per sample. On a GPU `per_sample` back-to-back all-reduces are one
    CUDA graph and a sample is one replay (no launch overhead, as in the decode step's graph); on the CPU, plain
    calls."""
    from floorline.device.timing import time_captured

    ar.src.normal_()

    def body():
        for _ in range(per_sample):
            ar.run()

    dist.barrier()  # the ranks start together; each all-reduce then keeps them in step
    ms = time_captured(body, warmup, samples, ar.comm.device)
    return [m * 1e3 / per_sample for m in ms]
