"""The tables and figures of README.md and docs/*.md, produced by floorline from the committed records under results/
so they cannot drift: every block between `<!-- floorline:NAME -->` and `<!-- /floorline:NAME -->` is regenerated.

  python scripts/readme_tables.py          rewrite the blocks in README.md and docs/*.md
  python scripts/readme_tables.py --check  exit 1 and name the stale blocks (tests/test_readme.py runs this)

A block's source is named in it; each block sits in one document. Text outside the blocks is left alone.
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]  # the documents that hold blocks (not docs/lab/)
H200 = ROOT / "results" / "h200"
SUITE = H200 / "suite"  # the figures of record (scripts/h200_suite.toml)
CPU = ROOT / "results" / "cpu"
BLOCK = re.compile(r"(<!-- floorline:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /floorline:(?P=name) -->)", re.S)


def _read(path: Path) -> list[dict]:
    from floorline.core import records

    return records.read(path)


def _para(text: str) -> str:
    """Prose wrapped as the rest of the README is (118 columns)."""
    return textwrap.fill(text, width=118, break_on_hyphens=False, break_long_words=False) + "\n"


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def cpu_run() -> str:
    """`floorline run` on this project's 2-core CPU, as an 80-column terminal shows it."""
    from rich.console import Console

    from floorline.report import display

    path = CPU / "default_run.jsonl"
    recs = _read(path)
    con = Console(width=80, file=io.StringIO(), highlight=False, color_system=None)
    con.print(display.run_table(recs, columns=80))
    text = "\n".join(ln.rstrip() for ln in con.file.getvalue().splitlines()).strip("\n")
    r0 = recs[0]
    return (_para(f"`floorline run` on {r0['device_name']} ({r0['torch_threads']} threads, {r0['dtype']}, torch "
                  f"{r0['torch_version']}; `{_rel(path)}`), in an 80-column terminal:") + f"\n```\n{text}\n```\n")


def first_minute() -> str:
    """The wall time of the README's first command (scripts/first_minute.sh), as recorded."""
    kv = dict(ln.split("=", 1) for ln in (CPU / "first_minute.txt").read_text().splitlines() if "=" in ln)
    return _para(f"Measured on {kv['cpu']} ({kv['cores']} cores, shared with other work: load average "
                 f"{kv['load_before']} before it started): `floorline run` took {float(kv['run_s']):.0f} s "
                 f"({float(kv['run_cpu_s']):.0f} s of CPU time) as is, in {kv['dtype']} (this CPU "
                 f"{'has' if kv['dtype'] == 'bf16' else 'lacks'} native bf16), "
                 f"and {float(kv['run_avx2_s']):.0f} s ({float(kv['run_avx2_cpu_s']):.0f} s of CPU time) with torch "
                 f"held to AVX2, in {kv['dtype_avx2']} (what a CPU without AVX-512 BF16 gets); "
                 f"`scripts/first_minute.sh`, `results/cpu/first_minute.txt`.")


def h200_run() -> str:
    from floorline.report import display

    path = H200 / "core_run.jsonl"
    recs = [r for r in _read(path) if (r["model"], r["ctx"]) == ("qwen2.5-7b", 2048)]
    r0 = recs[0]
    cols = [c for c in display.COLUMNS if c[0] != "valid"]
    return (_para(f"`floorline run` on an {r0['device_name']} (qwen2.5-7b, ctx 2048, transformers "
                  f"{r0['transformers_version']}, torch {r0['torch_version'].split('+')[0]}; `{_rel(path)}`; "
                  f"{display.bandwidth_line(r0)}):") + f"\n{display.markdown(recs, cols)}\n")


def _suite(groups: tuple[str, ...] = ("native", "native-int4", "native-long", "small", "hf"),
           valid_only: bool = True) -> list[dict]:
    """The figures of record: the records of the suite's files (`groups`; valid ones only unless asked), the latest of
    each cell."""
    latest = {}
    for f in sorted(SUITE.glob("*.jsonl")):
        if f.stem not in groups:
            continue
        for r in _read(f):
            if (r.get("kind") or "cell") == "cell" and (r.get("valid") or not valid_only):
                key = (r["model"], r["ctx"], r["mode"], r.get("quant") or "none")
                if key not in latest or (r.get("timestamp") or "") >= (latest[key].get("timestamp") or ""):
                    latest[key] = dict(r, _file=_rel(f))
    return list(latest.values())


