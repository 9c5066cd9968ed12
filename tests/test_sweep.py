"""sweep: fresh process per cell, invalid cells recorded with reasons, kill-safety, resume, truncated last line, Ray.

Faults are injected into the child processes only, through a sitecustomize.py on their PYTHONPATH that patches
the runtime's prefill for one context: `crash@CTX` exits hard after a line on stderr, `hang@CTX` sleeps.
"""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import inject, run_cli

from floorline import cli
from floorline.bench import runtimes
from floorline.bench.config import RunConfig
from floorline.core import records
from floorline.study import resume, sweep

SITECUSTOMIZE = """
import os, sys, time
fault = os.environ.get("FLOORLINE_TEST_FAULT", "")
if fault:
    import floorline.bench.runtimes.base as base
    orig = base.Runtime.prefill
    def prefill(self, prompt, chunk=1024, progress=None):
        for f in fault.split(","):
            kind, ctx = f.split("@")
            if prompt.shape[1] == int(ctx):
                if kind == "crash":
                    print("injected crash: the kernel fell over", file=sys.stderr, flush=True)
                    os._exit(7)
                if kind == "hang":
                    time.sleep(3600)
        return orig(self, prompt, chunk, progress)
    base.Runtime.prefill = prefill
"""

COMMON = ["--device", "cpu", "--steps", "3", "--warmup", "1"]


@pytest.fixture
def faults(tmp_path, monkeypatch):
    inject(tmp_path, monkeypatch, SITECUSTOMIZE)

    def set_fault(spec: str):
        monkeypatch.setenv("FLOORLINE_TEST_FAULT", spec)
    return set_fault


def lines(path: Path) -> list[dict]:
    text = path.read_text()
    assert text.endswith("\n")
    return [json.loads(ln) for ln in text.splitlines()]


def test_crash_and_timeout_are_recorded_invalid_and_the_sweep_goes_on(tmp_path, faults, capsys):
    faults("crash@24,hang@40")
    out = tmp_path / "r.jsonl"
    rc = cli.main(["sweep", "--models", "tiny-llama", "--ctx", "16,24,40", "--modes", "static", "--timeout", "20",
                   "--output", str(out), *COMMON])
    assert rc == 1  # the grid is whole, but a cell failed: a script calling the sweep must see it
    recs = {r["ctx"]: r for r in lines(out)}
    assert sorted(recs) == [16, 24, 40]
    assert recs[16]["valid"] is True and recs[16]["step_ms_median"] > 0
    assert recs[24]["valid"] is False and recs[24]["reason"].startswith("crash: exit code 7")
    assert "injected crash: the kernel fell over" in recs[24]["reason"]  # the child's last stderr lines
    assert recs[40]["valid"] is False and recs[40]["reason"].startswith("timeout after 20 s")
    for r in recs.values():  # failed cells still carry the schema and the analytic floor
        assert r["schema_version"] == records.SCHEMA_VERSION and r["floor_bytes"] > 0 and r["model"] == "tiny-llama"
    e = capsys.readouterr().err
    assert "1/3 cells valid" in e and "--rerun with the grid narrowed to it measures it again" in e
    # the same grid again with other steps: nothing runs; the valid cell kept, and said to be from other steps
    rc = cli.main(["sweep", "--models", "tiny-llama", "--ctx", "16,24,40", "--modes", "static", "--timeout", "20",
                   "--output", str(out), "--device", "cpu", "--steps", "4", "--warmup", "1"])
    e = capsys.readouterr().err
    assert rc == 1 and "(3 recorded, 0 run now)" in e and len(lines(out)) == 3
    assert "1 cell(s) in" in e and "other --steps/--warmup (e.g. 3/1, now 4/1)" in e


