"""The study's grid as a kill-safe, resumable sweep: models x contexts x modes, one fresh process per cell.

Owns: planning the cells, resuming from a results file (finished cells skipped by key; a truncated last line
discarded), recording failed cells as invalid with their reason, and three executors that stream finished cells into
one file: local (one cell at a time), GPUs (one process per GPU of this host), Ray (a task per cell, num_gpus=1).
Each cell is appended the moment it finishes (records.append: one line, flush, fsync), so a killed sweep loses only
the cells in flight.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable

import torch

from floorline import floor, quant, records, system, zoo
from floorline.errors import UserError
from floorline.launcher import kill, run_fresh
from floorline.measure import RunConfig, expand_modes, memory_need, resolve_device, validate, weight_format

DEFAULT_MODELS = ["qwen2.5-7b", "llama-3.1-8b", "mistral-7b-v0.3"]  # the study's trio
DEFAULT_CTXS = [2048, 4096, 8192, 16384]
DEFAULT_MODES = ["eager", "graph"]


def device_kind(device: str | None) -> str:
    return "cuda" if str(device or "").startswith("cuda") else "cpu"


def cell_key(rec: dict) -> tuple:
    """What makes two records the same cell: model, ctx, mode, quant, dtype, attention, device kind."""
    return (rec.get("model"), rec.get("ctx"), rec.get("mode"), rec.get("quant") or "none", rec.get("dtype"),
            rec.get("attn_implementation") or "sdpa", device_kind(rec.get("device")))


@dataclass(frozen=True)
class Cell:
    arch: zoo.Arch
    model: str  # as the user gave it (a zoo name or a local directory)
    ctx: int
    mode: str
    run: RunConfig  # one ctx, one mode

    def key(self) -> tuple:
        return cell_key({"model": self.arch.name, "ctx": self.ctx, "mode": self.mode, "quant": self.run.quant,
                         "dtype": self.run.dtype, "attn_implementation": self.run.attn, "device": self.run.device})

    @property
    def label(self) -> str:
        return f"{self.arch.name} ctx {self.ctx} {self.mode}"


def plan(models_: list[str], ctxs: list[int], modes: list[str], base: RunConfig) -> list[Cell]:
    """Every cell of the grid, in model -> ctx -> mode order. Bad models, modes or options fail here, before any run."""
    if not models_ or not ctxs or not modes:
        raise UserError("the grid is empty: give --models, --ctx and --modes")
    archs = {m: zoo.resolve(m) for m in models_}
    device = resolve_device(base.device) if base.device != "auto" else None
    kind = device.type if device else ("cuda" if _cuda_visible() else "cpu")
    modes = expand_modes(modes, torch.device(kind), base.quant)  # a device name only: no CUDA context here
    base = replace(base, device=base.device if base.device != "auto" else kind, quant=quant.canonical(base.quant))
    if min(ctxs) <= 0:
        raise UserError(f"--ctx must be positive numbers of tokens, got {ctxs}")
    for m, a in archs.items():  # options wrong for every cell fail the sweep here, not each cell in the file;
        validate(replace(base, model=m, ctxs=[1], modes=modes), a, kind)  # a ctx past max position is per cell
    cells = []
    for m, a in archs.items():
        for ctx in ctxs:
            for mode in modes:
                cells.append(Cell(a, m, ctx, mode, replace(base, model=m, ctxs=[ctx], modes=[mode])))
    return cells


def nvml_gpu_names() -> list[str]:
    """The NVIDIA GPUs of this host, asked through NVML so the parent never opens a CUDA context of its own."""
    try:
        import pynvml

        pynvml.nvmlInit()
        names = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
                 for i in range(pynvml.nvmlDeviceGetCount())]
        return [n.decode() if isinstance(n, bytes) else n for n in names]
    except Exception:
        return []


def _cuda_visible() -> bool:
    return bool(nvml_gpu_names())


def precheck(cell: Cell) -> str | None:
    """A reason the cell cannot run, known without running it (the record says so; no process is spent)."""
    try:
        validate(cell.run, cell.arch)
    except UserError as e:
        return f"invalid input: {e}"
    return None


# ------------------------------------------------------------------------------------------------- results file
def load_done(path: str | os.PathLike, warn: Callable[[str], None], repair: bool = True) -> list[dict]:
    """Records already in the results file. A truncated or corrupt *last* line (a kill mid-write) is discarded with a
    warning and (repair=True) cut from the file, so its cell runs again; a corrupt line before the last is an error."""
    p = Path(path)
    if not p.exists():
        return []
    data = p.read_bytes()
    lines = data.split(b"\n")
    tail = lines.pop()  # after the last newline: b"" when the file ends cleanly
    good_end = len(data) - len(tail)
    if tail.strip():
        try:
            json.loads(tail)
            lines.append(tail)  # a complete record that lacks only its newline
            good_end = len(data)
        except json.JSONDecodeError:
            warn(f"{path}: the last line is truncated ({len(tail)} bytes, a killed write); discarded, its cell reruns")
    elif lines and lines[-1].strip():
        try:
            json.loads(lines[-1])
        except json.JSONDecodeError:
            warn(f"{path}: the last line is not a complete record; discarded, its cell reruns")
            good_end -= len(lines[-1]) + 1
            lines.pop()
    if good_end < len(data):
        if not repair:
            return records.parse(data[:good_end].decode("utf-8"), str(p))
        with open(p, "r+b") as f:
            f.truncate(good_end)
            f.flush()
            os.fsync(f.fileno())
    return records.read(p)


def device_name(device: str) -> str:
    """Without opening a CUDA context in this (parent) process: NVML's name of the GPU, or the CPU's."""
    if device_kind(device) == "cuda":
        names = nvml_gpu_names()
        idx = int(device.split(":")[1]) if ":" in device else 0
        return names[idx] if idx < len(names) else device
    return system.cpu_name()


def failure_record(cell: Cell, reason: str) -> dict:
    """An invalid record for a cell that produced none (timeout, crash, out of memory, bad input)."""
    f = floor.floor(cell.arch, cell.ctx, weight_format(cell.run), "strict")
    rec = {"schema_version": records.SCHEMA_VERSION, "kind": "cell", "run_id": uuid.uuid4().hex,
           "model": cell.arch.name, "model_path": cell.arch.path, "ctx": cell.ctx, "mode": cell.mode,
           "quant": cell.run.quant, "dtype": cell.run.dtype, "attn_implementation": cell.run.attn,
           "device": cell.run.device, "device_name": device_name(cell.run.device),
           "floor_bytes": f.bytes, "valid": False, "reason": reason}
    for k in records.REQUIRED_KEYS:
        rec.setdefault(k, None)
    env = {k: v for k, v in system.environment().items() if k not in ("torch_threads", "cpu_name")}
    return {**rec, **env}


def classify(why: str) -> str:
    """The launcher's failure line -> the reason a record carries (out of memory, timeout, crash)."""
    if why.startswith("timeout"):
        return why
    if "out of memory" in why.lower():
        return "out of memory: " + why
    if why.startswith("exit code 2:") and "floorline: error:" in why:
        return "invalid input: " + why.split("floorline: error:", 1)[1].strip()
    return "crash: " + why


