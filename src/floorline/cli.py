"""The command line: one verb per command; each parses, calls the library, prints. No logic of its own.

Bad input (a UserError, or arguments argparse rejects) prints one line and exits 2; --debug shows the traceback.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import sys
import threading
from pathlib import Path

from rich.console import Console

from floorline import __version__
from floorline.core import records
from floorline.core.errors import UserError
from floorline.native.options import NativeOptions

# silence kineto's lines in `explain` (torch 2.13 prints USDT start/stop lines at 5); read when torch loads
os.environ.setdefault("KINETO_LOG_LEVEL", "6")

class _Out(Console):
    """stdout. A table is printed whole: where even its folded text columns leave too little room for its numbers
    (which never wrap), it is printed at its full width and the terminal wraps its lines, rather than rich cutting
    digits off the numbers or dropping columns."""

    def on_broken_pipe(self) -> None:  # rich exits 1 there, the code of a failed cell: main() says 141
        self.quiet = True
        raise BrokenPipeError(32, "Broken pipe")

    def print(self, *objects, **kwargs):
        from rich.table import Table

        if len(objects) == 1 and isinstance(objects[0], Table):
            need = self.measure(objects[0], options=self.options.update_width(10_000))
            have = self.width
            if need.minimum > have:  # (rich's minimum still cuts numbers: their full width; print's width= is capped)
                self.width = need.maximum
                try:
                    return super().print(*objects, crop=False, **kwargs)
                finally:
                    self.width = have
        super().print(*objects, **kwargs)


out = _Out(highlight=False, width=None if sys.stdout.isatty() else 240)  # piped: no truncated tables
err = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse prints usage + message)
        err.print(f"floorline: error: {message}; see `{self.prog} --help`")
        raise SystemExit(2)


def _int_list(s: str) -> list[int]:
    try:
        out = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got {s!r}") from None
    if not out:  # `--ctx ,` is not the default
        raise argparse.ArgumentTypeError(f"expected at least one integer, got {s!r}")
    return out


# ---------------------------------------------------------------------------------------------------------- models
def cmd_models(args) -> int:
    from floorline.core import zoo
    from floorline.report import display

    out.print(display.table(display.MODELS_HEADER, display.models_rows(zoo.ZOO.values()),
                            "embedded models (random weights built on the device; or pass a local directory)"))
    return 0


# ----------------------------------------------------------------------------------------------------------- specs
def cmd_specs(args) -> int:
    from floorline.core import specs
    from floorline.report import display

    out.print(display.table(display.SPECS_HEADER, display.specs_rows(specs.GPUS),
                            "GPU datasheet peak memory bandwidth (every run also measures its achievable bandwidth)"))
    try:
        import torch

        if torch.cuda.is_available():
            name = torch.cuda.get_device_name()
            g = specs.detect(name)
            out.print(f"this machine: {name} -> {g.key if g else 'unknown: runs on its measured bandwidth alone'}")
    except ImportError:
        pass
    return 0


# ----------------------------------------------------------------------------------------------------------- floor
def cmd_floor(args) -> int:
    from floorline.core import floor, specs, tp, zoo
    from floorline.report import display

    a = zoo.resolve(args.model, need="config", download=args.download)
    _check_builds(a)
    if not 0 < args.ctx < a.max_pos:  # (the step's token goes at position ctx: within the max position)
        raise UserError(f"--ctx must be in 1..{a.max_pos - 1} for {a.name} (the step's token at position ctx, below "
                        f"its max position {a.max_pos}), got {args.ctx}")
    if args.experts and not a.experts:
        raise UserError(f"--experts sets how a mixture-of-experts model stores its routed experts; {a.name} is dense: "
                        f"drop --experts (--weight-bits sets its matrices)")
    if a.prequant and args.weight_bits is None:  # (a bf16 floor of a GPTQ checkpoint: 4x its bytes)
        raise UserError(f"{a.name} is a pre-quantised checkpoint (config.json's quantization_config): " + (
            f"its {a.prequant[6:]}-bit weights are counted by `floorline endpoint ... {a.prequant}`, not by floor's "
            f"4 and 8 bits with groups" if a.prequant.startswith("--bpw") else f"add {a.prequant} to count its floor"))
    fmt = floor.weight_format(args.dtype, args.weight_bits,
                              floor.group_option(args.group_size, args.weight_bits, args.dtype))
    experts = floor.experts_read(a, fmt, args.experts)
    ex_name = (experts.name or args.experts or args.dtype) if experts else None  # mxfp4, or the bytes' dtype
    f = (floor.floor(a, args.ctx, fmt, args.convention, experts=experts) if args.tp == 1
         else tp.floor(a, args.ctx, args.tp, fmt, args.convention))
    ar_us, ar_backend = _allreduce_latency(args)
    gpus = [specs.lookup(args.gpu)] if args.gpu else specs.GPUS
    by_gpu = {g.key: f.ms(g.peak_gbps) if args.tp == 1 else f.total_ms(g.peak_gbps, ar_us) or f.ms(g.peak_gbps)
              for g in gpus}
    if args.format == "json":
        out.print_json(json.dumps({
            "model": a.name, "ctx": args.ctx, "convention": args.convention, "dtype": args.dtype,
            "weight_bits": fmt.bits or fmt.dense_bytes * 8, "group_size": fmt.group_size if fmt.bits else None,
            "components": f.components, "floor_bytes": f.bytes,
            **({"experts": a.experts, "experts_per_token": a.top_k, "expert_format": ex_name or "as decoder"}
               if a.experts else {}),
            "gpu": args.gpu and gpus[0].key, "peak_gbps": gpus[0].peak_gbps if args.gpu else None,
            "floor_ms": by_gpu[gpus[0].key] if args.gpu else None, "floor_ms_by_gpu": by_gpu,
            **(tp.record_fields(f, ar_us, ar_backend) if args.tp > 1 else {"tp": 1}),
        }))
        return 0
    bits = (f"int{fmt.bits} " + (f"g{fmt.group_size}" if fmt.group_size else "per-row")) if fmt.bits else args.dtype
    out.print(display.table(display.FLOOR_HEADER, display.floor_rows(f),
                            f"{a.name}, ctx {args.ctx}, {bits} decoder matrices, {args.convention} convention: "
                            f"bytes one decode step moves" + (f" on each of {args.tp} GPUs (the heaviest rank, "
                                                              f"{f.rank})" if args.tp > 1 else "")))
    if a.experts:
        read = f"the top {a.top_k}" if args.convention == "strict" else "all"
        out.print(f"MoE: {read} of {a.experts} experts in each of {a.n_moe} layers, stored "
                  f"{ex_name or bits} (--experts to change)")
    if args.tp > 1:
        term = (f"{f.allreduce_count} x {ar_us:.2f} us ({ar_backend}) = {f.allreduce_ms(ar_us):.3f} ms, added below"
                if ar_us is not None else "not in the figures below: give --allreduce-us or --allreduce-from")
        out.print(f"all-reduces a step: {f.allreduce_count} (2 a layer + the argmax across vocabulary shards); "
                  f"{term}; KV heads held {f.kv_copies:g}x across the GPUs")
    out.print(display.table(display.FLOOR_GPU_HEADER, display.floor_gpu_rows(gpus, by_gpu),
                            "floor at datasheet peak bandwidth" + (" + all-reduces" if ar_us is not None else "")))
    return 0


def _allreduce_latency(args) -> tuple[float | None, str | None]:
    """--allreduce-us, or the median of `floorline allreduce` records (--allreduce-from), or none."""
    if args.allreduce_us is not None and args.allreduce_from:
        raise UserError("give --allreduce-us or --allreduce-from, not both")
    if (args.allreduce_us is not None or args.allreduce_from) and args.tp == 1:
        raise UserError("an all-reduce latency needs --tp N (N >= 2)")
    if args.allreduce_backend and not args.allreduce_from:
        raise UserError("--allreduce-backend picks among the records of --allreduce-from; give those records")
    if args.allreduce_us is not None:
        if not 0 <= args.allreduce_us < float("inf"):  # (nan fails too)
            raise UserError(f"--allreduce-us must be a finite number >= 0, got {args.allreduce_us}")
        return args.allreduce_us, "given"
    if args.allreduce_from:
        from floorline.study import allreduce

        return allreduce.latency_from(args.allreduce_from, args.allreduce_backend, args.tp)
    return None, None


# ------------------------------------------------------------------------------------------------------------- run
def _run_config(args, modes: list[str], need: str = "weights"):
    from floorline import quant
    from floorline.bench.config import RunConfig, with_defaults
    from floorline.bench.device import resolve_device
    from floorline.core import zoo

    device = resolve_device(args.device)
    model = args.model or (zoo.DEFAULT_GPU_MODEL if device.type == "cuda" else zoo.DEFAULT_CPU_MODEL)
    model = _hub_dir(model, args.download, need)
    ctxs = args.ctx or [zoo.DEFAULT_GPU_CTX if device.type == "cuda" else zoo.DEFAULT_CPU_CTX]
    cfg = RunConfig(model=model, ctxs=ctxs, modes=modes, dtype=args.dtype, device=args.device, warmup=args.warmup,
                    steps=args.steps, seed=args.seed, prefill_chunk=args.prefill_chunk, attn=args.attn,
                    threads=args.threads, quant=quant.canonical(args.quant), tp=args.tp, allreduce=args.allreduce,
                    native=args.native)
    return with_defaults(cfg, device.type)


def _hub_dir(model: str, download: bool, need: str = "weights") -> str:
    """A Hub id becomes its cached snapshot directory (weights fetched only when allowed): worker processes get a
    local directory and never touch the network."""
    from floorline.core import hub, zoo

    if not hub.is_hub_id(model):
        return model
    if need == "weights":  # its config.json first (a few KB): a pre-quantised checkpoint is refused before its shards
        zoo.refuse_prequant(model, zoo.resolve(model, need="config", download=download))
    return str(hub.snapshot(model, need, download))


def _seconds(s: str) -> float:
    """--timeout: positive, finite seconds (a NaN once passed `<= 0`; -1 reached the HTTP client as a traceback)."""
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {s!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {s!r}")
    return v


def _group_size(s: str) -> int | str:
    """--group-size: a positive number of elements, or row (one scale and zero per output row)."""
    if s == "row":
        return s
    try:
        v = int(s)
    except ValueError:
        v = 0
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of elements or row, got {s!r}")
    return v


def _prepare_output(path: str | None) -> list[dict]:
    """An --output file checked (and a torn last line repaired) before anything is measured: records.prepare. Its
    records ([] without --output)."""

    return records.prepare(path, lambda m: err.print(f"warning: {m}")) if path else []


def _out_dir(path: str) -> Path:
    """A folder for a command's files (--out), made before anything is measured; one line if it cannot be."""
    d = Path(path)
    if d.exists() and not d.is_dir():
        raise UserError(f"{path}: is a file; give --out a folder")
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"{path}: cannot make that folder ({e.strerror}); give --out a writable folder") from None
    return d


