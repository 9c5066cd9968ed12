"""Result records: a versioned schema of flat keys, written as JSON lines durably, read back strictly.

Schema history (bump SCHEMA_VERSION when a key changes meaning or goes away; adding keys is compatible):
  1  first version: one record per measured cell (model x ctx x mode x quant x dtype x device).
  2  mode native's settings are the run's options (NativeOptions), in every record: native_mlp, native_attn_kernel,
     native_attn_chunk (0: sized to the GPU), native_pdl (auto | off), native_step_tune. What a native step resolved
     them to: native_pdl_launch (bool), native_attn_chunk_used, native_attn, native_fused_mlp (bool), with the
     tuning trials in native_{int4,triton,mlp}_step_tuning. In version 1 native_pdl held the resolved mode
     (after-wait, ...), native_attn_chunk the chunk used and native_fused_mlp the MLP's tuning; native_mlp_split and
     native_probe_no_wait went away. Added since (compatible): native_persist, native_persist_used and
     native_{persist,attn}_step_tuning (the attention's chunk and warps, and the CUDA chunks, timed in the step), native_o_merge_used and
     native_o_merge_step_tuning (the attention's merge inside the o GEMV, or not), native_finals_step_tuning (the
     attention's and o's finalists timed together in interleaved rounds), native_kv_prefetch_used and
     native_kv_prefetch_step_tuning (the fused MLP asking the L2 for the next layer's KV, or not), native_pdl_early_used
     and native_pdl_early_step_tuning (which kernels let the next launch before their own wait; native_pdl may be
     after-wait); model_config_sha256 (a local model's config.json digest: arch.Arch.identity).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import sys
import time
from pathlib import Path

from floorline.core.errors import UserError

try:
    import fcntl
except ImportError:  # not POSIX: no lock, one writer a file
    fcntl = None

SCHEMA_VERSION = 2

# Every record has at least these keys (None where not applicable, e.g. floor_ms_peak for a CPU).
REQUIRED_KEYS = (
    "schema_version", "run_id", "model", "ctx", "mode", "quant", "dtype", "device", "device_name",
    "step_ms_median", "step_ms_p90", "samples_ms", "floor_bytes", "floor_ms_peak", "floor_ms_measured",
    "fraction_of_floor_peak", "fraction_of_floor_measured", "tokens_per_s", "achieved_gbps", "valid", "reason",
)


LOCK_QUIET_S = 1.0  # a lock held this long is no record being written: the wait is said (once a file)
_ANNOUNCED: set = set()


def _try_lock(f, kind: int, seconds: float) -> bool:
    """The lock, without blocking, retried for `seconds`; False when another holder kept it that long."""
    end = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(f.fileno(), kind | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= end:
                return False
            time.sleep(0.02)


@contextlib.contextmanager
def _locked(f, exclusive: bool = True):
    """An advisory lock (flock) on an open results file, so that floorline processes writing one file never overlap:
    a record is written whole under the exclusive lock (a record of many kB takes more than one write), and a repair
    of the last line (prepare) looks at it under the same lock, so it never cuts another process's record mid-write."""
    held = False
    if fcntl is not None:
        kind = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        try:
            if not _try_lock(f, kind, LOCK_QUIET_S):  # held past a record's write: say so once a file, then wait
                if f.name not in _ANNOUNCED:
                    _ANNOUNCED.add(f.name)
                    print(f"floorline: waiting for {f.name}: another floorline process holds it", file=sys.stderr,
                          flush=True)
                fcntl.flock(f.fileno(), kind)
            held = True
        except OSError:  # a file system without locks (some network mounts): written as before, unlocked
            pass
    try:
        yield f
    finally:
        if held:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


_HELD: dict = {}  # results file -> (its lock file, the open handle holding the lock, the folders hold() made)


