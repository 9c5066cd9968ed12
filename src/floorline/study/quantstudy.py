"""`floorline quant`: every int4 backend on one model and context, each against its own floor, and how much of its
ideal saving it realises.

One fresh process per backend: it builds the model once, converts and checks it, then runs every mode (and, with
--kernels, the decoder-matrix chain). Through resume.py, like every study: records are appended as each backend
finishes, a mode its process did not finish gets a failure record, a killed comparison resumes where it stopped (a
torn last line dropped); a backend whose library is not here gets an "unavailable" record that is tried again on the
next run. The rows and shares are quantrows.py's (pure functions of the records).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from floorline import quant
from floorline.bench import runtimes
from floorline.bench.config import RunConfig, expand_modes, validate, weight_format
from floorline.bench.device import resolve_device
from floorline.core import floor, published, zoo
from floorline.core.arch import Arch
from floorline.core.errors import UserError
from floorline.report import quantrows
from floorline.study import resume
from floorline.study.resume import Cell, cell_key, device_kind

@dataclass
class BackendRun:
    """One backend of the comparison: what is still to run of it, in one fresh process (job_of)."""

    backend: str  # the table's name: bf16 or a backend
    run: RunConfig  # modes (and run.kernels: the chain) still to run; quant canonical; dtype the backend's
    unavailable: str | None = None
    arch: Arch | None = None
    modes: list[str] | None = None  # every mode of the comparison (the table's rows), done or not


@dataclass
class QuantConfig:
    base: RunConfig  # model, one ctx, modes, device, steps...; quant and dtype are set per backend
    backends: list[str]
    output: str
    kernels: bool = False
    timeout_s: float | None = 1800
    rerun: bool = False


def backend_dtype(name: str, dtype: str) -> str:
    """The backend runs the asked dtype where it can, else the first its kernels take (ExLlamaV2, Marlin: fp16)."""
    b = quant.get(name)
    return dtype if b is None or dtype in b.dtypes else b.dtypes[0]


def _kernel_key(rec: dict) -> tuple:
    return (*cell_key(rec)[:2], rec.get("quant") or "none", rec.get("dtype"), device_kind(rec.get("device")))


def _done(have: list[dict]) -> tuple[set, set]:
    """Cells and kernel chains already recorded; an "unavailable" record is not done (the library may be here now)."""
    tried = [r for r in have if not str(r.get("reason") or "").startswith("unavailable")]
    return ({cell_key(r) for r in tried if r.get("kind", "cell") == "cell"},
            {_kernel_key(r) for r in tried if r.get("kind") == "kernels"})


def plan(cfg: QuantConfig, have: list[dict]) -> list[BackendRun]:
    """One job per backend, in the order asked; bad input fails here, before anything runs."""
    if len(cfg.base.ctxs) != 1:
        raise UserError("quant takes one --ctx; run one comparison per context")
    names = []
    for n in cfg.backends or list(quant.NAMES):
        quant.canonical(n)  # unknown names fail here
        names.append(quant.label(quant.canonical(n)))
    if "bf16" not in names:
        names.insert(0, "bf16")  # every speed-up is against it
    a = zoo.resolve(cfg.base.model)
    device = resolve_device(cfg.base.device)
    # no modes: the device's pair (runtimes.study_modes); `all`: every backend's
    modes = expand_modes(cfg.base.modes or runtimes.study_modes(device.type), device, native=False)
    base = replace(cfg.base, device=str(device) if cfg.base.device == "auto" else cfg.base.device, modes=modes)
    cells, chains = _done([] if cfg.rerun else have)
    jobs = []
    for n in dict.fromkeys(names):
        b = quant.get(n)
        run = replace(base, quant=quant.canonical(n), dtype=backend_dtype(n, base.dtype), kernels=False)
        why = b.missing(device.type) if b else None
        if not why:
            validate(run, a, device.type)
        key = {**a.identity(), "ctx": run.ctxs[0], "quant": run.quant, "dtype": run.dtype,
               "attn_implementation": a.attention(run.attn), "device": run.device}
        todo = [m for m in modes if cell_key({**key, "mode": m}) not in cells]
        chain = cfg.kernels and _kernel_key(key) not in chains
        jobs.append(BackendRun(n, replace(run, modes=todo, kernels=chain), f"unavailable: {why}" if why else None,
                               a, modes))
    return jobs


def job_of(job: BackendRun, said: set) -> resume.Job | None:
    """The backend's fresh process for the modes (and chain) still to run; an unavailable backend's cells get their
    failure records without a process, once per reason (not once per run); None when nothing is left."""
    run = job.run
    cells = [Cell(job.arch, run.model, run.ctxs[0], m, replace(run, modes=[m])) for m in run.modes]
    if job.unavailable:
        cells = [c for c in cells if (c.key(), job.unavailable) not in said]
        return resume.Job(job.backend, cells, [], known=job.unavailable) if cells else None
    if not run.modes and not run.kernels:
        return None
    return resume.Job(job.backend, cells, [run])


def run(cfg: QuantConfig, log: Callable[[str], None] = lambda s: None) -> tuple[list[BackendRun], list[dict]]:
    """Run what is not yet in the output; returns the plan and the output's records afterwards, those of this
    device kind only (the file is shared with sweep and may hold other machines' runs)."""
    have = resume.load(cfg.output, log)
    jobs = plan(cfg, have)
    said = {(cell_key(r), r.get("reason")) for r in have}
    todo = [j for j in (job_of(job, said) for job in jobs) if j is not None]

    def started(j: resume.Job) -> None:
        if j.known:
            log(f"{j.label}: {j.known}")
        else:
            run_ = j.configs[0]
            log(f"{j.label}: fresh process, modes {','.join(run_.modes) or '-'}"
                + (" + kernel chain" if run_.kernels else ""))

    resume.run(cfg.output, todo, cfg.timeout_s, started=started)
    kind = device_kind(jobs[0].run.device)
    model = cell_key(jobs[0].arch.identity())[:2]  # (a folder of the same name holds another model)
    return jobs, [r for r in resume.load(cfg.output, log) if device_kind(r.get("device")) == kind
                  and cell_key(r)[:2] == model]


def published_rows() -> list[dict]:
    """The study's L4 rows (quantrows.published_rows), the ideal speed-up from floorline's byte accounting of each
    format for the published model and context (derived, not published)."""
    pts = published.load().get("quant_l4", [])
    if not pts:
        return []
    a, ctx = zoo.ZOO[pts[0]["model"]], pts[0]["ctx"]

    def fbytes(q: str) -> int:
        q = quant.canonical(q)  # the study's names are floorline's (bf16 -> none)
        cfg = RunConfig(a.name, [ctx], [], quant=q, dtype=backend_dtype(q, "bf16"))
        return floor.floor(a, ctx, weight_format(cfg)).bytes

    return quantrows.published_rows(fbytes)
