"""The command line, end to end and in-process: `run` on the CPU with the tiny models, every output format, the
informational verbs, and every bad input exiting 2 with one line on stderr."""

from __future__ import annotations

import csv
import io
import json
import statistics
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import read_jsonl_strict, run_cli

from floorline import cli
from floorline.bench import config, models
from floorline.core import floor, records, specs, zoo
from floorline.core.errors import UserError
from floorline.report import display

CTX, STEPS, WARMUP = 64, 5, 1
RUN = ["run", "--model", "tiny-llama", "--ctx", str(CTX), "--device", "cpu", "--steps", str(STEPS),
       "--warmup", str(WARMUP)]


@pytest.fixture(scope="module")
def run_all(tmp_path_factory):
    """`run --mode all` on the CPU, JSON on stdout and records appended to a file; done once for this module. A module
    fixture is made before conftest's per-test bf16 pin, so it pins `--dtype auto` to bf16 itself (on a CPU without
    native bf16 the run is fp32)."""
    out = tmp_path_factory.mktemp("run") / "tmp.jsonl"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(models, "cpu_has_native_bf16", lambda: True)
        rc, stdout, stderr = run_cli([*RUN, "--mode", "all", "--output", str(out), "--format", "json"])
    assert rc == 0, stderr
    return out, json.loads(stdout), stderr


def check_record(r: dict, *, model="tiny-llama", arch=None, ctx=CTX, steps=STEPS, warmup=WARMUP):
    arch = arch or zoo.ZOO[model]
    missing = [k for k in records.REQUIRED_KEYS if k not in r]
    assert not missing, missing
    assert r["schema_version"] == records.SCHEMA_VERSION
    assert r["model"] == model and r["ctx"] == ctx and r["dtype"] == "bf16" and r["device"] == "cpu"
    assert r["quant"] == "none"
    s = r["samples_ms"]
    assert len(s) == steps and all(isinstance(x, float) and x > 0 for x in s)
    assert r["step_ms_median"] == pytest.approx(float(np.median(s)), rel=1e-12)
    assert r["step_ms_median"] == pytest.approx(statistics.median(s), rel=1e-12)
    assert r["step_ms_p90"] == pytest.approx(float(np.percentile(s, 90)), rel=1e-12)
    assert min(s) <= r["step_ms_median"] <= r["step_ms_p90"] <= max(s)
    f = floor.floor(arch, ctx, floor.weight_format("bf16"), "strict")
    assert r["floor_bytes"] == f.bytes
    assert r["paper_floor_bytes"] == floor.floor(arch, ctx, floor.weight_format("bf16"), "paper").bytes
    assert sum(v for k, v in r.items() if k.startswith("floor_bytes_")) == r["floor_bytes"]
    assert r["floor_bytes_kv_read"] == ctx * floor.kv_bytes_per_token(arch)
    assert r["measured_gbps"] > 0 and len(r["bw_samples_gbps"]) == 10
    assert r["floor_ms_measured"] == pytest.approx(f.bytes / (r["measured_gbps"] * 1e9) * 1e3, rel=1e-12)
    assert r["fraction_of_floor_measured"] == pytest.approx(r["floor_ms_measured"] / r["step_ms_median"], rel=1e-12)
    assert r["tokens_per_s"] == pytest.approx(1000.0 / r["step_ms_median"], rel=1e-12)
    assert r["achieved_gbps"] == pytest.approx(f.bytes / (r["step_ms_median"] * 1e-3) / 1e9, rel=1e-12)
    assert r["valid"] is True and r["reason"] is None
    for k in ("peak_gbps", "peak_source", "gpu_key", "floor_ms_peak", "fraction_of_floor_peak",
              "paper_floor_ms_peak", "paper_fraction_of_floor_peak"):
        assert r[k] is None, k
    # every timed and warm-up step was a real token: the position moved by exactly that many
    assert r["position_end"] == ctx + r["prepare_tokens"] + warmup + steps
    assert r["max_cache_len"] == ctx + warmup + steps + config.SLACK_TOKENS
    assert not any("parameters" in w for w in r["warnings"])  # the built model matched the accounting
    assert r["prefill_s"] > 0 and r["build_s"] > 0
    assert len(r["run_id"]) == 32


# ------------------------------------------------------------------------------------------------------ run, CPU
def test_run_all_modes_records(run_all):
    path, printed, stderr = run_all
    recs = records.read(path)
    assert [r["mode"] for r in recs] == ["eager", "static"]
    for r in recs:
        check_record(r)
    assert len({r["run_id"] for r in recs}) == 2
    assert read_jsonl_strict(path) == recs  # every line one complete object
    assert printed == recs  # --format json prints the same records
    assert "2 record(s) appended" in stderr
    assert "Traceback" not in stderr


