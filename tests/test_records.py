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
    (b'{"a": 1}\n{"a"\n', 14, None),  # a line with its newline was written whole: parse() judges it, never dropped
    (b'{"a": 1}\nnotes', 14, None),  # not the start of a record: not floorline's killed write, left to parse()
])
def test_the_torn_tail_rule(data, keep, why):
    n, reason = records.torn_tail(data)
    assert n == keep and (reason is None if why is None else why in reason)


REC = '{"schema_version": 2, "a": 1}\n'


def test_prepare_repairs_a_torn_tail_so_the_next_append_is_its_own_line(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text(REC + '{"schema_version": 2, "a"')
    warned = []
    assert [r["a"] for r in records.prepare(p, warned.append)] == [1]
    assert "truncated" in warned[0] and p.read_text() == REC
    records.append(p, [{"schema_version": 2, "a": 2}])
    assert [r["a"] for r in records.read(p)] == [1, 2]
    p.write_text(REC.rstrip("\n"))  # complete, only the newline missing: terminated
    assert len(records.prepare(p)) == 1 and p.read_text() == REC
    p.write_text('{"schema_version": 2, "a"')  # the first record's write killed: the file starts again
    assert records.prepare(p) == [] and p.read_text() == ""


def test_prepare_waits_for_a_record_another_process_is_writing(tmp_path):
    """Another floorline process mid-way through a record (it holds the file's lock, its line not yet whole): a start-up
    repair waits for it, then finds the record whole and cuts nothing. Unlocked, it cut that record."""
    import threading

    fcntl = pytest.importorskip("fcntl")
    p = tmp_path / "r.jsonl"
    p.write_text(REC + '{"schema_version": 2, "a"')  # the other writer's first bytes
    got = []
    with open(p, "ab") as writer:
        fcntl.flock(writer.fileno(), fcntl.LOCK_EX)
        t = threading.Thread(target=lambda: got.append(records.prepare(p)))
        t.start()
        t.join(0.5)
        assert t.is_alive() and p.read_text().endswith('"a"')  # waiting, nothing cut
        writer.write(b': 2}\n')
        writer.flush()
        fcntl.flock(writer.fileno(), fcntl.LOCK_UN)
    t.join(10)
    assert [r["a"] for r in got[0]] == [1, 2] and p.read_text() == REC + '{"schema_version": 2, "a": 2}\n'


def test_read_waits_for_a_record_being_written(tmp_path):
    """A report reading a file a study is appending to sees each record whole, never half a line."""
    import threading

    fcntl = pytest.importorskip("fcntl")
    p = tmp_path / "r.jsonl"
    p.write_text(REC + '{"schema_version": 2, "a"')
    got = []

    def reader():
        try:
            got.append(records.read(p))
        except UserError as e:
            got.append(e)

    with open(p, "ab") as writer:
        fcntl.flock(writer.fileno(), fcntl.LOCK_EX)
        t = threading.Thread(target=reader)
        t.start()
        t.join(0.5)
        assert t.is_alive()
        writer.write(b': 2}\n')
        writer.flush()
        fcntl.flock(writer.fileno(), fcntl.LOCK_UN)
    t.join(10)
    assert [r["a"] for r in got[0]] == [1, 2]


def test_a_stream_as_output_is_written_not_read(tmp_path):
    """--output /dev/stdout, a pipe or /dev/null: nothing read or repaired (reading a pipe's other end waited forever),
    and records written without fsync (which those refuse: a traceback after the measurement)."""
    import os
    import threading

    if not hasattr(os, "mkfifo") or not os.path.exists("/dev/null"):
        pytest.skip("needs POSIX pipes")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    t = threading.Thread(target=lambda: got.append(records.prepare(fifo)), daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive() and got == [[]]
    records.append("/dev/null", [_rec(1)])
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(open(fifo).read().splitlines()), daemon=True)
    reader.start()
    records.append(fifo, [_rec(1), _rec(2)])
    reader.join(5)
    assert [json.loads(x)["run_id"] for x in lines] == ["r1", "r2"]


def test_append_waits_while_another_process_holds_the_file(tmp_path, capsys, monkeypatch):
    """An append starts its record only when no other floorline process is writing or repairing the file, and once
    the lock has been held past a record's write it says that it waits, once a file (a stuck process holding the
    lock is otherwise a silent hang)."""
    import threading
    import time

    fcntl = pytest.importorskip("fcntl")
    monkeypatch.setattr(records, "LOCK_QUIET_S", 0.2)
    p = tmp_path / "r.jsonl"
    p.write_text(REC)
    records.append(p, [{"schema_version": 2, "a": 2}])  # no other process: nothing said
    assert capsys.readouterr().err == ""
    p.write_text(REC)
    with open(p, "rb") as other:
        fcntl.flock(other.fileno(), fcntl.LOCK_EX)
        recs = [{"schema_version": 2, "a": 2}, {"schema_version": 2, "a": 3}]
        t = threading.Thread(target=records.append, args=(p, recs))
        t.start()
        err, end = "", time.monotonic() + 20
        while not err and time.monotonic() < end:  # (polled: a loaded machine may start the thread late)
            time.sleep(0.05)
            err = capsys.readouterr().err
        assert t.is_alive() and p.read_text() == REC
        assert err == f"floorline: waiting for {p}: another floorline process holds it\n"
        fcntl.flock(other.fileno(), fcntl.LOCK_UN)
    t.join(10)
    assert [r["a"] for r in records.read(p)] == [1, 2, 3]
    assert capsys.readouterr().err == ""  # said once, not once a record


@pytest.mark.parametrize("text", ["my notes\nline two\nimportant last line\n", "my notes\nlast line, no newline",
                                  REC + "a line somebody wrote\n", "my only line, no newline",
                                  REC + "a last line somebody wrote, no newline"])
def test_prepare_leaves_a_file_that_is_not_records_as_it_was(tmp_path, text):
    """A file given as --output by mistake: one line naming it, and not a byte of it changed (its last line, with or
    without a newline, is not a killed write of floorline's unless the lines before it are records)."""
    from floorline.core.errors import UserError

    p = tmp_path / "notes.txt"
    p.write_text(text)
    with pytest.raises(UserError, match="notes.txt:"):
        records.prepare(p)
    assert p.read_text() == text


def test_prepare_refuses_what_it_cannot_write_in_one_line(tmp_path):
    from floorline.core.errors import UserError

    with pytest.raises(UserError, match="is a folder"):
        records.prepare(tmp_path)
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(UserError, match=r"cannot write there \(.*a-file is a file, not a folder\)"):  # root or not
        records.prepare(tmp_path / "a-file" / "r.jsonl")
    assert records.prepare(tmp_path / "new" / "r.jsonl") == [] and (tmp_path / "new").is_dir()


def test_a_full_disk_is_one_line_not_a_traceback(tmp_path):
    """`--output /dev/full` (or a disk that fills during a sweep): the write fails after the measurement; it once
    ended in a traceback (OSError: No space left on device)."""
    import os

    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    with pytest.raises(UserError, match="/dev/full: cannot write a record .*free space there or write elsewhere"):
        records.append("/dev/full", [_rec(1)])


def _hold_elsewhere(path):
    """records.hold(path) in another process, which keeps it until killed."""
    import subprocess
    import sys

    code = ("import sys, time; from floorline.core import records; records.hold(sys.argv[1]); print('held', "
            "flush=True); time.sleep(600)")
    p = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_one_planning_command_a_file(tmp_path):
    """Two sweeps on one file once both ran every cell: the second planning command is one line. The lock is a
    hidden file beside the results (never the results file itself, which is neither made nor removed), released at
    the end; records are still appended and read meanwhile."""
    p = tmp_path / "new" / "r.jsonl"
    (tmp_path / "link").symlink_to(tmp_path / "new", target_is_directory=True)
    other = _hold_elsewhere(p)
    try:
        assert (tmp_path / "new" / ".r.jsonl.lock").exists() and not p.exists()
        for path in (p, tmp_path / "link" / "r.jsonl"):  # by any path to the file
            with pytest.raises(UserError, match="another floorline command is running from this file"):
                records.hold(path)
        records.append(p, [{"schema_version": 2, "x": 1}])  # a plain `run --output` beside it
        assert records.read(p) == [{"schema_version": 2, "x": 1}]
    finally:
        other.kill()
        other.wait()
    records.hold(p)  # a killed holder's lock is gone with it
    records.hold(p)  # (a second hold of the same file in one process: nothing more)
    records.release()
    assert not (tmp_path / "new" / ".r.jsonl.lock").exists() and records.read(p) == [{"schema_version": 2, "x": 1}]
    records.hold(None)
    records.release()


def test_a_hold_that_wrote_nothing_leaves_no_folder(tmp_path):
    records.hold(tmp_path / "a" / "b" / "r.jsonl")  # (a quant refused after its hold: bad input)
    assert (tmp_path / "a" / "b" / ".r.jsonl.lock").exists()
    records.release()
    assert not (tmp_path / "a").exists()


def test_a_lock_file_removed_while_it_was_opened_is_not_held(tmp_path, monkeypatch):
    """The holder before removes its lock file on release; one that opened it just before locks a file nobody else
    will find: hold() sees the inode changed and takes the new file."""
    import os

    p = tmp_path / "r.jsonl"
    lock = tmp_path / ".r.jsonl.lock"
    lock.write_text("")
    real, calls = records.fcntl.flock, []

    def flock(fd, op):
        if not calls:  # the first lock taken: its file goes away (the holder before released it)
            lock.unlink()
        calls.append(fd)
        return real(fd, op)

    monkeypatch.setattr(records.fcntl, "flock", flock)
    records.hold(p)
    held = records._HELD[p.resolve()][1]
    assert len(calls) == 2 and lock.exists() and os.stat(lock).st_ino == os.fstat(held).st_ino
    records.release()


def test_a_second_sweep_on_the_same_file_is_refused(tmp_path, capsys):
    from floorline import cli

    p = tmp_path / "r.jsonl"
    other = _hold_elsewhere(p)
    try:
        rc = cli.main(["sweep", "--models", "tiny-llama", "--ctx", "16", "--modes", "eager", "--device", "cpu",
                       "--output", str(p)])
        e = capsys.readouterr().err
        assert rc == 2 and "another floorline command is running from this file" in e and e.count("\n") == 1, e
        assert not p.exists()  # nothing ran, nothing written
        assert cli.main(["sweep", "--models", "tiny-llama", "--ctx", "16", "--modes", "eager", "--device", "cpu",
                         "--output", str(p), "--dry-run"]) == 0  # a dry run plans nothing: no lock asked
    finally:
        other.kill()
        other.wait()
    assert cli.main(["sweep", "--models", "tiny-llama", "--ctx", "16", "--modes", "eager", "--device", "cpu",
                     "--output", str(p), "--steps", "2", "--warmup", "1"]) == 0
    assert len(records.read(p)) == 1 and not (tmp_path / ".r.jsonl.lock").exists()  # released at the command's end


def test_each_record_is_fsynced_on_a_regular_file(tmp_path, monkeypatch):
    """A killed run keeps every finished record: each is on disk (fsync) before the next is measured; a stream
    (/dev/null, a pipe) is written without one (it has no disk to sync)."""
    import os

    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    records.append(tmp_path / "r.jsonl", [{"schema_version": 2, "i": i} for i in range(3)])
    assert len(synced) == 3
    records.append("/dev/null", [{"schema_version": 2}])
    assert len(synced) == 3
