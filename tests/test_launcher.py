"""launcher: a RunConfig in a fresh process comes back as records; a failure says why with the child's last stderr
lines; a timeout kills the child's whole process group."""

from __future__ import annotations

from floorline.bench.config import RunConfig
from floorline.study import launcher

TINY = dict(device="cpu", warmup=1, steps=3, dtype="bf16", prefill_chunk=16)


def test_records_come_back_tagged():
    started = []
    recs, why = launcher.run_fresh([RunConfig("tiny-llama", [16], ["eager"], **TINY)], tags={"study": "t"},
                                   on_start=started.append)
    assert why is None and len(started) == 1 and started[0].returncode == 0
    assert [(r["model"], r["ctx"], r["mode"], r["study"]) for r in recs] == [("tiny-llama", 16, "eager", "t")]
    assert recs[0]["valid"] and recs[0]["step_ms_median"] > 0


def test_a_childs_records_name_the_users_command(monkeypatch):
    """A cell run in a child process records the command the user typed, not the worker's own command line."""
    monkeypatch.setattr("sys.argv", ["/usr/bin/floorline", "sweep", "--models", "tiny-llama"])
    monkeypatch.delenv("FLOORLINE_COMMAND", raising=False)
    recs, why = launcher.run_fresh([RunConfig("tiny-llama", [16], ["eager"], **TINY)])
    assert why is None and recs[0]["command"] == "floorline sweep --models tiny-llama"


def test_bad_input_is_exit_2_with_the_childs_error_line():
    recs, why = launcher.run_fresh([RunConfig("gpt-5", [16], ["eager"], **TINY)])
    assert recs == [] and why.startswith("exit code 2: ") and "floorline: error: unknown model" in why


def test_a_timeout_kills_the_child_and_says_so():
    procs = []
    recs, why = launcher.run_fresh([RunConfig("tiny-llama", [16], ["eager"], **TINY)], timeout_s=0.5,
                                   on_start=procs.append)
    assert recs == [] and why.startswith("timeout after")
    assert procs[0].returncode is not None  # reaped: nothing left running