def test_run_appends(run_all, tmp_path):
    path, _, _ = run_all
    p = tmp_path / "copy.jsonl"
    p.write_text(path.read_text() + '{"schema_version": 2, "run_id": "a killed wri')  # and a torn last line
    rc, _, e = run_cli([*RUN, "--mode", "eager", "--steps", "2", "--warmup", "0", "--output", str(p),
                        "--format", "json"])
    assert rc == 0 and "truncated" in e  # cut before the new record, which gets its own line
    recs = records.read(p)
    assert [r["mode"] for r in recs] == ["eager", "static", "eager"]
    check_record(recs[-1], steps=2, warmup=0)


def test_run_resume_runs_only_the_cells_the_file_lacks(tmp_path):
    """A run killed after some cells: the same command with --resume measures the rest, once."""
    out = tmp_path / "r.jsonl"
    argv = ["run", "--model", "tiny-llama", "--ctx", "16,24", "--mode", "eager,static", "--device", "cpu", "--steps",
            "2", "--warmup", "0", "--output", str(out), "--format", "json"]
    rc, _, e = run_cli(argv)
    assert rc == 0, e
    lines = out.read_text().splitlines()
    out.write_text("\n".join(lines[:2]) + "\n" + lines[2][:40])  # killed while writing its third record
    rc, o, e = run_cli([*argv, "--resume"])
    assert rc == 0, e
    assert "truncated" in e and "2 cell(s) to run" in e
    assert [(r["ctx"], r["mode"]) for r in json.loads(o)] == [(24, "eager"), (24, "static")]
    recs = records.read(out)
    assert sorted((r["ctx"], r["mode"]) for r in recs) == [(16, "eager"), (16, "static"), (24, "eager"),
                                                         (24, "static")]
    rc, o, e = run_cli([*argv, "--resume"])
    assert rc == 0 and "nothing to run" in e and records.read(out) == recs
    rc, _, e = run_cli([*argv[:-4], "--resume"])
    assert rc == 2 and "give --output" in e


def test_run_several_contexts(tmp_path):
    rc, stdout, stderr = run_cli([*RUN[:3], "--ctx", "32,64", *RUN[5:], "--mode", "static", "--format", "json"])
    assert rc == 0, stderr
    recs = json.loads(stdout)
    assert [(r["ctx"], r["mode"]) for r in recs] == [(32, "static"), (64, "static")]
    for r in recs:
        check_record(r, ctx=r["ctx"])
    kv = floor.kv_bytes_per_token(zoo.ZOO["tiny-llama"])
    assert recs[1]["floor_bytes"] - recs[0]["floor_bytes"] == 32 * kv


def test_run_csv(capsys):
    rc = cli.main([*RUN, "--mode", "eager", "--format", "csv"])
    o, e = capsys.readouterr()
    assert rc == 0, e
    rows = list(csv.DictReader(io.StringIO(o)))
    assert len(rows) == 1
    row = rows[0]
    for k in records.REQUIRED_KEYS:
        assert k in row, k
    samples = json.loads(row["samples_ms"])
    assert len(samples) == STEPS
    assert float(row["step_ms_median"]) == pytest.approx(float(np.median(samples)))
    assert int(row["floor_bytes"]) == floor.floor(zoo.ZOO["tiny-llama"], CTX).bytes
    assert row["mode"] == "eager" and row["valid"] == "True" and row["floor_ms_peak"] == ""


def test_run_markdown(capsys):
    rc = cli.main([*RUN, "--mode", "all", "--format", "md"])
    o, e = capsys.readouterr()
    assert rc == 0, e
    lines = [ln for ln in o.splitlines() if ln.strip()]
    assert len(lines) == 4  # header, rule, one row per CPU mode
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert head == [h for h, _, _ in display.COLUMNS]
    assert set(lines[1].replace("|", "").replace("-", "")) == set()
    rows = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines[2:]]
    for row, mode in zip(rows, ["eager", "static"]):
        assert len(row) == len(head)
        cells = dict(zip(head, row))
        assert cells["model"] == "tiny-llama" and cells["ctx"] == str(CTX) and cells["mode"] == mode
        assert float(cells["ms/step"]) > 0 and float(cells["tok/s"]) > 0
        assert cells["floor ms @peak"] == "-" and cells["% floor @peak"] == "-" and cells["valid"] == "yes"
        assert cells["% floor @meas"].endswith("%")