def run_cell(cell: Cell, timeout_s: float | None, env: dict | None = None,
             on_start: Callable[[subprocess.Popen], None] | None = None) -> list[dict]:
    """One cell in a fresh process -> its record(s), or one invalid record saying why there is none."""
    reason = precheck(cell)
    if reason:
        return [failure_record(cell, reason)]
    recs, why = run_fresh([cell.run], timeout_s=timeout_s, env=env, on_start=on_start)
    mine = [r for r in recs if r.get("mode") == cell.mode and r.get("ctx") == cell.ctx]
    if mine:
        return mine
    return [failure_record(cell, classify(why or "the child exited without a record"))]


# --------------------------------------------------------------------------------------------------- executors
Sink = Callable[[Cell, list[dict]], None]


def run_local(cells: list[Cell], timeout_s: float | None, sink: Sink, started: Callable[[Cell], None]) -> None:
    for c in cells:
        started(c)
        sink(c, run_cell(c, timeout_s))


def run_gpus(cells: list[Cell], gpus: list[int], timeout_s: float | None, sink: Sink,
             started: Callable[[Cell], None]) -> None:
    """One worker thread per GPU; each runs its cells' processes with CUDA_VISIBLE_DEVICES set to its GPU."""
    todo: queue.Queue[Cell] = queue.Queue()
    for c in cells:
        todo.put(c)
    lock = threading.Lock()
    procs: set[subprocess.Popen] = set()
    stop = threading.Event()
    errors: list[BaseException] = []

    def worker(gpu: int) -> None:
        while not stop.is_set():
            try:
                c = todo.get_nowait()
            except queue.Empty:
                return
            with lock:
                started(c)
            try:
                recs = run_cell(replace(c, run=replace(c.run, device="cuda")), timeout_s,
                                env={"CUDA_VISIBLE_DEVICES": str(gpu)}, on_start=procs.add)
            except BaseException as e:  # keep the other GPUs going; re-raised below
                errors.append(e)
                return
            if stop.is_set():  # Ctrl-C killed this child: no record, so resume runs the cell again
                return
            with lock:
                for r in recs:
                    r["gpu_index"] = gpu
                sink(c, recs)

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


