"""records: JSON lines appended durably and read back strictly."""

from __future__ import annotations

import json

import pytest

from floorline.core import records
from floorline.core.errors import UserError


def _rec(i: int, **kw) -> dict:
    return {"schema_version": records.SCHEMA_VERSION, "run_id": f"r{i}", "samples_ms": [1.5, 2.25], "valid": True,
            "reason": None, "nested": {"a": [1, 2]}, **kw}


def test_append_and_read_round_trip(tmp_path):
    p = tmp_path / "sub" / "dir" / "out.jsonl"  # parents are created
    records.append(p, [_rec(1), _rec(2)])
    records.append(p, [_rec(3, note="ünïcode")])
    got = records.read(p)
    assert got == [_rec(1), _rec(2), _rec(3, note="ünïcode")]
    lines = p.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == ""  # newline-terminated
    assert len(lines) == 4
    for line in lines[:-1]:
        assert isinstance(json.loads(line), dict)  # each line a complete object on its own


def test_append_nothing_creates_an_empty_readable_file(tmp_path):
    p = tmp_path / "empty.jsonl"
    records.append(p, [])
    assert records.read(p) == []


def test_append_refuses_nan(tmp_path):
    p = tmp_path / "nan.jsonl"
    with pytest.raises(ValueError):
        records.append(p, [_rec(1, step_ms_median=float("nan"))])
    assert records.read(p) == []  # nothing half-written


def test_blank_lines_are_skipped(tmp_path):
    p = tmp_path / "blank.jsonl"
    p.write_text(json.dumps(_rec(1)) + "\n\n   \n" + json.dumps(_rec(2)) + "\n")
    assert [r["run_id"] for r in records.read(p)] == ["r1", "r2"]


def test_corrupt_line_names_file_and_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps(_rec(1)) + "\n" + '{"schema_version": 1, "run_id": "r2", "samp' + "\n")
    with pytest.raises(UserError) as e:
        records.read(p)
    assert f"{p}:2:" in str(e.value)


def test_newer_schema_is_refused(tmp_path):
    p = tmp_path / "new.jsonl"
    records.append(p, [_rec(1), _rec(2, schema_version=records.SCHEMA_VERSION + 1)])
    with pytest.raises(UserError) as e:
        records.read(p)
    assert f"{p}:2:" in str(e.value) and "schema_version" in str(e.value)


@pytest.mark.parametrize("line", ['{"run_id": "x"}', '{"schema_version": "1"}', "[1, 2]", "42"])
def test_missing_or_odd_schema_is_refused(tmp_path, line):
    p = tmp_path / "odd.jsonl"
    p.write_text(line + "\n")
    with pytest.raises(UserError, match=r":1:"):
        records.read(p)


def test_required_keys_are_unique_and_include_schema():
    assert len(set(records.REQUIRED_KEYS)) == len(records.REQUIRED_KEYS)
    assert "schema_version" in records.REQUIRED_KEYS and "samples_ms" in records.REQUIRED_KEYS


def test_read_drop_torn_tail(tmp_path):
    from floorline.core import records
    from floorline.core.errors import UserError

    p = tmp_path / "child.jsonl"
    p.write_text('{"schema_version": 1, "a": 1}\n{"schema_version": 1, "a"')
    with pytest.raises(UserError, match=":2:"):
        records.read(p)
    assert records.read(p, drop_torn_tail=True) == [{"schema_version": 1, "a": 1}]
    p.write_text('{"schema_version": 1, "a": 1}')  # complete, only the newline missing: kept
    assert records.read(p, drop_torn_tail=True) == [{"schema_version": 1, "a": 1}]


def test_source_digest_names_the_code_that_ran(tmp_path):
    """source_sha256 changes with any .py byte or path under the root, and only with them."""
    from floorline.bench import system

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "notes.txt").write_text("not code")
    first = system.source_sha256(tmp_path)
    assert len(first) == 16 and first == system.source_sha256(tmp_path)
    (tmp_path / "pkg" / "notes.txt").write_text("changed, still not code")
    assert system.source_sha256(tmp_path) == first
    (tmp_path / "pkg" / "a.py").write_text("x = 2\n")
    assert system.source_sha256(tmp_path) != first
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "a.py").rename(tmp_path / "pkg" / "b.py")
    assert system.source_sha256(tmp_path) != first


@pytest.mark.parametrize("data, keep, why", [
    (b"", 0, None),
    (b'{"a": 1}\n', 9, None),
    (b'{"a": 1}\n{"a"', 9, "truncated"),  # killed mid-line
    (b'{"a": 1}\n{"a": 2}', 17, None),  # complete, only its newline missing
    (b'{"a": 1}\n{"a"\n', 9, "not a complete record"),  # a torn line that got its newline
])
def test_the_torn_tail_rule(data, keep, why):
    n, reason = records.torn_tail(data)
    assert n == keep and (reason is None if why is None else why in reason)
