"""measure_cells: one model on one device, one context, one or more modes -> one record per mode.

Flow: validate -> achievable bandwidth (best of copy, read, gemv) -> floors -> memory check -> build (random on device, or local) -> quantise and
check (--quant) -> per mode: prefill (chunked) -> prepare (capture / compile) -> warm-up steps -> timed steps ->
energy window -> record; then (--kernels) the decoder-matrix chain.
Records are yielded as each mode finishes, so the caller can write them before the next mode can fail.
"""

from __future__ import annotations

import gc
import importlib.util
import math
import time
import traceback
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator

import torch

from floorline import bandwidth, floor, models, quant, runtimes, specs, stats, system, tp, zoo
from floorline.errors import UserError
from floorline.records import SCHEMA_VERSION
from floorline.timing import time_steps

ENERGY_WINDOW_S = 2.0  # NVML's energy counter updates about every 100 ms: measure over seconds, not a 30-step window
ENERGY_MAX_TOKENS = 512  # cache room reserved for the energy window
SLACK_TOKENS = 8  # cache room for a runtime's prepare steps (graph: 2, compile: 3)
RESULT_KEYS = ("step_ms_median", "step_ms_p90", "samples_ms", "floor_ms_peak", "floor_ms_measured",
               "fraction_of_floor_peak", "fraction_of_floor_measured", "tokens_per_s", "achieved_gbps",
               "paper_floor_ms_peak", "paper_fraction_of_floor_peak")


@dataclass
class RunConfig:
    model: str
    ctxs: list[int]  # one cell per context x mode; the model is built once
    modes: list[str]
    dtype: str = "bf16"
    device: str = "auto"
    warmup: int = 5
    steps: int = 30
    seed: int = 0
    prefill_chunk: int = 1024
    quant: str = "none"  # a quant backend (quant.NAMES) or none
    attn: str = "sdpa"  # transformers attention implementation: sdpa or eager
    energy: bool = True  # the ~2 s NVML energy window after the timed steps (GPU only)
    threads: int = 0  # torch CPU threads in the measuring process; 0: torch's own choice
    kernels: bool = False  # also time the chain of decoder matrices alone (one record of kind "kernels")
    tp: int = 1  # tensor parallelism over this many GPUs: one process per rank (launcher.run_fresh), tp.py's floor
    allreduce: str = "auto"  # the all-reduce of a tp run: nccl or symm on GPUs, gloo on the CPU; auto: nccl / gloo


PREFILL_CHUNK = {"cuda": 1024, "cpu": 256}  # the CPU's smaller chunks: a prefill progress line that moves


def with_defaults(cfg: RunConfig, device_type: str) -> RunConfig:
    """Fill what depends on the device: dtype `auto` (models.default_dtype), prefill chunk None (PREFILL_CHUNK)."""
    return replace(cfg, dtype=models.default_dtype(device_type) if cfg.dtype == "auto" else cfg.dtype,
                   prefill_chunk=PREFILL_CHUNK[device_type] if cfg.prefill_chunk is None else cfg.prefill_chunk)


def resolve_device(spec: str) -> torch.device:
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        d = torch.device(spec)
    except RuntimeError:
        raise UserError(f"unknown device {spec!r}; use auto, cpu, cuda or cuda:N") from None
    if d.type not in ("cpu", "cuda"):
        raise UserError(f"device {spec!r} is not supported; use auto, cpu, cuda or cuda:N")
    if d.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"device {spec!r} asked for, but no CUDA GPU is visible; use --device cpu")
        if (d.index or 0) >= torch.cuda.device_count():
            raise UserError(f"device {spec!r}: only {torch.cuda.device_count()} CUDA device(s) visible")
    return d


def expand_modes(modes: list[str], device: torch.device, quant_name: str | None = None,
                 native: bool | None = None) -> list[str]:
    """`all` -> this device's modes: native with Triton, for dense weights or floorline's int4 (unless `native`)."""
    native = quant.canonical(quant_name) in ("none", "int4") if native is None else native
    out: list[str] = []
    for m in modes:
        for name in runtimes.modes_for(device.type, native) if m == "all" else [m]:
            runtimes.get(name, device.type)  # unknown mode, or graph/compile on the CPU: a UserError
            if name not in out:
                out.append(name)
    return out


