"""measure_cells: one model on one device, one context, one or more modes -> one record per mode.

Flow: validate -> achievable bandwidth (best of copy, read, gemv) -> floors -> memory check -> build (random on device, or local) -> quantise and
check (--quant) -> per mode: prefill (chunked) -> prepare (capture / compile) -> warm-up steps -> timed steps ->
energy window -> record; then (--kernels) the decoder-matrix chain.
Records are yielded as each mode finishes, so the caller can write them before the next mode can fail.
"""

from __future__ import annotations

import gc
import math
import time
import traceback
import uuid
from dataclasses import dataclass, replace
from typing import Callable, Iterator

import torch

from floorline import quant
from floorline.bench import bandwidth, models, moe, runtimes, system
from floorline.bench import device as device_mod
from floorline.bench.config import (
    ENERGY_WINDOW_S,
    RunConfig,
    cache_len,
    energy_tokens,
    expand_modes,
    memory_need,
    validate,
    weight_format,
)
from floorline.core import floor, stats, tp, zoo
from floorline.core.arch import Arch
from floorline.core.errors import UserError
from floorline.core.records import SCHEMA_VERSION
from floorline.device.timing import time_steps

RESULT_KEYS = ("step_ms_median", "step_ms_p90", "samples_ms", "floor_ms_peak", "floor_ms_measured",
               "fraction_of_floor_peak", "fraction_of_floor_measured", "tokens_per_s", "achieved_gbps",
               "paper_floor_ms_peak", "paper_fraction_of_floor_peak")


@dataclass
class Session:
    """What every cell of one process shares: the resolved inputs, the measured bandwidth, the built model."""

    cfg: RunConfig
    arch: Arch
    device: torch.device
    modes: list[str]
    nvml: system.Nvml | None
    energy: bool
    fmt: floor.WeightFormat
    base: dict  # the record keys common to every cell
    model: torch.nn.Module
    prompt: torch.Tensor  # (1, max ctx) random token ids
    failed: str | None = None  # the quant conversion or its check failed: every cell is recorded invalid, untimed

    def close(self) -> None:
        self.model = self.prompt = None
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


UNREAD_TOWERS = ("vision_tower", "multi_modal_projector")  # modules of a multimodal model that text decode never reads


def open_session(cfg: RunConfig, log: Callable[[str], None] = lambda s: None) -> Session:
    """Validate, check memory, measure the achievable bandwidth, build the model and the prompt."""
    a = zoo.resolve(cfg.model)
    device = device_mod.resolve_device(cfg.device)
    modes = expand_modes(cfg.modes, device, cfg.quant, arch=a)
    validate(replace(cfg, modes=modes), a, device.type)
    models.check_builds(a)  # before the bandwidth probe: a config transformers cannot build is said at once
    comm = None
    if cfg.tp > 1:  # one rank of a tensor-parallel run: join the group, take cuda:rank
        from floorline.bench import tp_run

        comm, device = tp_run.join(cfg, device)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    nvml = system.Nvml(device) if device.type == "cuda" else None
    energy = cfg.energy and nvml is not None and nvml.energy_mj() is not None
    backend = quant.get(cfg.quant)
    fmt = weight_format(cfg)
    models.check_fits(a, device, *memory_need(cfg, a, max(cfg.ctxs), energy))  # the dense build comes first

    base = {"schema_version": SCHEMA_VERSION, "kind": "cell", **a.identity(),
            "quant": quant.canonical(cfg.quant), "dtype": cfg.dtype, "warmup": cfg.warmup, "steps": cfg.steps, "seed": cfg.seed,
            "prefill_chunk": cfg.prefill_chunk, "attn_implementation": a.attention(cfg.attn),
            "floor_convention": "strict", **cfg.native.record()}
    base.update(device_mod.device_info(device))
    if comm is not None:
        base.update(tp_run.record_base(cfg, a, comm))
    base.update(system.environment())
    if nvml is not None:
        base["driver_version"] = nvml.driver()

    log(f"measuring achievable bandwidth on {device} (copy, read, gemv)")
    bw = bandwidth.achievable_bandwidth(device, models.TORCH_DTYPES[cfg.dtype])
    base.update({"measured_gbps": bw["gbps"], "bw_samples_gbps": bw["samples"], "bw_pattern": bw["pattern"],
                 "bw_patterns_gbps": bw["patterns"], "bw_pattern_samples_gbps": bw["pattern_samples"]})

    log(f"building {a.name} ({'local weights' if a.path else 'random weights'}, {cfg.dtype}) on {device}")
    torch.manual_seed(cfg.seed)
    t0 = time.perf_counter()
    model = (tp_run.build(cfg, a, device, comm) if comm is not None else
             models.build(a, device, cfg.dtype, cfg.seed, cfg.attn))
    base["build_s"] = time.perf_counter() - t0
    base["warnings"] = []
    # a multimodal checkpoint (Gemma 3 4B+) loads its vision tower too, which a text decode step never reads
    n_params = unread = 0
    for name, p in model.named_parameters():
        n_params += p.numel()
        unread += p.numel() if any(t in name.split(".") for t in UNREAD_TOWERS) else 0
    base["unread_parameters"] = unread
    if n_params - unread != floor.parameter_count(a):
        base["warnings"].append(f"the loaded model has {n_params - unread} parameters"
                                + (f" besides its vision tower's {unread}" if unread else "")
                                + f", the accounting {floor.parameter_count(a)}")
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    prompt = torch.randint(0, a.vocab, (1, max(cfg.ctxs)), generator=gen, device=device)  # random, never zeros
    ses = Session(cfg, a, device, modes, nvml, energy, fmt, base, model, prompt)
    if backend is not None:
        ses.failed = _quantise(ses, backend, log)
    return ses