def test_run_table(capsys):
    rc = cli.main([*RUN, "--mode", "static"])
    o, e = capsys.readouterr()
    assert rc == 0, e
    assert "tiny-llama" in o and "static" in o and "ms/step" in o
    assert "done:" in e and "static" in e  # a progress line per finished cell, on stderr


def test_a_crashing_mode_is_recorded_invalid_and_the_others_still_run(monkeypatch, tmp_path, capsys):
    from floorline.bench.runtimes.static import Static

    def boom(self):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(Static, "step", boom)
    out = tmp_path / "crash.jsonl"
    rc = cli.main([*RUN, "--mode", "static,eager", "--output", str(out), "--format", "md"])
    o, e = capsys.readouterr()
    assert rc == 1  # a crashed mode: not a user error, not a success
    crashed, ok = records.read(out)
    assert crashed["mode"] == "static" and crashed["valid"] is False
    assert crashed["reason"] == "crash: RuntimeError: boom"
    for k in ("step_ms_median", "samples_ms", "tokens_per_s", "fraction_of_floor_measured"):
        assert crashed[k] is None
    assert ok["mode"] == "eager"
    check_record(ok)
    assert "| NO |" in o and "| yes |" in o
    assert "INVALID: crash: RuntimeError: boom" in e


# ----------------------------------------------------------------------------------------------- local directory
def _run_local(d):
    return run_cli(["run", "--model", str(d), "--ctx", str(CTX), "--device", "cpu", "--steps", "3", "--warmup", "1",
                    "--mode", "eager", "--format", "json"])


def _check_local(rc, stdout, stderr, d):
    assert rc == 0, stderr
    (r,) = json.loads(stdout)
    a = zoo.resolve(str(d))
    check_record(r, model=d.name, arch=a, steps=3)
    assert r["model_path"] == str(d.resolve())
    ref = zoo.ZOO["tiny-qwen2"]
    assert r["floor_bytes"] == floor.floor(ref, CTX).bytes
    assert floor.parameter_count(a) == ref.params


def test_run_local_directory_loads_its_weights(tiny_qwen2_dir, monkeypatch, capsys):
    _check_local(*_run_local(tiny_qwen2_dir), tiny_qwen2_dir)
    # the run (in this process) loads the folder's weights: it never builds random ones
    monkeypatch.setattr(models, "build_random", lambda *a, **k: pytest.fail("a local folder's run built random weights"))
    assert cli.main(["run", "--model", str(tiny_qwen2_dir), "--ctx", "16", "--device", "cpu", "--steps", "2",
                     "--warmup", "1", "--mode", "eager", "--format", "json"]) == 0
    monkeypatch.undo()
    # and the weights loaded are the saved ones, not fresh random values
    a = zoo.resolve(str(tiny_qwen2_dir))
    loaded = models.build(a, torch.device("cpu"), "bf16")
    saved = models.build_random(zoo.ZOO["tiny-qwen2"], torch.device("cpu"), "bf16", seed=3)
    ls, ss = loaded.state_dict(), saved.state_dict()
    assert ls.keys() == ss.keys()
    for k in ss:
        assert torch.equal(ls[k], ss[k]), k


def test_floor_of_a_local_directory(tiny_qwen2_dir, capsys):
    rc = cli.main(["floor", "--model", str(tiny_qwen2_dir), "--ctx", "64", "--format", "json"])
    o, e = capsys.readouterr()
    assert rc == 0, e
    assert json.loads(o)["floor_bytes"] == floor.floor(zoo.ZOO["tiny-qwen2"], 64).bytes


@pytest.mark.parametrize("damage", ["corrupt", "mismatch"])
def test_local_directory_with_bad_weights_is_a_user_error(tiny_qwen2_dir, tmp_path, damage):
    d = tmp_path / "damaged"
    d.mkdir()
    cfg = json.loads((tiny_qwen2_dir / "config.json").read_text())
    if damage == "corrupt":
        (d / "model.safetensors").write_bytes(b"garbage, not a safetensors header")
    else:
        (d / "model.safetensors").write_bytes((tiny_qwen2_dir / "model.safetensors").read_bytes())
        cfg["intermediate_size"] = 256
    (d / "config.json").write_text(json.dumps(cfg))
    rc, _, stderr = _run_local(d)
    assert rc == 2
    assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr
    # the fix named is the damage's: the file, or config.json's sizes
    assert ("a safetensors file is damaged" in stderr) == (damage == "corrupt"), stderr


