"""explain on a GPU (skipped without CUDA): the profiler sees the kernels inside CUDA-graph replays, and the
breakdown adds up."""

import pytest
import torch

from floorline.bench.config import RunConfig
from floorline.bench.explain import explain

pytestmark = pytest.mark.gpu


def test_explain_sees_kernels_in_every_mode():
    rows = explain(RunConfig("tiny-llama", [256], ["eager", "static", "graph"], device="cuda", steps=10, warmup=2),
                   profile_steps=3)
    by = {r["mode"]: r for r in rows}
    for r in rows:
        assert r["kernels_per_step"] > 20, r["mode"]  # 4 layers x (7 GEMMs + norms + RoPE + attention)
        assert 0 < r["gpu_busy_ms"] <= r["wall_ms"] * 1.5
        assert r["idle_gaps_ms"] == pytest.approx(max(r["wall_ms"] - r["gpu_busy_ms"], 0.0))  # (0 on a noisy host:)
        assert bool(r["warnings"]) == (r["gpu_busy_ms"] > r["wall_ms"]) and r["profiled_wall_ms"] > 0
        assert r["attention_ms"] > 0
    # one replay enqueues a whole step: far less host time than launching its kernels one by one
    assert by["graph"]["host_enqueue_ms"] < by["static"]["host_enqueue_ms"]
    assert torch.cuda.is_available()


def test_explain_of_native_keeps_what_the_step_chose():
    """A native explain record names its sources and what the runtime resolved, as a run's record does: the step
    tuner's trials among them, so a breakdown can be read against the launches it profiled."""
    from floorline.bench import system

    (r,) = explain(RunConfig("tiny-llama", [256], ["native"], device="cuda", steps=10, warmup=2), profile_steps=3)
    assert r["source_sha256"] == system.source_sha256() and r["native_mlp"] == "fused"
    assert r["native_pdl_launch"] is not None and "native_mlp_step_tuning" in r
