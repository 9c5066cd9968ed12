"""The study's grid as a kill-safe, resumable sweep: models x contexts x modes, one fresh process per cell.

Owns: planning the cells, the cells a precheck refuses without a process, and three executors that stream finished
cells into one file: local (one cell at a time), GPUs (one process per GPU of this host), Ray (a task per cell,
num_gpus=1). Resume, failure records and the append loop are resume.py's, shared with ab and quant: a killed sweep
loses only the cells in flight.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
from dataclasses import dataclass, replace
from typing import Callable, Iterable

import torch

from floorline import quant
from floorline.bench import runtimes, system
from floorline.bench.config import RunConfig, expand_modes, memory_need, validate, weight_format, with_defaults
from floorline.bench.device import resolve_device
from floorline.core import floor, tp, zoo
from floorline.core.errors import UserError
from floorline.study import resume
from floorline.study.launcher import kill
from floorline.study.resume import Cell, Job, Sink, device_kind, execute

DEFAULT_MODELS = ["qwen2.5-7b", "llama-3.1-8b", "mistral-7b-v0.3"]  # the study's trio
DEFAULT_CTXS = [2048, 4096, 8192, 16384]


def plan(models_: list[str], ctxs: list[int], modes: list[str] | None, base: RunConfig) -> list[Cell]:
    """Every cell of the grid, in model -> ctx -> mode order (modes None: the device's pair, runtimes.study_modes).
    Bad models, modes or options fail here, before any run."""
    if not models_ or not ctxs or modes == []:
        raise UserError("the grid is empty: give --models, --ctx and --modes")
    archs = {m: zoo.resolve(m) for m in models_}
    device = resolve_device(base.device) if base.device != "auto" else None
    kind = device.type if device else ("cuda" if _cuda_visible() else "cpu")
    modes = runtimes.study_modes(kind) if modes is None else modes
    base = with_defaults(replace(base, device=base.device if base.device != "auto" else kind,
                                 quant=quant.canonical(base.quant)), kind)
    if min(ctxs) <= 0:
        raise UserError(f"--ctx must be positive numbers of tokens, got {ctxs}")
    # a device name only (no CUDA context here); `all` per model: no native for a model native does not run (MoE)
    by_model = {m: expand_modes(modes, torch.device(kind), base.quant, arch=a) for m, a in archs.items()}
    for m, a in archs.items():  # options wrong for every cell fail the sweep here, not each cell in the file;
        validate(replace(base, model=m, ctxs=[1], modes=by_model[m]), a, kind)  # a ctx past max position: per cell
    cells: dict = {}  # by key: a ctx given twice, or one folder by two paths, is one cell
    for m, a in archs.items():
        for ctx in ctxs:
            for mode in by_model[m]:
                c = Cell(a, m, ctx, mode, replace(base, model=m, ctxs=[ctx], modes=[mode]))
                cells.setdefault(c.key(), c)
    return list(cells.values())


def _cuda_visible() -> bool:
    return bool(system.nvml_gpu_names())


def precheck(cell: Cell) -> str | None:
    """A reason the cell cannot run, known without running it (the record says so; no process is spent)."""
    try:
        validate(cell.run, cell.arch)
    except UserError as e:
        return f"invalid input: {e}"
    return None


def cell_job(cell: Cell) -> Job:
    """One cell, one fresh process; a cell the precheck refuses gets its failure record without a process."""
    return Job(cell.label, [cell], [cell.run], known=precheck(cell))


def on_gpu(job: Job) -> Job:
    """The job as a process that sees one GPU (CUDA_VISIBLE_DEVICES) runs it: device cuda."""
    cells = [replace(c, run=replace(c.run, device="cuda")) for c in job.cells]
    return replace(job, cells=cells, configs=[replace(c, device="cuda") for c in job.configs])


# --------------------------------------------------------------------------------------------------- executors
def run_gpus(jobs: list[Job], gpus: list[int], timeout_s: float | None, sink: Sink,
             started: Callable[[Job], None]) -> None:
    """One worker thread per GPU; each runs its cells' processes with CUDA_VISIBLE_DEVICES set to its GPU."""
    todo: queue.Queue[Job] = queue.Queue()
    for j in jobs:
        todo.put(j)
    lock = threading.Lock()
    procs: set[subprocess.Popen] = set()
    stop = threading.Event()
    errors: list[BaseException] = []

    def worker(gpu: int) -> None:
        while not stop.is_set():
            try:
                j = todo.get_nowait()
            except queue.Empty:
                return
            with lock:
                started(j)
            try:
                recs = execute(on_gpu(j), timeout_s, env={"CUDA_VISIBLE_DEVICES": str(gpu)}, on_start=procs.add)
            except BaseException as e:  # keep the other GPUs going; re-raised below
                errors.append(e)
                return
            if stop.is_set():  # Ctrl-C killed this child: no record, so resume runs the cell again
                return
            with lock:
                for r in recs:
                    r["gpu_index"] = gpu
                sink(j, recs)

    threads = [threading.Thread(target=worker, args=(g,), daemon=True) for g in gpus]
    for t in threads:
        t.start()
    try:
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(timeout=0.2)
    except KeyboardInterrupt:
        stop.set()
        for p in list(procs):
            if p.poll() is None:
                kill(p)
        raise
    if errors:
        raise errors[0]


def _ray_job(job: Job, timeout_s: float | None, command: str) -> list[dict]:
    """Runs inside a Ray worker: the same fresh child process as a local cell (Ray sets CUDA_VISIBLE_DEVICES), its
    records naming the user's command, not the Ray worker's."""
    os.environ[system.COMMAND_ENV] = command
    return execute(job, timeout_s)


def run_ray(jobs: list[Job], address: str, timeout_s: float | None, sink: Sink,
            started: Callable[[Job], None]) -> None:
    try:
        import ray
    except ImportError:
        raise UserError("--ray needs Ray: pip install 'floorline[ray]'") from None
    if not ray.is_initialized():
        main = threading.current_thread() is threading.main_thread()
        term = signal.getsignal(signal.SIGTERM) if main else None
        ray.init(address=None if address in ("", "local") else address, log_to_driver=False,
                 include_dashboard=False, configure_logging=False)
        if main and term is not None:  # Ray's own SIGTERM handler exits at once; the caller's takes the cells down
            signal.signal(signal.SIGTERM, term)
    remote = ray.remote(_ray_job)
    pending = {}
    for j in jobs:
        gpu = device_kind(j.configs[0].device) == "cuda"
        ref = remote.options(num_gpus=1 if gpu else 0, num_cpus=1).remote(j, timeout_s, system.command_line())
        pending[ref] = j
        started(j)
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            j = pending.pop(done[0])
            try:
                recs = ray.get(done[0])
            except Exception as e:  # the task itself failed (a node lost, a pickling error): record it
                why = f"crash: ray task failed: {type(e).__name__}: {str(e)[:300]}"
                recs = [resume.failure_record(cell, why) for cell in j.cells]
            for r in recs:
                r["executor"] = "ray"
            sink(j, recs)
    except KeyboardInterrupt:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise


# -------------------------------------------------------------------------------------------------------- sweep
@dataclass
class SweepConfig:
    cells: list[Cell]
    output: str
    timeout_s: float | None = 1800
    rerun: bool = False
    gpus: list[int] | None = None
    ray: str | None = None  # None: no Ray; "" or "local": a local instance; else a cluster address


def todo_cells(cfg: SweepConfig, have: Iterable[dict]) -> list[Cell]:
    if cfg.rerun:
        return list(cfg.cells)
    done = resume.done_keys(list(have))
    return [c for c in cfg.cells if c.key() not in done]


def run_sweep(cfg: SweepConfig, todo: list[Cell], started: Callable[[Job], None],
              finished: Callable[[Job, list[dict]], None]) -> None:
    """Run `todo` (todo_cells of what resume.load found); every finished cell is appended before it is reported."""
    if cfg.ray is not None:
        def executor(jobs, timeout_s, sink, started_):
            run_ray(jobs, cfg.ray, timeout_s, sink, started_)
    elif cfg.gpus:
        def executor(jobs, timeout_s, sink, started_):
            run_gpus(jobs, cfg.gpus, timeout_s, sink, started_)
    else:
        executor = resume.run_local
    resume.run(cfg.output, [cell_job(c) for c in todo], cfg.timeout_s, started, finished, executor)


def latest(cells: list[Cell], have: list[dict]) -> list[dict]:
    """The last record of each cell of the grid that the file holds (after --rerun, the new one)."""
    last = {resume.cell_key(r): r for r in have if resume.is_cell(r)}
    return [last[c.key()] for c in cells if c.key() in last]


def dry_run_rows(cells: list[Cell], have: list[dict], peak_gbps: float | None,
                 free: int | None = None) -> list[dict]:
    """Each cell with its strict floor, the memory a run asks for it (weights + KV cache + the margin run's check
    adds), and whether it is done, or would be refused for memory (`free` bytes: the CPU's, known here)."""
    from floorline.bench.models import memory_asked

    done = resume.done_keys(have)
    rows = []
    for c in cells:
        f = (floor.floor(c.arch, c.ctx, weight_format(c.run), "strict") if c.run.tp == 1 else
             tp.floor(c.arch, c.ctx, c.run.tp, weight_format(c.run)))  # per GPU
        need = memory_asked(*memory_need(c.run, c.arch, c.ctx, energy=device_kind(c.run.device) == "cuda"))
        status = "done" if c.key() in done else precheck(c) or (
            f"out of memory: {free / 1e9:.2f} GB free" if free is not None and need > free else "to run")
        rows.append({"cell": c.label, "floor_bytes": f.bytes, "floor_ms_peak": f.ms(peak_gbps),
                     "memory_bytes": need, "status": status})
    return rows

