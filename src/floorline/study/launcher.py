"""Run RunConfigs in a fresh process (a new CUDA context: the study's "fresh session") and collect its records.

The configs are floorline's own (RunConfig) or a running server's (EndpointConfig, an A/B arm). The child is
`python -m floorline.study.worker`, in its own process group so a timeout kills it and any compile workers
it started. The parent reads back whatever records the child finished, even when it crashed or timed out.
A tensor-parallel run (RunConfig.tp = N, or `floorline allreduce`) is N such children, one per rank (run_spec).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from floorline.bench import system
from floorline.bench.config import RunConfig
from floorline.core import records
from floorline.serve.endpoint import EndpointConfig
from floorline.study.worker import PARENT_ENV

STDERR_TAIL_LINES = 8


def run_fresh(configs: list[RunConfig | EndpointConfig], tags: dict | None = None, timeout_s: float | None = None,
              env: dict | None = None, on_start: Callable[[subprocess.Popen], None] | None = None,
              ) -> tuple[list[dict], str | None]:
    """(records the child finished, None) or (those records, why it failed: one line + the child's last stderr).

    env: extra environment variables for the child (CUDA_VISIBLE_DEVICES for one GPU of several);
    on_start: told the child's Popen, so a caller running several can kill them all on Ctrl-C.
    """
    spec = json.dumps({"configs": [{"endpoint": asdict(c)} if isinstance(c, EndpointConfig) else asdict(c)
                                   for c in configs], "tags": tags or {}})
    return run_spec(spec, max((getattr(c, "tp", 1) for c in configs), default=1), timeout_s, env, on_start)


# Tensor-parallel children: NVLink multicast (NVLS) stays off; it can take a shared host's GPUs out of service.
TP_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_spec(spec: str, ranks: int = 1, timeout_s: float | None = None, env: dict | None = None,
             on_start: Callable[[subprocess.Popen], None] | None = None) -> tuple[list[dict], str | None]:
    """The worker on `spec` in `ranks` fresh processes (one per tensor-parallel rank, each in its own session, all
    seeing every GPU the parent sees; rank r takes cuda:r). Rank 0's records come back; when one rank fails or the
    timeout passes, every rank is killed (the others would wait in a collective forever)."""
    with tempfile.TemporaryDirectory(prefix="floorline-") as d:
        out = Path(d) / "records.jsonl"
        rank_env = [{}] if ranks == 1 else [
            {**TP_ENV, "FLOORLINE_TP_RANK": str(r), "FLOORLINE_TP_SIZE": str(ranks), "MASTER_ADDR": "127.0.0.1",
             "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(ranks),  # torchrun's names (transformers)
             "MASTER_PORT": str(port), "FLOORLINE_TP_SCRATCH": str(Path(d) / "scratch")}
            for port in [_free_port()] for r in range(ranks)]
        procs, errs = [], []
        try:
            for r, extra in enumerate(rank_env):
                err = open(Path(d) / f"stderr.{r}", "w+")  # files, not pipes: no rank blocks on a full pipe
                errs.append(err)
                dest = out if r == 0 else Path(d) / f"records.rank{r}.jsonl"
                procs.append(subprocess.Popen([sys.executable, "-m", "floorline.study.worker", spec, str(dest)],
                                              stdout=subprocess.DEVNULL, stderr=err, text=True,
                                              start_new_session=True,
                                              env={**os.environ, **(env or {}), **extra, PARENT_ENV: str(os.getpid()),
                                                   system.COMMAND_ENV: system.command_line()}))
                if on_start:
                    on_start(procs[-1])
            why = _wait_all(procs, timeout_s)
        except BaseException:  # Ctrl-C in the parent: take the children down with it
            for p in procs:
                kill(p)
            raise
        finally:
            tails = []
            for e in errs:
                e.seek(0)
                tails.append(e.read())
                e.close()
        recs = records.read(out, drop_torn_tail=True) if out.exists() else []  # a child killed mid-write
    if why:
        bad = next((i for i, p in enumerate(procs) if p.returncode not in (0, -signal.SIGKILL)), 0)
        tail = [ln for ln in tails[bad].strip().splitlines() if ln.strip()][-STDERR_TAIL_LINES:]
        why = why + (": " + " | ".join(tail) if tail else "") + (f" [rank {bad} of {ranks}]" if ranks > 1 else "")
    return recs, why


def _wait_all(procs: list[subprocess.Popen], timeout_s: float | None) -> str | None:
    """None when every process exits 0; else why, after killing the rest."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        codes = [p.poll() for p in procs]
        failed = next((c for c in codes if c not in (None, 0)), None)
        if failed is not None:
            for p in procs:
                kill(p)
            return f"exit code {failed}"
        if all(c == 0 for c in codes):
            return None
        if deadline is not None and time.monotonic() > deadline:
            for p in procs:
                kill(p)
            return f"timeout after {timeout_s:.0f} s"
        time.sleep(0.05)


def kill(proc: subprocess.Popen) -> None:
    """SIGKILL the child's whole process group (it started its own session), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
