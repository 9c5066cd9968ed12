"""ab: the bootstrap's coverage and reproducibility, arm parsing, and an end-to-end A/B of the tiny model."""

import json
import re

import numpy as np
import pytest

from floorline import cli
from floorline.core import stats
from floorline.core.errors import UserError
from floorline.study import ab


def test_bootstrap_percentile_interval_covers_the_true_mean_about_95_percent():
    rng = np.random.default_rng(2026)
    true, sims, hits = 1.25, 400, 0
    for i in range(sims):
        x = rng.normal(true, 0.02, size=30)  # 30 sessions of ratios
        _, lo, hi = stats.bootstrap_ci(list(x), "mean", n_resamples=2000, seed=i)
        hits += lo <= true <= hi
    assert 0.92 <= hits / sims <= 0.98, hits / sims


def test_bootstrap_gmean_covers_the_true_geometric_mean():
    rng = np.random.default_rng(8)
    sims, hits = 400, 0
    for i in range(sims):
        x = np.exp(rng.normal(np.log(1.1), 0.05, size=50))  # log-normal: the geometric mean is 1.1
        _, lo, hi = stats.bootstrap_ci(list(x), "gmean", n_resamples=2000, seed=i)
        hits += lo <= 1.1 <= hi
    assert 0.92 <= hits / sims <= 0.98, hits / sims


def test_bootstrap_is_reproducible_and_seed_dependent():
    x = list(np.random.default_rng(0).normal(1.2, 0.05, size=10))
    a = stats.bootstrap_ci(x, "mean", 10_000, seed=1)
    assert a == stats.bootstrap_ci(x, "mean", 10_000, seed=1)
    b = stats.bootstrap_ci(x, "mean", 10_000, seed=2)
    assert a[1:] != b[1:]
    assert a[1] < b[2] and b[1] < a[2]  # different but overlapping
    assert a[1] < np.mean(x) < a[2]


def test_bootstrap_needs_two_values():
    assert stats.bootstrap_ci([1.2], "mean") == (1.2, None, None)


@pytest.mark.parametrize("spec, want", [
    ("graph", ab.Arm("graph", "bf16", "sdpa")),
    ("mode=static,dtype=fp16", ab.Arm("static", "fp16", "sdpa")),
    ("eager,attn=eager", ab.Arm("eager", "bf16", "eager")),
    ("graph,quant=nf4", ab.Arm("graph", "bf16", "sdpa", "nf4")),
    ("graph,quant=bf16", ab.Arm("graph", "bf16", "sdpa", "none")),
])
def test_parse_arm(spec, want):
    assert ab.parse_arm(spec) == want


@pytest.mark.parametrize("spec", ["", "warp", "mode=graph,dtype=int3", "graph,attn=flash", "graph,colour=red",
                                  "graph,quant=int3"])
def test_parse_arm_rejects(spec):
    with pytest.raises(UserError):
        ab.parse_arm(spec)


def test_session_configs_share_a_model_only_when_arms_differ_by_mode():
    from floorline.bench.config import RunConfig
    cfg = ab.ABConfig(RunConfig("tiny-llama", [64], []), ab.parse_arm("eager"), ab.parse_arm("static"))
    one = ab.session_configs(cfg, cfg.b, cfg.a)
    assert len(one) == 1 and one[0].modes == ["static", "eager"] and one[0].energy is False
    cfg2 = ab.ABConfig(cfg.base, ab.parse_arm("eager"), ab.parse_arm("eager,dtype=fp32"))
    two = ab.session_configs(cfg2, cfg2.a, cfg2.b)
    assert [(c.modes, c.dtype) for c in two] == [(["eager"], "bf16"), (["eager"], "fp32")]


def _lines(path):
    return [json.loads(ln) for ln in open(path)]


