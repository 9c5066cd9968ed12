"""Reading results from many machines into one list: every file read strictly, duplicates dropped.

Owns merging only. records.prepare does the per-line checks (a corrupt line or a newer schema_version is a UserError
naming file and line; a torn last line, a killed write, is left out with a note); this module adds what only shows
across files: missing files and duplicate run_ids.
"""

from __future__ import annotations

import json
from pathlib import Path

from floorline.core import records, zoo
from floorline.core.arch import config_digest
from floorline.core.errors import UserError


def result_files(paths: list[str]) -> list[tuple[Path, bool]]:
    """The files to read, each with whether a directory search found it: each path as given, or the *.jsonl files
    under a directory (sorted)."""
    if not paths:
        raise UserError("no results given; name one or more JSON-lines files written by `floorline run` or `ab`")
    out: list[tuple[Path, bool]] = []
    for s in paths:
        p = Path(s)
        if p.is_dir():
            found = sorted(p.rglob("*.jsonl"))
            if not found:
                raise UserError(f"{p}: no *.jsonl files in this directory")
            out += [(f, True) for f in found]
        elif p.is_file():
            out.append((p, False))
        else:
            raise UserError(f"{p}: no such results file")
    return out


def _foreign(path: Path) -> bool:
    """A JSON-lines file that is not floorline's (another tool's, a probe's): its first line is JSON without a
    schema_version, or is not a JSON object at all. A floorline file from a newer version, or with a corrupt first
    record, is floorline's: records.read names its error. At most the first MiB is read."""
    with open(path, "rb") as f:
        first = b""
        while not first.strip():
            first = f.readline(1 << 20)
            if not first:
                return False  # empty: nothing to read, nothing to skip
    try:
        rec = json.loads(first)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return not first.lstrip().startswith(b"{")  # a record cut or corrupted stays floorline's error
    return not isinstance(rec, dict) or "schema_version" not in rec


def identity(rec: dict) -> str:
    """What makes two records the same: run_id, or the whole record where there is none (explain records)."""
    rid = rec.get("run_id")
    return f"run_id:{rid}" if rid else "record:" + json.dumps(rec, sort_keys=True)


# where and when a record was written, not what it holds: the same llama-bench rows imported twice differ only here
WRITTEN = ("timestamp", "command", "host", "source_file")


def _same(a: dict, b: dict) -> bool:
    return {k: v for k, v in a.items() if k not in WRITTEN} == {k: v for k, v in b.items() if k not in WRITTEN}


def _told_apart(recs: list[dict]) -> tuple[list[dict], list[str]]:
    """Local models whose name stands for more than one model, renamed "name (path)": two folders of one name with
    different config.json, or a folder named as a zoo model. Only configs known to differ tell models apart: a
    record's digest (or its folder's, where the folder is here), and a zoo model's records. A zoo model keeps its
    name (the published points match it); a record that gives no digest (written before them) joins the one digest
    seen at its path, and otherwise names no second model. Returns the records and the names told apart."""
    def digest(r: dict) -> str | None:
        return r.get("model_config_sha256") or config_digest(r.get("model_path"))

    known: dict = {}  # name -> {identity: the first path seen}; identity: a config digest, or "zoo"
    at: dict = {}  # (name, path) -> the digests seen there
    for r in recs:
        name, path, d = r.get("model"), r.get("model_path"), digest(r)
        if d:
            known.setdefault(name, {}).setdefault(d, path)
            at.setdefault((name, path), set()).add(d)
        elif not path and name in zoo.ZOO:
            known.setdefault(name, {}).setdefault("zoo", None)
    clash = [str(m) for m, ids in known.items() if len(ids) > 1]
    if not clash:
        return recs, []

    def label(r: dict) -> str:
        name, path = r["model"], r.get("model_path")
        seen = at.get((name, path), set())
        me = digest(r) or (next(iter(seen)) if len(seen) == 1 else None)
        if me is None:  # no config to go by: its folder, where it names one
            return f"{name} ({path})" if path else name
        where = known[name][me]
        same = [i for i, p in known[name].items() if p == where]  # one path, two configs (two machines)
        return f"{name} ({where}" + (f", config {me[:8]}" if len(same) > 1 else "") + ")"

    return [{**r, "model": label(r)} if str(r.get("model")) in clash and r.get("model_path") else r
            for r in recs], clash


def load_results(paths: list[str]) -> tuple[list[dict], list[str]]:
    """Records of every file, in file order, each record once; and notes on what was merged or dropped."""
    merged: list[dict] = []
    seen: dict[str, tuple[dict, Path]] = {}
    dropped, conflicts, files, skipped, torn = 0, [], [], [], []
    for f, searched in result_files(paths):
        if searched and _foreign(f):  # under a folder: skipped with a note; named on its own: an error, as before
            skipped.append(f)
            continue
        files.append(f)
        # a torn last line (a killed write, or a run still writing) is left out with a note, as sweep leaves it
        for rec in records.prepare(f, warn=torn.append, repair=False, write=False):
            key = identity(rec)
            if key in seen:
                dropped += 1
                first, where = seen[key]
                if not _same(first, rec):
                    conflicts.append(f"run_id {rec.get('run_id')} in {f} differs from the one in {where}; "
                                     f"kept the one in {where}")
                continue
            seen[key] = (rec, f)
            merged.append(rec)
    if not files:
        raise UserError(f"no floorline records in {', '.join(map(str, paths))} (its *.jsonl files are another tool's); "
                        f"name the files `floorline run`, `sweep` or `ab` wrote")
    notes = [f"read {len(merged) + dropped} records from {len(files)} file{'s' * (len(files) != 1)}"]
    if skipped:
        notes.append(f"skipped {len(skipped)} *.jsonl file{'s' * (len(skipped) != 1)} whose first line is no "
                     f"floorline record: {', '.join(map(str, skipped[:3]))}{' ...' if len(skipped) > 3 else ''}")
    if dropped:
        notes.append(f"dropped {dropped} duplicate record{'s' * (dropped != 1)} (same run_id, or the same record "
                     f"where there is no run_id)")
    notes += conflicts + torn
    merged, clash = _told_apart(merged)
    if clash:
        notes.append(f"{', '.join(clash)}: one name, several local folders (several models); each shown with its "
                     f"folder")
    cells = [r for r in merged if (r.get("kind") or "cell") == "cell"]
    missing = sorted({k for r in cells for k in records.REQUIRED_KEYS if k not in r})
    if missing:
        notes.append(f"some cell records lack {', '.join(missing)}; shown as '-'")
    return merged, notes