def _ray_cell(cell: Cell, timeout_s: float | None) -> list[dict]:
    """Runs inside a Ray worker: the same fresh child process as a local cell (Ray sets CUDA_VISIBLE_DEVICES)."""
    return run_cell(cell, timeout_s)


def run_ray(cells: list[Cell], address: str, timeout_s: float | None, sink: Sink,
            started: Callable[[Cell], None]) -> None:
    try:
        import ray
    except ImportError:
        raise UserError("--ray needs Ray: pip install 'floorline[ray]'") from None
    if not ray.is_initialized():
        ray.init(address=None if address in ("", "local") else address, log_to_driver=False,
                 include_dashboard=False, configure_logging=False)
    remote = ray.remote(_ray_cell)
    pending = {}
    for c in cells:
        gpu = device_kind(c.run.device) == "cuda"
        ref = remote.options(num_gpus=1 if gpu else 0, num_cpus=1).remote(c, timeout_s)
        pending[ref] = c
        started(c)
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            c = pending.pop(done[0])
            try:
                recs = ray.get(done[0])
            except Exception as e:  # the task itself failed (a node lost, a pickling error): record it
                recs = [failure_record(c, f"crash: ray task failed: {type(e).__name__}: {str(e)[:300]}")]
            for r in recs:
                r["executor"] = "ray"
            sink(c, recs)
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
    done = {cell_key(r) for r in have if r.get("kind", "cell") == "cell"}
    return [c for c in cfg.cells if c.key() not in done]


def run_sweep(cfg: SweepConfig, todo: list[Cell], started: Callable[[Cell], None],
              finished: Callable[[Cell, list[dict]], None]) -> None:
    """Run `todo` (todo_cells of what load_done found); every finished cell is appended before it is reported."""

    def sink(c: Cell, recs: list[dict]) -> None:
        records.append(cfg.output, recs)
        finished(c, recs)

    if not todo:
        return
    if cfg.ray is not None:
        run_ray(todo, cfg.ray, cfg.timeout_s, sink, started)
    elif cfg.gpus:
        run_gpus(todo, cfg.gpus, cfg.timeout_s, sink, started)
    else:
        run_local(todo, cfg.timeout_s, sink, started)


def dry_run_rows(cells: list[Cell], have: list[dict], peak_gbps: float | None) -> list[dict]:
    """Each cell with its strict floor and the memory it needs (weights + KV cache), and whether it is done."""
    done = {cell_key(r) for r in have if r.get("kind", "cell") == "cell"}
    rows = []
    for c in cells:
        f = floor.floor(c.arch, c.ctx, weight_format(c.run), "strict")
        need = memory_need(c.run, c.arch, c.ctx, energy=device_kind(c.run.device) == "cuda")
        rows.append({"cell": c.label, "floor_bytes": f.bytes, "floor_ms_peak": f.ms(peak_gbps),
                     "memory_bytes": sum(need), "status": "done" if c.key() in done else
                     (precheck(c) or "to run")})
    return rows

