"""One resume path for every study (sweep, ab, quant): plan -> skip what is done -> run fresh -> append.

Owns: the cell and its key (what makes two records the same measurement), reading a results file back with the
torn-tail rule (a last line cut by a kill is dropped and cut from the file; a bad line before it is an error), the
failure record of a cell that produced none, and the loop: each Job runs in one fresh process (launcher.run_fresh),
every cell it owes gets a record (its own, or a failure record saying why not), and the records are appended
(records.append: one line each, flushed and fsynced) before the study is told. A study plans its jobs from what the
file already holds; a SIGKILL loses at most the job in flight, and the same command resumes.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import Callable

from floorline.bench import system
from floorline.bench.config import RunConfig, weight_format
from floorline.core import floor, records
from floorline.core.arch import Arch, config_digest
from floorline.native.options import NativeOptions
from floorline.serve.endpoint import EndpointConfig, clean_url, weight_floors
from floorline.study.launcher import run_fresh


def device_kind(device: str | None) -> str:
    return "cuda" if str(device or "").startswith("cuda") else "cpu"


def cell_key(rec: dict) -> tuple:
    """What makes two records the same cell: model (its name, and for a local directory the digest of its
    config.json: two folders of one name are two models, one folder at two paths one), ctx, mode, quant, dtype,
    attention, device kind, for tensor parallelism the GPU count and the all-reduce backend (one GPU: tp 1, no
    backend), and for mode native its options (NativeOptions); for a running server (mode endpoint): model, ctx, its
    URL and the model it serves (its device and weights are its own). A record from before the digest was kept takes
    its folder's, where the folder is here."""
    model = rec.get("model"), rec.get("model_config_sha256") or config_digest(rec.get("model_path"))
    if rec.get("mode") == "endpoint":
        return *model, rec.get("ctx"), "endpoint", rec.get("endpoint_url"), rec.get("endpoint_served_model")
    tp = rec.get("tp") or 1
    return (*model, rec.get("ctx"), rec.get("mode"), rec.get("quant") or "none", rec.get("dtype"),
            rec.get("attn_implementation") or "sdpa", device_kind(rec.get("device")), tp,
            (rec.get("allreduce_backend") or "auto") if tp > 1 else None,
            NativeOptions.from_record(rec).text() if rec.get("mode") == "native" else None)


def is_cell(rec: dict) -> bool:
    return (rec.get("kind") or "cell") == "cell"


@dataclass(frozen=True)
class Cell:
    arch: Arch
    model: str  # as the user gave it (a zoo name or a local directory)
    ctx: int
    mode: str
    run: RunConfig  # one ctx, one mode
    endpoint: EndpointConfig | None = None  # a running server measured instead (mode endpoint)

    def key(self) -> tuple:
        if self.endpoint is not None:
            return cell_key({**self.arch.identity(), "ctx": self.ctx,
                             "mode": "endpoint", "endpoint_url": clean_url(self.endpoint.url),
                             "endpoint_served_model": self.endpoint.served_model})
        from floorline.bench import tp_run

        return cell_key({**self.arch.identity(), "ctx": self.ctx, "mode": self.mode,
                         "quant": self.run.quant, "dtype": self.run.dtype,
                         "attn_implementation": self.arch.attention(self.run.attn),
                         "device": self.run.device, "tp": self.run.tp, **self.run.native.record(),
                         "allreduce_backend": tp_run.backend(self.run, device_kind(self.run.device))})

    @property
    def label(self) -> str:
        return f"{self.arch.name} ctx {self.ctx} {self.mode}" + (f" tp {self.run.tp}" if self.run.tp > 1 else "")


def done_keys(have: list[dict], *, valid_only: bool = False) -> set[tuple]:
    """The cell keys a results file already holds (valid ones only, with valid_only)."""
    return {cell_key(r) for r in have if is_cell(r) and (r.get("valid") or not valid_only)}


# ------------------------------------------------------------------------------------------------- results file
def load(path: str | os.PathLike, warn: Callable[[str], None] = lambda m: None, repair: bool = True) -> list[dict]:
    """Records already in the results file (records.prepare: checked first, then a torn last line, a kill mid-write,
    cut from the file with a warning, so its cell runs again; repair=False changes nothing). Whether the file can be
    written is asked when there is something to append (records.writable): a finished study reads a read-only file.
    A study that will run what the file lacks (repair) holds it first (records.hold: one such command a file)."""
    if repair:
        records.hold(path)
    return records.prepare(path, lambda m: warn(f"{m}, its cell reruns" if repair else m), repair, write=False)


