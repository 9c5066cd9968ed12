"""Cell records grouped for the tables and plots: which records are cells, their labels, medians, valid/total.

Owns grouping and the order rows appear in; it derives nothing a record does not hold except medians over records.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable

from floorline.core.modes import MODES as MODE_ORDER  # the one list of modes, without torch


def kind(rec: dict) -> str:
    """A record's kind; records written before `kind` existed are cells."""
    return rec.get("kind") or "cell"


def of_kind(recs: Iterable[dict], k: str) -> list[dict]:
    return [r for r in recs if kind(r) == k]


def study_cells(recs: Iterable[dict]) -> list[dict]:
    """Cells of `floorline run`: the A/B sessions' cells (they carry ab_key) are summarised by their ab_summary."""
    return [r for r in of_kind(recs, "cell") if not r.get("ab_key")]


def variant(rec: dict) -> str:
    """The mode, with dtype / quant / attention appended where they are not the defaults (like ab.Arm.label)."""
    parts = [str(rec.get("mode"))]
    if rec.get("dtype") not in (None, "bf16"):
        parts.append(str(rec["dtype"]))
    if rec.get("quant") not in (None, "none"):
        parts.append(f"quant={rec['quant']}")
    if rec.get("attn_implementation") not in (None, "sdpa"):
        parts.append(f"attn={rec['attn_implementation']}")
    if (rec.get("tp") or 1) > 1:  # its floor (floor_bytes, floor_ms_*) is per GPU: the heaviest rank's
        parts.append(f"tp={rec['tp']}/{rec.get('allreduce_backend')}")
    return "/".join(parts)


def device(rec: dict) -> str:
    return str(rec.get("device_name") or rec.get("device") or "?")


def short_device(name: str) -> str:
    return name.replace("NVIDIA ", "").replace("GeForce ", "")


def numbers(recs: Iterable[dict], key: str) -> list[float]:
    return [r[key] for r in recs if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]


def median(recs: Iterable[dict], key: str) -> float | None:
    x = numbers(recs, key)
    return statistics.median(x) if x else None


def valid(recs: Iterable[dict]) -> list[dict]:
    return [r for r in recs if r.get("valid") is True]


def count(recs: list[dict]) -> str:
    return f"{len(valid(recs))}/{len(recs)}"


def device_bandwidth(recs: list[dict]) -> dict[str, float]:
    """device name -> datasheet peak GB/s, or the median measured copy GB/s where there is no peak (CPUs)."""
    out = {}
    for name, rs in group(recs, lambda r: (device(r),)).items():
        out[name[0]] = median(rs, "peak_gbps") or median(rs, "measured_gbps") or 0.0
    return out


def group(recs: Iterable[dict], key: Callable[[dict], tuple]) -> dict[tuple, list[dict]]:
    """Records by key, keys in first-seen order."""
    out: dict[tuple, list[dict]] = {}
    for r in recs:
        out.setdefault(key(r), []).append(r)
    return out


def mode_rank(label: str) -> tuple:
    mode = label.split("/")[0]
    return (MODE_ORDER.index(mode) if mode in MODE_ORDER else len(MODE_ORDER), label)


def sort_key(bandwidth: dict[str, float]) -> Callable[[tuple], tuple]:
    """Order for (device, model, ctx, variant)-like keys, any prefix: devices by bandwidth, then name, ctx, mode."""
    def k(key: tuple) -> tuple:
        out: list = [bandwidth.get(key[0], 0.0), key[0]]
        for part in key[1:]:
            if isinstance(part, (int, float)):
                out.append((0, part, ""))
            elif isinstance(part, str) and part.split("/")[0] in MODE_ORDER:
                out.append((1,) + mode_rank(part))
            else:
                out.append((2, 0, str(part)))
        return tuple(out)
    return k


def grouped(recs: list[dict], key: Callable[[dict], tuple]) -> list[tuple[tuple, list[dict]]]:
    """group() sorted by sort_key: the order every table and legend uses."""
    k = sort_key(device_bandwidth(recs))
    return sorted(group(recs, key).items(), key=lambda kv: k(kv[0]))