# ------------------------------------------------------------------------------------------------ other verbs
def test_models_lists_the_zoo(capsys):
    assert cli.main(["models"]) == 0
    o, _ = capsys.readouterr()
    for name, a in zoo.ZOO.items():
        assert name in o
        assert f"{a.params:,}" in o
    assert "57,344" in o  # qwen2.5-7b KV bytes per token


def test_specs_lists_the_table(capsys):
    assert cli.main(["specs"]) == 0
    o, _ = capsys.readouterr()
    for g in specs.GPUS:
        assert g.key in o


def test_floor_json_paper_l4(capsys):
    rc = cli.main(["floor", "--model", "qwen2.5-7b", "--ctx", "2048", "--gpu", "l4", "--convention", "paper",
                   "--format", "json"])
    o, e = capsys.readouterr()
    assert rc == 0 and e == ""
    d = json.loads(o)
    assert d["floor_bytes"] == 15_348_673_536 == sum(d["components"].values())
    assert d["floor_ms"] == pytest.approx(51.16, abs=0.005)
    assert d["gpu"] == "l4" and d["peak_gbps"] == 300 and d["convention"] == "paper"
    assert d["weight_bits"] == 16 and d["group_size"] is None
    assert d["floor_ms_by_gpu"] == {"l4": d["floor_ms"]}


def test_floor_json_int4_all_gpus(capsys):
    rc = cli.main(["floor", "--model", "llama-3.1-8b", "--ctx", "8192", "--weight-bits", "4", "--format", "json"])
    o, _ = capsys.readouterr()
    assert rc == 0
    d = json.loads(o)
    a = zoo.ZOO["llama-3.1-8b"]
    assert d["weight_bits"] == 4 and d["group_size"] == 128 and d["gpu"] is None and d["floor_ms"] is None
    assert d["components"] == floor.components(a, 8192, floor.weight_format("bf16", 4, 128), "strict")
    assert set(d["floor_ms_by_gpu"]) == {g.key for g in specs.GPUS}
    assert d["floor_ms_by_gpu"]["h200"] == pytest.approx(d["floor_bytes"] / 4800e9 * 1e3)


@pytest.mark.parametrize("group, want", [([], 128), (["--group-size", "64"], 64), (["--group-size", "row"], None)])
def test_floor_group_size(capsys, group, want):
    rc = cli.main(["floor", "--model", "llama-3.2-1b", "--ctx", "128", "--weight-bits", "4", "--format", "json", *group])
    d = json.loads(capsys.readouterr().out)
    fmt = floor.weight_format("bf16", 4, want)
    assert rc == 0 and d["group_size"] == want
    assert d["floor_bytes"] == floor.floor(zoo.ZOO["llama-3.2-1b"], 128, fmt).bytes
    # q_proj of llama-3.2-1b, 2048 x 2048: 2 MiB of codes, and a 2-byte scale and zero per group (per row: 2048)
    assert fmt.matrix_bytes(2048, 2048) == 2048 * 2048 // 2 + 2 * 2 * 2048 * (2048 // want if want else 1)


def test_floor_table(capsys):
    rc = cli.main(["floor", "--model", "qwen2.5-7b", "--ctx", "2048", "--gpu", "h200"])
    o, _ = capsys.readouterr()
    assert rc == 0
    assert "14,258,743,296" in o and "2.971" in o and "kv_read" in o


# ----------------------------------------------------------------------------------------------------- bad input
def assert_one_line_error(rc, stderr, *needles):
    assert rc == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("floorline: error:")
    assert "Traceback" not in stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