def test_the_reasons_that_fail_a_command():
    """Exit 1 for a crash, a timeout, out of memory, a refused cell or a quantised model that failed its check; a
    library not installed or a step below the floor is a finding (exit 0)."""
    for reason in ("crash: exit code 7", "timeout after 20 s", "out of memory: 80 GiB asked", "invalid input: bad",
                   "quant: check failed"):
        assert cli._failed([None, reason]), reason
    for reason in (None, "unavailable: bitsandbytes not installed", "below the floor: 0.4 ms < 0.5 ms"):
        assert not cli._failed([reason]), reason


def test_past_max_position_is_invalid_without_a_process(tmp_path):
    cells = sweep.plan(["tiny-qwen2"], [9000], ["eager"], RunConfig("", [], [], device="cpu"))
    rec = resume.execute(sweep.cell_job(cells[0]), timeout_s=1)
    assert rec[0]["valid"] is False and "max position 8192" in rec[0]["reason"]
    out = tmp_path / "r.jsonl"  # the command: the record, and exit 1 (it once ended "0/1 cells valid", exit 0)
    rc = cli.main(["sweep", "--models", "tiny-qwen2", "--ctx", "9000", "--modes", "eager", "--output", str(out),
                   *COMMON])
    assert rc == 1 and "max position 8192" in lines(out)[0]["reason"]
    rc = cli.main(["sweep", "--models", "tiny-qwen2", "--ctx", "9000", "--modes", "eager", "--output", str(out),
                   *COMMON])
    assert rc == 1 and len(lines(out)) == 1  # resumed: nothing new run, the grid still holds the failure