def h200_headline() -> str:
    """The headline table: HF transformers' modes (graph, compile) and floorline's native path (bf16, int4) on the
    H200, ms a step and % of the floor at the datasheet peak and at the bandwidth that run measured."""
    core = [dict(r, _file=_rel(H200 / "core_run.jsonl")) for r in _read(H200 / "core_run.jsonl")
            if r["ctx"] == 2048 and r["mode"] in ("eager", "graph", "compile")]
    recs = core + _suite()
    order = {"eager": 0, "graph": 1, "compile": 2, "native": 3}
    sizes = {"qwen2.5-0.5b": 0.5, "llama-3.2-1b": 1, "qwen2.5-1.5b": 1.5, "llama-3.2-3b": 3, "qwen2.5-7b": 7,
             "llama-3.1-8b": 8}
    recs.sort(key=lambda r: (-sizes.get(r["model"], 0), r["ctx"], r.get("quant") != "none", order.get(r["mode"], 9)))
    rows = ["| model | ctx | mode | weights | ms/step | % of floor (datasheet) | % of floor (measured bw) | GB/s "
            "measured |", "|---|---|---|---|---|---|---|---|"]
    for r in recs:
        rows.append(f"| {r['model']} | {r['ctx']} | {r['mode']} | {'int4' if r.get('quant') == 'int4' else r['dtype']} "
                    f"| {r['step_ms_median']:.3f} | {100 * r['fraction_of_floor_peak']:.1f}% | "
                    f"{100 * r['fraction_of_floor_measured']:.1f}% | {r['measured_gbps']:.0f} |")
    files = sorted({r["_file"] for r in recs})
    shas = sorted({r.get("source_sha256") or "-" for r in recs if r["mode"] == "native"})

    def dates(native: bool) -> str:
        ds = sorted({(r.get("timestamp") or "-")[:10] for r in recs if (r["mode"] == "native") == native})
        return ds[0] if len(ds) == 1 else f"{ds[0]} to {ds[-1]}"

    dev = recs[0]["device_name"] if recs else "-"
    return (_para(f"Batch 1 on an {dev} (4800 GB/s datasheet), one fresh process a cell, ms per decode step "
                  f"(median of 30) and the share of the strict floor it reaches (int4: its own floor, the bytes of "
                  f"its codes, scales and zeros): at the datasheet peak, and at the bandwidth the same run measured. "
                  f"HF transformers' modes ({dates(False)}) and floorline's native path ({dates(True)}, sources "
                  f"{', '.join(shas)}). From " + ", ".join(f"`{f}`" for f in files) + ".")
            + "\n" + "\n".join(rows) + "\n")


def h200_today() -> str:
    """Today's families on the H200 (scripts/h200_suite.toml, group today): every cell's latest record, the invalid
    ones with their reason; MoE rows with the experts a step read and the floor of every expert."""
    from floorline.report import display

    order = {"eager": 0, "static": 1, "graph": 2, "compile": 3, "native": 4}
    recs = sorted(_suite(("today",), valid_only=False), key=lambda r: (r["model"], r["ctx"], order.get(r["mode"], 9)))
    rows = ["| model | ctx | mode | ms/step | floor ms (datasheet) | % of floor (datasheet) | % of floor (measured bw) "
            "| note |", "|---|---|---|---|---|---|---|---|"]
    for r in recs:
        note = []
        if r.get("moe_experts"):  # what `run` prints under its table (display.moe_line)
            note.append(display.moe_line(r) or f"top {r['moe_top_k']} of {r['moe_experts']} experts")
        if r.get("hf_sliding_cache"):
            note.append(f"sliding layers: {r['hf_sliding_cache']}")
        if r.get("attn_implementation") == "eager":
            note.append("eager attention")
        if not r.get("valid"):
            fl = r["floor_bytes"] / (r["peak_gbps"] * 1e9) * 1e3  # an invalid record has no derived figures
            rows.append(f"| {r['model']} | {r['ctx']} | {r['mode']} | - | {fl:.3f} | - | - | "
                        f"{'; '.join(note + [(r.get('reason') or '')[:160]])} |")
            continue
        mode = r["mode"] + (" int4" if r.get("quant") == "int4" else "")  # (int4: its own floor, codes and scales)
        rows.append(f"| {r['model']} | {r['ctx']} | {mode} | {r['step_ms_median']:.3f} | "
                    f"{r['floor_ms_peak']:.3f} | {100 * r['fraction_of_floor_peak']:.1f}% | "
                    f"{100 * r['fraction_of_floor_measured']:.1f}% | {'; '.join(note)} |")
    dev = recs[0]["device_name"] if recs else "-"
    ver = sorted({f"torch {r.get('torch_version')}, transformers {r.get('transformers_version')}" for r in recs})
    dates = sorted({(r.get("timestamp") or "-")[:10] for r in recs})
    return (_para(f"Batch 1 on an {dev} ({', '.join(ver)}; {dates[0] if dates else '-'}), random bf16 weights, one "
                  f"fresh process a model, ms per decode step (median of 30) and the share of the strict floor "
                  f"reached. From `{_rel(SUITE / 'today.jsonl')}`.") + "\n" + "\n".join(rows) + "\n")