FAILED = ("crash", "quant", "timeout", "out of memory", "invalid input")  # reasons that fail a command: exit 1


def _failed(reasons) -> bool:
    """A cell crashed, timed out, ran out of memory, was refused, or its quantised model failed its check: the
    command exits 1 (the records say why). A backend not installed ("unavailable") or a measurement flagged invalid
    (a step below the floor) is a finding, not a failure."""
    return any(str(r or "").startswith(FAILED) for r in reasons)


def cmd_run(args) -> int:
    from floorline.bench.measure import measure_cells
    from floorline.report import display

    names = _names(args.mode)
    cfg = _run_config(args, names)  # (a bad --native value is named first)
    if cfg.native.text():
        from floorline.bench.config import expand_modes
        from floorline.bench.device import resolve_device
        from floorline.core import zoo

        modes = expand_modes(names, resolve_device(cfg.device), cfg.quant, arch=zoo.resolve(cfg.model, need="config"))
        if "native" not in modes:  # (`all` without native: a CPU, a model native does not run)
            raise UserError(f"--native sets mode native's options and this run has no mode native "
                            f"({','.join(modes)}); add native to --mode where it runs, or drop --native")
    if args.resume:
        if not args.output:
            raise UserError("--resume skips the cells --output already holds; give --output")
        records.hold(args.output)  # one command planning from a file at a time
    have = _prepare_output(args.output)
    runs = [cfg]
    if args.resume:
        runs = _runs_to_resume(cfg, have)
        err.print(f"resuming: {len(have)} record(s) in {args.output}; " +
                  (f"{sum(len(r.ctxs) * len(r.modes) for r in runs)} cell(s) to run" if runs else "nothing to run"))
    done: list[dict] = []
    with err.status(f"floorline run {cfg.model}") as status:
        for rec in (rec for c in runs for rec in (_tp_records(c, status) if c.tp > 1 else measure_cells(
                c, log=lambda s: status.update(s), debug=args.debug))):
            done.append(rec)
            if args.output:
                records.append(args.output, [rec])
            if rec.get("step_ms_median") is not None:
                err.print(f"done: {rec['model']} ctx {rec['ctx']} {rec['mode']}: {rec['step_ms_median']:.3f} ms/step")
    if done or args.format != "table":  # (a resumed run with nothing left prints no empty table)
        _print_records(args, done)
    for line in display.notes(done):
        err.print(line)
    if args.output:
        err.print(f"{len(done)} record(s) appended to {args.output}")
    return 1 if _failed(r.get("reason") for r in done) else 0


