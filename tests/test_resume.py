"""resume: the torn-tail rule, and every study (sweep, ab, quant) SIGKILLed in the middle of writing a record, then
resumed with the same command: every cell (or session) exactly once, nothing finished lost.

The kill is real and lands mid-write: a sitecustomize.py on the study's PYTHONPATH wraps records.append in the study
process (not in its measuring children) so that its N-th call writes its records with the last line cut in half,
flushes, and SIGKILLs its own process.
"""

from __future__ import annotations


import pytest
from conftest import complete_lines

from floorline.core.errors import UserError
from floorline.study import ab, resume

TINY = ["--device", "cpu", "--steps", "3", "--warmup", "1", "--dtype", "bf16"]


def cells(recs: list[dict]) -> list[dict]:
    return [r for r in recs if r.get("kind") == "cell"]


# ----------------------------------------------------------------------------------------------- the torn tail
def test_load_drops_a_torn_last_line_and_cuts_it_from_the_file(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('{"schema_version": 1, "a": 1}\n{"schema_version": 1, "a"')
    warned = []
    assert [r["a"] for r in resume.load(p, warned.append)] == [1]
    assert "truncated" in warned[0] and p.read_text() == '{"schema_version": 1, "a": 1}\n'


def test_load_without_repair_leaves_the_file(tmp_path):
    p = tmp_path / "r.jsonl"
    text = '{"schema_version": 1, "a": 1}\n{"schema_version": 1, "a"'
    p.write_text(text)
    assert len(resume.load(p, repair=False)) == 1 and p.read_text() == text


def test_a_complete_last_record_without_its_newline_is_kept_and_terminated(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('{"schema_version": 1, "a": 1}\n{"schema_version": 1, "a": 2}')
    assert [r["a"] for r in resume.load(p)] == [1, 2]
    assert p.read_text().endswith("}\n")  # the next append starts its own line


def test_a_corrupt_line_before_the_last_is_an_error(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('{"schema_version": 1}\nnot json\n{"schema_version": 1}\n')
    with pytest.raises(UserError, match=f"{p}:2"):
        resume.load(p)


def test_cell_key_names_the_measurement_not_the_run():
    a = {"model": "m", "ctx": 16, "mode": "eager", "quant": None, "dtype": "bf16", "device": "cuda:1"}
    b = {**a, "quant": "none", "attn_implementation": "sdpa", "device": "cuda", "run_id": "x"}
    assert resume.cell_key(a) == resume.cell_key(b)
    assert resume.cell_key(a) != resume.cell_key({**a, "device": "cpu"})
    assert resume.cell_key(a) != resume.cell_key({**a, "attn_implementation": "eager"})


def test_classify():
    assert resume.classify("timeout after 5 s") == "timeout after 5 s"
    assert resume.classify("exit code 1: CUDA out of memory").startswith("out of memory")
    assert resume.classify("exit code 2: floorline: error: bad ctx") == "invalid input: bad ctx"
    assert resume.classify("exit code -9") == "crash: exit code -9"


# ---------------------------------------------------------------------------------------- each study, SIGKILLed
def test_sweep_killed_mid_write_resumes_every_cell_exactly_once(tmp_path, torn):
    out = tmp_path / "r.jsonl"
    args = ["sweep", "--models", "tiny-llama,tiny-qwen2", "--ctx", "16", "--modes", "eager",
            "--output", str(out), *TINY]
    p = torn(args, at=2)
    assert p.returncode == -9, p.stderr
    first, tail = complete_lines(out)
    assert len(first) == 1 and tail  # one cell finished, the second torn mid-line
    p = torn(args)
    assert p.returncode == 0, p.stderr
    assert "truncated" in p.stderr
    recs, tail = complete_lines(out)
    assert tail == "" and recs[0] == first[0]  # the finished cell kept as it was
    keys = [(r["model"], r["mode"]) for r in recs]
    assert sorted(keys) == [("tiny-llama", "eager"), ("tiny-qwen2", "eager")]
    assert all(r["valid"] for r in recs)


def test_ab_killed_mid_write_resumes_each_session_once_with_both_arms_from_one_attempt(tmp_path, torn):
    out = tmp_path / "ab.jsonl"
    args = ["ab", "--model", "tiny-llama", "--ctx", "16", "--a", "eager", "--b", "static", "--sessions", "2",
            "--resamples", "200", "--output", str(out), *TINY]
    p = torn(args, at=2)  # the first session appended; the second's second arm torn
    assert p.returncode == -9, p.stderr
    first, tail = complete_lines(out)
    assert len(first) == 3 and tail  # the first session's two arms and the second's first arm
    p = torn(args)
    assert p.returncode == 0, p.stderr
    recs, tail = complete_lines(out)
    assert tail == "" and recs[:3] == first  # nothing finished is lost
    summary = [r for r in recs if r["kind"] == "ab_summary"]
    assert len(summary) == 1 and summary[0]["sessions"] == [0, 1]
    done = resume.load(out)
    pairs = ab.completed_sessions(done, summary[0]["ab_key"])
    for s, arms in pairs.items():
        assert arms["A"]["ab_attempt"] == arms["B"]["ab_attempt"]  # never one arm of each attempt
    # the second session's lone arm of the killed attempt is still in the file; the summary pairs the new attempt's
    lone = first[2]
    assert lone["ab_session"] == 1 and pairs[1][lone["ab_arm"]]["ab_attempt"] != lone["ab_attempt"]
    ratios = {s: pairs[s]["A"]["step_ms_median"] / pairs[s]["B"]["step_ms_median"] for s in pairs}
    assert summary[0]["ratios"] == [pytest.approx(ratios[s]) for s in (0, 1)]


def test_quant_killed_mid_write_resumes_every_cell_exactly_once(tmp_path, torn):
    out = tmp_path / "q.jsonl"
    args = ["quant", "--model", "tiny-llama", "--ctx", "16", "--mode", "eager,static", "--backends", "bf16,int4",
            "--output", str(out), *TINY]
    p = torn(args, at=2)  # bf16's two modes appended; int4's second mode torn
    assert p.returncode == -9, p.stderr
    first, tail = complete_lines(out)
    assert [(r["quant"], r["mode"]) for r in first] == [("none", "eager"), ("none", "static"), ("int4", "eager")]
    assert tail
    p = torn(args)
    assert p.returncode == 0, p.stderr
    recs, tail = complete_lines(out)
    assert tail == "" and recs[:3] == first
    keys = [(r["quant"], r["mode"]) for r in cells(recs)]
    want = {(q, m) for q in ("none", "int4") for m in ("eager", "static")}
    assert sorted(keys) == sorted(want)  # exactly once: int4 eager is not redone, int4 static is
    assert all(r["valid"] for r in recs)
