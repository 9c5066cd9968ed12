"""Run RunConfigs in a fresh process (a new CUDA context: the study's "fresh session") and collect its records.

The configs are floorline's own (RunConfig) or a running server's (EndpointConfig, an A/B arm). The child is
`python -m floorline.worker`, in its own process group so a timeout kills it and any compile workers
it started. The parent reads back whatever records the child finished, even when it crashed or timed out.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from floorline import records
from floorline.endpoint import EndpointConfig
from floorline.measure import RunConfig

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
    with tempfile.TemporaryDirectory(prefix="floorline-") as d:
        out = Path(d) / "records.jsonl"
        proc = subprocess.Popen([sys.executable, "-m", "floorline.worker", spec, str(out)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, start_new_session=True,
                                env={**os.environ, **(env or {})})
        if on_start:
            on_start(proc)
        try:
            _, stderr = proc.communicate(timeout=timeout_s)
            why = None if proc.returncode == 0 else f"exit code {proc.returncode}"
        except subprocess.TimeoutExpired:
            kill(proc)
            _, stderr = proc.communicate()
            why = f"timeout after {timeout_s:.0f} s"
        except BaseException:  # Ctrl-C in the parent: take the child down with it
            kill(proc)
            raise
        recs = records.read(out, drop_torn_tail=True) if out.exists() else []  # a child killed mid-write
    if why:
        tail = [ln for ln in stderr.strip().splitlines() if ln.strip()][-STDERR_TAIL_LINES:]
        why = why + (": " + " | ".join(tail) if tail else "")
    return recs, why


def kill(proc: subprocess.Popen) -> None:
    """SIGKILL the child's whole process group (it started its own session), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