def hold(path: str | os.PathLike | None) -> None:
    """Called by a command that plans from a results file what it still has to run (sweep, ab, quant: resume.load;
    run --resume), before it reads the file: a second such command on the same file (by any path to it) is one line
    (UserError), not a second run of every cell beside the first. The lock (flock) is on a hidden file beside it,
    `.NAME.lock`, so it never meets the per-record lock (_locked) on the file itself, on a local disk or on NFS, where
    flock is a byte range. Held until release() (the CLI's end) or the process's; a second hold of one file is a
    no-op. None, a stream, or a folder where no lock file can be made or opened: no lock."""
    if not path or fcntl is None:
        return
    p = Path(path).resolve()
    if p in _HELD or (p.exists() and not p.is_file()):
        return
    lock = p.with_name(f".{p.name}.lock")
    made = [d for d in [p.parent, *p.parent.parents] if not d.exists()]  # removed again if left empty
    while True:
        try:
            p.parent.mkdir(parents=True, exist_ok=True)  # (the folder a first record would make)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            try:  # another user's lock file, or a folder this user cannot write: flock takes a reader's handle
                fd = os.open(lock, os.O_RDONLY)
            except OSError:
                return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            _remove_empty(made)
            raise UserError(f"{path}: another floorline command is running from this file (sweep, ab, quant or run "
                            f"--resume: one at a time); wait for it to end, or give another --output") from None
        except OSError:  # a file system without locks (some network mounts): as before, unlocked
            os.close(fd)
            return
        try:
            if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                break  # (else the holder before removed it while this opened it: take the new one)
        except FileNotFoundError:
            pass
        os.close(fd)
    _HELD[p] = (lock, fd, made)


def release() -> None:
    """Every hold() of this process let go, its lock file removed (while still locked: a command that opened it
    meanwhile finds it gone and takes the next one), and a folder hold() made that nothing was written to."""
    while _HELD:
        _, (lock, fd, made) = _HELD.popitem()
        with contextlib.suppress(OSError):
            lock.unlink()
        os.close(fd)
        _remove_empty(made)


def _remove_empty(folders: list[Path]) -> None:
    for d in folders:  # deepest first
        with contextlib.suppress(OSError):
            d.rmdir()


@contextlib.contextmanager
def _open_locked(p: Path, exclusive: bool):
    """The file opened for reading under its lock. An exclusive lock is taken on a handle open for writing where the
    file allows one (on NFS, Linux emulates flock with byte-range locks, which need it)."""
    f = None
    if exclusive:
        try:
            f = open(p, "r+b")
        except OSError:  # a read-only file: the lock as a reader's handle can take it
            f = None
    with f or open(p, "rb") as f, _locked(f, exclusive):
        yield f


def append(path: str | os.PathLike, records: list[dict]) -> None:
    """Append records, one complete line per write, flushed and fsynced: a killed run keeps every finished record.
    Each record is written under the file's lock (_locked)."""
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(p, "a", encoding="utf-8") as f:
            regular = stat.S_ISREG(os.fstat(f.fileno()).st_mode)  # not /dev/stdout, a pipe or /dev/null: no fsync
            for r in records:
                line = json.dumps(r, sort_keys=False, allow_nan=False) + "\n"
                with _locked(f):
                    f.write(line)
                    f.flush()
                    if regular:
                        os.fsync(f.fileno())
    except OSError as e:  # a full disk, a quota, a pipe closed: one line, not a traceback
        fix = ("free space there or write elsewhere" if e.errno in (errno.ENOSPC, errno.EDQUOT) else
               "write elsewhere")
        raise UserError(f"{p}: cannot write a record ({e.strerror or e}); {fix} (the records written before are "
                        f"kept)") from None


def torn_tail(data: bytes) -> tuple[int, str | None]:
    """The torn-tail rule: a last line that lacks its newline, starts as every record does ("{") and is not a complete
    JSON record is a write killed half-way (append writes each record and its newline at once, the newline last), not
    part of the file. Returns (bytes that are the file's records, why the rest was dropped or None). A complete last
    record that lacks only its newline is kept; any other line is left to parse(), where a bad one is an error (never
    dropped: it may be a line of somebody's file given as --output by mistake)."""
    tail = data.rpartition(b"\n")[2]
    if not tail.strip() or not tail.lstrip().startswith(b"{"):
        return len(data), None
    try:
        json.loads(tail)
        return len(data), None
    except json.JSONDecodeError:
        return len(data) - len(tail), f"the last line is truncated ({len(tail)} bytes, a killed write)"


