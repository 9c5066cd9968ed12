"""The A/B experiment: two run configurations over N fresh sessions, a ratio per session, bootstrap intervals.

A session is one fresh process (launcher.run_fresh) that builds the model once and runs both arms on it, in A-B order
on even sessions and B-A on odd ones, so drift does not favour one arm. Per session: ratio = median_A / median_B
(> 1: B is faster). Summary: mean and geometric-mean ratio, each with a 95% percentile bootstrap interval (scipy).
Sessions run through resume.py like every study: each session's records (both arms, or a failure record for an arm
that gave none) are appended as it finishes; a rerun of the same experiment resumes, a torn last line is dropped, and
a session counts only when one attempt at it gave both arms valid (every attempt carries its own ab_attempt id).

An arm may be a running OpenAI-compatible server (endpoint.py): `endpoint=URL[,served=NAME][,bpw=B|weight_bits=N]`.
Its part of a session is one `floorline endpoint` measurement (one streamed request of 1 + warmup + steps tokens, a
fresh random prompt seeded by the session and the attempt) made in the session's fresh process, beside the other
arm; its record (mode endpoint) pairs with the other arm's as any record does, so the summary is the same. The
server is probed once before any session starts (reachable, the model served, its name), so a bad arm costs nothing.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import statistics
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

from floorline import quant
from floorline.bench.config import RunConfig, expand_modes, validate
from floorline.bench.device import resolve_device
from floorline.bench.models import ATTN_IMPLEMENTATIONS, TORCH_DTYPES
from floorline.core import floor, gguf, records, stats, zoo
from floorline.core.errors import UserError
from floorline.core.modes import MODES
from floorline.native.options import NativeOptions
from floorline.serve import endpoint
from floorline.study import resume


@dataclass(frozen=True)
class Arm:
    mode: str
    dtype: str
    attn: str
    quant: str = "none"
    # an endpoint arm (mode "endpoint"): the server's URL, the model name it serves, the weight format it holds (for
    # the floor, as in `floorline endpoint`), its GPU's datasheet key. None on floorline's own modes.
    endpoint: str | None = None
    served: str | None = None
    bpw: str | None = None
    weight_bits: int | None = None
    group_size: int | str | None = None  # elements or "row"; None: not given (floor.group_option)
    gpu: str | None = None
    device: str | None = None  # where the server runs, for its copy bandwidth (default: --device; none: skip)
    tp: int = 1  # tensor-parallel GPUs (floorline's own modes)
    allreduce: str = "auto"
    native: str = ""  # mode native's options that differ from the defaults (NativeOptions.text(): "mlp=gemv")

    @property
    def label(self) -> str:
        return self.label_as()

    def label_as(self, dtype: bool = False) -> str:
        """The arm in a few words, its dtype where not bf16 (or always, with dtype: two arms that differ by it)."""
        show = dtype or self.dtype != "bf16"
        if self.endpoint:
            where = self.endpoint.split("://", 1)[-1]
            return " ".join(["endpoint", *([self.served] if self.served else []), "at", where]
                            + ([self.dtype] if show else [])
                            + ([f"bpw={self.bpw}"] if self.bpw else [])
                            + ([f"int{self.weight_bits}"] if self.weight_bits else []))
        return "/".join([self.mode] + ([self.dtype] if show else [])
                        + ([f"attn={self.attn}"] if self.attn != "sdpa" else [])
                        + ([self.quant] if self.quant != "none" else [])
                        + ([f"tp={self.tp}"] if self.tp != 1 else [])
                        + ([f"allreduce={self.allreduce}"] if self.allreduce != "auto" else [])
                        + ([self.native] if self.native else []))

    def fields(self) -> dict:
        """What identifies the arm: its four run fields, and the endpoint fields only when set (so the key of an
        A/B of floorline's modes is what it was before endpoint arms existed: its file still resumes)."""
        return {k: v for k, v in asdict(self).items() if k in ("mode", "dtype", "attn", "quant")
                or v is not None and (k, v) not in (("tp", 1), ("allreduce", "auto"), ("native", ""))}

    def options(self) -> NativeOptions:
        return NativeOptions.parse(self.native)


RUN_KEYS = ("mode", "dtype", "attn", "quant", "tp", "allreduce")
NATIVE_KEYS = NativeOptions.keys()  # mode native's options: mode=native,mlp=gemv
ENDPOINT_KEYS = ("endpoint", "served", "dtype", "bpw", "weight_bits", "group_size", "gpu", "device")


def arm_terms(message: str) -> str:
    """An endpoint's message about its weights in an arm's keys: --weight-bits 4 -> weight_bits=4."""
    for flag, key in (("--weight-bits", "weight_bits"), ("--group-size", "group_size"), ("--bpw", "bpw")):
        message = re.sub(flag + r"(?: (?=[0-9A-Z]|row\b))?", key + "=", message)  # a value after it joins the key
    return message


def parse_arm(spec: str, dtype: str = "bf16", attn: str = "sdpa", quant_: str = "none",
              served: str | None = None, tp: int = 1, allreduce: str = "auto",
              native: NativeOptions = NativeOptions()) -> Arm:
    """'graph', 'mode=graph,dtype=fp16,attn=eager,quant=nf4,tp=2,allreduce=symm' (a bare word is the mode), mode
    native with its options ('mode=native,mlp=gemv,pdl=off': the rest from `native`, the run's --native), or an
    endpoint: 'endpoint=http://127.0.0.1:8000/v1,served=NAME,bpw=Q4_K' (served defaults to `served`, dtype to bf16: the
    server's dense dtype, not this host's)."""
    given: dict[str, str] = {}
    for part in [p.strip() for p in spec.split(",") if p.strip()]:
        k, _, v = part.partition("=") if "=" in part else ("mode", "", part)
        if k not in RUN_KEYS + ENDPOINT_KEYS + NATIVE_KEYS:
            raise UserError(f"arm {spec!r}: unknown key {k!r}; use mode=, dtype=, attn=, quant=, tp=, allreduce=, "
                            f"mode native's {'=, '.join(NATIVE_KEYS)}=, or endpoint=URL with served=, bpw=, "
                            f"weight_bits=, group_size=, gpu=, device=")
        if k in given:  # ("eager,static" once ran static alone, said nowhere)
            raise UserError(f"arm {spec!r}: {k} given twice; an arm is one {k} (compare two as --a and --b)")
        given[k] = v
    if "endpoint" in given or given.get("mode") == "endpoint":
        return _endpoint_arm(spec, given, served)
    extra = [k for k in given if k not in RUN_KEYS + NATIVE_KEYS]
    if extra:
        raise UserError(f"arm {spec!r}: {extra[0]}= belongs to an endpoint arm; add endpoint=URL or drop it")
    items = {k: given.pop(k) for k in NATIVE_KEYS if k in given}
    if items and given.get("mode") != "native":
        raise UserError(f"arm {spec!r}: {next(iter(items))}= is an option of mode native; add mode=native")
    try:
        opts = native.with_items(items)
    except UserError as e:
        raise UserError(f"arm {spec!r}: {e}") from None
    fields = {"mode": None, "dtype": dtype, "attn": attn, "quant": quant_, "tp": tp, "allreduce": allreduce,
              "native": opts.text() if given.get("mode") == "native" else "", **given}
    try:
        fields["tp"] = int(fields["tp"])
    except ValueError:
        raise UserError(f"arm {spec!r}: tp= takes a number of GPUs, got {fields['tp']!r}") from None
    try:
        fields["quant"] = quant.canonical(fields["quant"])
    except UserError as e:
        raise UserError(f"arm {spec!r}: {e}") from None
    arm = Arm(**fields)
    if arm.mode not in MODES:
        raise UserError(f"arm {spec!r}: give a mode, one of {', '.join(MODES)}, or endpoint=URL")
    if arm.dtype not in TORCH_DTYPES:
        raise UserError(f"arm {spec!r}: unknown dtype {arm.dtype!r}; use one of {', '.join(TORCH_DTYPES)}")
    if arm.attn not in ATTN_IMPLEMENTATIONS:
        raise UserError(f"arm {spec!r}: unknown attention {arm.attn!r}; use one of {', '.join(ATTN_IMPLEMENTATIONS)}")
    return arm


def _endpoint_arm(spec: str, given: dict[str, str], served: str | None) -> Arm:
    if not given.get("endpoint"):
        raise UserError(f"arm {spec!r}: an endpoint arm needs the server's URL: endpoint=http://HOST:PORT/v1")
    wrong = [k for k in given if k not in ENDPOINT_KEYS + ("mode",)]
    if wrong:
        raise UserError(f"arm {spec!r}: {wrong[0]}= is for floorline's own modes; an endpoint arm takes served=, "
                        f"dtype=, bpw=, weight_bits=, group_size=, gpu=, device=")
    try:
        endpoint.check_url(given["endpoint"])
    except UserError as e:
        raise UserError(f"arm {spec!r}: {str(e).replace('--url', 'endpoint=')}") from None
    ints = {}
    for k in ("weight_bits", "group_size"):
        if k in given and not (k == "group_size" and given[k] == "row"):
            try:
                ints[k] = int(given[k])
            except ValueError:
                raise UserError(f"arm {spec!r}: {k}= takes a whole number{' or row' * (k == 'group_size')}, "
                                f"got {given[k]!r}") from None
        elif k in given:
            ints[k] = "row"
    dtype = given.get("dtype", "bf16")
    if dtype not in TORCH_DTYPES:
        raise UserError(f"arm {spec!r}: unknown dtype {dtype!r}; use one of {', '.join(TORCH_DTYPES)}")
    try:  # the weights' options as `endpoint` would take them, said in the arm's terms now, not at its first session
        if given.get("bpw"):
            if ints:
                raise UserError(f"bpw= is the average over every weight, its groups' scales included: drop "
                                f"{'= and '.join(ints)}=")
            gguf.parse_bpw(given["bpw"])
        floor.weight_format(dtype, ints.get("weight_bits"),
                            floor.group_option(ints.get("group_size"), ints.get("weight_bits"), dtype,
                                               ("group_size=", "weight_bits=4")))
    except UserError as e:
        raise UserError(f"arm {spec!r}: {arm_terms(str(e))}") from None
    return Arm("endpoint", dtype, "sdpa", "none", endpoint=endpoint.clean_url(given["endpoint"]),
               served=given.get("served") or served, bpw=given.get("bpw"), gpu=given.get("gpu"),
               device=given.get("device"), **ints)


@dataclass
class ABConfig:
    base: RunConfig  # model, ctx, device, warmup, steps, seed; its modes/dtype/attn are replaced by each arm's
    a: Arm
    b: Arm
    sessions: int = 10
    resamples: int = 10_000
    timeout_s: float | None = 1800

    def key(self, legacy: bool = False) -> str:
        """Identifies the experiment in an output file: the same key resumes, another starts afresh. A local folder
        is its name and config digest, however its path is typed (one name typed in two folders is two models); a
        zoo model's key is as it always was. legacy: the key before folders were, the model as typed (its sessions
        are this experiment's too: run_ab)."""
        d = {"base": asdict(self.base), "a": self.a.fields(), "b": self.b.fields()}
        for k in ("modes", "dtype", "attn", "quant", "tp", "allreduce", "native"):
            d["base"].pop(k)
        if not legacy and self.base.model not in zoo.ZOO and Path(self.base.model).is_dir():
            ident = zoo.resolve(self.base.model, need="config").identity()
            d["base"].update(model=ident["model"], model_config_sha256=ident["model_config_sha256"])
        return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


def session_configs(cfg: ABConfig, first: Arm, second: Arm, session: int = 0, attempt: str | None = None) -> list:
    """The session's measurements in order: one RunConfig (one model build) when two floorline arms differ only by
    mode; otherwise one per arm (an EndpointConfig for an endpoint arm)."""
    ab = replace(cfg, base=replace(cfg.base, energy=False))  # the energy window would only lengthen each session
    if not first.endpoint and not second.endpoint and first.tp == 1 and (
            first.dtype, first.attn, first.quant, first.tp, first.allreduce) == (
            second.dtype, second.attn, second.quant, second.tp, second.allreduce) and (
            first.native == second.native or "native" not in (first.mode, second.mode)):
        native = first.native if first.mode == "native" else second.native
        return [replace(ab.base, modes=[first.mode, second.mode], dtype=first.dtype, attn=first.attn,
                        quant=first.quant, native=NativeOptions.parse(native))]
    return [arm_config(ab, arm, session, attempt) for arm in (first, second)]  # tp: a fresh set of ranks each


def arm_config(cfg: ABConfig, arm: Arm, session: int = 0, attempt: str | None = None):
    """The RunConfig of a floorline arm; the EndpointConfig of an endpoint arm (one session: `session`, its prompt
    salted with the attempt id, so a retried session never reuses a prompt the server may hold in its cache)."""
    if arm.endpoint:
        b = cfg.base
        return endpoint.EndpointConfig(
            url=arm.endpoint, model=b.model, ctxs=list(b.ctxs), served_model=arm.served, warmup=b.warmup,
            steps=b.steps, sessions=1, seed=b.seed, dtype=arm.dtype, weight_bits=arm.weight_bits,
            group_size=arm.group_size, bpw=arm.bpw, gpu=arm.gpu, device=arm.device or b.device,
            first_session=session, prompt_salt=int(attempt, 16) if attempt else None)
    return replace(cfg.base, modes=[arm.mode], dtype=arm.dtype, attn=arm.attn, quant=arm.quant, tp=arm.tp,
                   allreduce=arm.allreduce, native=arm.options())


def _arm_of(rec: dict, cfg: ABConfig) -> str | None:
    for name, arm in (("A", cfg.a), ("B", cfg.b)):
        if arm.endpoint:
            if (rec.get("mode"), rec.get("endpoint_url"), rec.get("endpoint_served_model")) == (
                    "endpoint", arm.endpoint, arm.served):
                return name
        elif (rec.get("mode"), rec.get("dtype"), rec.get("attn_implementation"), rec.get("quant") or "none",
                rec.get("tp") or 1) == (arm.mode, arm.dtype, arm.attn, arm.quant, arm.tp) and (
                arm.tp == 1 or arm.allreduce in ("auto", rec.get("allreduce_backend"))) and (
                arm.mode != "native" or NativeOptions.from_record(rec) == arm.options()):
            return name
    return None


def _tag_arm(cfg: ABConfig, rec: dict) -> None:
    rec["ab_arm"] = _arm_of(rec, cfg)


def completed_sessions(recs: list[dict], key: str) -> dict[int, dict[str, dict]]:
    """session -> {"A": record, "B": record} for sessions of this experiment where one attempt gave both arms valid
    (the last such attempt); arms of different attempts are never paired."""
    by: dict[tuple, dict[str, dict]] = {}
    for r in recs:
        if r.get("kind") == "cell" and r.get("ab_key") == key and r.get("valid"):
            by.setdefault((r["ab_session"], r.get("ab_attempt")), {})[r["ab_arm"]] = r
    return {s: d for (s, _), d in by.items() if set(d) == {"A", "B"}}


def session_job(cfg: ABConfig, key: str, s: int) -> resume.Job:
    """Session s: A-B on even sessions, B-A on odd ones; one fresh attempt, its own id on every record."""
    order = (cfg.a, cfg.b) if s % 2 == 0 else (cfg.b, cfg.a)
    order_tag = "A-B" if s % 2 == 0 else "B-A"
    a = zoo.resolve(cfg.base.model, need="config" if cfg.a.endpoint and cfg.b.endpoint else "weights")
    ctx = cfg.base.ctxs[0]
    attempt = uuid.uuid4().hex[:12]
    configs = session_configs(cfg, *order, session=s, attempt=attempt)
    cells = [resume.Cell(a, cfg.base.model, ctx, arm.mode,
                         replace(cfg.base, modes=[arm.mode], ctxs=[ctx], dtype=arm.dtype, attn=arm.attn,
                                 quant=arm.quant, native=arm.options()),
                         endpoint=arm_config(cfg, arm, s, attempt) if arm.endpoint else None)
             for arm in order]
    tags = {"ab_key": key, "ab_session": s, "ab_order": order_tag, "ab_attempt": attempt}
    return resume.Job(f"session {s + 1}/{cfg.sessions} ({order_tag})", cells, configs, tags,
                      annotate=functools.partial(_tag_arm, cfg))


def run_ab(cfg: ABConfig, output: str, log: Callable[[str], None] = lambda s: None) -> dict:
    if cfg.a == cfg.b:
        raise UserError("--a and --b are the same configuration; give two different arms")
    if cfg.sessions < 1:
        raise UserError(f"--sessions must be >= 1, got {cfg.sessions}")
    if cfg.timeout_s is not None and not cfg.timeout_s > 0:
        raise UserError(f"--timeout must be positive seconds, got {cfg.timeout_s}")
    if cfg.resamples < 100:
        raise UserError(f"--resamples must be >= 100 for a percentile interval, got {cfg.resamples}")
    if len(cfg.base.ctxs) != 1:
        raise UserError("ab takes one --ctx; run one A/B per context")
    arms = []
    for arm in (cfg.a, cfg.b):  # fail before any session starts: a bad arm would fail all of them
        arm_cfg = arm_config(cfg, arm)
        if arm.endpoint:  # the inputs, then the server: reachable, the model served (its name fills served=)
            log(f"probing {arm.endpoint}")
            try:
                endpoint.check_inputs(arm_cfg)  # (a pre-quantised --model asks for the arm's weight_bits=)
            except UserError as e:
                raise UserError(f"arm {arm.label}: {arm_terms(str(e))}") from None
            arm = replace(arm, served=endpoint.served_name(arm_cfg))
        else:
            a = zoo.resolve(arm_cfg.model)
            device = resolve_device(arm_cfg.device)
            validate(arm_cfg, a, device.type)
            expand_modes(arm_cfg.modes, device)
            arm = replace(arm, attn=a.attention(arm.attn))  # what its records will say they ran (gpt-oss: eager)
        arms.append(arm)
    cfg = replace(cfg, a=arms[0], b=arms[1])
    if cfg.a.endpoint and (cfg.a.endpoint, cfg.a.served) == (cfg.b.endpoint, cfg.b.served):
        raise UserError(f"--a and --b are the same server and model ({cfg.a.label}); give two different arms")
    if cfg.a == cfg.b:  # (two mode arms told apart by attn= alone)
        raise UserError(f"--a and --b run the same configuration ({cfg.a.label}: {cfg.base.model} runs eager "
                        f"attention whatever attn= says); give two different arms")
    key = cfg.key()
    have = resume.load(output, log)
    # an older file's sessions (keyed by the path as typed) count where they measured this model
    model = resume.cell_key(zoo.resolve(cfg.base.model, need="config").identity())[:2]
    older = {s: d for s, d in completed_sessions(have, cfg.key(legacy=True)).items()
             if resume.cell_key(d["A"])[:2] == model}
    held = {**older, **completed_sessions(have, key)}
    # the sessions asked for: a file holding more of this A/B (an earlier --sessions 3) gives the same summary as one
    # holding just these; the rest stay in the file
    done = {s: d for s, d in held.items() if s < cfg.sessions}
    if len(held) > len(done):
        log(f"{output} holds {len(held)} finished sessions of this A/B; --sessions {cfg.sessions} summarises sessions "
            f"1-{cfg.sessions}")
    if done:
        log(f"resuming: {len(done)} of {cfg.sessions} sessions already in {output}")
    failures = []

    def finished(job: resume.Job, recs: list[dict]) -> None:
        s = job.tags["ab_session"]
        got = completed_sessions(recs, key)
        if s in got:
            done[s] = got[s]
        else:
            reasons = "; ".join(str(r.get("reason")) for r in recs if not r.get("valid"))
            failures.append(f"session {s}: {reasons or 'no records'}")
            log(f"session {s + 1} failed: {failures[-1]}")

    jobs = [session_job(cfg, key, s) for s in range(cfg.sessions) if s not in done]
    resume.run(output, jobs, cfg.timeout_s, started=lambda j: log(f"{j.label}: fresh process"), finished=finished)
    if not done:
        raise UserError(f"no session finished both arms ({'; '.join(failures)[:400]}); try `floorline run` with "
                        f"the same options to see the error")
    summary = summarize(cfg, key, done, failures)
    same = [r for r in have if r.get("kind") == "ab_summary" and r.get("ab_key") == key
            and r.get("sessions") == summary["sessions"] and r.get("bootstrap_resamples") == cfg.resamples]
    if jobs or not same:  # a finished A/B run again reprints its summary; the file has it already
        records.append(output, [summary])
    return summary


def summarize(cfg: ABConfig, key: str, done: dict[int, dict[str, dict]], failures: list[str]) -> dict:
    sessions = sorted(done)
    med_a = [done[s]["A"]["step_ms_median"] for s in sessions]
    med_b = [done[s]["B"]["step_ms_median"] for s in sessions]
    ratios = [a / b for a, b in zip(med_a, med_b)]
    mean, mean_lo, mean_hi = stats.bootstrap_ci(ratios, "mean", cfg.resamples, cfg.base.seed)
    gm, gm_lo, gm_hi = stats.bootstrap_ci(ratios, "gmean", cfg.resamples, cfg.base.seed)
    r0 = done[sessions[0]]["A"]
    return {
        "schema_version": records.SCHEMA_VERSION, "kind": "ab_summary", "run_id": uuid.uuid4().hex, "ab_key": key,
        "model": r0["model"], "model_path": r0.get("model_path"), "model_config_sha256": r0.get("model_config_sha256"),
        "ctx": r0["ctx"], "device_name": r0["device_name"], "device": r0["device"],
        **dict(zip(("arm_a", "arm_b"), (arm.label_as(cfg.a.dtype != cfg.b.dtype) for arm in (cfg.a, cfg.b)))),
        "arm_a_config": cfg.a.fields(), "arm_b_config": cfg.b.fields(),
        "steps": cfg.base.steps, "warmup": cfg.base.warmup, "seed": cfg.base.seed,
        "n_sessions": len(sessions), "sessions_asked": cfg.sessions, "failed_sessions": failures,
        "sessions": sessions, "orders": [done[s]["A"]["ab_order"] for s in sessions],
        "median_ms_a": med_a, "median_ms_b": med_b, "ratios": ratios,
        "ratio_mean": mean, "ratio_mean_ci95": [mean_lo, mean_hi],
        "ratio_gmean": gm, "ratio_gmean_ci95": [gm_lo, gm_hi],
        "ratio_median": statistics.median(ratios), "bootstrap_resamples": cfg.resamples,
        "bootstrap_method": "percentile (scipy.stats.bootstrap)",
        "timestamp": r0.get("timestamp"), "floorline_version": r0.get("floorline_version"),
    }


