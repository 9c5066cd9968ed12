"""measure / bandwidth: validation before anything is built, the verdict on a measured step, the patterns."""

from __future__ import annotations

import pytest
import torch

from floorline.bench import bandwidth, config, device, measure, models
from floorline.bench.config import RunConfig
from floorline.core import floor, zoo
from floorline.core.errors import UserError


def cfg(**kw) -> RunConfig:
    return RunConfig(**{"model": "tiny-llama", "ctxs": [64], "modes": ["eager"], "device": "cpu", "warmup": 1,
                        "steps": 5, **kw})


def test_memory_need_counts_the_native_fused_mlps_copy_of_down():
    a = zoo.ZOO["tiny-llama"]
    plain = config.memory_need(cfg(), a, 64, False)
    native = config.memory_need(cfg(modes=["native"]), a, 64, False)
    dense = floor.weight_format(cfg().dtype).dense_bytes
    assert native[0] - plain[0] == a.layers * a.intermediate * a.hidden * dense and native[1] == plain[1]
    assert config.memory_need(cfg(modes=["native"], quant="int4"), a, 64, False)[0] == plain[0]  # two GEMVs
    assert config.memory_need(cfg(modes=["native"], native="mlp=gemv"), a, 64, False) == plain


# ------------------------------------------------------------------------------------------------------ validate
def test_validate_accepts_the_last_context_that_fits():
    a = zoo.ZOO["tiny-llama"]
    decode = 1 + 5 + config.SLACK_TOKENS
    config.validate(cfg(ctxs=[a.max_pos - decode]), a)
    with pytest.raises(UserError, match=f"use --ctx {a.max_pos - decode} or less"):
        config.validate(cfg(ctxs=[64, a.max_pos - decode + 1]), a)


@pytest.mark.parametrize("kw,match", [
    ({"ctxs": [0]}, "positive"), ({"ctxs": [64, -1]}, "positive"), ({"ctxs": []}, "positive"),
    ({"steps": 1}, "steps"), ({"warmup": -1}, "warmup"), ({"prefill_chunk": 0}, "prefill"),
    ({"dtype": "int8"}, "dtype"),
])
def test_validate_rejects(kw, match):
    with pytest.raises(UserError, match=match):
        config.validate(cfg(**kw), zoo.ZOO["tiny-llama"])


def test_cache_len():
    c = cfg(ctxs=[64, 128], warmup=2, steps=10)
    a = zoo.ZOO["tiny-llama"]
    assert config.cache_len(c, a, 128, energy=False) == 128 + 2 + 10 + config.SLACK_TOKENS
    assert config.cache_len(c, a, 64, energy=True) == 64 + 2 + 10 + config.SLACK_TOKENS + config.ENERGY_MAX_TOKENS
    # near the max position the energy window shrinks so no token decodes past it
    near = a.max_pos - 2 - 10 - config.SLACK_TOKENS - 100
    assert config.energy_tokens(c, a, near, True) == 100
    assert config.cache_len(c, a, near, energy=True) == a.max_pos
    assert config.energy_tokens(c, a, near + 100, True) == 0
    assert config.SLACK_TOKENS >= max(r.prepare_tokens for r in config.runtimes.RUNTIMES.values())


def test_expand_modes():
    cpu = torch.device("cpu")
    assert config.expand_modes(["all"], cpu) == ["eager", "static"]
    assert config.expand_modes(["static", "eager", "static"], cpu) == ["static", "eager"]
    assert config.expand_modes(["all"], torch.device("cuda")) == ["eager", "static", "graph", "compile", "native"]
    assert config.expand_modes(["all"], torch.device("cuda"), "int4") == config.expand_modes(["all"], torch.device("cuda"))
    assert "native" not in config.expand_modes(["all"], torch.device("cuda"), "nf4")  # native runs dense or int4
    with pytest.raises(UserError):
        config.expand_modes(["eager", "graph"], cpu)
    with pytest.raises(UserError):
        config.expand_modes(["fast"], cpu)


def test_resolve_device():
    assert device.resolve_device("cpu") == torch.device("cpu")
    assert device.resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(UserError):
        device.resolve_device("tpu")
    with pytest.raises(UserError):
        device.resolve_device("not a device")
    with pytest.raises(UserError):
        device.resolve_device("cuda:64")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_resolve_cuda_without_gpu():
    with pytest.raises(UserError, match="no CUDA GPU"):
        device.resolve_device("cuda")