def _runs_to_resume(cfg, have: list[dict]) -> list:
    """`run --resume`: the cells of `cfg` the records lack (their keys as sweep's resume has them), one config per
    context with the modes it still needs."""
    from dataclasses import replace

    from floorline.study import resume, sweep

    done = resume.done_keys(have)
    todo = [c for c in sweep.plan([cfg.model], cfg.ctxs, cfg.modes, cfg) if c.key() not in done]
    return [replace(cfg, ctxs=[ctx], modes=[c.mode for c in todo if c.ctx == ctx])
            for ctx in dict.fromkeys(c.ctx for c in todo)]


def _tp_records(cfg, status) -> list[dict]:
    """--tp N: one fresh process per rank (floorline's launcher); rank 0's records."""
    from floorline.bench import tp_run
    from floorline.bench.config import validate
    from floorline.bench.device import resolve_device
    from floorline.core import zoo
    from floorline.study.launcher import run_fresh

    tp_run.validate(cfg, zoo.resolve(cfg.model), resolve_device(cfg.device).type)  # before any process starts
    validate(cfg, zoo.resolve(cfg.model))
    status.update(f"{cfg.tp} ranks, one process each: {cfg.model}")
    recs, why = run_fresh([cfg])
    if why and not recs:
        raise UserError(f"the {cfg.tp} ranks failed: {why}")
    if why:
        err.print(f"warning: a rank failed after some records: {why}")
    return recs


# -------------------------------------------------------------------------------------------------------------- ab
def cmd_ab(args) -> int:
    from floorline.report import display
    from floorline.study import ab

    arm_a, arm_b = (ab.parse_arm(x, served=args.served_model) for x in (args.a, args.b))
    if args.served_model and not (arm_a.endpoint or arm_b.endpoint):
        raise UserError("--served-model names the model of an endpoint arm; give one (--a endpoint=URL) or drop it")
    base = _run_config(args, [], need="config" if arm_a.endpoint and arm_b.endpoint else "weights")
    arm = dict(dtype=base.dtype, attn=args.attn, quant_=args.quant, served=args.served_model, tp=args.tp,
               allreduce=args.allreduce, native=base.native)
    cfg = ab.ABConfig(base=base, a=ab.parse_arm(args.a, **arm), b=ab.parse_arm(args.b, **arm), sessions=args.sessions,
                      resamples=args.resamples, timeout_s=args.timeout)
    with err.status("floorline ab") as status:
        s = ab.run_ab(cfg, args.output, log=lambda m: status.update(m))
    out.print(display.table(display.AB_SESSION_HEADER, display.ab_session_rows(s),
                            f"{s['model']} ctx {s['ctx']} on {s['device_name']}: A = {s['arm_a']}, B = {s['arm_b']}, "
                            f"{s['steps']} timed steps per arm per session"))
    out.print(display.ab_headline(s), markup=False)  # ("[no interval: N < 2]" is no rich markup tag)
    out.print(display.ab_gmean_line(s), markup=False)
    out.file.flush()  # the table before the notes when both streams go to one pipe
    for f in s["failed_sessions"]:
        err.print(f"failed: {f}")
    err.print(f"sessions and summary in {args.output}")  # (a finished A/B run again appends nothing)
    return 0


# ----------------------------------------------------------------------------------------------------------- sweep
def cmd_sweep(args) -> int:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from floorline.bench import system
    from floorline.bench.config import RunConfig
    from floorline.core import specs
    from floorline.report import display
    from floorline.study import resume, sweep

    base = RunConfig(model="", ctxs=[], modes=[], dtype=args.dtype, device=args.device, warmup=args.warmup,
                     steps=args.steps, seed=args.seed, prefill_chunk=args.prefill_chunk, attn=args.attn,
                     threads=args.threads, quant=args.quant, tp=args.tp, allreduce=args.allreduce, native=args.native)
    # defaults filled here, not in the parser: importing sweep imports torch, which `floorline floor` never needs
    models = _names(args.models, "--models") if args.models is not None else sweep.DEFAULT_MODELS
    modes = _names(args.modes, "--modes") if args.modes is not None else None  # None: the device's pair
    cells = sweep.plan(models, args.ctx or sweep.DEFAULT_CTXS, modes, base)
    if base.native.text() and not any("native" in c.run.modes for c in cells):
        raise UserError("--native sets mode native's options and no cell of this grid runs mode native; add native "
                        "to --modes where it runs, or drop --native")
    if args.tp > 1 and (args.gpus or args.ray is not None):
        raise UserError("--tp cells take several GPUs each: run them with the local executor (drop --gpus / --ray)")
    if args.gpus and args.ray is not None:
        raise UserError("--gpus and --ray both given; use one executor")
    if args.gpus and cells[0].run.device.startswith("cpu"):
        raise UserError("--gpus runs cells on GPUs; drop --device cpu" if args.device.startswith("cpu") else
                        "--gpus runs cells on GPUs and no CUDA GPU is visible here; drop --gpus to run on the CPU")
    cfg = sweep.SweepConfig(cells, args.output, args.timeout, args.rerun, args.gpus, args.ray)
    have = resume.load(args.output, lambda m: err.print(f"warning: {m}"), repair=not args.dry_run)
    todo = sweep.todo_cells(cfg, have)
    run0 = cells[0].run
    other = [r for r in ([] if args.rerun else sweep.latest(cells, have)) if r.get("valid")
             and (r.get("steps"), r.get("warmup")) != (run0.steps, run0.warmup)]
    if other:  # (steps and warmup are no part of a cell's key: a resume keeps what the file holds)
        err.print(f"warning: {len(other)} cell(s) in {args.output} were measured with other --steps/--warmup (e.g. "
                  f"{other[0]['steps']}/{other[0]['warmup']}, now {run0.steps}/{run0.warmup}); kept as they are, "
                  f"--rerun measures them again")
    if args.dry_run:
        names = system.nvml_gpu_names() if cells[0].run.device.startswith("cuda") else []
        spec = specs.detect(names[0]) if names else None
        title = f"{len(cells)} cells" + (f"; floor at {spec.name} peak {spec.peak_gbps:.0f} GB/s" if spec else "")
        free = None  # the CPU's free memory (a GPU's needs a CUDA context: its run says)
        if cells[0].run.device == "cpu":
            import torch

            from floorline.bench import models

            free = models.free_bytes(torch.device("cpu"))
        t = display.table(display.DRY_RUN_HEADER, display.dry_run_rows(
            sweep.dry_run_rows(cells, [] if args.rerun else have, spec.peak_gbps if spec else None, free)), title)
        out.print(t)
        return 0
    results: list[dict] = []
    cols = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("eta"), TimeRemainingColumn()]
    with Progress(*cols, console=err, transient=False) as prog:
        task = prog.add_task("sweep", total=len(cells))
        prog.update(task, completed=len(cells) - len(todo))

        def started(c):
            prog.update(task, description=f"running {c.label}")

        def finished(c, recs):
            results.extend(recs)
            prog.advance(task)
            for r in recs:
                tag = f"{r['step_ms_median']:.3f} ms/step" if r.get("valid") else f"INVALID: {r.get('reason')}"
                prog.console.print(f"{c.label}: {tag}")

        try:
            sweep.run_sweep(cfg, todo, started=started, finished=finished)
        except KeyboardInterrupt as e:
            how = "terminated" if isinstance(e, _Terminated) else "interrupted"
            err.print(f"{how}: {len(results)} cell(s) finished this time are in {args.output}; run the same "
                      f"command to resume")
            return 143 if isinstance(e, _Terminated) else 130
    grid = sweep.latest(cells, [*have, *results])
    valid = sum(1 for r in grid if r.get("valid"))
    err.print(f"{valid}/{len(cells)} cells valid in {args.output} ({len(grid)} recorded, {len(results)} run now)"
              + ("; an invalid cell is kept as measured: --rerun with the grid narrowed to it measures it again"
                 if valid < len(grid) else ""))
    return 1 if _failed(r.get("reason") for r in grid) else 0


