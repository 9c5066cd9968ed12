"""explain: interval merging, and the table + PNG on the CPU (kernels are CPU ops there)."""

import json
import statistics

import pytest

from floorline import cli
from floorline.bench import system
from floorline.core import zoo
from floorline.bench.explain import _exclusive_us, _merged_us


@pytest.mark.parametrize("iv, want", [
    ([], 0.0),
    ([(0, 10)], 10.0),
    ([(0, 10), (5, 15)], 15.0),  # overlap counted once
    ([(0, 10), (2, 3), (20, 25)], 15.0),  # nested, then a gap
    ([(20, 25), (0, 10)], 15.0),  # order does not matter
])
def test_merged_intervals(iv, want):
    assert _merged_us(iv) == want


@pytest.mark.parametrize("iv, want", [
    ([], []),
    ([(0, 10), (20, 25)], [10, 5]),  # a gap is nobody's
    ([(0, 10), (5, 15), (12, 30)], [10, 5, 15]),  # a PDL chain: each starts early and waits; overlap is the earlier's
    ([(0, 10), (2, 3)], [9, 1]),  # nested: the inner one while it runs, the outer one the rest
    ([(5, 15), (0, 10)], [5, 10]),  # order of the list does not matter
    ([(0, 10), (0, 10)], [10, 0]),  # identical: the first listed
])
def test_exclusive_shares(iv, want):
    assert _exclusive_us(iv) == want


def test_exclusive_shares_sum_to_the_union():
    import random

    rng = random.Random(0)
    for _ in range(200):
        iv = [(s, s + rng.randint(1, 30)) for s in (rng.randint(0, 100) for _ in range(rng.randint(1, 12)))]
        got = _exclusive_us(iv)
        assert sum(got) == _merged_us(iv) and all(0 <= g <= e - s for g, (s, e) in zip(got, iv))


def test_layer_slots_split_a_kernel_by_its_place_in_the_layer():
    """Mode native's step: the GEMV 4 times a layer then lm_head, attention twice (two names) a layer; 2 layers,
    2 steps."""
    from floorline.bench.explain import _layer_slots

    step = []
    for _ in range(2):
        step += ["gemv", "chunk", "merge", "gemv", "gemv", "gemv"]
    step += ["gemv", "argmax"]
    got = _layer_slots(step * 2, steps=2, layers=2)
    want = []
    for _ in range(2):
        want += ["1/4", None, None, "2/4", "3/4", "4/4"]
    want += ["after", None]
    assert got == want * 2
    # HF's graph mode: 7 launches a layer, no extra; a name once a layer and once more is slotted too
    assert _layer_slots(["q"] * 7 * 3, steps=1, layers=3) == [f"{i % 7 + 1}/7" for i in range(21)]
    assert _layer_slots(["n", "n", "n"], steps=1, layers=2) == ["1/1", "1/1", "after"]
    from floorline.report import display

    rec = {"kernels_by_slot": [{"name": "int4_gemv", "slot": "3/4", "ms_per_step": 0.54, "calls_per_step": 28,
                                "us_per_call": 19.4}]}
    assert display.slot_rows(rec) == [["int4_gemv", "3/4", "19.4", "0.540", "28"]]
    assert display.slot_rows({}) == []  # records from before it
    row = {"ctx": 32, "mode": "eager", "wall_ms": 1.0, "gpu_busy_ms": 0.9, "floor_ms_measured": 0.5,
           "kernel_excess_ms": 0.4, "idle_gaps_ms": 0.1, "kernels_per_step": 50, "host_enqueue_ms": 0.2,
           "attention_ms": 0.01}
    assert display.explain_rows([{**row, "attention_gbps": 0.49}])[0][-1] == "0.49"  # a CPU's: once printed "0"
    assert display.explain_rows([{**row, "attention_gbps": 3712.4}])[0][-1] == "3712"
    assert display.explain_rows([{**row, "attention_gbps": None}])[0][-1] == "-"