def energy_tokens(cfg: RunConfig, a: zoo.Arch, ctx: int, energy: bool) -> int:
    """Cache room for the energy window: ENERGY_MAX_TOKENS, less where the model's max position comes first."""
    return max(0, min(ENERGY_MAX_TOKENS, a.max_pos - ctx - cfg.warmup - cfg.steps - SLACK_TOKENS)) if energy else 0


def cache_len(cfg: RunConfig, a: zoo.Arch, ctx: int, energy: bool) -> int:
    return ctx + cfg.warmup + cfg.steps + SLACK_TOKENS + energy_tokens(cfg, a, ctx, energy)


def memory_need(cfg: RunConfig, a: zoo.Arch, ctx: int, energy: bool) -> tuple[int, int]:
    """(weight bytes, KV-cache bytes) a cell allocates: every parameter (and, for mode native's fused MLP on dense
    weights, its transposed copy of each down matrix), and the cache sized by cache_len."""
    dense = floor.weight_format(cfg.dtype).dense_bytes
    weights = floor.parameter_count(a) * dense
    if "native" in cfg.modes and quant.get(cfg.quant) is None:
        from floorline.native import mlp

        if mlp.enabled():
            weights += a.layers * a.intermediate * a.hidden * dense  # down^T: (intermediate, hidden) a layer
    return weights, cache_len(cfg, a, ctx, energy) * floor.kv_bytes_per_token(a, dense)


def weight_format(cfg: RunConfig) -> floor.WeightFormat:
    """How the decoder matrices of a run are stored: the quant backend's format, or dense in the run's dtype."""
    backend = quant.get(cfg.quant)
    dense = floor.weight_format(cfg.dtype)
    return backend.format(dense.dense_bytes) if backend else dense


def validate(cfg: RunConfig, a: zoo.Arch, device_type: str | None = None) -> None:
    if cfg.dtype not in models.TORCH_DTYPES:
        raise UserError(f"unknown dtype {cfg.dtype!r}; use one of {', '.join(models.TORCH_DTYPES)}")
    backend = quant.get(cfg.quant)
    if "native" in cfg.modes and importlib.util.find_spec("triton") is None:
        raise UserError("mode native needs Triton: pip install 'floorline[native]' (CUDA builds of torch bring it)")
    if "native" in cfg.modes and backend is not None and backend.name != "int4":
        raise UserError(f"mode native runs dense weights or floorline's own int4; use --quant int4 or none, "
                        f"not {backend.name}")
    if backend is not None:
        if cfg.dtype not in backend.dtypes:
            raise UserError(f"{backend.name} runs {'/'.join(backend.dtypes)} activations; use --dtype "
                            f"{backend.dtypes[0]}")
        why = backend.missing(device_type) if device_type else None
        if why:
            raise UserError(why)
    if not cfg.ctxs or min(cfg.ctxs) <= 0:
        raise UserError(f"--ctx must be positive numbers of tokens, got {cfg.ctxs}")
    if cfg.steps < 2 or cfg.warmup < 0:
        raise UserError(f"need --steps >= 2 and --warmup >= 0, got {cfg.steps} and {cfg.warmup}")
    if cfg.attn not in models.ATTN_IMPLEMENTATIONS:
        raise UserError(f"unknown attention {cfg.attn!r}; use one of {', '.join(models.ATTN_IMPLEMENTATIONS)}")
    if cfg.tp != 1 or cfg.allreduce != "auto":
        from floorline import tp_run

        tp_run.validate(cfg, a, device_type)
    if cfg.threads < 0:
        raise UserError(f"--threads must be >= 0 (0: torch's choice), got {cfg.threads}")
    if cfg.prefill_chunk <= 0:
        raise UserError(f"--prefill-chunk must be positive, got {cfg.prefill_chunk}")
    decode = cfg.warmup + cfg.steps + SLACK_TOKENS
    if max(cfg.ctxs) + decode > a.max_pos:
        raise UserError(f"--ctx {max(cfg.ctxs)} + {decode} decode tokens passes {a.name}'s max position "
                        f"{a.max_pos}; use --ctx {a.max_pos - decode} or less")


