"""worker: the child's entry point appends every record with the spec's tags; bad input exits 2 with one line; a
child whose parent is SIGKILLed dies with it (no orphan keeps measuring)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict

import pytest

from floorline.bench.config import RunConfig
from floorline.core import records
from floorline.study import worker


@pytest.fixture
def no_deathsig(monkeypatch):
    monkeypatch.setattr(worker, "die_with_parent", lambda: None)  # in-process: pytest keeps its own signals


def test_every_record_is_appended_with_its_tags(tmp_path, no_deathsig):
    out = tmp_path / "out.jsonl"
    spec = {"configs": [asdict(RunConfig("tiny-llama", [16], ["eager", "static"], device="cpu", warmup=1,
                                          steps=3, dtype="bf16", prefill_chunk=16))], "tags": {"ab_session": 4}}
    assert worker.main([json.dumps(spec), str(out)]) == 0
    recs = records.read(out)
    assert [r["mode"] for r in recs] == ["eager", "static"] and all(r["ab_session"] == 4 for r in recs)


def test_bad_input_exits_2_with_one_line(tmp_path, capsys, no_deathsig):
    spec = {"configs": [asdict(RunConfig("tiny-llama", [0], ["eager"], device="cpu"))], "tags": {}}
    assert worker.main([json.dumps(spec), str(tmp_path / "out.jsonl")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("floorline: error: --ctx")
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_child_dies_with_its_parent():
    # the child shares the parent's stdout: the parent prints the child's pid, the child "up" once its death
    # signal is armed
    child = ("from floorline.study.worker import die_with_parent; die_with_parent(); import time; print('up', flush=True); "
             "time.sleep(120)")
    parent = (f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', {child!r}]); "
              f"print(p.pid, flush=True); time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    pid = int(proc.stdout.readline())
    assert proc.stdout.readline().strip() == "up"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for _ in range(100):
        if not _alive(pid):
            break
        time.sleep(0.1)
    assert not _alive(pid), "the child outlived its SIGKILLed parent"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "State:\tZ" not in f.read()
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_whose_parent_died_before_it_armed_its_signal_ends_at_once():
    """The launcher names itself in FLOORLINE_PARENT_PID: a child re-parented before it armed the signal (its
    parent SIGKILLed in the child's first instants) sees another parent and exits, and torch is imported only after
    (the seconds of that import are no window for an orphan)."""
    code = "from floorline.study.worker import die_with_parent; die_with_parent(); print('survived')"
    env = {**os.environ, worker.PARENT_ENV: "999999999"}  # past any pid_max: never this child's parent
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "survived" not in p.stdout
    env[worker.PARENT_ENV] = str(os.getpid())
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "survived" in p.stdout
    p = subprocess.run([sys.executable, "-c", "import sys, floorline.study.worker; print('torch' in sys.modules)"],
                       capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "False"