def _names(s: str, flag: str = "--mode") -> list[str]:
    """A comma-separated option's names; one given empty (`--mode ""`) is an error, not the default."""
    out = [x.strip() for x in s.split(",") if x.strip()]
    if not out:
        raise UserError(f"{flag} {s!r} names nothing: name at least one, or leave {flag} out for its default")
    return out


# ---------------------------------------------------------------------------------------------------------- report
def cmd_report(args) -> int:
    from floorline import report

    recs, notes = report.load_results(args.results)
    files = report.write_report(recs, args.out, notes)  # (a bad --out or no records: one line, before the notes)
    for n in notes:
        err.print(n)
    err.print(f"wrote {len(files)} files to {args.out}: {', '.join(f.name for f in files)}")
    return 0


def _check_builds(a) -> None:
    """A local or Hub config that transformers cannot build has no floor (models.check_builds; imports torch)."""
    if a.path:
        from floorline.bench import models

        models.check_builds(a)


# --------------------------------------------------------------------------------------------------------- predict
def cmd_predict(args) -> int:
    from floorline.core import specs, zoo
    from floorline.report import predict

    a = zoo.resolve(args.model, need="config", download=args.download)
    _check_builds(a)
    if a.prequant:
        raise UserError(f"{a.name} is a pre-quantised checkpoint (config.json's quantization_config); predict counts "
                        f"unquantised weights: give the unquantised model's config")
    gpu = specs.lookup(args.gpu)
    cal = predict.calibrate_from(args.from_) if args.from_ else predict.calibrate_published()
    ar_us = _allreduce_latency(args)[0]
    preds = [predict.predict(cal, a, args.ctx, gpu, m, args.dtype, args.tp, ar_us) for m in _names(args.mode)]
    if args.format == "json":
        out.print_json(json.dumps({"calibration": predict.format_calibration(cal), "predictions": preds}))
        return 0
    out.print(predict.format_calibration(cal), markup=False)
    for p in preds:
        out.print(predict.format_prediction(p), markup=False)
    return 0


# --------------------------------------------------------------------------------------------------------- explain
def cmd_explain(args) -> int:
    from floorline.bench import explain
    from floorline.report import display

    cfg = _run_config(args, _names(args.mode))
    if cfg.tp > 1:
        raise UserError("explain --tp is not implemented yet; `floorline run --tp N` records carry the per-GPU floor "
                        "and the all-reduce term (allreduce_ms)")
    if args.profile_steps < 1:
        raise UserError(f"--profile-steps must be >= 1, got {args.profile_steps}")
    d = _out_dir(args.out)
    _prepare_output(str(d / "explain.jsonl"))  # an earlier run's records checked, a torn last line cut, first
    with err.status("floorline explain") as status:
        rows = explain.explain(cfg, args.profile_steps, log=lambda m: status.update(m))
    # written before anything is printed (a closed pipe loses nothing), after an earlier run's records (kept); the
    # plot is this run's
    records.append(d / "explain.jsonl", rows)
    explain.stacked_bar_png(rows, str(d / "explain.png"))
    r0 = rows[0]
    out.print(display.table(display.EXPLAIN_HEADER, display.explain_rows(rows),
                            f"{r0['model']} on {r0['device_name']}: one decode step, {r0['measured_gbps']:.0f} GB/s "
                            f"measured (busy = {r0['busy_is']})"))
    for r in rows:
        out.print(display.table(display.TOP_KERNEL_HEADER, display.top_kernel_rows(r),
                                f"top kernels, {r['mode']} ctx {r['ctx']}"))
        if r.get("kernels_by_slot") and r["device"] != "cpu":  # (the CPU's aten ops: dozens, little to learn)
            out.print(display.table(display.SLOT_HEADER, display.slot_rows(r),
                                    f"by place in the layer (native: 1/2 q/k/v, 2/2 o, the MLP its own kernel; 1/1 "
                                    f"q/k/v where the merge is inside o; or mlp=gemv: 1/4 q/k/v, 2/4 o, 3/4 gate_up, "
                                    f"4/4 down; after: lm_head), {r['mode']} ctx {r['ctx']}"))
    for r in rows:
        for w in r["warnings"]:
            err.print(f"warning: {r['mode']} ctx {r['ctx']}: {w}")
    err.print(f"added {len(rows)} record(s) to {d / 'explain.jsonl'}; plotted them in {d / 'explain.png'}")
    return 0