def grid() -> str:
    from floorline.report import cells as C

    path = H200 / "grid_default.jsonl"
    recs = _read(path)
    gpus = sorted({r.get("gpu_index") for r in recs if r.get("gpu_index") is not None})
    parts = []
    for mode in ("graph", "eager"):
        f = [r["fraction_of_floor_peak"] for r in C.valid(recs) if r["mode"] == mode and r["ctx"] == 2048]
        lo, hi = f"{100 * min(f):.0f}", f"{100 * max(f):.0f}"
        parts.append(f"{mode} {lo}%" if lo == hi else f"{mode} {lo}-{hi}%")
    return _para(f"The study's default grid on the H200 (`sweep --gpus {','.join(map(str, gpus))}`, "
                 f"{C.count(recs)} cells valid): `{_rel(path)}` and `results/h200/grid_report/`. At ctx 2048, of the "
                 f"strict floor at datasheet peak: {parts[0]} (the study's H100: 27%, paper convention), {parts[1]}.")


def h200_ab() -> str:
    from floorline.core import published
    from floorline.report import display

    path = H200 / "ab_qwen2.5-7b_ctx2048.jsonl"
    summaries = [r for r in _read(path) if r.get("kind") == "ab_summary"]
    latest = list({s["ab_key"]: s for s in summaries}.values())
    pub = "; ".join(f"{p['gpu']}: {display.ab_headline(p)}" for p in published.load()["cuda_graphs_ab"])
    lines = [display.ab_headline(s) for s in latest]
    return _para(f"From `{_rel(path)}`; published: {pub}.") + "\n```\n" + "\n".join(lines) + "\n```\n"


def h200_explain() -> str:
    from floorline.report import display

    path = H200 / "explain_qwen2.5-7b_ctx2048.jsonl"
    recs = _read(path)
    keep = ["mode", "wall ms", "busy ms", "floor ms", "kernel excess ms", "idle gaps ms", "kernels/step",
            "host enqueue ms"]
    idx = [display.EXPLAIN_HEADER.index(h) for h in keep]
    rows = [[r[i] for i in idx] for r in display.explain_rows(recs)]
    return f"From `{_rel(path)}`:\n\n{display.markdown_table(keep, rows)}\n"


def h200_quant() -> str:
    from floorline.report import display, quantrows

    path = H200 / "quant_qwen2.5-7b_ctx2048.jsonl"
    recs = _read(path)
    names = quantrows.backends_in([r for r in recs if r.get("kind") == "cell"])
    modes = [m for m in ("eager", "graph") if any(r.get("mode") == m for r in recs)]
    r0 = next(r for r in recs if r.get("kind") == "cell" and r.get("valid"))
    libs = sorted({f"{r['quant_library']} {r['quant_version']}" for r in recs
                   if r.get("quant_library") and r.get("quant_version")})
    main = display.markdown_table(display.QUANT_HEADER, display.quant_rows(
        quantrows.rows(recs, "qwen2.5-7b", 2048, modes, names)))
    chain = display.markdown_table(display.KERNEL_HEADER, display.kernel_rows(
        quantrows.kernel_rows(recs, "qwen2.5-7b", names)))
    return (_para(f"On an {r0['device_name']} (qwen2.5-7b, ctx 2048; torch {r0['torch_version'].split('+')[0]}, "
                  f"transformers {r0['transformers_version']}; {', '.join(libs)}; `{_rel(path)}`):")
            + f"\n{main}\n\nKernel level (`--kernels`: the decoder matrices alone, batch 1, graph-captured):\n\n"
              f"{chain}\n")


