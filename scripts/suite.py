"""The figures of record as a declarative suite: each [[run]] of a TOML file is one `floorline run` (or `explain`) in a
fresh process, its records appended to OUT/<group>.jsonl; a short table is printed last.

  python scripts/suite.py scripts/h200_suite.toml --out out/suite [--groups native,small]
                          [--only 'MODEL:MODE[:QUANT] ...']
                          [--budget 540]
                          [--src OTHER_SRC ...]

--src runs every entry again with another tree's sources (e.g. a git revision unpacked by `git archive REV src`),
interleaved entry by entry with this tree's, the order alternating: two versions measured in one lease. The table
names each record's sources by their source_sha256. --budget: seconds; an entry that would start with less than its
`seconds` (default 60) left is skipped and said so; one that runs past three times its `seconds` is stopped.

An entry: group, model, ctx (a list), mode, and optionally quant, native (mode native's options, as --native takes
them), steps, warmup, verb ("run" or "explain"), seconds (the time it is expected to need, for the budget).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def command(entry: dict, out: Path) -> list[str]:
    """The floorline command line of one entry."""
    verb = entry.get("verb", "run")
    cmd = [sys.executable, "-m", "floorline", verb, "--model", entry["model"],
           "--ctx", ",".join(str(c) for c in entry["ctx"]), "--mode", entry["mode"]]
    for key in ("quant", "native", "steps", "warmup"):
        if key in entry:
            cmd += [f"--{key}", str(entry[key])]
    if verb == "explain":
        return cmd + ["--out", str(out / f"explain_{entry['model']}_{entry['ctx'][0]}{_tag(entry)}")]
    return cmd + ["--output", str(out / f"{entry['group']}.jsonl"), "--format", "json"]


def _tag(entry: dict) -> str:
    return "".join(f"_{entry[k]}" for k in ("quant", "native") if entry.get(k)).replace(",", "_").replace("=", "-")


def run(entries: list[dict], srcs: list[Path], out: Path, budget: float, log) -> None:
    t0 = time.monotonic()
    for i, entry in enumerate(entries):
        order = srcs if i % 2 == 0 else srcs[::-1]  # alternate which tree goes first
        for src in order:
            left = budget - (time.monotonic() - t0)
            label = f"{entry['group']}: {entry['model']} ctx {entry['ctx']} {entry['mode']}{_tag(entry)} ({src})"
            if left < entry.get("seconds", 60):
                log(f"skipped, {left:.0f} s left: {label}")
                continue
            env = {**os.environ, "PYTHONPATH": str(src), "PYTHONUNBUFFERED": "1"}
            log(f"{label}")
            with open(out / "suite.log", "a") as f:
                try:
                    # an entry stops at three times its `seconds` (a compile that hangs leaves the rest their time)
                    subprocess.run(command(entry, out), env=env, stdout=f, stderr=subprocess.STDOUT,
                                   timeout=max(1.0, min(left - 5, 3 * entry.get("seconds", 60))), check=False)
                except subprocess.TimeoutExpired:
                    log(f"timed out: {label}")


def table(out: Path) -> str:
    """One line a record of every group file under `out`: ms a step, % of the floor at the measured bandwidth and at
    the datasheet peak, the sources."""
    lines = ["| group | model | ctx | mode | quant | native | ms/step | % floor @meas | % floor @peak | GB/s meas | "
             "sources | valid |", "|" + "---|" * 12]
    for p in sorted(out.glob("*.jsonl")):
        for line in p.read_text().splitlines():
            r = json.loads(line)
            if (r.get("kind") or "cell") != "cell":
                continue
            ms = r.get("step_ms_median")
            meas = f"{100 * r['fraction_of_floor_measured']:.1f}%" if r.get("fraction_of_floor_measured") else "-"
            peak = f"{100 * r['fraction_of_floor_peak']:.1f}%" if r.get("fraction_of_floor_peak") else "-"
            native = ",".join(f"{k}={r[f'native_{k}']}" for k in ("mlp", "attn_kernel", "attn_chunk", "pdl",
                                                                   "step_tune") if f"native_{k}" in r)
            lines.append(f"| {p.stem} | {r['model']} | {r['ctx']} | {r['mode']} | {r.get('quant') or 'none'} | "
                         f"{native if r['mode'] == 'native' else '-'} | {ms:.3f} | {meas} | {peak} | "
                         f"{r.get('measured_gbps') or 0:.0f} | {(r.get('source_sha256') or '?')[:16]} | "
                         f"{r.get('valid')} |" if ms else
                         f"| {p.stem} | {r['model']} | {r['ctx']} | {r['mode']} | {r.get('quant')} | | - | | | | | "
                         f"{r.get('reason')} |")
    return "\n".join(lines)


def select(entries: list[dict], groups: str | None, only: str | None) -> list[dict]:
    """The entries of `groups` (comma-separated; None: all), then of `only` (space-separated model:mode, or
    model:mode:quant to tell a quantised entry from its bf16 twin: quant "none" where the entry names none)."""
    if groups:
        want = set(groups.split(","))
        entries = [e for e in entries if e["group"] in want]
    if only:
        want = set(only.split())
        entries = [e for e in entries if f"{e['model']}:{e['mode']}" in want
                   or f"{e['model']}:{e['mode']}:{e.get('quant', 'none')}" in want]
    return entries


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("suite", help="the TOML file of [[run]] entries")
    p.add_argument("--out", default="out/suite", help="records and logs (default out/suite)")
    p.add_argument("--groups", default=None, help="comma-separated groups to run (default: all)")
    p.add_argument("--only", default=None,
                   help="space-separated model:mode[:quant] entries of those groups (default: all)")
    p.add_argument("--budget", type=float, default=float("inf"), help="seconds for the whole suite")
    p.add_argument("--src", nargs="*", default=[], help="other trees' src/ folders, measured beside this one")
    a = p.parse_args(argv)
    entries = select(tomllib.loads(Path(a.suite).read_text())["run"], a.groups, a.only)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    srcs = [ROOT / "src"] + [Path(s).resolve() for s in a.src]
    run(entries, srcs, out, a.budget, lambda m: print(m, flush=True))
    print(table(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