FLOOR_1B = ["floor", "--model", "llama-3.2-1b", "--ctx", "128"]
BAD_INPUT = {
    "unknown model": (["run", "--model", "gpt-5", "--device", "cpu"], ["unknown model 'gpt-5'", "tiny-llama"]),
    "unknown gpu": (["floor", "--model", "qwen2.5-7b", "--ctx", "2048", "--gpu", "t4"], ["unknown GPU 't4'", "h200"]),
    "ctx zero": ([*RUN[:3], "--ctx", "0", *RUN[5:]], ["--ctx"]),
    "ctx negative": ([*RUN[:3], "--ctx", "-5", *RUN[5:]], ["--ctx"]),
    "ctx not a number": ([*RUN[:3], "--ctx", "lots", *RUN[5:]], ["--ctx"]),
    "ctx past max position": ([*RUN[:3], "--ctx", "8192", *RUN[5:]], ["max position 8192"]),
    "ctx one past what fits": ([*RUN[:3], "--ctx", str(8192 - STEPS - WARMUP - config.SLACK_TOKENS + 1), *RUN[5:]],
                               ["max position 8192"]),
    "floor ctx negative": (["floor", "--model", "qwen2.5-7b", "--ctx", "-1"], ["--ctx must be in 1..32767"]),
    "floor ctx zero": (["floor", "--model", "qwen2.5-7b", "--ctx", "0"], ["--ctx must be in 1..32767"]),
    "floor ctx at max position": (["floor", "--model", "qwen2.5-7b", "--ctx", "32768"],
                                  ["--ctx must be in 1..32767", "below its max position 32768"]),
    "predict ctx at max position": (["predict", "--model", "qwen2.5-7b", "--ctx", "32768", "--gpu", "h200"],
                                    ["--ctx must be in 1..32767"]),
    "floor ctx past max position": (["floor", "--model", "qwen2.5-7b", "--ctx", "40000"], ["max position"]),
    "unknown mode": ([*RUN, "--mode", "eager,turbo"], ["unknown mode 'turbo'"]),
    "unknown dtype": ([*RUN, "--dtype", "int8"], ["unknown dtype 'int8'"]),
    "unknown floor dtype": (["floor", "--model", "qwen2.5-7b", "--ctx", "1", "--dtype", "fp8"], ["fp8"]),
    "bad bits": (["floor", "--model", "qwen2.5-7b", "--ctx", "1", "--weight-bits", "3"], ["3"]),
    "graph on cpu": ([*RUN, "--mode", "graph"], ["CUDA"]),
    "compile on cpu": ([*RUN, "--mode", "compile"], ["CUDA"]),
    "bad convention": (["floor", "--model", "qwen2.5-7b", "--ctx", "1", "--convention", "loose"], ["convention"]),
    "unknown device": ([*RUN, "--device", "tpu"], ["tpu"]),
    "no verb": ([], ["cmd"]),
    "unknown verb": (["bench"], ["bench"]),
    "too few steps": ([*RUN[:-4], "--steps", "1"], ["steps"]),
    "gpu prefix of several": (["floor", "--model", "qwen2.5-7b", "--ctx", "1", "--gpu", "a100"],
                              ["a100-80gb-sxm", "a100-40gb"]),
    "allreduce nan": (["floor", "--model", "qwen2.5-7b", "--ctx", "1", "--tp", "2", "--allreduce-us", "nan"],
                      ["finite"]),
    "ctx empty": ([*RUN[:3], "--ctx", ",", *RUN[5:]], ["--ctx", "at least one"]),
    "mode empty": ([*RUN, "--mode", ""], ["--mode ''", "at least one"]),
    "sweep models empty": (["sweep", "--models", " ", "--ctx", "16", "--device", "cpu", "--dry-run"],
                           ["--models ' '", "at least one"]),
    "allreduce hidden zero": (["allreduce", "--tp", "2", "--device", "cpu", "--hidden", "0"], ["--hidden"]),
    # --group-size for unquantised matrices would change nothing: a mistake, not a no-op
    "floor group size unquantised": (FLOOR_1B + ["--group-size", "64"], ["add --weight-bits 4 (or 8)", "drop"]),
    "floor group size bf16 16": (FLOOR_1B + ["--weight-bits", "16", "--group-size", "64"], ["add --weight-bits"]),
    "floor group size zero": (FLOOR_1B + ["--weight-bits", "4", "--group-size", "0"], ["elements or row"]),
    "ab timeout zero": (["ab", "--model", "tiny-llama", "--ctx", "16", "--device", "cpu", "--a", "eager", "--b",
                         "static", "--timeout", "0"], ["--timeout"]),
}


@pytest.mark.parametrize("argv,needles", list(BAD_INPUT.values()), ids=list(BAD_INPUT))
def test_bad_input_exits_2_with_one_line(argv, needles, capsys):
    try:
        rc = cli.main(argv)
    except SystemExit as e:  # argparse's rejections
        rc = e.code
    o, e = capsys.readouterr()
    assert_one_line_error(rc, e, *needles)
    assert o == ""


NOTES = "my notes\nline two\nimportant last line\n"


