"""Human and machine renderings of records and rows: every table floorline prints, as headers and rows of strings
(shared by the rich terminal tables, the report's markdown / HTML, and CSV).

Owns formatting only; it computes nothing that is not already in a record or a row (quantrows, explain, sweep).
No torch: the report renders through it.
"""

from __future__ import annotations

import csv
import io
import json

from rich import box
from rich.console import Console
from rich.table import Table

def gbps(v: float | None) -> str:
    """GB/s as a whole number, or three significant figures below 100 (a tiny model on a CPU: 0.312, not 0)."""
    return "-" if v is None else f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


# (header, record key, format) for the one-row-per-mode summary of `floorline run`
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
    ("GB/s", "achieved_gbps", gbps),
    ("J/token", "energy_j_per_token", "{:.3f}"),
    ("valid", "valid", "{}"),
]
# the columns an 80-column terminal gets: floor and % at the measured bandwidth, which every measured record has (an
# imported one, measured elsewhere, has the datasheet's: NARROW_PEAK)
NARROW = [("model", "model", "{}"), ("ctx", "ctx", "{}"), ("mode", "mode", "{}"),
          ("ms/step", "step_ms_median", "{:.3f}"), ("floor ms", "floor_ms_measured", "{:.3f}"),
          ("% floor", "fraction_of_floor_measured", "{:.1%}"), ("GB/s", "achieved_gbps", gbps),
          ("valid", "valid", "{}")]
NARROW_PEAK = [c if c[1] not in ("floor_ms_measured", "fraction_of_floor_measured") else
               (c[0], c[1].replace("measured", "peak"), c[2]) for c in NARROW]
LEFT = {"model", "mode", "backend", "library", "cell", "status", "name", "family", "component", "gpu", "kernel",
        "--gpu", "device", "memory", "source", "note", "order", "GPU", "comparison", "dtype"}


def cell(rec: dict, key: str, fmt: str) -> str:
    v = rec.get(key)
    if v is None:
        return "-"
    if key == "valid":
        return "yes" if v else "NO"
    return fmt(v) if callable(fmt) else fmt.format(v)


def rows(records: list[dict], columns=COLUMNS) -> list[list[str]]:
    return [[cell(r, k, f) for _, k, f in columns] for r in records]