def _quantise(ses: Session, backend: quant.Backend, log: Callable[[str], None]) -> str | None:
    """Convert and check every decoder matrix, then check the logits are finite. Returns why it failed, or None."""
    base, a = ses.base, ses.arch
    base.update({"quant_library": backend.library, "quant_version": backend.version(), "quant_format": ses.fmt.name,
                 "quant_quantiser": backend.quantiser, "quant_kernel": backend.kernel,
                 "activation_dtype": ses.cfg.dtype})
    log(f"{backend.name}: converting and checking {a.layers * 7} decoder matrices")
    try:
        conv = quant.convert(ses.model, backend, models.TORCH_DTYPES[ses.cfg.dtype], log=log)
        with torch.inference_mode():
            logits = ses.model(input_ids=ses.prompt[:, :16], use_cache=False).logits
        finite = bool(torch.isfinite(logits).all())
    except (UserError, torch.OutOfMemoryError):
        raise
    except quant.QuantCheckError as e:
        return f"quant check failed: {e}"
    except Exception as e:  # the library itself failed (an import, a kernel build, a launch): not timed
        msg = (str(e).strip().splitlines() or [""])[0][:300]
        return f"quant {backend.name} failed: {type(e).__name__}: {msg}"
    want = floor.components(a, 0, ses.fmt)["decoder_matrices"]
    base.update({"quant_convert_s": conv.seconds, "quant_matrices": conv.layers,
                 "quant_check_max_rel_error": conv.max_check_error, "quant_check_worst_layer": conv.worst_layer,
                 "quant_check_bound": backend.check_tolerance, "quant_weight_rel_error": conv.quant_error,
                 "quant_stored_matrix_bytes": conv.stored_bytes})
    if conv.stored_bytes != want:
        base["warnings"].append(f"the converted matrices store {conv.stored_bytes} bytes, the floor counts {want}")
    if not finite:
        return "quant check failed: the converted model's logits are not finite"
    return None