# ----------------------------------------------------------------------------------------------------------- quant
def cmd_quant(args) -> int:
    from floorline.report import display, quantrows
    from floorline.study import quantstudy

    if args.quant != "none":
        raise UserError("quant compares backends: give them with --backends, not --quant")
    base = _run_config(args, _names(args.mode) if args.mode is not None else [])  # []: quantstudy's default, by device
    if base.tp > 1:
        raise UserError("quant compares backends on one GPU; drop --tp")
    backends = _names(args.backends, "--backends") if args.backends is not None else []
    cfg = quantstudy.QuantConfig(base, backends, args.output, args.kernels, args.timeout, args.rerun)
    with err.status("floorline quant") as status:
        jobs, recs = quantstudy.run(cfg, log=lambda m: (status.update(m), err.print(m)))
    names, modes, model, ctx = [j.backend for j in jobs], jobs[0].modes, jobs[0].arch.name, base.ctxs[0]
    device = next((r.get("device_name") for r in reversed(recs) if r.get("device_name")), base.device)
    dtypes = {j.backend: j.run.dtype for j in jobs}  # each backend's record in the dtype it ran in this time
    cell_rows = quantrows.rows(recs, model, ctx, modes, names, jobs[0].arch.attention(base.attn), dtypes)
    chain_rows = quantrows.kernel_rows(recs, model, names, dtypes) if args.kernels else []
    out.print(display.table(display.QUANT_HEADER, display.quant_rows(cell_rows),
                            f"{model} ctx {ctx} on {device}: each backend against its own floor (bytes at its bit "
                            f"width, measured bandwidth)"))
    if args.kernels:
        out.print(display.table(display.KERNEL_HEADER, display.kernel_rows(chain_rows),
                                "kernel level: the 7 decoder matrices of every layer, batch 1, one chain per sample "
                                "(CUDA-graph captured on a GPU), against the bytes of those matrices"))
    out.print(display.table(display.PUBLISHED_QUANT_HEADER, display.published_quant_rows(quantstudy.published_rows()),
                            "published (the study, L4, qwen2.5-7b ctx 2048; ideal speed-up from floorline's "
                            "accounting of each format)"))
    out.file.flush()
    err.print(f"records in {args.output}")
    # the exit code says what the tables show (not an earlier run's failure of another mode in the shared file)
    return 1 if _failed(r["status"] for r in cell_rows + chain_rows) else 0


# -------------------------------------------------------------------------------------------------------- endpoint
def cmd_endpoint(args) -> int:
    from floorline.report import display
    from floorline.serve import endpoint

    cfg = endpoint.EndpointConfig(
        url=args.url, model=args.model, ctxs=args.ctx, served_model=args.served_model, warmup=args.warmup,
        steps=args.steps, sessions=args.sessions, seed=args.seed, dtype=args.dtype, weight_bits=args.weight_bits,
        group_size=args.group_size, bpw=args.bpw, gpu=args.gpu, device=args.device, api_key_env=args.api_key_env,
        timeout_s=args.timeout, download=args.download)
    _prepare_output(args.output)
    done: list[dict] = []
    with err.status(f"floorline endpoint {args.url}") as status:
        for rec in endpoint.measure_endpoint(cfg, log=lambda s: status.update(s)):
            done.append(rec)
            if args.output:
                records.append(args.output, [rec])
    _print_records(args, done)
    if args.format == "table" and done:
        from rich.table import Table

        r0 = done[0]
        server = " ".join(filter(None, [r0.get("endpoint_server") or r0.get("endpoint_server_header"),
                                        r0.get("endpoint_server_version")])) or "server unnamed"
        t = Table(title=f"{r0['endpoint_url']} ({server}), model {r0['endpoint_served_model']}: per session",
                  title_justify="left")
        for h in endpoint.SESSION_COLUMNS:
            t.add_column(h, justify="right")
        for row in endpoint.session_rows(done):
            t.add_row(*row)
        out.print(t)
    for line in display.notes(done):
        err.print(line)
    if args.output:
        err.print(f"{len(done)} record(s) appended to {args.output}")
    return 0 if all(r.get("valid") for r in done) else 1


def _print_records(args, done: list[dict]) -> None:
    from floorline.report import display

    if args.format == "json":
        out.print_json(json.dumps(done))
    elif args.format == "csv":
        out.file.write(display.csv_text(done))
    elif args.format == "md":
        out.print(display.markdown(done))
    else:
        out.print(display.run_table(done, wide=getattr(args, "wide", False) or None, columns=out.width))


# ---------------------------------------------------------------------------------------------------------- import
def cmd_import(args) -> int:
    from floorline.report import display
    from floorline.serve import llamabench

    have = {r.get("run_id") for r in _prepare_output(args.output)}
    recs, notes = llamabench.import_file(args.bench, args.model, download=args.download, gpu=args.gpu,
                                         device=args.device)
    new = [r for r in recs if r["run_id"] not in have]
    if len(new) < len(recs):
        notes.append(f"{len(recs) - len(new)} of {len(recs)} record(s) already in {args.output} (the same rows "
                     f"imported before): not appended again")
    if args.output:
        records.append(args.output, new)
    cells = [r for r in recs if r["kind"] == "cell"]
    _print_records(args, cells)
    for n in notes + display.notes(cells):  # (a row faster than its floor: a warning in the record, said here too)
        err.print(n)
    if args.output:
        err.print(f"{len(new)} record(s) appended to {args.output}")
    return 0


# ------------------------------------------------------------------------------------------------------- allreduce
def cmd_allreduce(args) -> int:
    import json as _json
    from dataclasses import asdict

    from floorline.core import records, zoo
    from floorline.study import allreduce
    from floorline.study.launcher import run_spec

    if args.hidden is not None and args.hidden < 1:
        raise UserError(f"--hidden must be a positive number of elements, got {args.hidden}")
    hidden = args.hidden if args.hidden is not None else zoo.resolve(args.model, need="config").hidden
    cpu = args.device.startswith("cpu")
    backends = (_names(args.backends, "--backends") if args.backends is not None else
                ["gloo"] if cpu else ["nccl", "symm"])
    cfg = allreduce.AllReduceConfig(args.tp, hidden, backends, args.dtype, args.device, args.samples, args.per_sample)
    allreduce.validate(cfg)
    _prepare_output(args.output)
    with err.status(f"floorline allreduce: {args.tp} ranks"):
        recs, why = run_spec(_json.dumps({"allreduce": asdict(cfg)}), args.tp, args.timeout)
    if not recs:
        raise UserError(f"the {args.tp} ranks gave no record: {why}")
    if args.output:
        records.append(args.output, recs)
    for r in recs:
        line = (f"{r['us_median']:.2f} us median, {min(r['samples_us']):.2f} min" if r["valid"]
                else f"not run: {r['reason']}")
        out.print(f"{r['backend']:<5} {r['tp']} ranks, {r['numel']} x {r['dtype']} ({r['message_bytes']:,} B) on "
                  f"{r['device_name']}{' in a CUDA graph' if r['in_cuda_graph'] else ''}: {line}")
    if args.output:
        err.print(f"{len(recs)} record(s) appended to {args.output}")
    return 0 if not why else 1