def test_truncated_last_line_is_discarded_and_its_cell_redone(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    args = ["sweep", "--models", "tiny-llama", "--ctx", "16,24", "--modes", "eager", "--output", str(out), *COMMON]
    assert cli.main(args) == 0
    full = out.read_text()
    first, second = full.splitlines()
    out.write_text(first + "\n" + second[: len(second) // 2])  # a write killed half-way
    capsys.readouterr()
    assert cli.main(args) == 0
    err = capsys.readouterr().err
    assert "truncated" in err and "discarded" in err
    recs = lines(out)
    assert [r["ctx"] for r in recs] == [16, 24]
    assert recs[0] == json.loads(first)
    assert recs[1]["run_id"] != json.loads(second)["run_id"]  # redone, not patched up


def test_resume_skips_finished_cells_and_rerun_forces_them(tmp_path):
    out = tmp_path / "r.jsonl"
    args = ["sweep", "--models", "tiny-qwen2", "--ctx", "16", "--modes", "eager,static", "--output", str(out),
            *COMMON]
    assert cli.main(args) == 0
    assert len(lines(out)) == 2
    assert cli.main(args) == 0
    assert len(lines(out)) == 2  # nothing to do
    assert cli.main(args + ["--rerun"]) == 0
    assert len(lines(out)) == 4


def test_corrupt_line_before_the_last_is_an_error(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    out.write_text('{"schema_version": 1}\nnot json\n{"schema_version": 1}\n')
    rc = cli.main(["sweep", "--models", "tiny-qwen2", "--ctx", "16", "--modes", "eager", "--output", str(out),
                   *COMMON])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{out}:2" in err[0]


def test_dry_run_lists_cells_floors_and_memory(tmp_path, capsys):
    rc = cli.main(["sweep", "--models", "qwen2.5-7b,tiny-llama", "--ctx", "2048,16384", "--modes", "eager,static",
                   "--dry-run", "--output", str(tmp_path / "none.jsonl"), "--device", "cpu"])
    assert rc == 0
    o = capsys.readouterr().out
    assert "8 cells" in o and "qwen2.5-7b ctx 16384 static" in o
    assert "14.26" in o  # qwen2.5-7b ctx 2048 strict floor, GB
    assert "max position 8192" in o  # tiny-llama at 16384
    assert not (tmp_path / "none.jsonl").exists()


def test_a_cell_given_twice_is_one_cell_and_two_folders_of_one_name_are_two(tmp_path, monkeypatch):
    from floorline.core import zoo
    from floorline.serve import servedir

    a = servedir.write_model_dir(zoo.ZOO["tiny-llama"], tmp_path / "a" / "llama")
    b = servedir.write_model_dir(zoo.ZOO["tiny-qwen2"], tmp_path / "b" / "llama")  # another model, the same name
    base = RunConfig(model="", ctxs=[], modes=[], device="cpu")
    cells = sweep.plan(["tiny-llama", "tiny-llama"], [16, 16, 32], ["eager", "eager"], base)
    assert [(c.ctx, c.mode) for c in cells] == [(16, "eager"), (32, "eager")]
    monkeypatch.chdir(tmp_path / "a")
    cells = sweep.plan(["llama", str(a) + "/", str(b)], [16], ["eager"], base)
    assert [c.arch.name for c in cells] == ["llama", "llama"]  # ./llama and a/llama/ are one folder
    assert [c.arch.path for c in cells] == [str(a.resolve()), str(b.resolve())]
    # what resume and report tell them apart by
    ids = [c.arch.identity() for c in cells]
    assert None not in (ids[0]["model_config_sha256"], ids[1]["model_config_sha256"])
    assert ids[0]["model_config_sha256"] != ids[1]["model_config_sha256"]
    assert zoo.ZOO["tiny-llama"].identity() == {"model": "tiny-llama", "model_path": None, "model_config_sha256": None}
    rec = resume.failure_record(cells[0], "crash: a test") | {"valid": True}
    done = resume.done_keys([rec])
    assert cells[0].key() in done and cells[1].key() not in done
    old = {k: v for k, v in rec.items() if k != "model_config_sha256"}  # a record from before the digest
    assert cells[0].key() in resume.done_keys([old])  # takes its folder's, the folder being here
    import shutil

    copy = shutil.copytree(a, tmp_path / "c" / "llama")  # one model at another path (a Hub model in another cache)
    assert sweep.plan([str(copy)], [16], ["eager"], base)[0].key() == cells[0].key()
    monkeypatch.chdir(a)
    assert zoo.resolve(".").name == "llama"  # --model . is named by its folder, not ""


def test_default_grid_is_the_studys():
    assert sweep.DEFAULT_MODELS == ["qwen2.5-7b", "llama-3.1-8b", "mistral-7b-v0.3"]
    assert sweep.DEFAULT_CTXS == [2048, 4096, 8192, 16384]


def test_default_modes_by_device(tmp_path, capsys):
    """The study's pair on a GPU (eager, graph); on the CPU, graph's counterpart without graphs (static), so a plain
    `floorline sweep` or `quant` on the CPU runs instead of failing on a mode it cannot run."""
    assert runtimes.study_modes("cuda") == ["eager", "graph"] and runtimes.study_modes("cpu") == ["eager", "static"]
    cells = sweep.plan(["tiny-llama"], [16], None, RunConfig(model="", ctxs=[], modes=[], device="cpu"))
    assert [c.mode for c in cells] == ["eager", "static"]
    rc = cli.main(["sweep", "--models", "tiny-llama", "--ctx", "16", "--device", "cpu", "--dry-run",
                   "--output", str(tmp_path / "x.jsonl")])
    assert rc == 0 and "tiny-llama ctx 16 static" in capsys.readouterr().out


def test_graph_on_cpu_and_gpus_on_cpu_are_errors(tmp_path, capsys):
    rc = cli.main(["sweep", "--models", "tiny-llama", "--ctx", "16", "--modes", "graph", "--device", "cpu",
                   "--output", str(tmp_path / "x.jsonl")])
    assert rc == 2 and "needs a CUDA GPU" in capsys.readouterr().err
    rc = cli.main(["sweep", "--models", "tiny-llama", "--ctx", "16", "--modes", "eager", "--device", "cpu",
                   "--gpus", "0,1", "--output", str(tmp_path / "x.jsonl")])
    assert rc == 2 and "--gpus" in capsys.readouterr().err


def test_ray_local_instance_runs_tiny_cells(tmp_path):
    ray = pytest.importorskip("ray", reason="floorline[ray] not installed")
    out = tmp_path / "r.jsonl"
    try:
        rc = cli.main(["sweep", "--models", "tiny-llama", "--ctx", "16,24", "--modes", "eager", "--ray",
                       "--output", str(out), *COMMON])
    finally:
        ray.shutdown()
    assert rc == 0
    recs = lines(out)
    assert sorted(r["ctx"] for r in recs) == [16, 24]
    assert all(r["valid"] and r["executor"] == "ray" for r in recs)


def test_gpus_executor_gives_each_process_one_gpu(tmp_path, monkeypatch):
    seen = []

    def fake_execute(job, timeout_s, env=None, on_start=None):
        cell = job.cells[0]
        seen.append((cell.ctx, env["CUDA_VISIBLE_DEVICES"], job.configs[0].device))
        time.sleep(0.05)
        return [resume.failure_record(cell, "fake")]

    monkeypatch.setattr(sweep, "execute", fake_execute)
    cells = sweep.plan(["tiny-llama"], [16, 24, 32, 40, 48], ["eager"], RunConfig("", [], [], device="cpu"))
    out = tmp_path / "r.jsonl"
    cfg = sweep.SweepConfig(cells, str(out), gpus=[0, 1])
    done = []
    sweep.run_sweep(cfg, cells, started=lambda c: None, finished=lambda j, r: done.append(j.cells[0].ctx))
    assert sorted(done) == [16, 24, 32, 40, 48]
    assert {g for _, g, _ in seen} == {"0", "1"}  # both GPUs used
    assert all(dev == "cuda" for _, _, dev in seen)
    recs = lines(out)
    assert sorted(r["ctx"] for r in recs) == [16, 24, 32, 40, 48]
    assert {r["gpu_index"] for r in recs} == {0, 1}


@pytest.mark.parametrize("sig, rc", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_stops_cleanly_and_keeps_finished_cells(tmp_path, sig, rc):
    out = tmp_path / "r.jsonl"
    cmd = [sys.executable, "-m", "floorline", "sweep", "--models", "tiny-llama", "--ctx", "16,24,32,40",
           "--modes", "eager", "--output", str(out), *COMMON]
    # a user's Ctrl-C reaches a sweep whose SIGINT is at its default; a runner started in the background (a
    # non-interactive shell's `&`) hands its children SIGINT ignored, which Python then keeps ignoring
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    while time.time() < deadline and (not out.exists() or out.read_text().count("\n") < 1):
        time.sleep(0.2)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == rc, err
    assert "run the same command to resume" in err
    recs = lines(out)
    assert 1 <= len(recs) < 4 and all(r["valid"] for r in recs)


@pytest.mark.parametrize("bad, match", [
    (["--steps", "1"], "steps"), (["--warmup", "-1"], "warmup"), (["--attn", "flash"], "attention"),
    (["--prefill-chunk", "0"], "prefill"), (["--timeout", "-1"], "timeout"), (["--ctx", "0"], "positive"),
    (["--models", "gpt-5"], "unknown model"),
])
def test_bad_options_fail_the_sweep_without_poisoning_the_file(tmp_path, bad, match):
    out = tmp_path / "r.jsonl"
    args = ["sweep", "--models", "tiny-llama", "--ctx", "16", "--modes", "eager", "--output", str(out), *COMMON]
    rc, _, err = run_cli(args + bad)  # (--timeout -1: argparse refuses it, SystemExit 2)
    err = err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and match in err[0], err
    assert not out.exists()  # nothing recorded: the corrected command runs every cell


def test_attention_is_part_of_the_resume_key(tmp_path):
    out = tmp_path / "r.jsonl"
    args = ["sweep", "--models", "tiny-llama", "--ctx", "16", "--modes", "eager", "--output", str(out), *COMMON]
    assert cli.main(args) == 0
    assert cli.main(args + ["--attn", "eager"]) == 0
    assert [r["attn_implementation"] for r in lines(out)] == ["sdpa", "eager"]


def test_threads_reach_the_measuring_child(tmp_path):
    out = tmp_path / "r.jsonl"
    assert cli.main(["sweep", "--models", "tiny-llama", "--ctx", "16", "--modes", "eager", "--threads", "1",
                     "--output", str(out), *COMMON]) == 0
    assert lines(out)[0]["torch_threads"] == 1


def test_dry_run_does_not_repair_the_file(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    out.write_text('{"schema_version": 1, "kind": "cell"}\n{"schema_ver')
    before = out.read_bytes()
    assert cli.main(["sweep", "--models", "tiny-llama", "--ctx", "16", "--modes", "eager", "--dry-run",
                     "--output", str(out), "--device", "cpu"]) == 0
    assert out.read_bytes() == before


def test_a_family_without_sdpa_is_looked_up_by_the_attention_it_ran(tmp_path):
    """gpt-oss runs eager attention (its sinks) whatever --attn says; its records say eager. The study keys its cells
    and failure records the same way, so a measured cell is done: not a false "the child exited without a record",
    and `run --resume` run again measures nothing."""
    base = RunConfig(model="", ctxs=[], modes=[], device="cpu")
    (c,) = sweep.plan(["tiny-gpt-oss"], [16], ["eager"], base)
    assert c.run.attn == "sdpa"  # asked
    rec = resume.failure_record(c, "crash: a test") | {"valid": True}
    assert rec["attn_implementation"] == "eager"
    assert resume.done_keys([rec]) == {c.key()}
    (llama,) = sweep.plan(["tiny-llama"], [16], ["eager"], base)  # a family with SDPA keeps it
    assert resume.failure_record(llama, "x")["attn_implementation"] == "sdpa"
    out = tmp_path / "r.jsonl"
    argv = ["run", "--model", "tiny-gpt-oss", "--ctx", "16", "--mode", "eager", "--device", "cpu", "--steps", "2",
            "--warmup", "0", "--output", str(out), "--resume"]
    rc, _, e = run_cli(argv)
    assert rc == 0, e
    (r,) = records.read(out)
    assert r["valid"] and r["attn_implementation"] == "eager"
    rc, _, e = run_cli(argv)
    assert rc == 0 and "nothing to run" in e and len(records.read(out)) == 1


def test_dry_run_memory_is_what_run_asks_and_says_what_will_not_fit():
    """The memory column is run's own check (weights + KV cache + its margin); a cell over the CPU's free memory is
    "out of memory" there, not "to run", exactly where run's check refuses it."""
    import torch

    from floorline.bench import models
    from floorline.bench.config import memory_need

    base = RunConfig(model="", ctxs=[], modes=[], device="cpu", dtype="fp32")
    cells = sweep.plan(["qwen2.5-7b", "tiny-llama"], [16], ["eager"], base)
    free = 2 * 10**9
    rows = sweep.dry_run_rows(cells, [], None, free)
    assert [r["status"] for r in rows] == ["out of memory: 2.00 GB free", "to run"]
    for c, r in zip(cells, rows):
        w, kv = memory_need(c.run, c.arch, c.ctx, energy=False)
        assert r["memory_bytes"] == models.memory_asked(w, kv) == int((w + kv) * 1.1)
        refused = False
        try:
            models.check_fits(c.arch, torch.device("cpu"), w, kv, have=free)
        except Exception:
            refused = True
        assert refused == r["status"].startswith("out of memory")
    assert sweep.dry_run_rows(cells, [], None)[0]["status"] == "to run"  # free unknown (a GPU's): not judged
