"""`floorline quant`: every int4 backend on one model and context, each against its own floor, and how much of its
ideal saving it realises.

One fresh process per backend (launcher.run_fresh): it builds the model once, converts and checks it, then runs every
mode (and, with --kernels, the decoder-matrix chain). Records are appended to the output file as each backend
finishes, so a killed comparison resumes where it stopped; a backend whose library is not here gets an
"unavailable" record that is tried again on the next run. Rows are pure functions of the records.

Share of the ideal saving realised, per mode, against the bf16 reference of the same mode:
  ideal time t_ideal = t_bf16 * bytes_q / bytes_bf16    (the step scales with its floor bytes)
  share = (t_bf16 - t_q) / (t_bf16 - t_ideal)          (1 = all of the cut in bytes became time; 0 = none; < 0 slower)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from floorline import floor, published, quant, records, zoo
from floorline.errors import UserError
from floorline.launcher import run_fresh
from floorline.measure import RunConfig, expand_modes, resolve_device, validate, weight_format
from floorline.sweep import Cell, cell_key, classify, device_kind, failure_record

DEFAULT_MODES = ["eager", "graph"]


@dataclass
class Job:
    backend: str  # the table's name: bf16 or a backend
    run: RunConfig  # modes (and run.kernels: the chain) still to run; quant canonical; dtype the backend's
    unavailable: str | None = None


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
    return (rec.get("model"), rec.get("quant") or "none", rec.get("dtype"), device_kind(rec.get("device")))


def _done(have: list[dict]) -> tuple[set, set]:
    """Cells and kernel chains already recorded; an "unavailable" record is not done (the library may be here now)."""
    tried = [r for r in have if not str(r.get("reason") or "").startswith("unavailable")]
    return ({cell_key(r) for r in tried if r.get("kind", "cell") == "cell"},
            {_kernel_key(r) for r in tried if r.get("kind") == "kernels"})


def plan(cfg: QuantConfig, have: list[dict]) -> list[Job]:
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
    modes = expand_modes(cfg.base.modes or DEFAULT_MODES, device, native=False)  # `all`: every backend's
    base = replace(cfg.base, device=str(device) if cfg.base.device == "auto" else cfg.base.device, modes=modes)
    cells, chains = _done([] if cfg.rerun else have)
    jobs = []
    for n in dict.fromkeys(names):
        b = quant.get(n)
        run = replace(base, quant=quant.canonical(n), dtype=backend_dtype(n, base.dtype), kernels=False)
        why = b.missing(device.type) if b else None
        if not why:
            validate(run, a, device.type)
        key = {"model": a.name, "ctx": run.ctxs[0], "quant": run.quant, "dtype": run.dtype,
               "attn_implementation": run.attn, "device": run.device}
        todo = [m for m in modes if cell_key({**key, "mode": m}) not in cells]
        chain = cfg.kernels and _kernel_key(key) not in chains
        jobs.append(Job(n, replace(run, modes=todo, kernels=chain), f"unavailable: {why}" if why else None))
    return jobs


def unavailable_records(job: Job, arch: zoo.Arch, modes: list[str], reason: str) -> list[dict]:
    """Invalid records (the sweep's failure records) that keep a backend that did not run in every table."""
    return [failure_record(Cell(arch, job.run.model, job.run.ctxs[0], m, replace(job.run, modes=[m])), reason)
            for m in modes]


def run(cfg: QuantConfig, log: Callable[[str], None] = lambda s: None) -> tuple[list[Job], list[dict]]:
    """Run what is not yet in the output; returns the plan and every record of the output afterwards."""
    from pathlib import Path

    have = records.read(cfg.output) if Path(cfg.output).exists() else []
    jobs = plan(cfg, have)
    a = zoo.resolve(cfg.base.model)
    said = {(cell_key(r), r.get("reason")) for r in have}
    for job in jobs:
        if job.unavailable:
            log(f"{job.backend}: {job.unavailable}")
            new = [r for r in unavailable_records(job, a, job.run.modes, job.unavailable)
                   if (cell_key(r), r["reason"]) not in said]
            records.append(cfg.output, new)  # once per reason, not once per run
            continue
        if not job.run.modes and not job.run.kernels:
            continue
        log(f"{job.backend}: fresh process, modes {','.join(job.run.modes) or '-'}"
            + (" + kernel chain" if job.run.kernels else ""))
        recs, why = run_fresh([job.run], timeout_s=cfg.timeout_s)
        got = {r.get("mode") for r in recs}
        lost = [m for m in job.run.modes if m not in got]  # the process died first: say why, not a blank row
        recs += unavailable_records(job, a, lost, classify(why or "the child exited without a record"))
        records.append(cfg.output, recs)
    return jobs, (records.read(cfg.output) if Path(cfg.output).exists() else [])


# ------------------------------------------------------------------------------------------------------------ rows
def _latest(recs: list[dict], kind: str, attn: str) -> dict:
    out = {}
    for r in recs:  # later records win (a rerun, or a library installed since); A/B sessions are not rows
        if ((r.get("kind") or "cell") == kind and not r.get("ab_key")
                and (r.get("attn_implementation") or "sdpa") == attn):
            out[(r.get("model"), r.get("ctx"), r.get("mode"), quant.label(r.get("quant")))] = r
    return out


def share_realised(t_ref: float, t_q: float, bytes_ref: int, bytes_q: int) -> float | None:
    """(t_bf16 - t_q) / (t_bf16 - t_bf16 * bytes_q / bytes_bf16); None when the format saves no bytes."""
    ideal_saving = t_ref - t_ref * bytes_q / bytes_ref
    return (t_ref - t_q) / ideal_saving if ideal_saving > 0 else None


def rows(recs: list[dict], model: str, ctx: int, modes: list[str], backends: list[str],
         attn: str = "sdpa") -> list[dict]:
    """One row per backend x mode: its time, its floor, speed-up over bf16, ideal speed-up, share realised."""
    cells = _latest(recs, "cell", attn)
    out = []
    for mode in modes:
        ref = cells.get((model, ctx, mode, "bf16"))
        ref_ok = ref is not None and ref.get("valid")
        for b in backends:
            r = cells.get((model, ctx, mode, b))
            row = {"backend": b, "mode": mode, "status": "not run", "dtype": None, "ms": None, "floor_ms": None,
                   "fraction": None, "floor_bytes": None, "speedup": None, "ideal_speedup": None, "share": None}
            if r is None:
                out.append(row)
                continue
            row.update({"dtype": r.get("dtype"), "floor_bytes": r.get("floor_bytes"),
                        "floor_ms": r.get("floor_ms_measured")})
            if ref is not None and r.get("floor_bytes"):
                row["ideal_speedup"] = ref["floor_bytes"] / r["floor_bytes"]
            if not r.get("valid"):
                row["status"] = r.get("reason") or "invalid"
                out.append(row)
                continue
            row.update({"status": "ok", "ms": r["step_ms_median"], "fraction": r.get("fraction_of_floor_measured")})
            if ref_ok:
                row["speedup"] = ref["step_ms_median"] / r["step_ms_median"]
                row["share"] = share_realised(ref["step_ms_median"], r["step_ms_median"], ref["floor_bytes"],
                                              r["floor_bytes"])
            out.append(row)
    return out


def kernel_rows(recs: list[dict], model: str, backends: list[str]) -> list[dict]:
    """One row per backend: the decoder-matrix chain's time against its bytes, and against the bf16 chain."""
    chains = _latest(recs, "kernels", "sdpa")  # the chain has no attention
    ref = chains.get((model, None, "kernels", "bf16"))
    out = []
    for b in backends:
        r = chains.get((model, None, "kernels", b))
        row = {"backend": b, "status": "not run", "ms": None, "bytes": None, "gbps": None, "fraction": None,
               "speedup": None, "ideal_speedup": None, "share": None}
        if r is not None:
            row["bytes"] = r.get("chain_bytes")
            if not r.get("valid"):
                row["status"] = r.get("reason") or "invalid"
            else:
                row.update({"status": "ok", "ms": r["chain_ms_median"], "gbps": r["achieved_gbps"],
                            "fraction": r["fraction_of_floor_measured"]})
                if ref is not None and ref.get("valid"):
                    row["speedup"] = ref["chain_ms_median"] / r["chain_ms_median"]
                    row["ideal_speedup"] = ref["chain_bytes"] / r["chain_bytes"]
                    row["share"] = share_realised(ref["chain_ms_median"], r["chain_ms_median"], ref["chain_bytes"],
                                                  r["chain_bytes"])
        out.append(row)
    return out


def published_rows() -> list[dict]:
    """The study's L4 rows as published, with speed-ups over its bf16 row; the ideal speed-up uses floorline's
    byte accounting of each format for qwen2.5-7b at ctx 2048 (derived, not published)."""
    pts = published.load().get("quant_l4", [])
    ref = next((p for p in pts if p["quant"] == "bf16"), None)
    if ref is None:
        return []
    a = zoo.ZOO[ref["model"]]

    def fbytes(q: str) -> int:
        return floor.floor(a, ref["ctx"], weight_format(RunConfig(a.name, [ref["ctx"]], [], quant=q,
                                                                   dtype=backend_dtype(q, "bf16")))).bytes

    out = []
    for p in pts:
        q = quant.canonical(p["quant"])  # the study's names are floorline's (bf16 -> none)
        ideal = fbytes("none") / fbytes(q)
        t_ref, t = ref["step_ms_median"], p["step_ms_median"]
        out.append({"backend": p["quant"], "library": p.get("library", "PyTorch"), "gpu": p["gpu_key"],
                    "ms": t, "speedup": t_ref / t, "ideal_speedup": ideal,
                    "share": share_realised(t_ref, t, fbytes("none"), fbytes(q))})
    return out