# ----------------------------------------------------------------------------------------------------------- check
def cmd_check(args) -> int:
    """Mode native's kernels against their references on this GPU, then timed alone (bench/check.py)."""
    import torch

    from floorline.bench import check
    from floorline.core import records, zoo
    from floorline.report import display

    ctxs = args.ctx or [zoo.DEFAULT_GPU_CTX, 16384]
    if min(ctxs) <= 0:
        raise UserError(f"--ctx must be positive numbers of tokens, got {ctxs}")
    zoo.resolve(args.model, need="config")  # the arguments first: a bad one is named on any machine
    _prepare_output(args.output)
    if not torch.cuda.is_available():
        raise UserError("check runs mode native's kernels on an NVIDIA GPU and none is visible here; on the CPU they "
                        "run under Triton's interpreter in the tests: python -m pytest tests/test_native.py")
    with err.status("floorline check") as status:
        info, rows = check.check(args.model, ctxs, timed=not args.no_time, log=lambda m: status.update(m))
    out.print(display.table(display.CHECK_HEADER, display.check_rows(rows),
                            f"{info['device_name']} (compute capability {info['capability']}): mode native's kernels "
                            f"on {info['model']}'s shapes against their references, then alone; copy bandwidth "
                            f"{info['copy_gbps']:.0f} GB/s measured; programmatic dependent launch "
                            f"{'on' if info['pdl'] else 'off'}; CUDA kernels: {info['cuda_kernels']}"))
    bad = [r for r in rows if not r["ok"]]
    out.print(f"{len(rows) - len(bad)} of {len(rows)} kernels match their references"
              + (": " + "; ".join(f"{r['kernel']} ({r['fmt']})" for r in bad) + " FAILED" if bad else ""))
    if args.output:
        records.append(args.output, [{"kind": "check", "schema_version": records.SCHEMA_VERSION, **info, **r}
                                     for r in rows])
        err.print(f"{len(rows)} rows appended to {args.output}")
    return 1 if bad else 0


# ------------------------------------------------------------------------------------------------------------ main
DOWNLOAD_HELP = ("a Hub id (org/name) not in the local cache may be downloaded: config.json, and for run the "
                 "safetensors weights (also allowed by HF_HUB_OFFLINE=0)")


def _tp_args(p) -> None:
    """floor's and predict's --tp: bytes per GPU plus count x latency of the all-reduces."""
    p.add_argument("--tp", type=int, default=1, help="tensor parallelism over N GPUs: bytes per GPU + all-reduces")
    p.add_argument("--allreduce-us", type=float, default=None, help="with --tp: one all-reduce's latency, us")
    p.add_argument("--allreduce-from", nargs="+", metavar="RECORDS", default=None,
                   help="with --tp: `floorline allreduce` records; the fastest backend's median "
                        "(or --allreduce-backend)")
    p.add_argument("--allreduce-backend", default=None, help="with --allreduce-from: nccl, symm or gloo")