def test_ab_end_to_end_tiny_cpu_and_resume(tmp_path, capsys):
    out = tmp_path / "ab.jsonl"
    args = ["ab", "--model", "tiny-llama", "--ctx", "32", "--a", "eager", "--b", "static", "--sessions", "3",
            "--steps", "4", "--warmup", "1", "--device", "cpu", "--resamples", "500", "--output", str(out)]
    assert cli.main(args) == 0
    printed = capsys.readouterr().out
    assert re.search(r"static vs eager: \d+\.\d{3}x \[\d+\.\d{3}, \d+\.\d{3}\], N=3", printed), printed
    recs = _lines(out)
    cells = [r for r in recs if r["kind"] == "cell"]
    summary = [r for r in recs if r["kind"] == "ab_summary"]
    assert len(cells) == 6 and len(summary) == 1
    assert [r["ab_order"] for r in cells[::2]] == ["A-B", "B-A", "A-B"]
    # within a session the first record is the arm that ran first
    assert [r["ab_arm"] for r in cells[:4]] == ["A", "B", "B", "A"]
    s = summary[0]
    assert s["n_sessions"] == 3 and s["sessions"] == [0, 1, 2]
    for i, sess in enumerate(s["sessions"]):
        a = next(r for r in cells if r["ab_session"] == sess and r["ab_arm"] == "A")
        b = next(r for r in cells if r["ab_session"] == sess and r["ab_arm"] == "B")
        assert s["ratios"][i] == pytest.approx(a["step_ms_median"] / b["step_ms_median"])
    assert s["ratio_mean"] == pytest.approx(np.mean(s["ratios"]))
    lo, hi = s["ratio_mean_ci95"]
    assert lo <= s["ratio_mean"] <= hi

    # resume: one more session runs only the fourth (index 3)
    args[args.index("--sessions") + 1] = "4"
    assert cli.main(args) == 0
    recs = _lines(out)
    assert len([r for r in recs if r["kind"] == "cell"]) == 8
    assert [r["ab_session"] for r in recs if r["kind"] == "cell"][6:] == [3, 3]
    assert recs[-1]["kind"] == "ab_summary" and recs[-1]["n_sessions"] == 4

    # run again when finished: the summary is printed again, not appended again (and, for a user who is not root, a
    # read-only file serves)
    capsys.readouterr()
    out.chmod(0o444)
    try:
        assert cli.main(args) == 0
    finally:
        out.chmod(0o644)
    assert "N=4" in capsys.readouterr().out and _lines(out) == recs

    # fewer sessions than the file holds: the summary of those asked for (it once said N=4 for --sessions 2)
    args[args.index("--sessions") + 1] = "2"
    assert cli.main(args) == 0
    assert re.search(r"N=2\b", capsys.readouterr().out)
    assert _lines(out)[-1]["kind"] == "ab_summary" and _lines(out)[-1]["sessions"] == [0, 1]