def test_explain_cpu_end_to_end(tmp_path, capsys, monkeypatch):
    rc = cli.main(["explain", "--model", "tiny-qwen2", "--ctx", "32", "--mode", "eager,static", "--device", "cpu",
                   "--steps", "4", "--warmup", "1", "--profile-steps", "2", "--out", str(tmp_path)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "kernel excess ms" in printed and "top kernels, static ctx 32" in printed
    rows = [json.loads(ln) for ln in open(tmp_path / "explain.jsonl")]
    assert [r["mode"] for r in rows] == ["eager", "static"]
    for r in rows:
        assert r["kind"] == "explain" and r["wall_ms"] > 0 and r["gpu_busy_ms"] > 0
        assert r["source_sha256"] == system.source_sha256() and "kernel_sources_sha256" in r  # which code ran
        assert r["kernels_per_step"] > 10  # a decoder layer alone is dozens of aten ops
        assert r["idle_gaps_ms"] == pytest.approx(max(r["wall_ms"] - r["gpu_busy_ms"], 0.0))  # (0 on a noisy host:)
        assert bool(r["warnings"]) == (r["gpu_busy_ms"] > r["wall_ms"]) and r["profiled_wall_ms"] > 0
        assert r["kernel_excess_ms"] == pytest.approx(r["gpu_busy_ms"] - r["floor_ms_measured"])
        assert r["floor_ms_measured"] == pytest.approx(r["floor_bytes"] / (r["measured_gbps"] * 1e9) * 1e3)
        # the bandwidth printed above the table, with its raw samples (the best pattern's median)
        assert r["measured_gbps"] == pytest.approx(statistics.median(r["bw_pattern_samples_gbps"][r["bw_pattern"]]))
        assert r["bw_samples_gbps"] and set(r["bw_patterns_gbps"]) == set(r["bw_pattern_samples_gbps"])
        assert 0 < sum(k["share"] for k in r["top_kernels"]) <= 1.0 + 1e-9
        assert all(0 < k["ms_per_step"] <= k["span_ms_per_step"] + 1e-9 for k in r["top_kernels"])
        assert r["attention_ms"] > 0  # SDPA shows up as a CPU op
        # the matmuls own their time (aten::mm has aten children, so it is no leaf op: it was once left out).
        # Counted, not timed (a busy CI machine once made CPU SDPA take 70% of the step): q, k, v carry a bias
        # (addmm), o, gate, up, down and the lm_head do not (mm)
        arch = zoo.resolve("tiny-qwen2")
        calls = {k["name"]: k["calls_per_step"] for k in r["top_kernels"]}
        assert calls.get("aten::addmm") == 3 * arch.layers, r["top_kernels"]
        assert calls.get("aten::mm") == 4 * arch.layers + 1, r["top_kernels"]
        assert all(k["ms_per_step"] > 0 for k in r["top_kernels"] if k["name"] in ("aten::mm", "aten::addmm"))
        slots = r["kernels_by_slot"]  # tiny-qwen2: matmuls several times a layer
        assert slots and all(x["name"] in {k["name"] for k in r["top_kernels"]} for x in slots)
        assert sum(x["ms_per_step"] for x in slots) <= sum(k["ms_per_step"] for k in r["top_kernels"]) + 1e-9
    png = (tmp_path / "explain.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    # a second explain into the same folder adds its records after the first's (nothing is lost); the plot is its own
    from floorline.bench import explain

    monkeypatch.setattr(explain, "explain", lambda *a, **k: [{**rows[1], "ctx": 48}])
    with open(tmp_path / "explain.jsonl", "a") as f:
        f.write('{"schema_version": 2, "kind": "explain", "mo')  # a run killed mid-write: cut before the next
    assert cli.main(["explain", "--model", "tiny-qwen2", "--ctx", "48", "--mode", "static", "--device", "cpu",
                     "--out", str(tmp_path)]) == 0
    again = [json.loads(ln) for ln in open(tmp_path / "explain.jsonl")]
    assert again == rows + [{**rows[1], "ctx": 48}]
    assert (tmp_path / "explain.png").read_bytes() != png


def test_a_busy_time_above_the_wall_time_is_no_negative_idle_time(tmp_path, capsys, monkeypatch):
    """Busy comes from the profiled steps, wall from unprofiled ones; on a noisy host the first can exceed the
    second. Idle gaps are then 0, not negative, and the record and stderr say why."""
    from floorline.bench import explain

    monkeypatch.setattr(explain, "time_steps", lambda step, n, device: [1e-6] * n)  # steps "faster" than their ops
    rc = cli.main(["explain", "--model", "tiny-qwen2", "--ctx", "16", "--mode", "eager", "--device", "cpu",
                   "--steps", "2", "--warmup", "0", "--profile-steps", "1", "--out", str(tmp_path)])
    assert rc == 0
    (r,) = [json.loads(ln) for ln in open(tmp_path / "explain.jsonl")]
    assert r["idle_gaps_ms"] == 0.0 and r["gpu_busy_ms"] > r["wall_ms"] and r["profiled_wall_ms"] > 0
    assert len(r["warnings"]) == 1 and "exceeds the wall time" in r["warnings"][0]
    assert "warning: eager ctx 16: busy" in capsys.readouterr().err
    assert cli.main(["report", str(tmp_path / "explain.jsonl"), "--out", str(tmp_path / "rep")]) == 0
    assert "tiny-qwen2 ctx 16 eager: busy" in (tmp_path / "rep" / "report.md").read_text()


def test_explain_keeps_the_profilers_own_lines_off_stderr():
    """torch's profiler (kineto) prints "STAGE:" and, from torch 2.13, "USDT: ... profiler_start" lines on every
    profile; importing the CLI (before torch loads) turns them off, so `explain` prints only its own lines."""
    import os
    import subprocess
    import sys

    code = ("import floorline.cli, torch\n"
            "with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):\n"
            "    torch.ones(3) + 1\n")
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0 and "USDT" not in p.stderr and "STAGE" not in p.stderr, p.stderr