@pytest.mark.parametrize("argv", [
    [*RUN, "--output", "{notes}"],
    ["sweep", "--models", "tiny-llama", "--ctx", "16", "--modes", "eager", "--device", "cpu", "--output", "{notes}"],
    ["ab", "--model", "tiny-llama", "--ctx", "16", "--device", "cpu", "--a", "eager", "--b", "static",
     "--sessions", "2", "--output", "{notes}"],
    ["import", "{bench}", "--model", "tiny-llama", "--output", "{notes}"],
    [*RUN, "--output", "{folder}"],
    ["explain", "--model", "tiny-llama", "--ctx", "16", "--device", "cpu", "--out", "{notes}"],
    ["report", "{bench}", "--out", "{notes}"],
], ids=["run", "sweep", "ab", "import", "run-folder", "explain", "report"])
def test_an_output_that_is_not_a_results_file_is_one_line_before_anything_runs(argv, tmp_path, capsys):
    """A file of somebody's given as --output (or --out) by mistake, or a folder: one line, exit 2, before a
    measurement, and not a byte of the file changed (its last line is never taken for a killed write)."""
    notes, bench = tmp_path / "notes.txt", tmp_path / "bench.jsonl"
    notes.write_text(NOTES)
    bench.write_text("")
    named = tmp_path if "{folder}" in argv else notes
    rc = cli.main([a.format(notes=notes, folder=tmp_path, bench=bench) for a in argv])
    o, e = capsys.readouterr()
    assert_one_line_error(rc, e, str(named))
    assert notes.read_text() == NOTES and o == ""


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="two GPUs here: the all-reduce would run")
def test_allreduce_without_two_gpus_names_the_cpu_option(capsys):
    rc = cli.main(["allreduce", "--tp", "2"])
    assert_one_line_error(rc, capsys.readouterr().err, "--tp 2 needs 2 CUDA GPUs", "--device cpu")


def test_out_of_memory_exits_2(monkeypatch, capsys):
    monkeypatch.setattr(models, "free_bytes", lambda device: 1000)
    rc = cli.main([*RUN, "--mode", "eager"])
    o, e = capsys.readouterr()
    assert_one_line_error(rc, e, "out of memory", "tiny-llama", "GB", "0.00 GB is free")


def test_local_dir_without_config_exits_2(tmp_path, capsys):
    (tmp_path / "model.safetensors").write_bytes(b"")
    rc = cli.main([*RUN[:1], "--model", str(tmp_path), *RUN[3:]])
    _, e = capsys.readouterr()
    assert_one_line_error(rc, e, "config.json")


def test_local_dir_without_safetensors_exits_2(tmp_path, capsys, tiny_qwen2_dir):
    (tmp_path / "config.json").write_text((tiny_qwen2_dir / "config.json").read_text())
    rc = cli.main([*RUN[:1], "--model", str(tmp_path), *RUN[3:]])
    _, e = capsys.readouterr()
    assert_one_line_error(rc, e, "safetensors")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA GPU")
def test_cuda_without_gpu_exits_2(capsys):
    rc = cli.main([*RUN[:-6], "--device", "cuda", "--mode", "eager"])
    _, e = capsys.readouterr()
    assert_one_line_error(rc, e, "no CUDA GPU")


def test_debug_shows_the_traceback():
    with pytest.raises(UserError):
        cli.main(["floor", "--debug", "--model", "gpt-5", "--ctx", "1"])


def test_debug_before_the_verb_shows_the_traceback(capsys):
    with pytest.raises(UserError):
        cli.main(["--debug", "floor", "--model", "gpt-5", "--ctx", "1"])


def _render(table, columns: int) -> list[str]:
    from rich.console import Console

    c = Console(width=columns, file=io.StringIO(), highlight=False)
    c.print(table)
    return c.file.getvalue().splitlines()


def test_the_run_table_fits_80_columns_without_cutting_a_number(run_all):
    _, recs, _ = run_all
    lines = _render(display.run_table(recs, columns=80), 80)
    assert all(len(ln) <= 80 for ln in lines) and not any("…" in ln for ln in lines)
    body = "\n".join(lines)
    for r in recs:  # the essential figures, whole
        for v in (f"{r['step_ms_median']:.3f}", f"{r['floor_ms_measured']:.3f}",
                  f"{r['fraction_of_floor_measured']:.1%}", display.gbps(r["achieved_gbps"])):
            assert v in body
    assert "p90 ms" not in body and "--wide" in body


def test_a_tiny_bandwidth_keeps_its_figures(run_all):
    """A tiny model on a CPU reaches a fraction of a GB/s: three significant figures, where it used to print 0."""
    _, recs, _ = run_all
    slow = [{**r, "achieved_gbps": 0.3124} for r in recs]
    assert "0.312" in "\n".join(_render(display.run_table(slow, columns=80), 80))
    assert [display.gbps(v) for v in (0.3124, 45.26, 4430.4)] == ["0.312", "45.3", "4430"]