def build_parser() -> Parser:
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: a subparser's default must not overwrite `floorline --debug VERB`
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    p = Parser(prog="floorline", description="Batch-1 LLM decode measured against its memory floor.",
               parents=[common])
    p.add_argument("--version", action="version", version=f"floorline {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=Parser)

    # the options of one measured cell, shared by run, ab and explain
    opts = argparse.ArgumentParser(add_help=False)
    opts.add_argument("--dtype", default="auto", help="bf16, fp16 or fp32; default auto: bf16 on a GPU and on CPUs "
                                                      "with native bf16 arithmetic, else fp32")
    opts.add_argument("--attn", default="sdpa", help="attention implementation: sdpa (default) or eager")
    opts.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
    opts.add_argument("--warmup", type=int, default=5, help="warm-up steps (default 5)")
    opts.add_argument("--steps", type=int, default=30, help="timed steps (default 30)")
    opts.add_argument("--seed", type=int, default=0)
    opts.add_argument("--prefill-chunk", type=int, default=None,
                      help="prefill tokens per forward (default 1024 on a GPU, 256 on the CPU)")
    opts.add_argument("--threads", type=int, default=0, help="CPU threads for torch (default: torch's choice)")
    opts.add_argument("--tp", type=int, default=1, help="tensor parallelism over N GPUs of this host, one process "
                                                        "per rank (default 1); native or HF's own tp plan")
    opts.add_argument("--allreduce", default="auto", help="with --tp: nccl (default on GPUs) or symm (torch "
                                                          "symmetric memory's one-shot); gloo on the CPU")
    opts.add_argument("--quant", default="none", help="decoder matrices: none/bf16 (default), nf4, gptq-exllamav2, "
                                                      "awq-marlin, int4-tinygemm, int4-gemlite or int4 (floorline's)")
    opts.add_argument("--native", default="", metavar="NAME=VALUE,...",
                      help=f"mode native's options: {NativeOptions.help()} (default: the first of each; "
                           f"docs/native.md)")

    cell = argparse.ArgumentParser(add_help=False, parents=[opts])
    cell.add_argument("--model", default=None,
                      help="zoo name or local directory (default: qwen2.5-7b on a GPU, qwen2.5-0.5b on the CPU)")
    cell.add_argument("--ctx", type=_int_list, default=None,
                      help="prompt tokens prefilled before decoding, comma-separated for several in run and explain "
                           "(ab and quant take one) (default 2048 on a GPU, 1024 on the CPU)")
    cell.add_argument("--download", action="store_true", help=DOWNLOAD_HELP)

    sub.add_parser("models", parents=[common], help="list the embedded models").set_defaults(fn=cmd_models)
    sub.add_parser("specs", parents=[common], help="list the GPU spec table").set_defaults(fn=cmd_specs)

    f = sub.add_parser("floor", parents=[common], help="analytic bytes and floor of one decode step (no GPU needed)")
    f.add_argument("--model", required=True, help="zoo name, a local directory (its config.json) or a Hub id")
    f.add_argument("--ctx", type=int, required=True, help="tokens already in the KV cache")
    f.add_argument("--gpu", help="a key from `floorline specs` (default: every GPU in the table)")
    f.add_argument("--convention", choices=["strict", "paper"], default="strict")
    f.add_argument("--dtype", default="bf16", help="bf16, fp16 or fp32 (unquantised parts and the KV cache)")
    f.add_argument("--weight-bits", type=int, default=None,
                   help="the dtype's own width (16, or 32 with --dtype fp32: unquantised), 8 or 4 for the decoder "
                        "matrices, and a MoE's routed experts too unless --experts names their storage")
    f.add_argument("--group-size", type=_group_size, default=None,
                   help="elements per scale/zero group of --weight-bits 8|4 matrices, or row (default 128)")
    f.add_argument("--experts", choices=["bf16", "mxfp4"], default=None,
                   help="how a MoE model's routed experts are stored (default: as its checkpoint, e.g. gpt-oss "
                        "mxfp4; with --weight-bits 8|4, as the decoder matrices)")
    f.add_argument("--format", choices=["table", "json"], default="table")
    f.add_argument("--download", action="store_true", help=DOWNLOAD_HELP)
    _tp_args(f)
    f.set_defaults(fn=cmd_floor)

    r = sub.add_parser("run", parents=[common, cell], help="measure batch-1 decode against its floor")
    r.add_argument("--mode", default="all", help="eager, static, graph, compile, native, comma-separated, or all "
                                                      "(default)")
    r.add_argument("--output", help="append the records to this JSON-lines file")
    r.add_argument("--resume", action="store_true", help="skip the cells --output already holds (a killed run goes "
                                                         "on where it stopped)")
    r.add_argument("--format", choices=["table", "json", "csv", "md"], default="table")
    r.add_argument("--wide", action="store_true", help="every column of the table, however wide the terminal")
    r.set_defaults(fn=cmd_run)

    b = sub.add_parser("ab", parents=[common, cell], help="A/B of two configurations over fresh sessions")
    b.add_argument("--a", required=True, help="arm A: a mode, or mode=M,dtype=D,attn=sdpa|eager,quant=Q,tp=N,"
                                               "allreduce=B and mode native's options (--native's names) (e.g. "
                                               "eager), or a running server: endpoint=URL[,served=NAME,bpw=B|"
                                               "weight_bits=N,group_size=G,gpu=KEY,device=D]")
    b.add_argument("--b", required=True, help="arm B, same form (e.g. graph)")
    b.add_argument("--served-model", default=None, help="the model name of endpoint arms that give no served= "
                                                        "(default: the first one GET /v1/models lists)")
    b.add_argument("--sessions", type=int, default=10, help="fresh processes, each running both arms (default 10)")
    b.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default 10000)")
    b.add_argument("--timeout", type=_seconds, default=1800, help="seconds per session before it is killed")
    b.add_argument("--output", default="ab.jsonl", help="JSON-lines file for sessions + summary; resumes (ab.jsonl)")
    b.set_defaults(fn=cmd_ab)

    w = sub.add_parser("sweep", parents=[common, opts], help="the study's grid, one fresh process per cell, resumable")
    w.add_argument("--models", default=None, help="comma-separated zoo names or directories "
                                                  "(default: qwen2.5-7b,llama-3.1-8b,mistral-7b-v0.3, the study's trio)")
    w.add_argument("--ctx", type=_int_list, default=None, help="default 2048,4096,8192,16384")
    w.add_argument("--modes", default=None, help="default eager,graph on a GPU, eager,static on the CPU")
    w.add_argument("--output", default="results.jsonl", help="JSON-lines results; resumed when it exists")
    w.add_argument("--timeout", type=_seconds, default=1800, help="seconds per cell before it is killed (default 1800)")
    w.add_argument("--rerun", action="store_true", help="run cells already in the output again")
    w.add_argument("--dry-run", action="store_true", help="list the cells, their floors and memory, run nothing")
    w.add_argument("--gpus", type=_int_list, default=None, help="run cells in parallel, one process per GPU: 0,1,...")
    w.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                   help="send each cell to a Ray cluster (default: a local instance); needs floorline[ray]")
    w.set_defaults(fn=cmd_sweep)

    qt = sub.add_parser("quant", parents=[common, cell], help="int4 backends against their own floors: the share "
                                                              "of the ideal saving each realises")
    qt.add_argument("--backends", default=None, help="comma-separated (default: all): bf16, nf4, gptq-exllamav2, "
                                                     "awq-marlin, int4-tinygemm, int4-gemlite, int4")
    qt.add_argument("--mode", default=None, help="modes, comma-separated (default eager,graph on a GPU, "
                                                 "eager,static on the CPU)")
    qt.add_argument("--kernels", action="store_true", help="also time the chain of decoder matrices alone")
    qt.add_argument("--output", default="results.jsonl",
                    help="JSON-lines results (shared with sweep, one at a time); resumes")
    qt.add_argument("--timeout", type=_seconds, default=1800, help="seconds per backend process (default 1800)")
    qt.add_argument("--rerun", action="store_true", help="run backends already in the output again")
    qt.set_defaults(fn=cmd_quant)

    rp = sub.add_parser("report", parents=[common], help="merge results from many machines into tables and plots")
    rp.add_argument("results", nargs="+", help="JSON-lines results files (or folders of them)")
    rp.add_argument("--out", default="report", help="folder for report.md, results.csv, PNGs, index.html")
    rp.set_defaults(fn=cmd_report)

    q = sub.add_parser("predict", parents=[common], help="predict a step on a GPU you do not have (two-term model)")
    q.add_argument("--model", required=True, help="zoo name or a local directory")
    q.add_argument("--ctx", type=int, required=True)
    q.add_argument("--gpu", required=True, help="a key from `floorline specs`")
    q.add_argument("--mode", default="eager,graph", help="comma-separated modes (default eager,graph)")
    q.add_argument("--dtype", default="bf16")
    q.add_argument("--from", dest="from_", nargs="+", metavar="RESULTS",
                   help="JSON-lines results to calibrate on (default: the study's published values)")
    q.add_argument("--format", choices=["text", "json"], default="text")
    q.add_argument("--download", action="store_true", help=DOWNLOAD_HELP)
    _tp_args(q)
    q.set_defaults(fn=cmd_predict)

    ep = sub.add_parser("endpoint", parents=[common], help="batch-1 decode of a running OpenAI-compatible server "
                                                           "against the floor of the model it serves")
    ep.add_argument("--url", required=True, help="the server's OpenAI base URL, e.g. http://127.0.0.1:8080/v1 "
                                                 "(an API key goes in $FLOORLINE_API_KEY, never here)")
    ep.add_argument("--model", required=True, help="the architecture the floor is counted from: zoo name, local "
                                                   "directory (config.json is enough) or Hub id org/name")
    ep.add_argument("--served-model", default=None, help="the model name the server knows (default: the first one "
                                                         "GET /v1/models lists)")
    ep.add_argument("--ctx", type=_int_list, default=[2048], help="prompt tokens, comma-separated (default 2048)")
    ep.add_argument("--warmup", type=int, default=5, help="per-token samples dropped at the start (default 5)")
    ep.add_argument("--steps", type=int, default=30, help="timed tokens per session (default 30)")
    ep.add_argument("--sessions", type=int, default=1, help="requests per ctx, each a fresh random prompt (default 1)")
    ep.add_argument("--seed", type=int, default=0)
    ep.add_argument("--dtype", default="bf16", help="the server's dense dtype: unquantised parts and the KV cache")
    ep.add_argument("--weight-bits", type=int, default=None, help="8 or 4: decoder matrices as in `floor`")
    ep.add_argument("--group-size", type=_group_size, default=None,
                    help="elements per scale/zero group of --weight-bits 8|4 matrices, or row (default 128)")
    ep.add_argument("--bpw", default=None, help="average bits per weight of every weight matrix, or a ggml type "
                                                "(Q4_0, Q4_K, Q8_0, ...; docs/endpoint.md for mixes like Q4_K_M)")
    ep.add_argument("--gpu", default=None, help="the server's GPU, a key from `floorline specs` (default: detected "
                                                "when the server runs on this host)")
    ep.add_argument("--device", default="auto", help="where the server runs when it is on this host (its bandwidth "
                                                     "is measured, the best of copy, read and GEMV): auto (default; loopback URLs only), cpu, "
                                                     "cuda, cuda:N, or none")
    ep.add_argument("--api-key-env", default=None, help="the environment variable holding the API key (default: "
                                                        "FLOORLINE_API_KEY, then OPENAI_API_KEY)")
    ep.add_argument("--timeout", type=_seconds, default=600, help="seconds per HTTP request (default 600)")
    ep.add_argument("--output", help="append the records to this JSON-lines file")
    ep.add_argument("--format", choices=["table", "json", "csv", "md"], default="table")
    ep.add_argument("--download", action="store_true", help=DOWNLOAD_HELP)
    ep.set_defaults(fn=cmd_endpoint)

    im = sub.add_parser("import", parents=[common], help="llama-bench JSON / JSON-lines results as floorline records")
    im.add_argument("bench", help="llama-bench output (-o json or -o jsonl)")
    im.add_argument("--model", required=True, help="the architecture benchmarked: zoo name, local directory or "
                                                   "Hub id")
    im.add_argument("--gpu", default=None, help="the GPU it ran on, a key from `floorline specs` (default: matched "
                                                "from llama-bench's gpu_info)")
    im.add_argument("--device", default="none", help="none (default), or cpu / cuda / cuda:N: measure this host's "
                                                     "copy bandwidth for the floor in ms (when the bench ran here)")
    im.add_argument("--output", help="append the records to this JSON-lines file")
    im.add_argument("--format", choices=["table", "json", "csv", "md"], default="table")
    im.add_argument("--download", action="store_true", help=DOWNLOAD_HELP)
    im.set_defaults(fn=cmd_import)

    ar = sub.add_parser("allreduce", parents=[common], help="time one hidden-vector all-reduce per backend across "
                                                             "N GPUs (in a CUDA graph), for floor --tp and predict")
    ar.add_argument("--tp", type=int, default=2, help="ranks, one process and one GPU each (default 2)")
    ar.add_argument("--model", default="qwen2.5-7b", help="whose hidden size (default qwen2.5-7b: 3584)")
    ar.add_argument("--hidden", type=int, default=None, help="the vector's length instead of a model's hidden size")
    ar.add_argument("--dtype", default="fp32", help="fp32 (native's residual stream, default) or bf16")
    ar.add_argument("--backends", default=None, help="comma-separated: nccl,symm (default on GPUs); gloo on the CPU")
    ar.add_argument("--device", default="cuda", help="cuda (default) or cpu (gloo: a test of the plumbing)")
    ar.add_argument("--samples", type=int, default=30, help="timed samples (default 30)")
    ar.add_argument("--per-sample", type=int, default=50, help="all-reduces per sample, back to back (default 50)")
    ar.add_argument("--timeout", type=_seconds, default=600, help="seconds before the ranks are killed")
    ar.add_argument("--output", help="append the records to this JSON-lines file")
    ar.set_defaults(fn=cmd_allreduce)

    ck = sub.add_parser("check", parents=[common], help="mode native's kernels against their references on this GPU, "
                                                        "then timed alone (run it first on a new machine)")
    ck.add_argument("--model", default="qwen2.5-7b", help="whose shapes (zoo name or local directory; default "
                                                          "qwen2.5-7b)")
    ck.add_argument("--ctx", type=_int_list, default=None, help="the attention's contexts (default 2048,16384)")
    ck.add_argument("--no-time", action="store_true", help="check only: no timing")
    ck.add_argument("--output", help="append one record per kernel to this JSON-lines file")
    ck.set_defaults(fn=cmd_check)

    e = sub.add_parser("explain", parents=[common, cell], help="profile a few steps: where the gap to the floor goes")
    e.add_argument("--mode", default="all", help="modes to compare side by side, comma-separated, or all")
    e.add_argument("--profile-steps", type=int, default=5, help="steps under the profiler (default 5)")
    e.add_argument("--out", default="explain", help="folder for explain.jsonl (added to) and explain.png (this run's "
                                                    "plot) (default ./explain)")
    e.set_defaults(fn=cmd_explain)
    return p