def predict_validation() -> str:
    """predict's validation: calibrated on one H200 cell, published back-prediction, published -> H200, H200 -> L4."""
    from floorline.core import specs, zoo
    from floorline.report import predict

    core = _read(H200 / "core_run.jsonl")
    explain = _read(H200 / "explain_qwen2.5-7b_ctx2048.jsonl")
    measured = {(r["model"], r["ctx"], r["mode"]): r["step_ms_median"] for r in core}
    h200, l4 = specs.lookup("h200"), specs.lookup("l4")
    cal = predict.calibrate([r for r in core if (r["model"], r["ctx"]) == ("qwen2.5-7b", 2048)] + explain)

    def vs(c, model, ctx, mode, gpu=h200):
        p = predict.predict(c, zoo.ZOO[model], ctx, gpu, mode)["step_ms"]
        m = measured[(model, ctx, mode)]
        return f"{mode} {p:6.2f} vs {m:6.2f} ms ({100 * (p / m - 1):+.0f}%)"

    out = [f"1. H200 across models and contexts: calibrated on `results/h200/core_run.jsonl` qwen2.5-7b ctx 2048 "
           f"(4 cells) + the 3 explain records: eta {cal.eta:.3f}, fixed {cal.overhead_ms:.2f} ms (one GPU), launch "
           f"eager {cal.launch_us_per_kernel['eager']:.1f} us, static {cal.launch_us_per_kernel['static']:.1f} us "
           f"per kernel. Predicted vs measured:", "   ```"]
    for model, ctx in (("llama-3.1-8b", 2048), ("llama-3.1-8b", 8192), ("qwen2.5-7b", 8192)):
        out.append(f"   {model:<13} ctx {ctx:<5} {vs(cal, model, ctx, 'graph')}   {vs(cal, model, ctx, 'eager')}")
    out.append(f"   {'llama-3.1-8b':<13} ctx {2048:<5} {vs(cal, 'llama-3.1-8b', 2048, 'static')}   "
               f"{vs(cal, 'llama-3.1-8b', 2048, 'compile')}")
    out.append("   ```")
    pub = predict.calibrate_published()
    b = "; ".join(f"{g} {r['fitted_ms']:.2f} vs {r['measured_ms']:.2f} ms ({r['error_pct']:+.1f}%)"
                  for g, r in sorted(((r["gpu"] + " " + r["mode"], r) for r in pub.residuals)))
    out.append(f"2. Published, back-prediction (`calibrate_published`, paper convention): eta {pub.eta:.3f}, fixed "
               f"{pub.overhead_ms:.2f} ms, launch eager {pub.launch_us_per_kernel['eager']:.2f} us per kernel; "
               f"{b}.")
    q = zoo.ZOO["qwen2.5-7b"]
    g = predict.predict(pub, q, 2048, h200, "graph")["step_ms"]
    e = predict.predict(pub, q, 2048, h200, "eager")["step_ms"]
    mg, me = measured[("qwen2.5-7b", 2048, "graph")], measured[("qwen2.5-7b", 2048, "eager")]
    out.append(f"3. Published -> our H200 (qwen2.5-7b ctx 2048): graph {g:.2f} vs {mg:.2f} ms measured "
               f"({100 * (g / mg - 1):+.0f}%), eager {e:.2f} vs {me:.2f} ms ({100 * (e / me - 1):+.0f}%).")
    l4g = predict.predict(cal, q, 2048, l4, "graph")["step_ms"]
    pl4 = next(r for r in pub.residuals if r["gpu"] == "l4" and r["mode"] == "graph")["measured_ms"]
    out.append(f"4. The reverse, H200 -> L4 (strict bytes against paper-convention cells, indicative): one GPU's "
               f"calibration has no fixed time and scales the whole graph step with 1/peak: L4 graph {l4g:.1f} ms "
               f"against {pl4:.1f} ms published (eager / the A/B ratio).")
    wrapped = [textwrap.fill(item, width=118, subsequent_indent="   ", break_on_hyphens=False)
               if item[:2] in ("1.", "2.", "3.", "4.") else item for item in out]
    return "\n".join(wrapped) + "\n"


def bandwidth() -> str:
    """Which streaming pattern won, on this project's CPU and on the H200: from the latest records that carry the
    patterns (results/cpu/default_run.jsonl; results/h200/), those of this version's sources first (not a dropped
    experiment's, measured later). An indented block: it sits in a numbered list."""
    from floorline.bench.system import source_sha256

    mine = source_sha256()

    def line(rec: dict, where: str, ours: bool) -> str:
        pats = rec["bw_patterns_gbps"]
        others = ", ".join(f"{k} {v:.0f}" for k, v in pats.items() if k != rec["bw_pattern"])
        # no record of this version's sources: the newest of any, said to be so (it may be a dropped experiment's)
        whose = "" if ours else f" (no record of this version's sources {mine} yet)"
        return (f"   - {where} ({rec['device_name']}, {rec['dtype']}): **{rec['bw_pattern']}**, "
                f"{rec['measured_gbps']:.0f} GB/s ({others} GB/s); `{rec['_file']}`, sources "
                f"{rec.get('source_sha256') or '-'}{whose}\n")

    out = []
    for where, root in (("CPU", CPU), ("H200", H200)):
        recs = [dict(r, _file=_rel(f)) for f in sorted(root.rglob("*.jsonl")) for r in _read(f)
                if r.get("bw_patterns_gbps")]
        same = [r for r in recs if r.get("source_sha256") == mine]
        if recs:
            out.append(line(max(same or recs, key=lambda r: r.get("timestamp") or ""), where, bool(same)))
    return "".join(out) + "   "