def measure_cells(cfg: RunConfig, log: Callable[[str], None] = lambda s: None,
                  debug: bool = False) -> Iterator[dict]:
    """One record per context x mode, yielded as each finishes."""
    ses = open_session(cfg, log)
    a, device, base, fmt = ses.arch, ses.device, ses.base, ses.fmt
    try:
        for ctx in cfg.ctxs:
            strict = floor.floor(a, ctx, fmt, "strict") if cfg.tp == 1 else tp.floor(a, ctx, cfg.tp, fmt, "strict")
            paper = floor.floor(a, ctx, fmt, "paper") if cfg.tp == 1 else tp.floor(a, ctx, cfg.tp, fmt, "paper")
            max_len = cache_len(cfg, a, ctx, ses.energy)
            cell = {**base, "ctx": ctx, "max_cache_len": max_len, "floor_bytes": strict.bytes,
                    "paper_floor_bytes": paper.bytes, **{f"floor_bytes_{k}": v for k, v in strict.components.items()}}
            if a.experts and not ses.failed:  # the experts the routers choose at this context (untimed, eager)
                log(f"routing: the experts {a.name}'s routers choose over 8 steps at ctx {ctx}")
                cell.update(moe.record_fields(a, moe.route(ses.model, a, ses.prompt[:, :ctx]), ctx, fmt))
            for mode in ses.modes:
                rec = {**cell, "run_id": uuid.uuid4().hex, "mode": mode, "warnings": list(base["warnings"])}
                if ses.failed:
                    rec.update({"valid": False, "reason": ses.failed, **{k: None for k in RESULT_KEYS}})
                    yield rec
                    continue
                try:
                    rec.update(_measure_mode(ses, mode, ctx, max_len, log))
                    _judge(rec, strict, paper, device_mod.cache_bytes(device))
                except torch.OutOfMemoryError:
                    raise UserError(
                        f"out of memory in mode {mode}: {a.name} at ctx {ctx} needs about "
                        f"{sum(memory_need(cfg, a, ctx, ses.energy)) / 1e9:.2f} GB of weights + KV, "
                        f"{models.free_bytes(device) / 1e9:.2f} GB free now; use a smaller model or --ctx") from None
                except UserError:
                    raise
                except Exception as e:  # a crashed mode is recorded invalid; the other modes still run
                    if debug:
                        traceback.print_exc()
                    msg = (str(e).strip().splitlines() or [""])[0][:300]
                    rec.update({"valid": False, "reason": f"crash: {type(e).__name__}: {msg}"})
                    for k in RESULT_KEYS:
                        rec.setdefault(k, None)
                yield rec
        if cfg.kernels:
            from floorline.bench import matrix_chain

            log("kernels: the chain of decoder matrices")
            yield matrix_chain.chain_record(ses, failed=ses.failed)
    finally:
        ses.close()


def start_runtime(ses: Session, mode: str, ctx: int, max_len: int, log: Callable[[str], None]):
    """A runtime with the prompt prefilled, prepared (captured / compiled) and warmed up: ready to time.
    Returns (runtime, prefill seconds)."""
    cuda = ses.device.type == "cuda"
    options = {"options": ses.cfg.native} if mode == "native" else {}
    rt = runtimes.get(mode, ses.device.type)(ses.model, max_len, **options)
    log(f"{mode}: prefill 0/{ctx} tokens")
    t0 = time.perf_counter()

    def progress(done: int, n: int) -> None:
        s = time.perf_counter() - t0
        eta = f", about {s * (n - done) / done:.0f} s to go" if done < n else ""
        log(f"{mode}: prefill {done}/{n} tokens ({s:.0f} s{eta})")

    rt.prefill(ses.prompt[:, :ctx], ses.cfg.prefill_chunk, progress)
    if cuda:
        torch.cuda.synchronize()
    prefill_s = time.perf_counter() - t0
    if rt.prepare_tokens:
        log(f"{mode}: {'capturing the CUDA graph' if mode == 'graph' else 'compiling'}")
    rt.prepare()
    log(f"{mode}: {ses.cfg.warmup} warm-up steps")
    for _ in range(ses.cfg.warmup):
        rt.step()
    if cuda:
        torch.cuda.synchronize()
    return rt, prefill_s