# ---------------------------------------------------------------------------------------------- failure records
def failure_record(cell: Cell, reason: str) -> dict:
    """An invalid record for a cell that produced none (timeout, crash, out of memory, bad input, unavailable)."""
    f = floor.floor(cell.arch, cell.ctx, weight_format(cell.run), "strict")
    rec = {"schema_version": records.SCHEMA_VERSION, "kind": "cell", "run_id": uuid.uuid4().hex,
           **cell.arch.identity(), "ctx": cell.ctx, "mode": cell.mode,
           "quant": cell.run.quant, "dtype": cell.run.dtype, "attn_implementation": cell.arch.attention(cell.run.attn),
           **cell.run.native.record(),
           "device": cell.run.device, "device_name": system.device_name(cell.run.device),
           "floor_bytes": f.bytes, "valid": False, "reason": reason}
    if cell.endpoint is not None:  # the server's floor, in the weight format it was said to hold
        strict, paper, fmt = weight_floors(cell.arch, cell.ctx, cell.endpoint)
        rec.update({**fmt, "floor_bytes": strict.bytes, "paper_floor_bytes": paper.bytes, "floor_convention": "strict",
                    "dtype": cell.endpoint.dtype, "attn_implementation": None, "device": None, "device_name": None,
                    "endpoint_url": clean_url(cell.endpoint.url),
                    "endpoint_served_model": cell.endpoint.served_model})
    elif cell.run.tp > 1:  # the cell's key holds the split
        from floorline.bench import tp_run
        from floorline.core import tp

        rec.update({"tp": cell.run.tp, "allreduce_backend": tp_run.backend(cell.run, device_kind(cell.run.device)),
                    "floor_bytes": tp.floor(cell.arch, cell.ctx, cell.run.tp, weight_format(cell.run)).bytes})
    for k in records.REQUIRED_KEYS:
        rec.setdefault(k, None)
    env = {k: v for k, v in system.environment().items() if k not in ("torch_threads", "cpu_name")}
    return {**rec, **env}


def classify(why: str) -> str:
    """The launcher's failure line -> the reason a record carries (out of memory, timeout, invalid input, crash)."""
    if why.startswith("timeout"):
        return why
    if "out of memory" in why.lower():
        return "out of memory: " + why
    if why.startswith("exit code 2:") and "floorline: error:" in why:
        return "invalid input: " + why.split("floorline: error:", 1)[1].strip()
    return "crash: " + why


# ------------------------------------------------------------------------------------------------------- the loop
@dataclass
class Job:
    """One fresh process's work: the RunConfigs it runs, the cells it owes a record for, tags for every record.

    known: a reason the job cannot run, known without starting it (bad input, a missing library): its cells get
    failure records and no process starts. annotate: called on every record before it is appended.
    """

    label: str
    cells: list[Cell]
    configs: list[RunConfig]
    tags: dict = field(default_factory=dict)
    known: str | None = None
    annotate: Callable[[dict], None] | None = None


def execute(job: Job, timeout_s: float | None, env: dict | None = None,
            on_start: Callable | None = None) -> list[dict]:
    """Run one job fresh -> every record it produced, plus a failure record for each cell it owed and did not give."""
    if job.known:
        recs, why = [], job.known
    else:
        recs, why = run_fresh(job.configs, tags=job.tags, timeout_s=timeout_s, env=env, on_start=on_start)
        why = classify(why or "the child exited without a record")
    got = done_keys(recs)
    recs = recs + [{**failure_record(c, why), **job.tags} for c in job.cells if c.key() not in got]
    for r in recs:
        if job.annotate:
            job.annotate(r)
    return recs


Sink = Callable[[Job, list[dict]], None]
Executor = Callable[[list[Job], float | None, Sink, Callable[[Job], None]], None]


def run_local(jobs: list[Job], timeout_s: float | None, sink: Sink, started: Callable[[Job], None]) -> None:
    for j in jobs:
        started(j)
        sink(j, execute(j, timeout_s))


def run(output: str | os.PathLike, jobs: list[Job], timeout_s: float | None = None,
        started: Callable[[Job], None] = lambda j: None,
        finished: Callable[[Job, list[dict]], None] = lambda j, recs: None,
        executor: Executor = run_local) -> None:
    """Run `jobs` (planned against load(output)); every job's records are appended before `finished` hears of them."""

    def sink(job: Job, recs: list[dict]) -> None:
        records.append(output, recs)
        finished(job, recs)

    if jobs:
        records.writable(output)  # known before the first process starts, not when its record is due
        executor(jobs, timeout_s, sink, started)