def h200_endpoint() -> str:
    """`scripts/gpu_check.sh endpoint` on the H200: transformers serve against run's modes on the same weights, and
    the eager step's drift over 300 steps in one process (why the eager row is not a server overhead)."""
    import statistics

    from floorline.report import display

    path = H200 / "endpoint" / "endpoint.jsonl"
    recs = _read(path)
    head, body = display.server_overhead(recs)
    r0 = recs[0]
    trend_path = H200 / "endpoint" / "eager_trend.jsonl"
    t = _read(trend_path)[0]
    s = t["samples_ms"]
    meds = ", ".join(f"{statistics.median(s[i:i + 30]):.0f}" for i in range(0, len(s), 30))
    # nvidia-smi every 0.5 s during that run: SM clocks of the samples drawing over 90 W (the GPU at work)
    rows = [ln.split(", ") for ln in (H200 / "endpoint" / "clocks.csv").read_text().splitlines()]
    busy = sorted({int(r[1].split()[0]) for r in rows if float(r[4].split()[0]) > 90})
    clock = f"{busy[0]} MHz" if len(busy) == 1 else f"{busy[0]}-{busy[-1]} MHz"
    beyond = [float(r[2]) for r in body if r[0] != "eager"]
    sessions = [r["step_ms_median"] for r in recs if r["mode"] == "endpoint" and r.get("valid")]
    return (_para(f"From `{_rel(path)}` ({r0['device_name']}, transformers {r0['transformers_version']}, "
                  f"{r0['model']} with random weights, bf16, ctx {r0['ctx']}; sources {r0['source_sha256']}): "
                  f"{head}.")
            + "\n" + display.markdown_table(display.SERVER_HEADER, body) + "\n\n"
            + _para(f"The eager row is no overhead figure: HF eager is bound by the host's Python, and on this host "
                    f"its step drifts within one process. `{_rel(trend_path)}` ({len(s)} steps of {t['model']} at "
                    f"ctx {t['ctx']}, one process, the GPU's SM clock {clock} throughout, `clocks.csv` beside it): "
                    f"medians of each 30 steps {meds} ms, the fastest step {min(s):.0f} ms. The server's first "
                    f"session (a fresh process) took {sessions[0]:.0f} ms a token, its later ones "
                    f"{min(sessions[1:]):.0f}-{max(sessions[1:]):.0f}. The graph and native rows are GPU-bound and "
                    f"steady: the server spends {min(beyond):.0f}-{max(beyond):.0f} ms a token beyond them."))


BLOCKS = {"bandwidth": bandwidth, "cpu-run": cpu_run, "first-minute": first_minute, "h200-run": h200_run, "grid": grid,
          "h200-ab": h200_ab, "h200-explain": h200_explain, "h200-quant": h200_quant, "h200-endpoint": h200_endpoint,
          "predict-validation": predict_validation, "h200-headline": h200_headline, "h200-today": h200_today}


def render(text: str) -> tuple[str, list[str]]:
    """A document's text with every block regenerated; the names of the blocks that changed."""
    changed = []

    def sub(m: re.Match) -> str:
        name = m["name"]
        if name not in BLOCKS:
            raise SystemExit(f"unknown block {name!r}; known: {', '.join(BLOCKS)}")
        body = BLOCKS[name]()
        if body != m["body"]:
            changed.append(name)
        return m.group(1) + body + m.group(4)

    return BLOCK.sub(sub, text), changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="report stale blocks instead of rewriting them")
    args = ap.parse_args(argv)
    stale = 0
    for doc in DOCS:
        new, changed = render(doc.read_text(encoding="utf-8"))
        if args.check:
            if changed:
                print(f"{_rel(doc)}: stale blocks {', '.join(changed)}; run python scripts/readme_tables.py",
                      file=sys.stderr)
                stale += 1
            continue
        doc.write_text(new, encoding="utf-8")
        if changed:
            print(f"{_rel(doc)}: {len(changed)} block(s) regenerated ({', '.join(changed)})")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