class _Terminated(KeyboardInterrupt):
    """SIGTERM (a job scheduler's kill, `timeout`): the same way out as Ctrl-C, so the children are taken down,
    scratch folders removed and the records kept."""


def _on_sigterm(signum, frame):
    raise _Terminated


def _is_stdout(path: str | None) -> bool:
    """--output naming this process's own stdout (/dev/stdout, /dev/fd/1, or the file or pipe stdout goes to)."""
    if not path or os.path.realpath(path) == os.devnull:  # (> /dev/null too: nothing to keep apart)
        return False
    try:
        a, b = os.stat(path), os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):  # no such file yet; stdout not a file
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def main(argv: list[str] | None = None) -> int:
    import signal

    global out
    args = build_parser().parse_args(argv)
    args.debug = getattr(args, "debug", False)
    stdout_console = out
    if _is_stdout(getattr(args, "output", None)):  # the records are the output: tables and notes go to stderr
        out = _Out(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 240)
    main_thread = threading.current_thread() is threading.main_thread()
    before = signal.signal(signal.SIGTERM, _on_sigterm) if main_thread else None
    try:
        return args.fn(args)
    except UserError as e:
        if args.debug:
            raise
        err.print(f"floorline: error: {e}")
        return 2
    except KeyboardInterrupt as e:
        err.print(f"floorline: {'terminated' if isinstance(e, _Terminated) else 'interrupted'}; records already "
                  f"written are kept (run the same command again to resume a sweep, ab or quant)")
        return 143 if isinstance(e, _Terminated) else 130
    except BrokenPipeError:  # the reader closed stdout (`| head`): records are written before anything is printed
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (no second error at exit's flush)
        except (OSError, ValueError):
            pass
        return 141  # what a shell reports for a command that SIGPIPE ended (cat, grep)
    finally:
        records.release()  # the results files this command planned from (records.hold)
        out = stdout_console
        if main_thread and before is not None:
            signal.signal(signal.SIGTERM, before)


if __name__ == "__main__":
    sys.exit(main())
