"""predict: calibration recovers known parameters from synthetic records; the published calibration reproduces the
published cells; one regression test of the H200 validation (the README's validation block is generated from the same
records by scripts/readme_tables.py and checked by test_readme); bad inputs are one-line UserErrors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from floorline.core import floor, specs, zoo
from floorline.core.errors import UserError
from floorline.report import predict

RESULTS = Path(__file__).resolve().parents[1] / "results" / "h200"

# the generating parameters of the synthetic records
ETA, OVERHEAD_MS = 0.62, 1.7
COMPILE_ETA, COMPILE_OVERHEAD_MS = 0.8, 0.9
LAUNCH_US = {"eager": 21.0, "static": 7.5}
KERNELS = {"eager": (44.0, 25.0), "static": (52.0, 40.0), "graph": (52.0, 40.0)}  # (per layer, fixed)
MODELS = ("qwen2.5-7b", "llama-3.1-8b", "llama-3.2-1b")  # 28, 32 and 16 layers
GPUS = ("l4", "a100-80gb-sxm", "h100-sxm")


def true_step_ms(model: str, ctx: int, gpu: specs.GpuSpec, mode: str) -> float:
    a = zoo.ZOO[model]
    ms = floor.floor(a, ctx).bytes / (gpu.peak_gbps * 1e9) * 1e3
    if mode == "compile":
        return ms / COMPILE_ETA + COMPILE_OVERHEAD_MS
    t = ms / ETA + OVERHEAD_MS
    if mode in LAUNCH_US:
        per_layer, fixed = KERNELS[mode]
        t += (per_layer * a.layers + fixed) * LAUNCH_US[mode] / 1e3
    return t


def synthetic_records(noise: float = 0.01, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    recs = []
    for g in GPUS:
        gpu = specs.lookup(g)
        for model in MODELS:
            for ctx in (2048, 8192):
                for mode in predict.MODES:
                    t = true_step_ms(model, ctx, gpu, mode) * (1 + noise * rng.standard_normal())
                    recs.append({"schema_version": 1, "kind": "cell", "model": model, "ctx": ctx, "mode": mode,
                                 "dtype": "bf16", "quant": "none", "valid": True, "gpu_key": g,
                                 "peak_gbps": gpu.peak_gbps, "step_ms_median": t,
                                 "floor_bytes": floor.floor(zoo.ZOO[model], ctx).bytes})
    for model in MODELS:  # kernel counts, as `floorline explain` on a GPU records them
        for mode, (per_layer, fixed) in KERNELS.items():
            recs.append({"schema_version": 1, "kind": "explain", "model": model, "ctx": 2048, "mode": mode,
                         "device": "cuda:0", "kernels_per_step": per_layer * zoo.ZOO[model].layers + fixed})
    # noise that must be ignored: an invalid cell, a CPU cell (no peak), a quantised cell, an A/B summary
    junk = dict(recs[0], step_ms_median=1e-3)
    recs += [dict(junk, valid=False), dict(junk, peak_gbps=None), dict(junk, quant="int4"),
             {"schema_version": 1, "kind": "ab_summary", "model": "qwen2.5-7b", "ctx": 2048}]
    return recs


def test_calibrate_recovers_synthetic_parameters():
    cal = predict.calibrate(synthetic_records())
    assert cal.convention == "strict" and cal.overhead_fitted
    assert cal.eta == pytest.approx(ETA, rel=0.02)
    assert cal.overhead_ms == pytest.approx(OVERHEAD_MS, rel=0.1)
    assert cal.compile_fit[0] == pytest.approx(COMPILE_ETA, rel=0.02)
    assert cal.compile_fit[1] == pytest.approx(COMPILE_OVERHEAD_MS, rel=0.15)
    for mode, us in LAUNCH_US.items():
        assert cal.launch_us_per_kernel[mode] == pytest.approx(us, rel=0.03), mode
    for mode, (per_layer, fixed) in KERNELS.items():  # explain counts at 16, 28, 32 layers: a and b both fitted
        assert cal.kernels.per_layer[mode] == pytest.approx(per_layer)
        assert cal.kernels.fixed[mode] == pytest.approx(fixed)
    cells = len(GPUS) * len(MODELS) * 2 * len(predict.MODES)
    assert len(cal.residuals) == cells and cal.n_records == cells + len(MODELS) * len(KERNELS)
    assert max(abs(r["error_pct"]) for r in cal.residuals) < 5  # 1% noise


def test_calibrate_without_noise_is_exact():
    cal = predict.calibrate(synthetic_records(noise=0.0))
    assert cal.eta == pytest.approx(ETA, rel=1e-6) and cal.overhead_ms == pytest.approx(OVERHEAD_MS, rel=1e-6)
    assert cal.launch_us_per_kernel["eager"] == pytest.approx(LAUNCH_US["eager"], rel=1e-6)
    assert max(abs(r["error_pct"]) for r in cal.residuals) < 1e-6


@pytest.mark.parametrize("mode", predict.MODES)
@pytest.mark.parametrize("gpu", ["b200", "l40s", "jetson-agx-thor"])  # none of them in the calibration
def test_predict_unseen_gpu_matches_generating_formula(gpu, mode):
    cal = predict.calibrate(synthetic_records())
    g = specs.lookup(gpu)
    p = predict.predict(cal, zoo.ZOO["mistral-7b-v0.3"], 4096, g, mode)
    want = true_step_ms("mistral-7b-v0.3", 4096, g, mode)
    assert p["step_ms"] == pytest.approx(want, rel=0.03)
    assert not p["in_calibration"]
    assert p["floor_bytes"] == floor.floor(zoo.ZOO["mistral-7b-v0.3"], 4096).bytes
    assert p["floor_ms_peak"] == pytest.approx(p["floor_bytes"] / (g.peak_gbps * 1e9) * 1e3)
    assert p["fraction_of_floor_peak"] == pytest.approx(p["floor_ms_peak"] / p["step_ms"])
    assert p["tokens_per_s"] == pytest.approx(1e3 / p["step_ms"])
    assert p["step_ms"] == pytest.approx(p["bandwidth_term_ms"] + p["overhead_ms"] + p["launch_term_ms"])
    assert (p["launch_term_ms"] > 0) == (mode in predict.HOST_MODES)


def test_one_gpu_calibration_fixes_overhead_at_zero():
    recs = [r for r in synthetic_records(noise=0.0) if r.get("gpu_key") in ("h100-sxm", None)]
    cal = predict.calibrate(recs)
    assert not cal.overhead_fitted and cal.overhead_ms == 0.0
    assert 0 < cal.eta < ETA  # eta absorbs the fixed time
    text = predict.format_prediction(predict.predict(cal, zoo.ZOO["qwen2.5-7b"], 2048, specs.lookup("l4"), "graph"))
    assert "not separable" in text


def test_calibrate_published_reproduces_published_cells():
    pub = json.loads((Path(predict.__file__).parents[1] / "core" / "data" / "published.json").read_text())
    cal = predict.calibrate_published()
    assert cal.convention == "paper" and "published" in cal.source and cal.n_records == 4
    assert set(cal.gpus) == {"h100-sxm", "l4"} and cal.overhead_fitted
    assert 0 < cal.eta <= 1 and cal.overhead_ms > 0 and cal.launch_us_per_kernel["eager"] > 0
    ratio = {ab["gpu_key"]: ab["ratio_mean"] for ab in pub["cuda_graphs_ab"]}
    for cell in pub["cells"]:
        g = specs.lookup(cell["gpu_key"])
        eager = predict.predict(cal, zoo.ZOO[cell["model"]], cell["ctx"], g, "eager")
        graph = predict.predict(cal, zoo.ZOO[cell["model"]], cell["ctx"], g, "graph")
        assert eager["in_calibration"] and eager["convention"] == "paper"
        assert graph["step_ms"] == pytest.approx(cell["step_ms_median"] / ratio[g.key], rel=1e-3)  # 2 points, 2 params
        assert eager["step_ms"] == pytest.approx(cell["step_ms_median"], rel=0.06)  # one launch cost for two hosts
        assert eager["fraction_of_floor_peak"] == pytest.approx(cell["paper_fraction_of_floor_peak"], abs=0.02)
    # the L4 floor in the paper convention, as the study counts it
    l4 = predict.predict(cal, zoo.ZOO["qwen2.5-7b"], 2048, specs.lookup("l4"), "eager")
    assert l4["floor_bytes"] == 15_348_673_536 and l4["floor_ms_peak"] == pytest.approx(51.16, abs=0.01)


def test_format_prediction_shows_inputs_source_and_caveat():
    cal = predict.calibrate_published()
    p = predict.predict(cal, zoo.ZOO["llama-3.1-8b"], 8192, specs.lookup("h200"), "eager")
    text = predict.format_prediction(p)
    assert text.splitlines()[0].startswith("predicted llama-3.1-8b ctx 8192 eager bf16 on H200")
    for s in (f"{p['floor_bytes']:,} B", "paper floor", "4800 GB/s", f"eta {p['eta']:.3f}", "kernels x",
              "published values", "caveat:", "host CPU", f"{p['step_ms']:.2f} ms/step"):
        assert s in text, s
    assert "all parameter bytes + KV read" in text and not p["floor_moe_top_k"]
    moe = predict.predict(cal, zoo.ZOO["qwen3-30b-a3b"], 2048, specs.lookup("l4"), "eager")
    assert moe["floor_moe_top_k"] and "but the experts not routed to" in predict.format_prediction(moe)
    assert moe["floor_bytes"] < floor.floor(zoo.ZOO["qwen3-30b-a3b"], 2048, convention="paper").bytes  # all experts
    # gpt-oss stores its experts in mxfp4: the prediction reads them as `floor` counts them (once bf16: 8.43 GB)
    g, a = predict.predict(cal, zoo.ZOO["gpt-oss-20b"], 2048, specs.lookup("h200"), "graph"), zoo.ZOO["gpt-oss-20b"]
    mx = floor.expert_format("mxfp4")
    paper, strict = (floor.components(a, 2048, convention=c, experts=mx) for c in ("paper", "strict"))
    assert g["floor_bytes"] == sum({**paper, "experts": strict["experts"]}.values()) == 4_919_803_008
    fit = predict.format_calibration(cal)
    assert (f"eta {cal.eta:.3f}, fixed {cal.overhead_ms:.2f} ms; launch eager "
            f"{cal.launch_us_per_kernel['eager']:.2f} us/kernel") in fit
    assert sum(ln.lstrip().startswith(("h100-sxm", "l4")) for ln in fit.splitlines()) == 4  # the 4 residual rows


# ---------------------------------------------------------------------------------- the documented validation
def _h200(name: str) -> list[dict]:
    from floorline.core import records

    path = RESULTS / name
    if not path.is_file():
        pytest.skip(f"{path} is not in this checkout")
    return records.read(path)


def test_validation_h200_across_models_and_contexts():
    core = _h200("core_run.jsonl")
    explain = _h200("explain_qwen2.5-7b_ctx2048.jsonl")
    cal = predict.calibrate([r for r in core if (r["model"], r["ctx"]) == ("qwen2.5-7b", 2048)] + explain)
    assert cal.eta == pytest.approx(0.356, abs=0.001) and cal.overhead_ms == 0.0
    assert cal.launch_us_per_kernel["eager"] == pytest.approx(65.2, abs=0.1)
    assert cal.launch_us_per_kernel["static"] == pytest.approx(17.0, abs=0.1)
    measured = {(r["model"], r["ctx"], r["mode"]): r["step_ms_median"] for r in core}
    h200 = specs.lookup("h200")

    def err_pct(model, ctx, mode):
        p = predict.predict(cal, zoo.ZOO[model], ctx, h200, mode)
        return 100 * (p["step_ms"] / measured[(model, ctx, mode)] - 1)

    # the numbers in predict.py's docstring
    assert err_pct("llama-3.1-8b", 2048, "graph") == pytest.approx(-3.1, abs=0.5)
    assert err_pct("llama-3.1-8b", 2048, "eager") == pytest.approx(1.7, abs=0.5)
    assert err_pct("llama-3.1-8b", 8192, "graph") == pytest.approx(-29.1, abs=0.5)
    assert err_pct("llama-3.1-8b", 8192, "eager") == pytest.approx(80.4, abs=1)
    assert err_pct("qwen2.5-7b", 8192, "graph") == pytest.approx(-24.6, abs=0.5)
    assert err_pct("qwen2.5-7b", 8192, "eager") == pytest.approx(5.8, abs=0.5)


def test_one_gpu_one_layer_count_recovers_eta_and_the_per_layer_kernels():
    # one GPU, one model: c is not separable (0), eta exact when the records have no fixed time; the explain counts
    # at one layer count fit a with b kept from the default model
    gpu, model = specs.lookup("a100-80gb-sxm"), "llama-3.1-8b"
    a = zoo.ZOO[model]
    recs = []
    for ctx in (2048, 4096):
        fl = floor.floor(a, ctx).bytes
        graph = fl / (0.5 * gpu.peak_gbps * 1e9) * 1e3
        kern = 40 * a.layers + predict.FIXED_KERNELS["eager"]
        for mode, t in (("graph", graph), ("eager", graph + kern * 30e-3)):
            recs.append({"schema_version": 1, "kind": "cell", "model": model, "ctx": ctx, "mode": mode,
                         "quant": "none", "valid": True, "gpu_key": gpu.key, "peak_gbps": gpu.peak_gbps,
                         "step_ms_median": t, "floor_bytes": fl})
    recs.append({"schema_version": 1, "kind": "explain", "model": model, "ctx": 2048, "mode": "eager",
                 "device": "cuda:0", "kernels_per_step": 40 * a.layers + predict.FIXED_KERNELS["eager"]})
    cal = predict.calibrate(recs)
    assert cal.eta == pytest.approx(0.5, rel=1e-9) and cal.overhead_ms == 0.0
    assert cal.kernels.per_layer["eager"] == pytest.approx(40.0)
    assert cal.launch_us_per_kernel["eager"] == pytest.approx(30.0, rel=1e-9)


# ------------------------------------------------------------------------------------------------- bad inputs
def _graph_only(recs):
    return [r for r in recs if r.get("mode") == "graph" and r.get("kind") == "cell"]


@pytest.mark.parametrize("recs, match", [
    ([], "no usable records"),
    ([{"kind": "cell", "model": "qwen2.5-7b", "ctx": 2048, "mode": "eager", "valid": True, "peak_gbps": None,
       "step_ms_median": 70.0, "floor_bytes": 1}], "no usable records"),  # a CPU run: no datasheet peak
    ([{"kind": "cell", "model": "qwen2.5-7b", "ctx": 2048, "mode": "eager", "valid": True, "peak_gbps": 300,
       "gpu_key": "l4", "step_ms_median": 62.0, "floor_bytes": 14_258_743_296}], "no usable graph records"),
])
def test_calibrate_bad_inputs(recs, match):
    with pytest.raises(UserError, match=match):
        predict.calibrate(recs)


def test_predict_bad_inputs(tmp_path):
    pub = predict.calibrate_published()
    q, h200 = zoo.ZOO["qwen2.5-7b"], specs.lookup("h200")
    with pytest.raises(UserError, match="unknown mode"):
        predict.predict(pub, q, 2048, h200, "turbo")
    with pytest.raises(UserError, match="no compile records"):
        predict.predict(pub, q, 2048, h200, "compile")
    with pytest.raises(UserError, match="static/graph pair"):
        predict.predict(pub, q, 2048, h200, "static")
    with pytest.raises(UserError, match="--ctx"):
        predict.predict(pub, q, 0, h200, "graph")
    with pytest.raises(UserError, match="--ctx"):
        predict.predict(pub, q, q.max_pos + 1, h200, "graph")
    graph_only = predict.calibrate(_graph_only(synthetic_records()))
    with pytest.raises(UserError, match="eager/graph pair"):
        predict.predict(graph_only, q, 2048, h200, "eager")
    no_kernels = predict.Calibration(eta=0.5, overhead_ms=0.0, launch_us_per_kernel={"eager": 10.0},
                                     kernels=predict.KernelModel({}, {}, "none"), source="test",
                                     convention="strict", n_records=1)
    with pytest.raises(UserError, match="no kernel-count model for mode eager"):
        predict.predict(no_kernels, q, 2048, h200, "eager")
    with pytest.raises(UserError, match="no such file"):
        predict.calibrate_from([str(tmp_path / "missing.jsonl")])
    (tmp_path / "cpu.jsonl").write_text(json.dumps({"schema_version": 1, "kind": "cell", "model": "qwen2.5-0.5b",
                                                    "ctx": 2048, "mode": "eager", "valid": True, "peak_gbps": None,
                                                    "step_ms_median": 74.0}) + "\n")
    with pytest.raises(UserError, match="no usable records"):
        predict.calibrate_from([str(tmp_path / "cpu.jsonl")])


def test_predict_module_does_not_import_torch():
    import ast

    tree = ast.parse(Path(predict.__file__).read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
             for a in n.names} | {n.module.split(".")[0] for n in ast.walk(tree)
                                  if isinstance(n, ast.ImportFrom) and n.module}
    assert "torch" not in names and "transformers" not in names


def test_eta_never_exceeds_one():
    # graph steps faster than the datasheet floor (a bad timing) do not produce eta > 1
    recs = [r for r in synthetic_records(noise=0.0) if r.get("mode") == "graph" and r.get("gpu_key") == "h100-sxm"
            and r.get("valid")]
    fast = [dict(r, step_ms_median=0.5 * r["floor_bytes"] / (r["peak_gbps"] * 1e9) * 1e3) for r in recs]
    assert predict.calibrate(fast).eta == pytest.approx(1.0)


def test_cli_predict_from_results_and_published(capsys):
    from floorline import cli

    h200 = Path(__file__).resolve().parents[1] / "results" / "h200"
    rc = cli.main(["predict", "--model", "llama-3.1-8b", "--ctx", "2048", "--gpu", "h200", "--mode", "graph",
                   "--from", str(h200 / "core_run.jsonl"), "--format", "json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    p = doc["predictions"][0]
    assert p["mode"] == "graph" and p["gpu_key"] == "h200" and p["step_ms"] > p["floor_ms_peak"]
    rc = cli.main(["predict", "--model", "qwen2.5-7b", "--ctx", "2048", "--gpu", "l4"])
    assert rc == 0
    o = capsys.readouterr().out
    assert "published values" in o and "caveat" in o
    rc = cli.main(["predict", "--model", "qwen2.5-7b", "--ctx", "2048", "--gpu", "l4", "--mode", "compile"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "compile" in err[0]


# ------------------------------------------------------------------------------------------------ endpoint records
EP_ETA, EP_OVERHEAD_MS = 0.41, 2.3


def endpoint_records(gpus=GPUS, bpw="Q4_K") -> list[dict]:
    """Records as `floorline endpoint --gpu KEY --bpw Q4_K` writes them, from a server whose step is known."""
    from floorline.core import gguf

    bits, label = gguf.parse_bpw(bpw)
    recs = []
    for g in gpus:
        gpu = specs.lookup(g)
        for model in MODELS:
            for ctx in (2048, 8192):
                b = gguf.floor_at_bpw(zoo.ZOO[model], ctx, bits).bytes
                recs.append({"schema_version": 1, "kind": "cell", "model": model, "ctx": ctx, "mode": "endpoint",
                             "dtype": "bf16", "quant": label, "weight_bits_per_weight": bits, "valid": True,
                             "gpu_key": g, "peak_gbps": gpu.peak_gbps, "floor_bytes": b, "floor_convention": "strict",
                             "step_ms_median": b / (EP_ETA * gpu.peak_gbps * 1e9) * 1e3 + EP_OVERHEAD_MS,
                             "endpoint_server": "llama.cpp", "endpoint_url": "http://127.0.0.1:8080/v1"})
    return recs


def test_endpoint_records_get_their_own_fit_and_leave_graph_alone():
    from floorline.core import gguf

    ep = endpoint_records()
    cpu_ep = dict(ep[0], peak_gbps=None, gpu_key=None)  # measured on a CPU without --gpu: left out, and said so
    cal = predict.calibrate(synthetic_records(noise=0) + ep + [cpu_ep])
    assert cal.eta == pytest.approx(ETA, rel=1e-6) and cal.overhead_ms == pytest.approx(OVERHEAD_MS, rel=1e-6)
    eta, c, fitted = cal.endpoint_fit
    assert eta == pytest.approx(EP_ETA, rel=1e-6) and c == pytest.approx(EP_OVERHEAD_MS, rel=1e-6) and fitted
    assert cal.endpoint_formats == (("q4_k", 4.5, None),)
    p = predict.predict(cal, zoo.ZOO["qwen2.5-7b"], 4096, specs.lookup("h200"), "endpoint")
    b = gguf.floor_at_bpw(zoo.ZOO["qwen2.5-7b"], 4096, 4.5).bytes
    assert p["floor_bytes"] == b and p["launch_term_ms"] == 0.0
    assert p["step_ms"] == pytest.approx(b / (EP_ETA * 4800e9) * 1e3 + EP_OVERHEAD_MS, rel=1e-6)
    text = predict.format_calibration(cal)
    assert "endpoint (its own fit): eta 0.410, fixed 2.30 ms; llama.cpp at http://127.0.0.1:8080/v1" in text
    assert "left out: 1 record(s), endpoint: no datasheet peak_gbps" in text and "--gpu KEY" in text
    assert len([r for r in cal.residuals if r["mode"] == "endpoint"]) == len(ep)
    assert "q4_k, 4.5 bits per weight" in predict.format_prediction(p)


def test_endpoint_records_alone_calibrate_the_endpoint_only():
    cal = predict.calibrate(endpoint_records(gpus=("l4",)))
    assert cal.eta is None and cal.endpoint_fit[2] is False  # one GPU: c not separable, 0
    assert cal.endpoint_fit[1] == 0.0 and 0 < cal.endpoint_fit[0] < EP_ETA  # eta absorbs the fixed time
    p = predict.predict(cal, zoo.ZOO["llama-3.1-8b"], 2048, specs.lookup("h100-sxm"), "endpoint")
    assert p["step_ms"] == pytest.approx(p["floor_bytes"] / (cal.endpoint_fit[0] * 3350e9) * 1e3)
    with pytest.raises(UserError, match="only endpoint records"):
        predict.predict(cal, zoo.ZOO["llama-3.1-8b"], 2048, specs.lookup("h100-sxm"), "graph")
    assert "eta None" not in predict.format_calibration(cal)


def test_endpoint_records_of_two_formats_fit_per_byte_but_predict_asks_for_one():
    cal = predict.calibrate(endpoint_records() + endpoint_records(bpw="Q8_0"))
    assert cal.endpoint_fit[0] == pytest.approx(EP_ETA, rel=1e-6)  # the same server per byte, whatever the format
    with pytest.raises(UserError, match=r"2 weight formats \(q4_k, q8_0\)"):
        predict.predict(cal, zoo.ZOO["qwen2.5-7b"], 2048, specs.lookup("h200"), "endpoint")
    with pytest.raises(UserError, match="no endpoint records"):
        predict.predict(predict.calibrate(synthetic_records()), zoo.ZOO["qwen2.5-7b"], 2048, specs.lookup("h200"),
                        "endpoint")


def test_an_endpoint_records_weight_format_is_counted_as_endpoint_counted_it():
    """int4 with groups, int4 one group a row (--group-size row: weight_group_size None, once counted as a bare 4
    bits a weight, lm_head and all), a ggml width, dense."""
    from floorline.core import gguf
    from floorline.serve import endpoint

    a = zoo.ZOO["llama-3.2-1b"]
    for kw, quant in (({"weight_bits": 4}, "int4-g128"), ({"weight_bits": 4, "group_size": "row"}, "int4-row"),
                      ({"bpw": "Q4_K"}, "q4_k"), ({}, "none")):
        cfg = endpoint.EndpointConfig(url="http://h:1/v1", model="llama-3.2-1b", ctxs=[128], **kw)
        strict, _, rec = endpoint.weight_floors(a, 128, cfg)
        assert rec["quant"] == quant
        got = predict._endpoint_floor(a, 128, predict._endpoint_format(rec), "bf16", "strict")
        assert got.bytes == strict.bytes, quant
    assert gguf.format_floor(a, 128, "bf16", "strict", 4, None).bytes == 1_017_749_504  # the walk's figure
