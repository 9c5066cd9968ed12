"""Predict a decode step on a GPU you do not have: the study's two-term account, calibrated on measured records.

Owns: calibrating the model below from records (or from the study's published values), predicting ms/step and the
fraction of the floor for any GPU in the spec table, and printing a prediction with its inputs. Pure Python + numpy /
scipy (no torch). It reads records (records.read), never measures, and does not touch the records' schema.

The model (per decode step, batch 1)
    replay modes (graph, compile):  t = B / (eta * P) + c
    host-launched modes (eager, static):  t = B / (eta * P) + c + K_mode * l_mode
  B  floor bytes in the convention of the calibration (records: strict; published: paper = all params + KV read)
  P  datasheet peak bandwidth (specs.py)
  eta  fraction of the peak the kernels reach; c  a per-step time that does not shrink with bandwidth (in-graph kernel
     latency, small kernels that cannot fill the memory system). Both from graph records: a least-squares fit of
     t = B/(eta*P) + c weighted by 1/t; c is fitted only when the records span two or more peak bandwidths (on one GPU
     the bytes vary a few percent and c is not separable from eta, so c = 0 and eta absorbs it). compile has its own
     (eta, c) when compile records are given: its fused kernels differ from the graph step's.
  K_mode  kernels per step; l_mode  host cost per kernel launch. A CUDA graph (and compile's reduce-overhead graph)
     replays its kernels without per-kernel host work, so the launch term is 0 there. From pairs of the same
     model/ctx/GPU: l_mode = (t_mode - t_graph) / K_mode (least squares over the pairs). Eager and static get their
     own l: HF's DynamicCache does host work per layer that the static cache does not.
  Napkin math, qwen2.5-7b ctx 2048 on the H200 (strict floor 14.26 GB, 4800 GB/s: 2.97 ms at peak): graph 8.34 ms
     -> eta = 2.97 / 8.34 = 0.356; eager 93.94 ms -> l = (93.94 - 8.34) ms / 1312 kernels = 65 us per kernel.

A running server's records (mode endpoint, from `floorline endpoint` or an `ab` endpoint arm) get their own fit, as
compile does: t = B / (eta_endpoint * P) + c_endpoint, with B the record's floor in the weight format the server was
said to hold (--bpw / --weight-bits), so records of several formats fit together per byte. No launch term: the
server's host loop, HTTP and SSE per token are inside eta_endpoint and c_endpoint (c only from two or more peak
bandwidths, as for graph). A prediction for mode endpoint counts the target's bytes in the format of those records
(one format: with several, the prediction asks for records of one). Records that cannot enter any fit (invalid, no
datasheet peak — a CPU, or a server measured without --gpu —, a quantised floorline mode, a mode without a model
here) are counted by reason and printed with the calibration, so a file whose endpoint records were left out says why.

Kernels per step: K ~= a_mode * layers + b_mode. Measured on the H200 (results/h200/explain_qwen2.5-7b_ctx2048.jsonl,
28 layers): eager 1312, static and graph 1543 (graph replays the captured static step). One model cannot split a from
b, so b (the kernels outside the layers: embedding, rotary tables, final norm, lm_head, argmax, masks) takes the share
the CPU profile shows: `floorline explain` leaf-op counts (what it counted on the CPU then; every aten op since
2026-12-04) of tiny llama / qwen2 models at 2, 4 and 8 layers fit
102-108 ops per layer + 41 outside in eager, 115-121 + 66 in static (ratio b/a 0.38-0.40 and 0.55-0.57); the same
ratio on the GPU gives b = 18 (eager) and 31 (static, graph), so a = (1312 - 18)/28 = 46.2 and (1543 - 31)/28 = 54.0.
For the 7-8B models (28-32 layers) b barely matters (llama-3.1-8b eager: 1497 kernels vs 1499 if b = 0). Explain
records (kind "explain", on a GPU) among the inputs replace these: a fitted per mode when they span two or more layer
counts, else a = (K - b)/layers with b kept. compile has no kernel model (Inductor fuses) and needs none (no launch
term).

Validation (against the committed H200 records and the published points) is in the README, generated from those
records by scripts/readme_tables.py; tests/test_predict.py keeps one regression test of it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from scipy.optimize import lsq_linear

from floorline.core import floor, gguf, modes, published, records, specs, tp, zoo
from floorline.core.arch import Arch
from floorline.core.errors import UserError, not_a_file

REPLAY_MODES = ("graph", "compile")  # no per-kernel host launch cost
HOST_MODES = ("eager", "static")
MODES = tuple(m for m in modes.MODES if m in HOST_MODES + REPLAY_MODES)  # native has no model here (yet)
ENDPOINT = "endpoint"  # a running server (endpoint.py): its own fit, bytes in the format it was said to hold
PREDICTABLE = MODES + (ENDPOINT,)
CAVEAT = ("eta and the launch cost are properties of the software stack and the host CPU, not only of the GPU; "
          "this prediction assumes they transfer to {gpu}.")

# Kernels per step = a * layers + b: a from the H200 explain counts for qwen2.5-7b (28 layers), b from the CPU
# profile's share of kernels outside the layers (see the module docstring).
H200_KERNELS = {"eager": 1312, "static": 1543, "graph": 1543}
H200_LAYERS = 28
FIXED_KERNELS = {"eager": 18.0, "static": 31.0, "graph": 31.0}


@dataclass(frozen=True)
class KernelModel:
    """Kernels per decode step ~= per_layer[mode] * layers + fixed[mode]; modes absent here have no kernel model."""

    per_layer: dict[str, float]
    fixed: dict[str, float]
    source: str

    def kernels(self, mode: str, layers: int) -> float | None:
        if mode not in self.per_layer:
            return None
        return self.per_layer[mode] * layers + self.fixed[mode]


DEFAULT_KERNELS = KernelModel(
    per_layer={m: (k - FIXED_KERNELS[m]) / H200_LAYERS for m, k in H200_KERNELS.items()},
    fixed=dict(FIXED_KERNELS),
    source="H200 explain counts for qwen2.5-7b (eager 1312, static/graph 1543 at 28 layers), "
           "b from the CPU profile's share outside the layers",
)


@dataclass(frozen=True)
class Calibration:
    eta: float | None  # fraction of the peak bandwidth the graph step's kernels reach (also the device part of
    # eager/static); None when the records were a server's only (endpoint_fit)
    overhead_ms: float  # c: per-step time that does not shrink with bandwidth (0 when the fit spans one GPU)
    launch_us_per_kernel: dict[str, float]  # host cost per kernel for the calibrated host-launched modes
    kernels: KernelModel
    source: str  # where the calibration came from, in words
    convention: str  # floor convention of the bytes: strict (records) or paper (published)
    n_records: int  # records used (cells and explain records)
    residuals: list[dict] = field(default_factory=list)  # per calibration cell: measured vs fitted
    gpus: tuple[str, ...] = ()  # GPUs the cells came from
    compile_fit: tuple[float, float] | None = None  # (eta, overhead_ms) of compile records, when any
    overhead_fitted: bool = False  # c was fitted (two or more peak bandwidths), not fixed at 0
    endpoint_fit: tuple[float, float, bool] | None = None  # (eta, overhead_ms, c fitted) of endpoint records
    endpoint_formats: tuple[tuple, ...] = ()  # (quant label, bits per weight, group size) of those records
    endpoint_servers: tuple[str, ...] = ()  # "NAME VERSION at URL" of those records
    skipped: tuple[tuple[str, int], ...] = ()  # (why, how many) records of kind cell that entered no fit

    def replay_params(self, mode: str) -> tuple[float, float] | None:
        if mode == "compile":
            return self.compile_fit
        if mode == ENDPOINT:
            return self.endpoint_fit[:2] if self.endpoint_fit else None
        return None if self.eta is None else (self.eta, self.overhead_ms)


# ------------------------------------------------------------------------------------------------------ calibration
def _layers(model: str, model_path: str | None = None) -> int | None:
    if model in zoo.ZOO:
        return zoo.ZOO[model].layers
    if model_path and Path(model_path).is_dir():
        try:
            return zoo.resolve(model_path).layers
        except UserError:
            return None
    return None


def _cell_bytes(r: dict, convention: str) -> int | None:
    # records: floor_bytes in their floor_convention (strict), paper_floor_bytes alongside
    key = "floor_bytes" if convention == r.get("floor_convention", "strict") else f"{convention}_floor_bytes"
    if r.get(key):
        return int(r[key])
    if r.get("model") in zoo.ZOO:  # published cells carry no bytes: count them from the zoo
        return floor.floor(zoo.ZOO[r["model"]], int(r["ctx"]), floor.weight_format(r.get("dtype") or "bf16"),
                           convention).bytes
    return None


def _why_unusable(r: dict) -> str | None:
    """None for a cell record that can enter a fit; else why not, in words a user can act on."""
    if r.get("valid", True) is not True:
        return "invalid"
    if r.get("mode") not in PREDICTABLE:
        return f"mode {r.get('mode')}: no model of it here"
    if r.get("mode") in MODES and r.get("quant", "none") not in ("none", None):
        return "a quantised floorline mode (the model is of bf16 steps)"
    if not r.get("peak_gbps"):
        return ("no datasheet peak_gbps (a CPU, or a server measured without --gpu: `floorline endpoint --gpu KEY` "
                "labels it)" if r.get("mode") == ENDPOINT else "no datasheet peak_gbps (measured on a CPU or an "
                "unknown GPU)")
    if not (isinstance(r.get("step_ms_median"), (int, float)) and r["step_ms_median"] > 0):
        return "no step time"
    return None


def _usable_cell(r: dict) -> bool:
    return r.get("kind", "cell") == "cell" and _why_unusable(r) is None


def _endpoint_format(r: dict) -> tuple:
    return r.get("quant") or "none", r.get("weight_bits_per_weight"), r.get("weight_group_size")


def _endpoint_floor(arch: Arch, ctx: int, fmt: tuple, dtype: str, convention: str) -> floor.Floor:
    """The floor in an endpoint record's weight format (_endpoint_format: dense, intN with groups, or bits per
    weight), counted as `floorline endpoint` counted it."""
    quant, bits, group = fmt
    if quant == "none":
        return gguf.format_floor(arch, ctx, dtype, convention)
    if str(quant).startswith("int"):  # "int4-g128", or "int4-row": one group a row (weight_group_size None)
        return gguf.format_floor(arch, ctx, dtype, convention, int(bits), int(group) if group else None)
    return gguf.format_floor(arch, ctx, dtype, convention, bpw=float(bits))


def _kernel_model(explain: list[dict]) -> KernelModel:
    """The default model, or one from measured explain records (GPU ones: CPU counts are aten ops, not kernels)."""
    by_mode: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in explain:
        layers = _layers(r.get("model", ""), r.get("model_path"))
        if layers and r.get("mode") in MODES and r.get("kernels_per_step"):
            by_mode[r["mode"]].append((layers, float(r["kernels_per_step"])))
    if not by_mode:
        return DEFAULT_KERNELS
    for a, b in (("static", "graph"), ("graph", "static")):  # graph captures the static step: same kernels
        if a in by_mode and b not in by_mode:
            by_mode[b] = by_mode[a]
    per_layer, fixed = dict(DEFAULT_KERNELS.per_layer), dict(DEFAULT_KERNELS.fixed)
    for mode, pts in by_mode.items():
        L = np.array([p[0] for p in pts], float)
        K = np.array([p[1] for p in pts], float)
        if len(set(L)) >= 2:
            a, b = np.polyfit(L, K, 1)
        else:
            b = FIXED_KERNELS.get(mode, 0.0)
            a = float(np.mean((K - b) / L))
        per_layer[mode], fixed[mode] = float(a), float(b)
    src = ", ".join(f"{m} {sorted({int(k) for _, k in pts})} at {sorted({l for l, _ in pts})} layers"
                    for m, pts in sorted(by_mode.items()))
    return KernelModel(per_layer, fixed, f"explain records: {src}")


def _fit_bandwidth(x_ms: np.ndarray, t_ms: np.ndarray, fit_overhead: bool) -> tuple[float, float]:
    """t = x / eta + c, least squares on relative error, eta <= 1 (nothing beats the datasheet peak), c >= 0."""
    w = 1.0 / t_ms
    if fit_overhead:
        res = lsq_linear(np.column_stack([x_ms * w, w]), np.ones_like(t_ms), bounds=([1.0, 0.0], [np.inf, np.inf]))
        u, c = res.x
    else:
        res = lsq_linear((x_ms * w)[:, None], np.ones_like(t_ms), bounds=([1.0], [np.inf]))
        u, c = res.x[0], 0.0
    return 1.0 / float(u), float(c)


def _fit(rows: list[dict], explain: list[dict], convention: str, source: str) -> Calibration:
    kmodel = _kernel_model(explain)
    # one cell per GPU x model x ctx x dtype x mode (x weight format, for a server): the median of its records' medians
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        gpu = r.get("gpu_key") or r.get("device_name") or f"{r['peak_gbps']} GB/s"
        fmt = _endpoint_format(r) if r["mode"] == ENDPOINT else None  # a server's formats: a cell each (own bytes)
        groups[(gpu, r["model"], int(r["ctx"]), r.get("dtype") or "bf16", r["mode"], fmt)].append(r)
    cells = []
    for (gpu, model, ctx, dtype, mode, _), rs in groups.items():
        b = _cell_bytes(rs[0], convention)
        if b is None:
            continue
        cells.append({"gpu": gpu, "model": model, "ctx": ctx, "dtype": dtype, "mode": mode, "n": len(rs),
                      "peak_gbps": float(rs[0]["peak_gbps"]), "bytes": b,
                      "layers": _layers(model, rs[0].get("model_path")),
                      "measured_ms": float(np.median([r["step_ms_median"] for r in rs]))})
    graph = [c for c in cells if c["mode"] == "graph"]
    served = [c for c in cells if c["mode"] == ENDPOINT]
    if not graph and not served:
        raise UserError("no usable graph records to calibrate on (need valid cell records with mode graph and a "
                        "datasheet peak_gbps); measure some with `floorline run --mode eager,graph` on a known GPU")

    def x_ms(c):  # the floor at peak, ms
        return c["bytes"] / (c["peak_gbps"] * 1e9) * 1e3

    def fit_replay(cs):
        fit_c = len({c["peak_gbps"] for c in cs}) >= 2
        return (*_fit_bandwidth(np.array([x_ms(c) for c in cs]), np.array([c["measured_ms"] for c in cs]), fit_c),
                fit_c)

    eta, c0, fitted = fit_replay(graph) if graph else (None, 0.0, False)
    endpoint_fit = fit_replay(served) if served else None
    comp = [c for c in cells if c["mode"] == "compile"]
    compile_fit = fit_replay(comp)[:2] if comp else None

    graph_ms = {(c["gpu"], c["model"], c["ctx"], c["dtype"]): c["measured_ms"] for c in graph}
    launch = {}
    for mode in HOST_MODES:
        pairs = []  # (kernels, t_mode - t_graph)
        for c in cells:
            tg = graph_ms.get((c["gpu"], c["model"], c["ctx"], c["dtype"]))
            k = kmodel.kernels(mode, c["layers"]) if c["layers"] else None
            if c["mode"] == mode and tg is not None and k:
                pairs.append((k, c["measured_ms"] - tg))
        if pairs:
            K = np.array([p[0] for p in pairs])
            d = np.array([p[1] for p in pairs])
            launch[mode] = max(0.0, float(K @ d / (K @ K))) * 1e3  # ms -> us per kernel

    cal = Calibration(eta=eta, overhead_ms=c0, launch_us_per_kernel=launch, kernels=kmodel, source=source,
                      convention=convention, n_records=0, gpus=tuple(sorted({c["gpu"] for c in cells})),
                      compile_fit=compile_fit, overhead_fitted=fitted, endpoint_fit=endpoint_fit)
    residuals, used = [], 0
    for c in sorted(cells, key=lambda c: (c["gpu"], c["model"], c["ctx"], PREDICTABLE.index(c["mode"]))):
        fitted_ms = _step_ms(cal, c["mode"], c["bytes"], c["peak_gbps"], c["layers"])
        if fitted_ms is None:
            continue  # e.g. static records without a graph pair: not part of any fit
        used += c["n"]
        residuals.append({k: c[k] for k in ("gpu", "model", "ctx", "mode", "n", "measured_ms")}
                         | {"fitted_ms": fitted_ms, "error_pct": 100 * (fitted_ms / c["measured_ms"] - 1)})
    n_explain = len(explain) if kmodel is not DEFAULT_KERNELS else 0
    return replace(cal, n_records=used + n_explain, residuals=residuals)


def calibrate(records_: list[dict], convention: str = "strict", source: str | None = None) -> Calibration:
    """Calibrate from measured records: `floorline run` cells (valid, with a datasheet peak) and, optionally,
    `floorline explain` records from a GPU for the kernel counts. Other records are ignored."""
    if convention not in floor.CONVENTIONS:
        raise UserError(f"unknown convention {convention!r}; use one of {', '.join(floor.CONVENTIONS)}")
    rows = [r for r in records_ if isinstance(r, dict) and _usable_cell(r)]
    explain = [r for r in records_ if isinstance(r, dict) and r.get("kind") == "explain"
               and str(r.get("device", "cuda")).startswith("cuda")]
    skipped: dict[str, int] = defaultdict(int)
    for r in records_:
        if isinstance(r, dict) and r.get("kind", "cell") == "cell" and _why_unusable(r):
            skipped[f"{r.get('mode')}: {_why_unusable(r)}"] += 1
    said = "; ".join(f"{n} {why}" for why, n in sorted(skipped.items()))
    if not rows:
        raise UserError("no usable records to calibrate on (need valid `floorline run` or `floorline endpoint` cells "
                        "with a datasheet peak_gbps, i.e. measured on a GPU in `floorline specs` or with --gpu)"
                        + (f"; left out: {said}" if said else "") + "; pass --from results of such a run")
    served = [r for r in rows if r["mode"] == ENDPOINT]
    cal = _fit(rows, explain, convention, source or "measured records")
    return replace(cal, skipped=tuple(sorted(skipped.items())),
                   endpoint_formats=tuple(sorted({_endpoint_format(r) for r in served}, key=str)),
                   endpoint_servers=tuple(sorted({_server_name(r) for r in served})))


def _server_name(r: dict) -> str:
    name = " ".join(str(x) for x in (r.get("endpoint_server") or "server", r.get("endpoint_server_version")) if x)
    return f"{name} at {r.get('endpoint_url')}"


def calibrate_from(paths: list[str]) -> Calibration:
    """calibrate() over every record of the given JSON-lines files (the CLI's --from)."""
    recs = []
    for p in paths:
        if not Path(p).is_file():
            raise not_a_file(p, "--from takes JSON-lines results of `floorline run`")
        recs += records.read(p, drop_torn_tail=True)  # a killed write's last line, as report leaves it out
    return calibrate(recs, source=f"measured records in {', '.join(paths)}")


def calibrate_published() -> Calibration:
    """Calibrate from the study's published points: per GPU an eager step (the cell) and a graph step (eager / the
    CUDA-graphs A/B ratio). Their fractions use all-parameter bytes + KV, so the bytes here are the paper convention."""
    pub = published.load()
    rows = []
    for cell in pub["cells"]:
        rows.append({**cell, "kind": "cell", "valid": True, "dtype": "bf16"})
        for ab in pub["cuda_graphs_ab"]:
            if (ab["gpu_key"], ab["model"], ab["ctx"], ab["arm_a"]) == (cell["gpu_key"], cell["model"], cell["ctx"],
                                                                         cell["mode"]) and ab["arm_b"] == "graph":
                rows.append({**cell, "kind": "cell", "valid": True, "dtype": "bf16", "mode": "graph",
                             "step_ms_median": cell["step_ms_median"] / ab["ratio_mean"]})
    desc = "; ".join(f"{c['gpu']} eager {c['step_ms_median']} ms" + (f" ({'; '.join(c['derived'])})"
                                                                         if c.get("derived") else "")
                     for c in pub["cells"])
    ratios = "; ".join(f"{a['gpu']} {a['ratio_mean']}" for a in pub["cuda_graphs_ab"])
    src = (f"published values ({pub['source'].split(' (')[0]}): qwen2.5-7b ctx 2048, {desc}; graph = eager / "
           f"CUDA-graphs A/B ratio ({ratios})")
    return _fit(rows, [], "paper", src)


# ------------------------------------------------------------------------------------------------------- prediction
def _step_ms(cal: Calibration, mode: str, nbytes: int, peak_gbps: float, layers: int | None) -> float | None:
    rp = cal.replay_params("graph" if mode in HOST_MODES else mode)  # endpoint: its own (eta, c), no launch term
    if rp is None:
        return None
    eta, c = rp
    t = nbytes / (eta * peak_gbps * 1e9) * 1e3 + c
    if mode in HOST_MODES:
        k = cal.kernels.kernels(mode, layers) if layers else None
        if mode not in cal.launch_us_per_kernel or k is None:
            return None
        t += k * cal.launch_us_per_kernel[mode] / 1e3
    return t


def predict(cal: Calibration, arch: Arch, ctx: int, gpu: specs.GpuSpec, mode: str, dtype: str = "bf16",
            tp_size: int = 1, allreduce_us: float | None = None) -> dict:
    """Predicted ms/step and fraction of the floor at peak, with every input the number was made from.

    tp_size N > 1: the same calibration (one-GPU records) applied to the heaviest rank's bytes (tp.py), plus the
    all-reduces, count x `allreduce_us` (given, or measured by `floorline allreduce`): the ranks' kernels reach the
    same eta on their halves, and each all-reduce is a serial latency no bandwidth hides."""
    if tp_size > 1 and allreduce_us is None:
        raise UserError("predict --tp needs the all-reduce latency: --allreduce-us, or --allreduce-from records of "
                        "`floorline allreduce`")
    if tp_size > 1 and mode == ENDPOINT:
        raise UserError("predict --tp is for floorline's own modes; a server's tensor parallelism is its own")
    if mode not in PREDICTABLE:
        raise UserError(f"unknown mode {mode!r}; use one of {', '.join(PREDICTABLE)}")
    if ctx <= 0 or ctx >= arch.max_pos:  # (the step's token goes at position ctx)
        raise UserError(f"--ctx must be in 1..{arch.max_pos - 1} for {arch.name} (the step's token at position ctx, "
                        f"below its max position {arch.max_pos}), got {ctx}")
    if mode == ENDPOINT:
        return _predict_endpoint(cal, arch, ctx, gpu, dtype)
    if cal.eta is None:
        raise UserError(f"the calibration has only endpoint records, no graph ones; predict --mode endpoint, or pass "
                        f"--from results with mode graph for {mode}")
    if mode == "compile" and cal.compile_fit is None:
        raise UserError("the calibration has no compile records; pass --from results that include mode compile "
                        "(`floorline run --mode graph,compile`), or predict --mode graph")
    kernels = cal.kernels.kernels(mode, arch.layers)
    if mode in HOST_MODES:
        if kernels is None:
            raise UserError(f"no kernel-count model for mode {mode}; pass --from `floorline explain` records of it")
        if mode not in cal.launch_us_per_kernel:
            raise UserError(f"the calibration has no {mode}/graph pair to give the {mode} launch cost; pass --from "
                            f"results with both modes for the same model and ctx (`floorline run --mode {mode},graph`)")
    fmt = floor.weight_format(dtype)
    experts = floor.experts_read(arch, fmt)  # as `floor` counts them (gpt-oss: mxfp4); once always in `dtype`
    fl = (floor.floor(arch, ctx, fmt, cal.convention, experts=experts) if tp_size == 1 else
          tp.floor(arch, ctx, tp_size, fmt, cal.convention))
    if arch.experts and cal.convention == "paper":  # the study's W is a dense model's; a MoE step reads its top-k
        fl = floor.Floor("paper", {**fl.components,
                                   "experts": floor.components(arch, ctx, fmt, experts=experts)["experts"]})
    ar_count = tp.allreduce_count(arch, tp_size)
    allreduce_ms = ar_count * (allreduce_us or 0.0) / 1e3
    eta, c = cal.replay_params(mode if mode in REPLAY_MODES else "graph")
    launch_us = cal.launch_us_per_kernel.get(mode, 0.0) if mode in HOST_MODES else 0.0
    bandwidth_ms = fl.bytes / (eta * gpu.peak_gbps * 1e9) * 1e3
    launch_ms = (kernels or 0.0) * launch_us / 1e3
    step = bandwidth_ms + c + launch_ms + allreduce_ms
    floor_ms = fl.ms(gpu.peak_gbps)
    return {
        "model": arch.name, "ctx": ctx, "mode": mode, "dtype": dtype, "gpu_key": gpu.key, "gpu": gpu.name,
        "peak_gbps": gpu.peak_gbps, "convention": cal.convention, "floor_bytes": fl.bytes, "floor_ms_peak": floor_ms,
        "eta": eta, "bandwidth_term_ms": bandwidth_ms, "overhead_ms": c,
        "kernels_per_step": kernels, "launch_us_per_kernel": launch_us, "launch_term_ms": launch_ms,
        "step_ms": step, "fraction_of_floor_peak": (floor_ms + allreduce_ms) / step,  # N > 1: the all-reduces are in
        # the floor
        "tokens_per_s": 1e3 / step,
        "in_calibration": gpu.key in cal.gpus, "calibration_source": cal.source,
        "calibration_n_records": cal.n_records, "calibration_gpus": list(cal.gpus),
        "overhead_fitted": cal.overhead_fitted, "caveat": CAVEAT.format(gpu=gpu.name),
        "tp": tp_size, "allreduce_count": ar_count, "allreduce_us": allreduce_us, "allreduce_term_ms": allreduce_ms,
        "floor_moe_top_k": bool(arch.experts),  # a MoE's floor counts the top-k routed experts (either convention)
    }


def _predict_endpoint(cal: Calibration, arch: Arch, ctx: int, gpu: specs.GpuSpec, dtype: str) -> dict:
    if cal.endpoint_fit is None:
        raise UserError("the calibration has no endpoint records; pass --from results of `floorline endpoint` (or an "
                        "`ab` endpoint arm) measured with a datasheet peak (--gpu KEY)")
    if len(cal.endpoint_formats) != 1:
        raise UserError(f"the endpoint records hold {len(cal.endpoint_formats)} weight formats "
                        f"({', '.join(f[0] for f in cal.endpoint_formats)}); pass --from records of one format, the "
                        f"one to predict")
    fmt = cal.endpoint_formats[0]
    fl = _endpoint_floor(arch, ctx, fmt, dtype, cal.convention)
    eta, c, fitted = cal.endpoint_fit
    bandwidth_ms = fl.bytes / (eta * gpu.peak_gbps * 1e9) * 1e3
    step = bandwidth_ms + c
    floor_ms = fl.ms(gpu.peak_gbps)
    return {
        "model": arch.name, "ctx": ctx, "mode": ENDPOINT, "dtype": dtype, "gpu_key": gpu.key, "gpu": gpu.name,
        "peak_gbps": gpu.peak_gbps, "convention": cal.convention, "floor_bytes": fl.bytes, "floor_ms_peak": floor_ms,
        "eta": eta, "bandwidth_term_ms": bandwidth_ms, "overhead_ms": c,
        "kernels_per_step": None, "launch_us_per_kernel": 0.0, "launch_term_ms": 0.0,
        "step_ms": step, "fraction_of_floor_peak": floor_ms / step, "tokens_per_s": 1e3 / step,
        "in_calibration": gpu.key in cal.gpus, "calibration_source": cal.source,
        "calibration_n_records": cal.n_records, "calibration_gpus": list(cal.gpus),
        "overhead_fitted": fitted, "caveat": CAVEAT.format(gpu=gpu.name),
        "endpoint_weight_format": {"quant": fmt[0], "weight_bits_per_weight": fmt[1], "weight_group_size": fmt[2]},
        "endpoint_servers": list(cal.endpoint_servers),
    }


# ---------------------------------------------------------------------------------------------------------- display
def format_prediction(pred: dict) -> str:
    p = pred
    conv = "strict floor" if p["convention"] == "strict" else "paper floor: all parameter bytes + KV read"
    if p.get("floor_moe_top_k") and p["convention"] == "paper":  # what a MoE step reads, not `floor --convention paper`
        conv = "paper floor: all parameter bytes but the experts not routed to (the top-k a layer) + KV read"
    k = "-" if p["kernels_per_step"] is None else f"{p['kernels_per_step']:.0f}"
    launch = (f"{k} kernels x {p['launch_us_per_kernel']:.2f} us = {p['launch_term_ms']:.2f} ms"
              if p["mode"] in HOST_MODES else "0 (a server's own time per token is inside its eta and fixed time)"
              if p["mode"] == ENDPOINT else "0 (replayed graph: no per-kernel host launch)")
    if p["mode"] == ENDPOINT:
        f = p["endpoint_weight_format"]
        conv += f"; weights as the endpoint records: {f['quant']}, {f['weight_bits_per_weight']:g} bits per weight"
    lines = [
        f"predicted {p['model']} ctx {p['ctx']} {p['mode']} {p['dtype']} on {p['gpu']}: {p['step_ms']:.2f} ms/step, "
        f"{p['tokens_per_s']:.1f} tok/s, {100 * p['fraction_of_floor_peak']:.1f}% of the floor at peak",
        f"  floor: {p['floor_bytes']:,} B ({conv}) / {p['peak_gbps']:g} GB/s = {p['floor_ms_peak']:.3f} ms"
        + (f" per GPU of {p['tp']}, + the all-reduces {p['allreduce_term_ms']:.3f} ms" if p.get("tp", 1) > 1 else ""),
        f"  step = bytes / (eta {p['eta']:.3f} x peak) {p['bandwidth_term_ms']:.2f} ms"
        f" + fixed {p['overhead_ms']:.2f} ms + launch {launch}"
        + (f" + all-reduces {p['allreduce_count']} x {p['allreduce_us']:.2f} us = {p['allreduce_term_ms']:.3f} ms"
           if p.get("tp", 1) > 1 else ""),
        f"  calibration: {p['calibration_source']}; {p['calibration_n_records']} records from "
        f"{', '.join(p['calibration_gpus'])}" + (" (this GPU is one of them)" if p["in_calibration"] else ""),
    ]
    if not p["overhead_fitted"]:
        lines.append("  note: calibrated on one GPU, so the fixed per-step time is not separable (0 here) and eta "
                     "absorbs it; far from that GPU's bandwidth this is unreliable")
    lines.append(f"  caveat: {p['caveat']}")
    return "\n".join(lines)


def format_calibration(cal: Calibration) -> str:
    """The fit: its parameters, then each calibration cell measured vs fitted."""
    launch = ", ".join(f"{m} {v:.2f} us/kernel" for m, v in cal.launch_us_per_kernel.items()) or "none"
    comp = f"; compile eta {cal.compile_fit[0]:.3f}, fixed {cal.compile_fit[1]:.2f} ms" if cal.compile_fit else ""
    lines = [f"calibration ({cal.convention} floor) from {cal.source}: {cal.n_records} records"]
    if cal.eta is not None:
        lines += [f"  eta {cal.eta:.3f}, fixed {cal.overhead_ms:.2f} ms"
                  f"{'' if cal.overhead_fitted else ' (one GPU: not fitted)'}{comp}; launch {launch}",
                  f"  kernels per step: {cal.kernels.source}"]
    if cal.endpoint_fit:
        e, c, fitted = cal.endpoint_fit
        lines.append(f"  endpoint (its own fit): eta {e:.3f}, fixed {c:.2f} ms"
                     f"{'' if fitted else ' (one GPU: not fitted)'}; {', '.join(cal.endpoint_servers)}; weights "
                     f"{', '.join(f[0] for f in cal.endpoint_formats)}")
    for why, n in cal.skipped:
        lines.append(f"  left out: {n} record(s), {why}")
    for r in cal.residuals:
        lines.append(f"  {r['gpu']:<10} {r['model']:<14} ctx {r['ctx']:<6} {r['mode']:<8} n={r['n']:<3} observed "
                     f"{r['measured_ms']:8.2f} ms  fitted {r['fitted_ms']:8.2f} ms  {r['error_pct']:+6.1f}%")
    return "\n".join(lines)