def _measure_mode(ses: Session, mode: str, ctx: int, max_len: int, log) -> dict:
    cuda, nvml = ses.device.type == "cuda", ses.nvml
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(ses.device)
    out: dict = {}
    rt = None
    try:
        with torch.inference_mode():
            rt, out["prefill_s"] = start_runtime(ses, mode, ctx, max_len, log)
            out.update({"prepare_s": rt.prepare_s, "prepare_tokens": rt.prepare_tokens, **rt.describe()})
            log(f"{mode}: {ses.cfg.steps} timed steps")
            before = nvml.snapshot() if nvml else {}
            samples = time_steps(rt.step, ses.cfg.steps, ses.device)  # the timed region
            after = nvml.snapshot() if nvml else {}
            rt.check()
            s = stats.summarize(samples)
            room = energy_tokens(ses.cfg, ses.arch, ctx, ses.energy)
            if room:
                log(f"{mode}: energy window")
                out.update(_energy_window(rt, nvml, s["step_ms_median"], room))
            out["position_end"] = int(rt.pos.item())
    finally:
        if rt is not None:
            rt.close()
        del rt
        gc.collect()
        if cuda:
            out["peak_mem_allocated_bytes"] = torch.cuda.max_memory_allocated(ses.device)
            torch.cuda.empty_cache()
    out.update(s)
    out["samples_ms"] = samples
    out.update({f"{k}_before": v for k, v in before.items()})
    out.update({f"{k}_after": v for k, v in after.items()})
    return out


def _energy_window(rt, nvml, median_ms: float, room: int) -> dict:
    """Decode on for about ENERGY_WINDOW_S (the cache keeps growing) and divide the NVML energy by its tokens."""
    n = min(room, max(1, math.ceil(ENERGY_WINDOW_S * 1e3 / median_ms)))
    torch.cuda.synchronize()
    e0, t0 = nvml.energy_mj(), time.perf_counter()
    for _ in range(n):
        rt.step()
    torch.cuda.synchronize()
    e1, t1 = nvml.energy_mj(), time.perf_counter()
    if e0 is None or e1 is None:
        return {"energy_j_per_token": None}
    return {"energy_j_per_token": (e1 - e0) / 1e3 / n, "energy_window_tokens": n, "energy_window_s": t1 - t0}


def _judge(rec: dict, strict: floor.Floor, paper: floor.Floor, cache_bytes: int) -> None:
    """Derived figures, and the validity verdict: a step under the floor at measured bandwidth is a bug unless the
    whole working set fits in the last-level cache (the tiny test models on a CPU)."""
    med = rec["step_ms_median"]
    peak, meas = rec["peak_gbps"], rec["measured_gbps"]
    rec.update({
        "tokens_per_s": 1e3 / med,
        "achieved_gbps": strict.bytes / (med * 1e-3) / 1e9,
        "floor_ms_peak": strict.ms(peak), "floor_ms_measured": strict.ms(meas),
        "fraction_of_floor_peak": strict.ms(peak) / med if peak else None,
        "fraction_of_floor_measured": strict.ms(meas) / med,
        "paper_floor_ms_peak": paper.ms(peak),
        "paper_fraction_of_floor_peak": paper.ms(peak) / med if peak else None,
        "valid": True, "reason": None,
    })
    for k in ("routed", "all_experts"):  # MoE: the routed experts' floor, and every expert's (moe.py)
        if f"floor_bytes_{k}" in rec:
            rec[f"fraction_of_{k}_floor_measured"] = rec[f"floor_bytes_{k}"] / (meas * 1e9) * 1e3 / med
    rec["warnings"].extend(stats.sample_warnings(rec))
    if med < strict.ms(meas):
        if strict.bytes <= 2 * cache_bytes:
            rec["warnings"].append(f"faster than the DRAM floor: the working set ({strict.bytes / 1e6:.1f} MB) fits "
                                   f"in the last-level cache ({cache_bytes / 1e6:.1f} MB)")
        else:
            rec.update({"valid": False, "reason": "step time below the memory floor at measured bandwidth: "
                                                  "a timing or accounting bug"})