def prepare(path: str | os.PathLike, warn=lambda m: None, repair: bool = True, write: bool = True) -> list[dict]:
    """The records already in a file that new records will be appended to, read and checked before anything is
    measured or changed: a file with a line that is not a floorline record, or (write) a path that cannot be written,
    is one line (UserError) and the file is left as it was. Then (repair) a torn last line (torn_tail: a killed write)
    is cut from the file with a warning, and a complete last record without its newline gets one, so the next append
    starts its own line; without repair the torn line is only warned of and left out. All of it under the file's lock
    (no other floorline process is mid-record meanwhile)."""
    p = Path(path)
    try:
        if p.is_dir():
            raise UserError(f"{path}: is a folder; give a file path for the JSON-lines records")
        if not p.is_file():  # new, or a stream (--output /dev/stdout, a pipe): nothing to read
            if write:
                writable(path)
            return []
        with _open_locked(p, exclusive=repair) as f:
            data = f.read()
            good_end, why = torn_tail(data)
            recs = parse(data[:good_end].decode("utf-8", errors="replace"), str(path))
            if why:
                warn(f"{path}: {why}; " + ("discarded" if repair else "left out"))
            if write:
                writable(path)
            if repair and (why or (data and not data.endswith(b"\n"))):
                try:  # through the locked handle (a read-only file's cannot write: the error below)
                    if why:
                        f.truncate(good_end)
                    else:
                        f.seek(0, os.SEEK_END)
                        f.write(b"\n")
                    f.flush()
                    os.fsync(f.fileno())
                except OSError as e:
                    raise UserError(f"{path}: cannot repair its last line ({e.strerror or e}); give a writable "
                                    f"file") from None
            return recs
    except OSError as e:
        raise UserError(f"{path}: cannot read it ({e.strerror}); give a readable file path") from None


def writable(path: str | os.PathLike) -> None:
    """A file that records can be appended to (its folder made if missing), known now rather than after a long
    measurement; one line (UserError) if not."""
    p = Path(path)
    try:
        if p.exists():
            if not os.access(p, os.W_OK):
                raise PermissionError(13, "Permission denied")
            return
        p.parent.mkdir(parents=True, exist_ok=True)
        if not os.access(p.parent, os.W_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as e:
        file = next((d for d in p.parents if d.is_file()), None)  # mkdir's "File exists" names no file
        why = f"{file} is a file, not a folder" if file else e.strerror
        raise UserError(f"{path}: cannot write there ({why}); give a writable file path") from None


def read(path: str | os.PathLike, drop_torn_tail: bool = False) -> list[dict]:
    """Every record of a JSON-lines file; a corrupt line or a newer schema is an error naming file and line.
    drop_torn_tail: a torn last line (torn_tail) is skipped."""
    if not Path(path).is_file():
        raise UserError(f"{path}: no such results file (or not a regular file)")
    with _open_locked(Path(path), exclusive=False) as f:  # a record another process is writing is whole or absent
        data = f.read()
    if drop_torn_tail:
        data = data[:torn_tail(data)[0]]
    return parse(data.decode("utf-8"), str(path))


def parse(text: str, path: str) -> list[dict]:
    """Records of JSON-lines text; `path` names the source in errors."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{path}:{n}: not a JSON record ({e.msg}); remove or repair that line") from None
        v = r.get("schema_version") if isinstance(r, dict) else None
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise UserError(f"{path}:{n}: not a floorline record (no valid schema_version); remove that line")
        if v > SCHEMA_VERSION:
            raise UserError(f"{path}:{n}: schema_version {v} is newer than this floorline reads "
                            f"(<= {SCHEMA_VERSION}); upgrade floorline")
        out.append(r)
    return out


QUANT_REFERENCE = "none"  # what records carry as `quant` for the unquantised reference


def quant_label(name: str | None) -> str:
    """How tables name a backend: `bf16` for the reference (whatever its dtype, the records say it)."""
    return "bf16" if name in (None, QUANT_REFERENCE, "bf16") else name