def _cache_bytes(device: torch.device) -> int:
    """Last-level cache: the GPU's L2, the CPU's largest cache level; 0 when unknown."""
    if device.type == "cuda":
        return getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
    best = 0
    for p in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        t = p.read_text().strip()
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
        try:
            best = max(best, int(t.rstrip("KMG")) * mult)
        except ValueError:
            pass
    return best


def _device_info(device: torch.device) -> dict:
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        spec = specs.detect(name)
    else:
        name, spec = system.cpu_name(), None
    return {"device": str(device), "device_name": name, "gpu_key": spec.key if spec else None,
            "peak_gbps": spec.peak_gbps if spec else None, "peak_source": spec.source if spec else None}


@dataclass
class Session:
    """What every cell of one process shares: the resolved inputs, the measured bandwidth, the built model."""

    cfg: RunConfig
    arch: zoo.Arch
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


def open_session(cfg: RunConfig, log: Callable[[str], None] = lambda s: None) -> Session:
    """Validate, check memory, measure the achievable bandwidth, build the model and the prompt."""
    a = zoo.resolve(cfg.model)
    device = resolve_device(cfg.device)
    modes = expand_modes(cfg.modes, device, cfg.quant)
    validate(replace(cfg, modes=modes), a, device.type)
    comm = None
    if cfg.tp > 1:  # one rank of a tensor-parallel run: join the group, take cuda:rank
        from floorline import tp_run

        comm, device = tp_run.join(cfg, device)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    nvml = system.Nvml(device) if device.type == "cuda" else None
    energy = cfg.energy and nvml is not None and nvml.energy_mj() is not None
    backend = quant.get(cfg.quant)
    fmt = weight_format(cfg)
    models.check_fits(a, device, *memory_need(cfg, a, max(cfg.ctxs), energy))  # the dense build comes first

    base = {"schema_version": SCHEMA_VERSION, "kind": "cell", "model": a.name, "model_path": a.path,
            "quant": quant.canonical(cfg.quant), "dtype": cfg.dtype, "warmup": cfg.warmup, "steps": cfg.steps, "seed": cfg.seed,
            "prefill_chunk": cfg.prefill_chunk, "attn_implementation": cfg.attn, "floor_convention": "strict"}
    base.update(_device_info(device))
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
    n_params = sum(p.numel() for p in model.parameters())
    if n_params != floor.parameter_count(a):
        base["warnings"].append(f"the loaded model has {n_params} parameters, the accounting {floor.parameter_count(a)}")
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
            for mode in ses.modes:
                rec = {**cell, "run_id": uuid.uuid4().hex, "mode": mode, "warnings": list(base["warnings"])}
                if ses.failed:
                    rec.update({"valid": False, "reason": ses.failed, **{k: None for k in RESULT_KEYS}})
                    yield rec
                    continue
                try:
                    rec.update(_measure_mode(ses, mode, ctx, max_len, log))
                    _judge(rec, strict, paper, _cache_bytes(device))
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
            from floorline import matrix_chain

            log("kernels: the chain of decoder matrices")
            yield matrix_chain.chain_record(ses, failed=ses.failed)
    finally:
        ses.close()


def start_runtime(ses: Session, mode: str, ctx: int, max_len: int, log: Callable[[str], None]):
    """A runtime with the prompt prefilled, prepared (captured / compiled) and warmed up: ready to time.
    Returns (runtime, prefill seconds)."""
    cuda = ses.device.type == "cuda"
    rt = runtimes.get(mode, ses.device.type)(ses.model, max_len)
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
    rec["warnings"].extend(stats.sample_warnings(rec))
    if med < strict.ms(meas):
        if strict.bytes <= 2 * cache_bytes:
            rec["warnings"].append(f"faster than the DRAM floor: the working set ({strict.bytes / 1e6:.1f} MB) fits "
                                   f"in the last-level cache ({cache_bytes / 1e6:.1f} MB)")
        else:
            rec.update({"valid": False, "reason": "step time below the memory floor at measured bandwidth: "
                                                  "a timing or accounting bug"})
    if rec.get("native_probe_no_wait"):  # a timing probe: kernels skipped their waits, the tokens are garbage
        rec.update({"valid": False, "reason": "FLOORLINE_PROBE_NO_WAIT=" + ",".join(rec["native_probe_no_wait"])
                    + ": kernels ran without waiting on their inputs (a probe of the boundaries' cost)"})