# -------------------------------------------------------------------------------------------------- memory check
def test_check_fits_message_and_boundary():
    a = zoo.ZOO["qwen2.5-7b"]
    dev = torch.device("cpu")
    need = int((2_000_000_000 + 1_000_000_000) * 1.1)
    models.check_fits(a, dev, 2_000_000_000, 1_000_000_000, have=need)  # exactly enough
    with pytest.raises(UserError) as e:
        models.check_fits(a, dev, 2_000_000_000, 1_000_000_000, have=need - 1)
    msg = str(e.value)
    assert "out of memory" in msg and "qwen2.5-7b" in msg
    assert "3.30 GB" in msg and "weights 2.00 GB" in msg and "KV cache 1.00 GB" in msg and "3.30 GB is free" in msg
    with pytest.raises(UserError, match=r"0\.00 GB is free"):
        models.check_fits(a, dev, 15_000_000_000, 0, have=1000)


def test_free_bytes_cpu_is_plausible():
    n = models.free_bytes(torch.device("cpu"))
    assert 100 << 20 < n < 1 << 50


def test_measure_cells_refuses_before_building(monkeypatch):
    monkeypatch.setattr(models, "free_bytes", lambda device: 1000)
    monkeypatch.setattr(models, "build", lambda *a, **k: pytest.fail("built a model that cannot fit"))
    monkeypatch.setattr(bandwidth, "achievable_bandwidth", lambda *a, **k: pytest.fail("measured before the memory check"))
    with pytest.raises(UserError, match="out of memory"):
        list(measure.measure_cells(cfg()))


# ---------------------------------------------------------------------------------------------------- the verdict
def _judged(med_ms: float, measured_gbps: float, cache_bytes: int, peak=None, model="qwen2.5-7b", ctx=2048, **extra):
    a = zoo.ZOO[model]
    strict, paper = floor.floor(a, ctx, convention="strict"), floor.floor(a, ctx, convention="paper")
    rec = {"step_ms_median": med_ms, "step_ms_p10": med_ms * 0.99, "step_ms_p90": med_ms * 1.02, "peak_gbps": peak,
           "measured_gbps": measured_gbps, "warnings": [], **extra}
    measure._judge(rec, strict, paper, cache_bytes)
    return rec, strict, paper


def test_judge_figures():
    rec, strict, paper = _judged(20.0, 4000.0, 0, peak=4800)
    assert rec["valid"] is True and rec["reason"] is None and rec["warnings"] == []
    assert rec["tokens_per_s"] == pytest.approx(50.0)
    assert rec["achieved_gbps"] == pytest.approx(strict.bytes / 0.020 / 1e9)
    assert rec["floor_ms_measured"] == pytest.approx(strict.bytes / 4000e9 * 1e3)
    assert rec["floor_ms_peak"] == pytest.approx(2.9706, abs=1e-4)
    assert rec["fraction_of_floor_peak"] == pytest.approx(rec["floor_ms_peak"] / 20.0)
    assert rec["fraction_of_floor_measured"] == pytest.approx(rec["floor_ms_measured"] / 20.0)
    assert rec["paper_floor_ms_peak"] == pytest.approx(paper.bytes / 4800e9 * 1e3)


def test_judge_without_peak():
    rec, _, _ = _judged(20.0, 4000.0, 0, peak=None)
    for k in ("floor_ms_peak", "fraction_of_floor_peak", "paper_floor_ms_peak", "paper_fraction_of_floor_peak"):
        assert rec[k] is None


def test_judge_below_the_floor_is_invalid():
    rec, _, _ = _judged(1.0, 4000.0, cache_bytes=50 << 20)  # 14 GB in 1 ms: impossible
    assert rec["valid"] is False and "below the memory floor" in rec["reason"]


def test_judge_below_the_floor_but_cache_resident_is_a_warning():
    rec, strict, _ = _judged(1e-4, 4000.0, cache_bytes=64 << 20, model="tiny-llama", ctx=64)
    assert 1e-4 < strict.ms(4000.0)
    assert strict.bytes <= 2 * (64 << 20)
    assert rec["valid"] is True and any("last-level cache" in w for w in rec["warnings"])


def test_judge_flags_spread():
    a = zoo.ZOO["tiny-llama"]
    rec = {"step_ms_median": 10.0, "step_ms_p10": 5.0, "step_ms_p90": 20.0, "peak_gbps": None,
           "measured_gbps": 10.0, "warnings": []}
    measure._judge(rec, floor.floor(a, 8), floor.floor(a, 8, convention="paper"), 0)
    assert any("unstable" in w for w in rec["warnings"]) and rec["valid"] is True


# ------------------------------------------------------------------------------------------------------ bandwidth
def test_cpu_copy_bandwidth():
    gbps, samples = bandwidth.copy_bandwidth(torch.device("cpu"), nbytes=16 << 20, reps=4)
    assert len(samples) == 4 and all(s > 0 for s in samples)
    assert min(samples) <= gbps <= max(samples)
    assert 0.1 < gbps < 10_000