def test_the_80_column_table_of_records_measured_elsewhere_shows_the_datasheet_floor(run_all):
    """An imported llama-bench row has no bandwidth measured here: its narrow table gives the floor at the datasheet
    peak (and says so) instead of a column of dashes."""
    _, recs, _ = run_all
    imported = [{**r, "floor_ms_measured": None, "fraction_of_floor_measured": None, "floor_ms_peak": 14.475,
                 "fraction_of_floor_peak": 0.579} for r in recs]
    body = "\n".join(_render(display.run_table(imported, columns=80), 80))
    assert "14.475" in body and "57.9%" in body and "datasheet peak" in body
    assert "measured bandwidth" in "\n".join(_render(display.run_table(recs, columns=80), 80))


def test_a_table_too_wide_for_the_terminal_keeps_every_number_whole():
    """`floorline models` (or explain) on an 80-column terminal: the text columns fold, and where the numbers still do
    not fit the table is printed as wide as they need (the terminal wraps the lines) instead of cut digits."""
    import io

    from floorline.core import zoo

    buf = io.StringIO()
    console = cli._Out(file=buf, width=80, highlight=False)
    console.print(display.table(display.MODELS_HEADER, display.models_rows(zoo.ZOO.values())))
    text = buf.getvalue()
    for a in zoo.ZOO.values():
        assert f" {a.name} " in text and f"{a.params:,}" in text and f" {a.max_pos} " in text
    buf.seek(0)
    buf.truncate()
    rows = [["2048", "native", "3.876", "0.231", "1.841", "469", "2.121", "0.102", "4430"]]
    console.print(display.table(["ctx", "mode", "wall ms", "floor ms", "idle gaps ms", "kernels/step",
                                 "host enqueue ms", "attention ms", "attention GB/s"] * 2, [rows[0] * 2]))
    assert all(v in buf.getvalue() for v in rows[0])  # no column dropped, no digit cut
    assert console.width == 80  # as it was, for what it prints next
    buf.seek(0)
    buf.truncate()
    console.print(display.table(["model", "ms"], [["m", "1.000"]]))  # what fits prints as before, within 80
    assert "1.000" in buf.getvalue() and max(len(ln) for ln in buf.getvalue().splitlines()) <= 80


def test_the_full_table_on_a_wide_terminal_or_with_wide(run_all):
    _, recs, _ = run_all
    wide = "\n".join(_render(display.run_table(recs, columns=250), 250))
    assert "p90 ms" in wide and "J/token" in wide and "…" not in wide
    forced = "\n".join(_render(display.run_table(recs, wide=True, columns=80), 400))
    assert "p90 ms" in forced


@pytest.mark.parametrize("fmt", ["table", "csv"])
def test_run_output_to_stdout_keeps_stdout_records_only(fmt):
    """`--output /dev/stdout` piped into another tool: stdout carries the records alone, one JSON line each; the table
    (or csv) goes to stderr. Once the table was printed into the same stream as the records."""
    p = subprocess.run([sys.executable, "-m", "floorline", *RUN, "--mode", "eager", "--format", fmt,
                        "--output", "/dev/stdout"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    recs = [json.loads(ln) for ln in p.stdout.splitlines()]
    assert [(r["model"], r["mode"]) for r in recs] == [("tiny-llama", "eager")]
    assert ("ms/step" if fmt == "table" else "step_ms_median") in p.stderr


@pytest.mark.parametrize("command", ["ab", "sweep", "quant", "endpoint", "allreduce"])
@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "soon"])
def test_timeout_is_positive_finite_seconds_everywhere(command, value):
    """Once endpoint passed -1 to the HTTP client (a traceback), sweep let NaN through `<= 0`, quant recorded every
    backend as 'timeout after -1 s' and counted those as done. Now argparse refuses it: one line, exit 2."""
    rc, _, err = run_cli([command, "--timeout", value])
    assert rc == 2 and "--timeout" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("argv", [["import", "{d}", "--model", "tiny-llama"],
                                  ["predict", "--from", "{d}", "--model", "qwen2.5-7b", "--ctx", "2048", "--gpu", "h200"],
                                  ["floor", "--model", "qwen2.5-7b", "--ctx", "2048", "--gpu", "h200", "--tp", "2",
                                   "--allreduce-from", "{d}"]])
