"""GPU checks (skipped without CUDA; run by scripts/gpu_check.sh on the H200 machine): graph replays and compiled
steps are the same real tokens as the static runtime, measure_cells records the GPU's state, the copy bandwidth is
a GPU's."""

from __future__ import annotations

import json

import pytest
import torch

from floorline.bench import bandwidth, config, measure, models, runtimes
from floorline.core import floor, specs, zoo

pytestmark = pytest.mark.gpu

CTX = 256
STEPS = 16


@pytest.fixture(scope="module")
def cuda():
    return torch.device("cuda")


@pytest.fixture(scope="module")
def tiny_llama_bf16(cuda):
    return models.build_random(zoo.ZOO["tiny-llama"], cuda, "bf16", seed=0)


@pytest.fixture(scope="module")
def prompt(cuda):
    gen = torch.Generator(device=cuda).manual_seed(7)
    return torch.randint(0, zoo.ZOO["tiny-llama"].vocab, (1, CTX), generator=gen, device=cuda)


@pytest.fixture(scope="module")
def static_tokens(tiny_llama_bf16, prompt):
    """Tokens of the static runtime: after the prefill, then after each of STEPS + 3 steps."""
    rt = runtimes.get("static", "cuda")(tiny_llama_bf16, CTX + STEPS + 16)
    with torch.inference_mode():
        rt.prefill(prompt)
        toks = [rt.tok.item()]
        for _ in range(STEPS + 3):
            rt.step()
            toks.append(rt.tok.item())
        assert rt.pos.item() == CTX + STEPS + 3
    rt.close()
    assert len(set(toks)) > 3  # a sequence that depends on its context
    return toks


@pytest.mark.parametrize("mode", ["graph", "compile"])
def test_captured_modes_give_the_static_tokens(mode, tiny_llama_bf16, prompt, static_tokens):
    rt = runtimes.get(mode, "cuda")(tiny_llama_bf16, CTX + STEPS + 16)
    with torch.inference_mode():
        rt.prefill(prompt)
        assert rt.tok.item() == static_tokens[0] and rt.pos.item() == CTX
        rt.prepare()  # spends prepare_tokens real tokens
        k = rt.prepare_tokens
        assert rt.pos.item() == CTX + k
        assert rt.tok.item() == static_tokens[k]
        assert rt.prepare_s > 0
        toks = []
        for _ in range(STEPS):
            rt.step()
            toks.append(rt.tok.item())
        assert rt.pos.item() == CTX + k + STEPS  # every replay advanced the position by one
    rt.close()
    assert toks == static_tokens[k + 1:k + 1 + STEPS]


@pytest.fixture(scope="module")
def gpu_records():
    cfg = config.RunConfig(model="tiny-llama", ctxs=[CTX], modes=["eager", "graph"], device="cuda", warmup=2,
                            steps=10)
    return list(measure.measure_cells(cfg))


def test_measure_cells_records_the_gpu(gpu_records):
    assert [r["mode"] for r in gpu_records] == ["eager", "graph"]
    for r in gpu_records:
        assert r["valid"] is True, r["reason"]
        assert r["device"].startswith("cuda") and r["device_name"] == torch.cuda.get_device_name()
        for k in ("driver_version", "sm_clock_mhz_before", "sm_clock_mhz_after", "mem_clock_mhz_before",
                  "mem_clock_mhz_after", "power_w_before", "power_w_after", "temperature_c_before",
                  "temperature_c_after"):
            assert k in r, k
        assert r["peak_mem_allocated_bytes"] > 0
        assert len(r["samples_ms"]) == 10 and all(x > 0 for x in r["samples_ms"])
        spec = specs.detect(r["device_name"])
        assert r["gpu_key"] == (spec.key if spec else None)
        if spec:
            assert r["peak_gbps"] == spec.peak_gbps
            assert r["floor_ms_peak"] == pytest.approx(r["floor_bytes"] / (spec.peak_gbps * 1e9) * 1e3)
            assert r["fraction_of_floor_peak"] == pytest.approx(r["floor_ms_peak"] / r["step_ms_median"])
        assert r["floor_bytes"] == floor.floor(zoo.ZOO["tiny-llama"], CTX).bytes
        assert r["position_end"] == CTX + r["prepare_tokens"] + 2 + 10 + (r.get("energy_window_tokens") or 0)
        assert r["max_cache_len"] >= r["position_end"]
    assert gpu_records[1]["prepare_tokens"] == 2 and gpu_records[1]["prepare_s"] > 0


def test_nvml_readings_when_nvml_works(gpu_records):
    r = gpu_records[0]
    if r["driver_version"] is None:
        pytest.skip("NVML not readable on this machine")
    assert r["sm_clock_mhz_before"] > 0 and r["mem_clock_mhz_before"] > 0
    assert r["temperature_c_before"] > 0


def test_cuda_copy_bandwidth(cuda):
    gbps, samples = bandwidth.copy_bandwidth(cuda)
    assert gbps > 100 and len(samples) == 10
    spec = specs.detect(torch.cuda.get_device_name())
    if spec:
        assert gbps < spec.peak_gbps * 1.05  # a copy cannot beat the datasheet


def test_native_gemv_is_a_bandwidth_pattern_on_the_gpu(cuda):
    """floorline's own Triton GEMV reads faster than a copy on the H200: it must be among the patterns the floor takes
    the best of, and its product must be right."""
    pytest.importorskip("triton")
    from floorline.native import gemv as G

    bw = bandwidth.achievable_bandwidth(cuda, torch.bfloat16, nbytes=256 << 20, reps=4)
    assert set(bw["patterns"]) == {"copy", "read", "gemv", "native"}
    assert bw["gbps"] == max(bw["patterns"].values())

    w = torch.randn(4096, bandwidth.GEMV_COLS, device=cuda, dtype=torch.bfloat16)
    x = torch.randn(bandwidth.GEMV_COLS, device=cuda)
    y = G.tri_gemv(w, x, config=bandwidth.NATIVE_TILE)
    assert ((y - w.float() @ x).norm() / (w.float() @ x).norm()).item() < 1e-5


def test_cli_run_on_gpu(tmp_path):
    from conftest import run_cli

    out = tmp_path / "gpu.jsonl"
    rc, stdout, stderr = run_cli(["run", "--model", "tiny-qwen2", "--ctx", "128", "--device", "cuda", "--mode",
                                  "static,graph", "--steps", "5", "--warmup", "1", "--output", str(out),
                                  "--format", "json"])
    assert rc == 0, stderr
    recs = json.loads(stdout)
    assert [r["mode"] for r in recs] == ["static", "graph"] and all(r["valid"] for r in recs)
    assert out.read_text().count("\n") == 2
