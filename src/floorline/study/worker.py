"""Child-process entry point: `python -m floorline.study.worker SPEC_JSON OUT.jsonl`.

Runs each config of the spec in this (fresh) process, in order — a RunConfig (one CUDA context for all of them) or an
EndpointConfig given as {"endpoint": {...}} (a running server, measured from here) — and appends every record,
tagged with the spec's `tags`, to OUT as it finishes. A UserError exits 2 with its one line on stderr.
"""

from __future__ import annotations

import json
import os
import signal
import sys

from floorline.core import records
from floorline.core.errors import UserError

PARENT_ENV = "FLOORLINE_PARENT_PID"  # the launcher's pid, so a parent that died before the signal was armed is seen


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies, so a SIGKILLed sweep leaves no orphan running. Armed
    before torch is imported (seconds); a parent already gone by then (this process re-parented) ends it at once."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: a killed parent may leave this child to finish its cell
        return
    parent = os.environ.get(PARENT_ENV)
    if parent and os.getppid() != int(parent):
        os._exit(1)


def main(argv: list[str]) -> int:
    die_with_parent()
    # imported after the death signal is armed: torch's import alone takes seconds
    from floorline.bench.config import RunConfig
    from floorline.bench.measure import measure_cells
    from floorline.serve.endpoint import EndpointConfig, measure_endpoint

    spec, out = json.loads(argv[0]), argv[1]
    try:
        if "allreduce" in spec:  # `floorline allreduce`: one record per backend
            from floorline.study import allreduce

            records.append(out, allreduce.measure(allreduce.AllReduceConfig(**spec["allreduce"])))
            return 0
        rank = int(os.environ.get("FLOORLINE_TP_RANK", "0"))
        for c in spec["configs"]:
            if rank and ("endpoint" in c or c.get("tp", 1) == 1):  # a one-GPU or server arm: rank 0 alone
                continue
            recs = (measure_endpoint(EndpointConfig(**c["endpoint"])) if "endpoint" in c
                    else measure_cells(RunConfig(**c)))
            for rec in recs:
                rec.update(spec.get("tags", {}))
                records.append(out, [rec])
    except UserError as e:
        print(f"floorline: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