def test_ab_same_arms_is_an_error(capsys):
    rc = cli.main(["ab", "--model", "tiny-llama", "--ctx", "32", "--a", "eager", "--b", "eager", "--device", "cpu"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "same configuration" in err[0]


def test_ab_bad_arm_or_ctx_fails_before_any_session(tmp_path, capsys):
    import time

    out = tmp_path / "ab.jsonl"
    for bad in (["--ctx", "0"], ["--ctx", "9000"], ["--b", "graph"]):
        args = ["ab", "--model", "tiny-llama", "--ctx", "32", "--a", "eager", "--b", "static", "--device", "cpu",
                "--output", str(out)]
        for i in range(0, len(bad), 2):
            args[args.index(bad[i]) + 1] = bad[i + 1]
        t0 = time.perf_counter()
        rc = cli.main(args)
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1, err
        assert time.perf_counter() - t0 < 5  # no session process was started
    assert not out.exists()


# ------------------------------------------------------------------------------------------------ endpoint arms
def test_parse_endpoint_arm():
    arm = ab.parse_arm("endpoint=http://127.0.0.1:8000/v1/,served=m,bpw=Q4_K,gpu=l4")
    assert arm == ab.Arm("endpoint", "bf16", "sdpa", "none", endpoint="http://127.0.0.1:8000/v1", served="m",
                         bpw="Q4_K", gpu="l4")
    assert arm.label == "endpoint m at 127.0.0.1:8000/v1 bpw=Q4_K"
    # served from --served-model unless the arm names it; dtype the server's (bf16), not this host's default
    assert ab.parse_arm("endpoint=http://h:1/v1", dtype="fp32", served="x").served == "x"
    assert ab.parse_arm("endpoint=http://h:1/v1", dtype="fp32").dtype == "bf16"
    assert ab.parse_arm("endpoint=http://h:1/v1,served=y,weight_bits=4", served="x") == ab.Arm(
        "endpoint", "bf16", "sdpa", endpoint="http://h:1/v1", served="y", weight_bits=4)
    assert ab.parse_arm("endpoint=http://h:1/v1,weight_bits=4,group_size=row").group_size == "row"


@pytest.mark.parametrize("spec, says", [
    ("endpoint=ftp://h/v1", "not an http(s) URL"),
    ("endpoint=http://u:pw@h:1/v1", "FLOORLINE_API_KEY"),
    ("mode=endpoint", "endpoint=http://HOST:PORT/v1"),
    ("graph,served=m", "belongs to an endpoint arm"),
    ("endpoint=http://h:1/v1,attn=eager", "for floorline's own modes"),
    ("endpoint=http://h:1/v1,quant=nf4", "for floorline's own modes"),
    ("endpoint=http://h:1/v1,weight_bits=four", "whole number"),
    ("eager,static", "mode given twice; an arm is one mode (compare two as --a and --b)"),
    ("mode=eager,dtype=bf16,dtype=fp32", "dtype given twice"),
    ("endpoint=http://h:1/v1,dtype=int3", "unknown dtype"),
    # group_size= for unquantised weights would change nothing
    ("endpoint=http://h:1/v1,group_size=64", "add weight_bits=4 (or 8), or drop group_size="),
    ("endpoint=http://h:1/v1,bpw=Q4_K,group_size=64", "drop group_size="),
    ("endpoint=http://h:1/v1,bpw=Q8_0,weight_bits=4", "drop weight_bits="),
    ("endpoint=http://h:1/v1,bpw=Q9_X", "arm 'endpoint=http://h:1/v1,bpw=Q9_X': "),
    ("endpoint=http://h:1/v1,bpw=0.5", "': bpw= must be between 1 and 32 bits"),  # in the arm's terms, not --bpw
    ("endpoint=http://h:1/v1,dtype=fp32,weight_bits=16", "weight_bits=16 with fp32"),
    ("endpoint=http://h:1/v1,weight_bits=4,group_size=some", "whole number or row"),
])
def test_parse_endpoint_arm_rejects(spec, says):
    with pytest.raises(UserError, match=re.escape(says)):
        ab.parse_arm(spec)


def test_key_of_mode_arms_is_unchanged_by_endpoint_fields():
    """An A/B file written before endpoint arms existed still resumes: the key hashes the four run fields only."""
    import hashlib
    from dataclasses import asdict

    from floorline.bench.config import RunConfig
    cfg = ab.ABConfig(RunConfig("tiny-llama", [64], []), ab.parse_arm("eager"), ab.parse_arm("graph,quant=nf4"))
    d = {"base": asdict(cfg.base), "a": {"mode": "eager", "dtype": "bf16", "attn": "sdpa", "quant": "none"},
         "b": {"mode": "graph", "dtype": "bf16", "attn": "sdpa", "quant": "nf4"}}
    for k in ("modes", "dtype", "attn", "quant", "tp", "allreduce", "native"):  # tp, allreduce, native: added later
        d["base"].pop(k)
    assert cfg.key() == hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]
    e = ab.ABConfig(cfg.base, cfg.a, ab.parse_arm("endpoint=http://h:1/v1,served=m"))
    assert e.key() != cfg.key() != ab.ABConfig(cfg.base, cfg.a, ab.parse_arm("endpoint=http://h:1/v1,served=n")).key()


def test_key_of_a_local_folder_is_its_config(tmp_path, monkeypatch):
    """`--model llama` typed in two folders is two models (two configs): two experiments, not one."""
    from dataclasses import replace

    from floorline.bench.config import RunConfig
    from floorline.core import zoo

    for sub, name in (("a", "tiny-qwen3"), ("b", "tiny-qwen2-moe")):
        (tmp_path / sub / "llama").mkdir(parents=True)
        cfg = zoo.ZOO[name].config or {}
        (tmp_path / sub / "llama" / "config.json").write_text(json.dumps(cfg))
    cfg = ab.ABConfig(RunConfig("llama", [64], []), ab.parse_arm("eager"), ab.parse_arm("static"))
    keys = []
    for sub in ("a", "b", "a"):
        monkeypatch.chdir(tmp_path / sub)
        keys.append(cfg.key())
    assert keys[0] != keys[1] and keys[0] == keys[2]
    monkeypatch.chdir(tmp_path)  # one folder however typed
    assert {replace(cfg, base=replace(cfg.base, model=m)).key() for m in ("a/llama", "./a/llama/",
                                                                           str(tmp_path / "a" / "llama"))} == {keys[0]}
    assert cfg.key(legacy=True) != keys[0]  # (the key as typed: an older file's sessions count too, run_ab)
    (tmp_path / "tiny-llama").mkdir()  # a folder named as a zoo model: the zoo model runs, its key as it was
    zoo_cfg = replace(cfg, base=replace(cfg.base, model="tiny-llama"))
    assert zoo_cfg.key() == zoo_cfg.key(legacy=True)


def test_the_summary_line_says_when_its_interval_under_covers():
    from floorline.report import display

    s = {"ratio_gmean": 1.2, "ratio_gmean_ci95": [1.1, 1.3], "bootstrap_resamples": 10000, "seed": 0}
    few = display.ab_gmean_line({**s, "ratios": [1.2] * 10})
    assert few.startswith("geometric mean 1.200x [1.100, 1.300]") and "about 91% at 10" in few
    assert "about 83% at 5" in display.ab_gmean_line({**s, "ratios": [1.2] * 3})  # the figure nearest its N
    assert "under-covers" not in display.ab_gmean_line({**s, "ratios": [1.2] * 50})
    one = display.ab_gmean_line({**s, "ratios": [1.2], "ratio_gmean_ci95": [None, None]})
    assert one == "geometric mean 1.200x (no interval: 1 session)"  # once "...bootstrap... under-covers at 1 sessions"
    head = display.ab_headline({"arm_a": "eager", "arm_b": "static", "ratio_mean": 0.913, "n_sessions": 1,
                                "ratio_mean_ci95": [None, None]})
    assert head == "static vs eager: 0.913x [no interval: N < 2], N=1"  # printed without rich markup (it ate [...])


def test_an_older_files_sessions_count_for_its_own_folder_only(tmp_path, monkeypatch, capsys):
    """Sessions written under the key of the path as typed (before a folder's key was its config) still resume the
    same A/B; they do not stand for another folder typed the same way."""
    from floorline.bench.config import RunConfig
    from floorline.core import zoo
    from floorline.serve import servedir

    for sub, name in (("a", "tiny-llama"), ("b", "tiny-qwen2")):
        servedir.write_model_dir(zoo.ZOO[name], tmp_path / sub / "llama")
    out = tmp_path / "ab.jsonl"
    args = ["ab", "--model", "llama", "--ctx", "16", "--a", "eager", "--b", "static", "--sessions", "1", "--steps",
            "2", "--warmup", "1", "--device", "cpu", "--resamples", "100", "--output", str(out)]
    monkeypatch.chdir(tmp_path / "a")
    assert cli.main(args) == 0
    base = ab.ABConfig(RunConfig("llama", [16], []), ab.parse_arm("eager"), ab.parse_arm("static"))
    key, legacy = base.key(), base.key(legacy=True)
    out.write_text("".join(json.dumps({**r, "ab_key": legacy} if r.get("ab_key") == key else r) + "\n"
                           for r in _lines(out)))  # as an older floorline wrote it
    assert cli.main(args) == 0  # resumed from the older sessions: none runs
    assert sum(r["kind"] == "cell" for r in _lines(out)) == 2
    monkeypatch.chdir(tmp_path / "b")  # another model typed the same way: its own session
    assert cli.main(args) == 0
    cells = [r for r in _lines(out) if r["kind"] == "cell"]
    assert len(cells) == 4 and {c["model_config_sha256"] for c in cells[2:]} != {cells[0]["model_config_sha256"]}


def test_ab_of_a_family_without_sdpa(tmp_path, capsys):
    """gpt-oss runs eager attention whatever attn= says: its arms are looked up by what their records say (one
    session pairs both arms), and two arms that differ only by attn= are one configuration."""
    out = tmp_path / "ab.jsonl"
    args = ["ab", "--model", "tiny-gpt-oss", "--ctx", "16", "--a", "eager", "--b", "static", "--sessions", "1",
            "--steps", "2", "--warmup", "1", "--device", "cpu", "--resamples", "100", "--output", str(out)]
    assert cli.main(args) == 0, capsys.readouterr().err
    recs = _lines(out)
    assert [r["kind"] for r in recs] == ["cell", "cell", "ab_summary"] and all(r["valid"] for r in recs[:2])
    assert {r["ab_arm"] for r in recs[:2]} == {"A", "B"}
    capsys.readouterr()
    rc = cli.main(["ab", "--model", "tiny-gpt-oss", "--ctx", "16", "--a", "eager", "--b", "mode=eager,attn=eager",
                   "--device", "cpu", "--output", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "same configuration" in err[0], err


def test_two_arms_that_differ_by_dtype_both_name_it():
    """On a CPU without native bf16 the default is fp32: an arm in bf16 beside it must say bf16, not nothing."""
    from floorline.bench.config import RunConfig

    a, b = ab.parse_arm("eager", dtype="fp32"), ab.parse_arm("mode=eager,dtype=bf16,attn=eager", dtype="fp32")
    assert (a.label, b.label) == ("eager/fp32", "eager/attn=eager")  # alone, bf16 is the default left out
    assert (a.label_as(True), b.label_as(True)) == ("eager/fp32", "eager/bf16/attn=eager")
    cfg = ab.ABConfig(RunConfig("tiny-llama", [16], []), a, b)
    rec = {"model": "tiny-llama", "ctx": 16, "device_name": "cpu", "device": "cpu", "ab_order": "A-B",
           "step_ms_median": 1.0}
    s = ab.summarize(cfg, "k", {0: {"A": rec, "B": rec}, 1: {"A": rec, "B": rec}}, [])
    assert (s["arm_a"], s["arm_b"]) == ("eager/fp32", "eager/bf16/attn=eager")