# ------------------------------------------------------------------------------------------ achievable bandwidth
def test_achievable_bandwidth_is_the_best_pattern_and_keeps_each():
    bw = bandwidth.achievable_bandwidth(torch.device("cpu"), torch.float32, nbytes=16 << 20, reps=4)
    assert set(bw["patterns"]) == {"copy", "read", "gemv"}  # the native Triton GEMV only on a CUDA GPU
    assert not bandwidth._native_ok(torch.device("cpu"), torch.bfloat16)
    assert bw["gbps"] == max(bw["patterns"].values()) == bw["patterns"][bw["pattern"]]
    assert bw["samples"] == bw["pattern_samples"][bw["pattern"]] and len(bw["samples"]) == 4
    assert all(0.1 < g < 10_000 for g in bw["patterns"].values())


def test_the_floor_and_the_verdict_use_the_best_pattern(monkeypatch):
    # a pattern faster than the copy raises the measured bandwidth: the floor at it drops, the verdict follows it
    fake = {"gbps": 30.0, "samples": [30.0], "pattern": "gemv", "patterns": {"copy": 20.0, "read": 25.0, "gemv": 30.0},
            "pattern_samples": {"copy": [20.0], "read": [25.0], "gemv": [30.0]}}
    monkeypatch.setattr(bandwidth, "achievable_bandwidth", lambda *a, **k: fake)
    rec = next(iter(measure.measure_cells(cfg(steps=3))))
    assert rec["measured_gbps"] == 30.0 and rec["bw_pattern"] == "gemv"
    assert rec["bw_patterns_gbps"] == fake["patterns"]
    assert rec["floor_ms_measured"] == pytest.approx(rec["floor_bytes"] / 30e9 * 1e3)


def test_dtype_auto_follows_native_bf16(monkeypatch):
    monkeypatch.setattr(models, "cpu_has_native_bf16", lambda: False)
    assert config.with_defaults(cfg(dtype="auto", prefill_chunk=None), "cpu").dtype == "fp32"
    monkeypatch.setattr(models, "cpu_has_native_bf16", lambda: True)
    c = config.with_defaults(cfg(dtype="auto", prefill_chunk=None), "cpu")
    assert c.dtype == "bf16" and c.prefill_chunk == config.PREFILL_CHUNK["cpu"]
    assert config.with_defaults(cfg(dtype="auto"), "cuda").dtype == "bf16"
    assert config.with_defaults(cfg(dtype="fp16", prefill_chunk=7), "cpu").dtype == "fp16"  # given: kept


def test_aten_capability_below_avx512_means_no_native_bf16(monkeypatch):
    monkeypatch.undo()  # the real detection, not conftest's pin
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    if "bf16" not in open("/proc/cpuinfo").read().split():  # aarch64 FEAT_BF16 does not depend on ATen's level
        assert models.cpu_has_native_bf16() is False


def test_prefill_reports_its_progress(tiny_llama_fp32):
    from floorline.bench import runtimes

    rt = runtimes.get("eager", "cpu")(tiny_llama_fp32, 128)
    seen = []
    with torch.inference_mode():
        rt.prefill(torch.arange(100).unsqueeze(0), 32, lambda done, n: seen.append((done, n)))
    assert seen == [(32, 100), (64, 100), (96, 100), (100, 100)]


@pytest.fixture(scope="module")
def local_llama(tmp_path_factory):
    from floorline.serve import servedir

    return servedir.write_model_dir(zoo.ZOO["tiny-llama"], tmp_path_factory.mktemp("local") / "llama")


@pytest.mark.parametrize("change, says", [
    ({"num_hidden_layers": 1}, "hold weights the config does not use (model.layers.1."),  # once loaded silently
    ({"num_hidden_layers": 6}, "lack weights the config needs (model.layers.4."),
    ({"intermediate_size": 999}, "[384, 128] in the files, [999, 128] from config.json"),  # once "see above report"
])
def test_a_config_that_does_not_match_its_weights_is_one_line_naming_them(local_llama, tmp_path, change, says):
    import json
    import shutil

    d = shutil.copytree(local_llama, tmp_path / "llama")
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, **change}))
    with pytest.raises(UserError, match="check config.json's sizes and layer count") as e:
        models.build(zoo.resolve(str(d)), torch.device("cpu"), "fp32")
    assert says in str(e.value) and "\n" not in str(e.value)
    assert models.build(zoo.resolve(str(local_llama)), torch.device("cpu"), "fp32") is not None  # the original loads


def test_a_missing_shard_is_named_as_missing(tmp_path):
    m = models.build_random(zoo.ZOO["tiny-llama"], torch.device("cpu"), "fp32", 0, "sdpa")
    m.save_pretrained(tmp_path / "sharded", max_shard_size="200KB")
    shards = sorted((tmp_path / "sharded").glob("*.safetensors"))
    assert len(shards) > 2
    shards[1].unlink()
    with pytest.raises(UserError, match=f"{shards[1].name}.*a file of the checkpoint is missing: copy the whole"):
        models.build(zoo.resolve(str(tmp_path / "sharded")), torch.device("cpu"), "fp32")
