"""Human and machine renderings of records: the summary columns shared by the rich table, markdown and CSV.

Owns formatting only; it computes nothing that is not already in a record.
"""

from __future__ import annotations

import csv
import io
import json

from rich.table import Table

# (header, record key, format) for the one-row-per-mode summary
COLUMNS = [
    ("model", "model", "{}"),
    ("ctx", "ctx", "{}"),
    ("mode", "mode", "{}"),
    ("ms/step", "step_ms_median", "{:.3f}"),
    ("p90 ms", "step_ms_p90", "{:.3f}"),
    ("tok/s", "tokens_per_s", "{:.1f}"),
    ("floor ms @peak", "floor_ms_peak", "{:.3f}"),
    ("floor ms @meas", "floor_ms_measured", "{:.3f}"),
    ("% floor @peak", "fraction_of_floor_peak", "{:.1%}"),
    ("% floor @meas", "fraction_of_floor_measured", "{:.1%}"),
    ("GB/s", "achieved_gbps", "{:.0f}"),
    ("J/token", "energy_j_per_token", "{:.3f}"),
    ("valid", "valid", "{}"),
]


def cell(rec: dict, key: str, fmt: str) -> str:
    v = rec.get(key)
    if v is None:
        return "-"
    if key == "valid":
        return "yes" if v else "NO"
    return fmt.format(v)


def rows(records: list[dict]) -> list[list[str]]:
    return [[cell(r, k, f) for _, k, f in COLUMNS] for r in records]


def rich_table(records: list[dict]) -> Table:
    r0 = records[0] if records else {}
    peak = f"{r0['peak_gbps']:.0f} GB/s datasheet ({r0.get('peak_source')})" if r0.get("peak_gbps") else "no datasheet peak"
    meas = f"{r0['measured_gbps']:.0f} GB/s measured copy" if r0.get("measured_gbps") else ""
    t = Table(title=f"batch-1 decode on {r0.get('device_name', '?')}: {peak}, {meas}", title_justify="left")
    for h, _, _ in COLUMNS:
        t.add_column(h, justify="left" if h in ("model", "mode") else "right")
    for r in rows(records):
        t.add_row(*r)
    return t


def markdown(records: list[dict]) -> str:
    head = [h for h, _, _ in COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows(records)]
    return "\n".join(lines)


def csv_text(records: list[dict]) -> str:
    """Every key of every record; lists and dicts JSON-encoded in their cell."""
    keys: list[str] = []
    for r in records:
        keys += [k for k in r if k not in keys]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
    w.writeheader()
    for r in records:
        w.writerow({k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in r.items()})
    return buf.getvalue()


def notes(records: list[dict]) -> list[str]:
    """One line per warning or invalid verdict, for the human formats."""
    out = []
    for r in records:
        tag = f"{r.get('model')} ctx {r.get('ctx')} {r.get('mode')}"
        if not r.get("valid"):
            out.append(f"{tag}: INVALID: {r.get('reason')}")
        out += [f"{tag}: warning: {w}" for w in r.get("warnings") or []]
        if r.get("prepare_s"):
            out.append(f"{tag}: {'capture' if r['mode'] == 'graph' else 'compile'} took {r['prepare_s']:.1f} s (not timed)")
    return out