def test_a_folder_where_a_file_belongs_is_named_as_one(argv, tmp_path):
    rc, _, err = run_cli([a.format(d=tmp_path) for a in argv])
    assert rc == 2 and f"{tmp_path}: a folder, not a file;" in err, err


@pytest.mark.parametrize("argv, named", [
    (["run", "--model", "tiny-llama", "--device", "cpu", "--mode", "eager", "--native", "mlp=gemv"], "--mode"),
    (["run", "--model", "tiny-llama", "--device", "cpu", "--mode", "all", "--native", "mlp=gemv"], "(eager,static)"),
    (["sweep", "--models", "tiny-llama", "--ctx", "16", "--device", "cpu", "--modes", "all", "--native", "pdl=off",
      "--dry-run"], "no cell of this grid runs mode native"),
    (["sweep", "--models", "tiny-llama", "--ctx", "16", "--device", "cpu", "--modes", "eager", "--native", "pdl=off",
      "--dry-run"], "--modes"),
    (["floor", "--model", "qwen2.5-7b", "--ctx", "2048", "--gpu", "h200", "--allreduce-backend", "nccl"],
     "--allreduce-from")])
def test_an_option_its_mode_or_source_would_ignore_is_refused(argv, named):
    """`--mode eager --native mlp=gemv` once stamped native_mlp=gemv into eager records; --allreduce-backend without
    --allreduce-from was ignored."""
    rc, _, err = run_cli(argv)
    assert rc == 2 and named in err and len(err.strip().splitlines()) == 1, err


def test_sweep_gpus_on_a_machine_without_one_names_the_right_flag(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    base = ["sweep", "--models", "tiny-llama", "--ctx", "16", "--modes", "eager", "--gpus", "0", "--dry-run"]
    rc, _, err = run_cli(base)  # --device left to its default: the user gave no --device cpu to drop
    assert rc == 2 and "no CUDA GPU is visible here; drop --gpus" in err, err
    rc, _, err = run_cli([*base, "--device", "cpu"])
    assert rc == 2 and "drop --device cpu" in err, err


def test_run_table_title_names_each_rows_own_bandwidth_when_they_differ():
    """`run --resume` measures each context in its own process: the title once gave the first process's 20 GB/s
    above rows whose floors were at 12-28 GB/s."""
    r = {"device_name": "AMD EPYC", "peak_gbps": None, "measured_gbps": 20.2, "bw_pattern": "copy",
         "model": "tiny-llama", "ctx": 16, "mode": "eager", "step_ms_median": 1.0, "floor_ms_measured": 0.5}
    one = display.run_table([r, dict(r, ctx=24)], wide=True).title
    assert "20 GB/s measured (copy)" in one and "each row" not in one
    two = display.run_table([r, dict(r, ctx=24, measured_gbps=28.1), dict(r, ctx=32, measured_gbps=12.2)],
                            wide=True).title
    assert "12-28 GB/s measured (each row at its own process's)" in two and "20 GB/s" not in two


def test_run_with_no_options_is_the_readmes_default(monkeypatch, capsys):
    """`floorline run` on a CPU: qwen2.5-0.5b, ctx 1024, eager and static, 5 warm-up and 30 timed steps (the
    README's first command and its first-minute figure depend on each)."""
    from floorline.bench import measure

    seen = []
    monkeypatch.setattr(measure, "measure_cells", lambda cfg, **kw: seen.append(cfg) or [])
    monkeypatch.setattr("floorline.bench.device.resolve_device", lambda d: __import__("torch").device("cpu"))
    assert cli.main(["run"]) == 0
    (cfg,) = seen
    assert (cfg.model, cfg.ctxs, cfg.warmup, cfg.steps) == ("qwen2.5-0.5b", [1024], 5, 30)
    from floorline.bench.config import expand_modes

    assert expand_modes(cfg.modes, __import__("torch").device("cpu"), cfg.quant) == ["eager", "static"]


def test_a_reader_that_closes_stdout_is_exit_141_and_no_message():
    """`floorline floor ... | head -1`: the reader went, nothing failed. rich would exit 1, the code of a crashed
    cell; floorline exits as a command that SIGPIPE ended (141), silently."""
    import os
    import subprocess
    import sys

    r, w = os.pipe()
    os.close(r)  # the reader is gone before anything is written
    try:
        p = subprocess.run([sys.executable, "-m", "floorline", "floor", "--model", "gpt-oss-20b", "--ctx", "8192"],
                           stdout=w, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(w)
    assert p.returncode == 141 and p.stderr == "", (p.returncode, p.stderr)