def num(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def pct(v, spec: str = ".1f") -> str:
    return "-" if v is None else format(v * 100, spec) + "%"


def short(text: str, n: int = 90) -> str:
    """A status or reason cut at a word boundary to about n characters, marked as cut."""
    return text if len(text) <= n else text[:n].rsplit(" ", 1)[0].rstrip(":;,") + " …"


def table(header: list[str], body: list[list[str]], title: str | None = None) -> Table:
    """A rich table: text columns left, numbers right; numbers never wrap or get cut (a narrow terminal folds the
    text columns instead)."""
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for h in header:
        left = h in LEFT
        t.add_column(h, justify="left" if left else "right", no_wrap=not left, overflow="fold")
    for r in body:
        t.add_row(*r)
    return t


def width(t: Table) -> int:
    """The columns a table needs to print without folding anything."""
    return Console(width=10_000, file=io.StringIO()).measure(t).maximum


# ----------------------------------------------------------------------------------------------------------- run
def bandwidth_line(r0: dict) -> str:
    """'no datasheet peak, 45 GB/s measured (best of copy 41, read 45, gemv 30)'."""
    peak = (f"{r0['peak_gbps']:.0f} GB/s datasheet ({r0.get('peak_source')})" if r0.get("peak_gbps")
            else "no datasheet peak")
    meas = ""
    if r0.get("measured_gbps"):
        pats = r0.get("bw_patterns_gbps") or {}
        best = r0.get("bw_pattern") or "copy"
        detail = ", ".join(f"{k} {v:.0f}" for k, v in pats.items())
        meas = f", {r0['measured_gbps']:.0f} GB/s measured ({best}" + (f"; {detail})" if detail else ")")
    return peak + meas


def run_table(records: list[dict], wide: bool | None = None, columns: int | None = None) -> Table:
    """The run summary: every column where the terminal has room (or wide=True), else the essential ones."""
    r0 = records[0] if records else {}
    title = f"batch-1 decode on {r0.get('device_name', '?')}: {bandwidth_line(r0)}"
    meas = sorted({round(r["measured_gbps"]) for r in records if r.get("measured_gbps")})
    if len(meas) > 1:  # several processes (run --resume: one a context), each its own bandwidth: the title says so
        title = (f"batch-1 decode on {r0.get('device_name', '?')}: {bandwidth_line({**r0, 'measured_gbps': None})}, "
                 f"{meas[0]}-{meas[-1]} GB/s measured (each row at its own process's)")
    full = table([h for h, _, _ in COLUMNS], rows(records), title)
    if wide or (wide is None and (columns is None or width(full) <= columns)):
        return full
    peak = not any(r.get("floor_ms_measured") for r in records) and any(r.get("floor_ms_peak") for r in records)
    return table([h for h, _, _ in NARROW], rows(records, NARROW_PEAK if peak else NARROW),
                 title + f"; floor and % at the {'datasheet peak' if peak else 'measured bandwidth'} (--wide: every "
                         f"column)")


def markdown_table(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines)


def markdown(records: list[dict], columns=COLUMNS) -> str:
    return markdown_table([h for h, _, _ in columns], rows(records, columns))


SERVER_HEADER = ["in-process mode", "ms/step", "server ITL - step, ms", "ratio"]


def server_overhead(records: list[dict]) -> tuple[str, list[list[str]]]:
    """An endpoint's sessions beside `run`'s modes on the same weights (scripts/gpu_check.sh endpoint): a headline
    (ITL: the median of the valid sessions' medians; TTFT likewise) and a row per in-process mode with the server's
    ITL minus its step. ("", []) without valid endpoint records."""
    import statistics

    cells = [r for r in records if r.get("kind", "cell") == "cell" and r.get("valid")]
    ep = [r for r in cells if r["mode"] == "endpoint"]
    if not ep:
        return "", []
    itl = statistics.median(r["step_ms_median"] for r in ep)
    ttft = statistics.median(r["ttft_ms"] for r in ep)
    server = ep[0].get("endpoint_server") or f"the server (header {ep[0].get('endpoint_server_header')})"
    each = ", ".join(f"{r['step_ms_median']:.1f}" for r in ep)
    head = (f"{server}, {len(ep)} sessions of {ep[0]['ctx']} + {ep[0].get('steps')} tokens: ITL {itl:.3f} ms (median "
            f"of the sessions' medians; each {each}), TTFT {ttft:.1f} ms")
    body = [[r["mode"], f"{r['step_ms_median']:.3f}", f"{itl - r['step_ms_median']:+.3f}",
             f"{itl / r['step_ms_median']:.2f}x"] for r in cells if r["mode"] != "endpoint"]
    return head, body


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


def moe_line(r: dict) -> str | None:
    """A valid mixture-of-experts record's routing (bench/moe.py): the experts a step read, and the floors of those
    bytes and of every expert at the measured bandwidth; a slow step beside the second is routing or a runtime that
    reads every expert, beside the first the runtime."""
    if not (r.get("moe_experts") and r.get("valid") and r.get("floor_bytes_routed") and r.get("measured_gbps")):
        return None
    def ms(b):
        return f"{b / (r['measured_gbps'] * 1e9) * 1e3:.3g} ms"
    return (f"routed to {r['moe_experts_read_per_step']:.3g} experts a step (top {r['moe_top_k']} of "
            f"{r['moe_experts']} in each of {r['moe_layers']} layers; {r['moe_experts_distinct_over_steps']} distinct "
            f"over {r['moe_route_steps']} steps); floor of the experts read {ms(r['floor_bytes_routed'])}, of every "
            f"expert {ms(r['floor_bytes_all_experts'])}, at the measured bandwidth")


def notes(records: list[dict]) -> list[str]:
    """One line per warning or invalid verdict, and a mixture-of-experts record's routing, for the human formats."""
    out = []
    for r in records:
        tag = f"{r.get('model')} ctx {r.get('ctx')} {r.get('mode')}"
        if not r.get("valid"):
            out.append(f"{tag}: INVALID: {r.get('reason')}")
        out += [f"{tag}: warning: {w}" for w in r.get("warnings") or []]
        moe = moe_line(r)
        if moe:
            out.append(f"{tag}: {moe}")
        if r.get("prepare_s"):
            out.append(f"{tag}: {'capture' if r['mode'] == 'graph' else 'compile'} took {r['prepare_s']:.1f} s (not timed)")
    return out


# ------------------------------------------------------------------------------------------------------------ A/B
def ab_headline(s: dict) -> str:
    """The study's form: 'graph vs eager: 1.259x [1.253, 1.267], N=10' (ours, or a published row that may lack an
    interval or N)."""
    ci = s.get("ratio_mean_ci95") or (None, None)
    if ci[0] is not None:
        ci_s = f" [{ci[0]:.3f}, {ci[1]:.3f}]"
    else:
        ci_s = " [no interval: N < 2]" if s.get("n_sessions") else " (no interval published)"
    n_s = f", N={s['n_sessions']}" if s.get("n_sessions") else ""
    return f"{s['arm_b']} vs {s['arm_a']}: {s['ratio_mean']:.3f}x{ci_s}{n_s}"


AB_SESSION_HEADER = ["session", "order", "A median ms", "B median ms", "A/B"]


def ab_session_rows(s: dict) -> list[list[str]]:
    return [[str(sess), s["orders"][i], f"{s['median_ms_a'][i]:.3f}", f"{s['median_ms_b'][i]:.3f}",
             f"{s['ratios'][i]:.3f}"] for i, sess in enumerate(s["sessions"])]


# how often a nominal 95% percentile interval of the mean held it, by N (4,000 draws of N normal samples a size,
# 2,000 resamples each; docs/method.md)
BOOTSTRAP_COVERAGE = {5: 0.83, 10: 0.91, 20: 0.93, 50: 0.94}


def ab_gmean_line(s: dict) -> str:
    glo, ghi = s["ratio_gmean_ci95"]
    n = len(s.get("ratios") or ())
    if glo is None:
        return f"geometric mean {s['ratio_gmean']:.3f}x (no interval: {n} session{'s' * (n != 1)})"
    near = min(BOOTSTRAP_COVERAGE, key=lambda k: abs(k - n))
    return (f"geometric mean {s['ratio_gmean']:.3f}x [{glo:.3f}, {ghi:.3f}]; 95% percentile bootstrap, "
            f"{s['bootstrap_resamples']} resamples, seed {s['seed']}"
            + (f" (it under-covers below 50 sessions: about {BOOTSTRAP_COVERAGE[near]:.0%} at {near}; docs/method.md)"
               if n < 50 else ""))


# ---------------------------------------------------------------------------------------------------------- check
CHECK_HEADER = ["kernel", "format", "shape", "config", "rel err", "check", "us", "MB", "GB/s", "% of copy",
                "cuBLAS GB/s"]


def check_rows(rows_: list[dict]) -> list[list[str]]:
    """`floorline check`'s rows (bench/check.py): each kernel's error against its reference, then its time alone."""
    return [[r["kernel"], r["fmt"], r["shape"], r["config"], num(r["rel_err"], ".1e"), "ok" if r["ok"] else "WRONG",
             num(r["us"], ".1f"), f"{r['bytes'] / 1e6:.1f}", num(r["gbps"], ".0f"),
             pct(r["fraction_of_copy"]), num(r["cublas_gbps"], ".0f")] for r in rows_]


# -------------------------------------------------------------------------------------------------------- explain
EXPLAIN_HEADER = ["ctx", "mode", "wall ms", "busy ms", "floor ms", "kernel excess ms", "idle gaps ms", "kernels/step",
                  "host enqueue ms", "attention ms", "attention GB/s"]


def explain_rows(rows_: list[dict]) -> list[list[str]]:
    return [[str(r["ctx"]), r["mode"], f"{r['wall_ms']:.3f}", f"{r['gpu_busy_ms']:.3f}",
             f"{r['floor_ms_measured']:.3f}", f"{r['kernel_excess_ms']:.3f}", f"{r['idle_gaps_ms']:.3f}",
             f"{r['kernels_per_step']:.0f}", f"{r['host_enqueue_ms']:.3f}", f"{r['attention_ms']:.3f}",
             gbps(r.get("attention_gbps") or None)] for r in rows_]  # 0.49 GB/s on a CPU once printed as 0


TOP_KERNEL_HEADER = ["kernel", "ms/step", "span ms/step", "calls/step", "share"]


def top_kernel_rows(r: dict) -> list[list[str]]:
    """ms/step: what the kernel adds to the busy time (explain._exclusive_us); span: from its start to its end,
    which under programmatic dependent launch includes waiting for its predecessor. Records before the span was
    kept show '-' there."""
    return [[x["name"][:90], f"{x['ms_per_step']:.3f}", num(x.get("span_ms_per_step"), ".3f"),
             f"{x['calls_per_step']:.0f}", f"{x['share']:.1%}"] for x in r["top_kernels"]]


SLOT_HEADER = ["kernel", "place in layer", "us/call", "ms/step", "calls/step"]


def slot_rows(r: dict) -> list[list[str]]:
    """explain's top kernels launched several times a layer, by their place in it (records before it: none)."""
    return [[x["name"][:60], x["slot"], f"{x['us_per_call']:.1f}", f"{x['ms_per_step']:.3f}",
             f"{x['calls_per_step']:.0f}"] for x in r.get("kernels_by_slot") or []]


# ---------------------------------------------------------------------------------------------------------- quant
QUANT_HEADER = ["backend", "mode", "dtype", "ms/step", "floor ms @meas", "% of its floor", "speed-up vs bf16",
                "ideal speed-up", "share of ideal saving", "status"]


def quant_rows(rows_: list[dict]) -> list[list[str]]:
    """quantrows.rows -> strings; a row that did not run shows its reason in place of the time."""
    return [[r["backend"], r["mode"], r["dtype"] or "-", num(r["ms"], ".3f"), num(r["floor_ms"], ".3f"),
             pct(r["fraction"]), num(r["speedup"], ".2f"), num(r["ideal_speedup"], ".2f"), pct(r["share"], ".0f"),
             short(r["status"])] for r in rows_]


KERNEL_HEADER = ["backend", "chain ms", "matrix GB", "GB/s", "% of measured bw", "speed-up vs bf16",
                 "ideal speed-up", "share of ideal saving", "status"]


def kernel_rows(rows_: list[dict]) -> list[list[str]]:
    return [[r["backend"], num(r["ms"], ".3f"), num(None if r["bytes"] is None else r["bytes"] / 1e9, ".3f"),
             num(r["gbps"], ".0f"), pct(r["fraction"]), num(r["speedup"], ".2f"), num(r["ideal_speedup"], ".2f"),
             pct(r["share"], ".0f"), short(r["status"])] for r in rows_]


PUBLISHED_QUANT_HEADER = ["backend (published)", "library", "GPU", "ms/step", "speed-up vs bf16",
                          "ideal speed-up (derived)", "share of ideal saving (derived)"]


def published_quant_rows(rows_: list[dict]) -> list[list[str]]:
    return [[r["backend"], r["library"], r["gpu"], num(r["ms"], ".2f"), num(r["speedup"], ".2f"),
             num(r["ideal_speedup"], ".2f"), pct(r["share"], ".0f")] for r in rows_]


# -------------------------------------------------------------------------------------------------------- sweep
DRY_RUN_HEADER = ["cell", "floor GB", "floor ms @peak", "memory GB", "status"]


def dry_run_rows(rows_: list[dict]) -> list[list[str]]:
    return [[r["cell"], f"{r['floor_bytes'] / 1e9:.2f}", num(r["floor_ms_peak"], ".3f"),
             f"{r['memory_bytes'] / 1e9:.2f}", r["status"]] for r in rows_]


# ----------------------------------------------------------------------------------------- models, specs, floor
MODELS_HEADER = ["name", "family", "params", "layers", "hidden", "heads/kv", "head_dim", "vocab", "tied", "max pos",
                 "bf16 weights GB", "bf16 KV B/token"]


def models_rows(archs) -> list[list[str]]:
    from floorline.core import floor

    out = []
    for a in archs:
        n = floor.parameter_count(a)
        out.append([a.name, a.family, f"{n:,}", str(a.layers), str(a.hidden), f"{a.heads}/{a.kv_heads}",
                    str(a.head_dim), str(a.vocab), "yes" if a.tied else "no", str(a.max_pos), f"{n * 2 / 1e9:.2f}",
                    f"{floor.kv_bytes_per_token(a):,}"])
    return out


SPECS_HEADER = ["--gpu", "device", "memory", "peak GB/s", "source", "note"]


def specs_rows(gpus) -> list[list[str]]:
    return [[g.key, g.name, g.memory, f"{g.peak_gbps:,.1f}".rstrip("0").rstrip("."), g.source, g.note] for g in gpus]


FLOOR_HEADER = ["component", "bytes", "MB"]


def floor_rows(f) -> list[list[str]]:
    body = [[k, f"{v:,}", f"{v / 1e6:,.2f}"] for k, v in f.components.items()]
    return body + [["[b]floor_bytes[/b]", f"[b]{f.bytes:,}[/b]", f"[b]{f.bytes / 1e6:,.2f}[/b]"]]


FLOOR_GPU_HEADER = ["gpu", "peak GB/s", "floor ms", "tokens/s at floor"]


def floor_gpu_rows(gpus, ms_by_gpu: dict[str, float]) -> list[list[str]]:
    return [[g.key, f"{g.peak_gbps:,.0f}", f"{ms_by_gpu[g.key]:.3f}", f"{1e3 / ms_by_gpu[g.key]:,.1f}"] for g in gpus]
