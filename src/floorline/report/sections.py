"""What the report says: the study's tables, invalid cells, the published points beside ours, A/B, explain, plots.

Owns the content and its wording; cells.py groups, markdown.py / html.py render. Every published figure is labelled
"published"; every fraction of the floor names its convention (strict unless marked "paper").
"""

from __future__ import annotations

from floorline.core import published
from floorline.report import cells as C
from floorline.report import display, quantrows
from floorline.report.document import Bullets, Document, Figure, Heading, Table, Text

PAPER = "paper (W+K)"


def num(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def pct(v) -> str:
    return num(v, ".1%")


def _where(model, ctx) -> str:
    return f"{model} ctx {ctx}"


# ------------------------------------------------------------------------------------------------------ cells
CELL_HEADER = ["model", "ctx", "mode", "ms/step", "p90 ms", "floor ms @peak", "floor ms @meas", "% floor @peak",
               "% floor @meas", "% floor @peak (paper)", "GB/s", "valid/total"]


def cell_row(model, ctx, mode, recs: list[dict]) -> list[str]:
    """The row's step: the median over its valid records; its shares and GB/s from that step and the row's floors, so
    the row reads as its own header says (% = floor ms / ms/step). Medians of each record's share did not: over two
    runs of 5.08 and 17.5 ms, 21.0% beside 1.651 / 11.294."""
    ok = C.valid(recs)
    step = C.median(ok, "step_ms_median")
    floors = ok or recs

    def share(floor_key: str):
        f = C.median(floors, floor_key)
        return f / step if f is not None and step else None

    floor_bytes = C.median(ok, "floor_bytes")
    gbps = floor_bytes / (step * 1e-3) / 1e9 if floor_bytes and step else None
    return [str(model), str(ctx), mode,
            num(step, ".3f"), num(C.median(ok, "step_ms_p90"), ".3f"),
            num(C.median(floors, "floor_ms_peak"), ".3f"), num(C.median(floors, "floor_ms_measured"), ".3f"),
            pct(share("floor_ms_peak")), pct(share("floor_ms_measured")),
            pct(share("paper_floor_ms_peak")), display.gbps(gbps),
            C.count(recs)]


def device_line(name: str, recs: list[dict]) -> str:
    peak, meas = C.median(recs, "peak_gbps"), C.median(recs, "measured_gbps")
    source = next((r["peak_source"] for r in recs if r.get("peak_source")), None)
    hosts = sorted({str(r["host"]) for r in recs if r.get("host")})
    p = (f"datasheet peak {peak:.0f} GB/s ({source})" if peak
         else "no datasheet peak (the floor is at measured bandwidth)")
    m = f"measured {meas:.0f} GB/s (best streaming pattern)" if meas else "no measured bandwidth"
    h = f"; host{'s' * (len(hosts) > 1)}: {', '.join(hosts)}" if hosts else ""
    return f"{name}: {p}, {m}{h}."


def cell_sections(doc: Document, cells: list[dict]) -> None:
    doc.add(Heading(1, "Cells per GPU × model × ctx"))
    if not cells:
        doc.add(Text("No cell records."))
        return
    doc.add(Text("One row per device × model × ctx × mode. ms/step, p90 and the floors: medians over the row's "
                 "valid records (one per machine and run); invalid records count in valid/total only. "
                 "% floor = floor ms / ms/step of the row, strict floor unless marked paper; @peak at the datasheet "
                 "peak, @meas at the measured bandwidth; GB/s = strict floor bytes / ms/step."))
    moe = sorted({str(r.get("model")) for r in cells if r.get("moe_experts")})
    if moe:  # the paper's W is every parameter: more than a batch-1 MoE step reads
        doc.add(Text(f"Mixture-of-experts rows ({', '.join(moe)}): the paper floor counts every expert's bytes (the "
                     f"study's W, a dense model's), while a batch-1 step reads the top-k of each layer, so their "
                     f"paper share can pass 100%; the strict columns count the experts a step reads."))
        latest = {(C.device(r), r.get("model"), r.get("ctx"), C.variant(r)): r for r in cells if display.moe_line(r)}
        if latest:
            doc.add(Bullets([f"{d}, {_where(m, ctx)}, {v}: {display.moe_line(r)}"
                             for (d, m, ctx, v), r in latest.items()]))
    for (dev,), drecs in C.grouped(cells, lambda r: (C.device(r),)):
        doc.add(Heading(2, dev), Text(device_line(dev, drecs)))
        rows = [cell_row(m, ctx, v, rs) for (_, m, ctx, v), rs in
                C.grouped(drecs, lambda r: (C.device(r), r.get("model"), r.get("ctx"), C.variant(r)))]
        doc.add(Table(CELL_HEADER, rows))

    doc.add(Heading(1, "Valid cells per GPU × model × ctx"))
    groups = C.grouped(cells, lambda r: (C.device(r), r.get("model"), r.get("ctx")))
    rows = [[dev, str(m), str(ctx), ", ".join(sorted({C.variant(r) for r in rs}, key=C.mode_rank)), C.count(rs)]
            for (dev, m, ctx), rs in groups]
    n_dev = len({C.device(r) for r in cells})
    doc.add(Table(["GPU", "model", "ctx", "modes", "valid/total"], rows),
            Text(f"Total: {len(C.valid(cells))} of {len(cells)} cells valid, in {len(groups)} GPU × model × ctx "
                 f"groups on {n_dev} device{'s' * (n_dev != 1)}."))

    bad = [r for r in cells if r.get("valid") is not True]
    doc.add(Heading(1, "Invalid cells"))
    if not bad:
        doc.add(Text("None."))
    else:
        k = C.sort_key(C.device_bandwidth(cells))
        bad.sort(key=lambda r: k((C.device(r), r.get("model"), r.get("ctx"), C.variant(r))))
        doc.add(Bullets([f"{C.device(r)}, {_where(r.get('model'), r.get('ctx'))}, {C.variant(r)} "
                         f"(host {r.get('host', '?')}, run {str(r.get('run_id', '?'))[:8]}): "
                         f"{r.get('reason') or 'no reason recorded'}" for r in bad]))


# -------------------------------------------------------------------------------------------------- published
def published_section(doc: Document, cells: list[dict]) -> None:
    pub = published.load()
    doc.add(Heading(1, "Published points beside ours"),
            Text(f"Published: {pub['source']} The study's fraction of the floor uses the paper convention "
                 f"(W+K: all parameter bytes plus the KV read); ours is shown in the same convention "
                 f"(paper_fraction_of_floor_peak), with the strict one beside it."))
    header = ["source", "GPU", "peak GB/s", "model", "ctx", "mode", "ms/step", "% floor @peak", "convention",
              "% floor @peak (strict)", "note"]
    rows = []
    for c in pub["cells"]:
        rows.append(["published", c["gpu"], num(c.get("peak_gbps"), ".0f"), c["model"], str(c["ctx"]), c["mode"],
                     num(c.get("step_ms_median"), ".2f"), pct(c.get("paper_fraction_of_floor_peak")), PAPER, "-",
                     "; ".join(c.get("derived") or []) or "as published"])
    wanted = {(c["model"], c["ctx"], c["mode"]) for c in pub["cells"]}
    mine = [r for r in cells if (r.get("model"), r.get("ctx"), C.variant(r)) in wanted]
    for (dev, m, ctx, v), rs in C.grouped(mine, lambda r: (C.device(r), r.get("model"), r.get("ctx"), C.variant(r))):
        ok = C.valid(rs)
        rows.append(["ours", dev, num(C.median(rs, "peak_gbps"), ".0f"), str(m), str(ctx), v,
                     num(C.median(ok, "step_ms_median"), ".2f"), pct(C.median(ok, "paper_fraction_of_floor_peak")),
                     PAPER, pct(C.median(ok, "fraction_of_floor_peak")), f"valid {C.count(rs)}"])
    doc.add(Table(header, rows))


# ---------------------------------------------------------------------------------------------------------- A/B
def ab_section(doc: Document, summaries: list[dict]) -> None:
    pub = published.load()["cuda_graphs_ab"]
    items = [f"ours, {C.device(s)}, {_where(s.get('model'), s.get('ctx'))}: {display.ab_headline(s)}"
             for s in summaries]
    items += [f"published, {p['gpu']}, {_where(p['model'], p['ctx'])}: {display.ab_headline(p)}" for p in pub]
    rows = []
    for s in summaries:
        lo, hi = s.get("ratio_mean_ci95") or (None, None)
        rows.append(["ours", C.device(s), str(s.get("model")), str(s.get("ctx")), f"{s['arm_b']} vs {s['arm_a']}",
                     num(s.get("ratio_mean"), ".3f"), f"[{lo:.3f}, {hi:.3f}]" if lo is not None else "-",
                     str(s.get("n_sessions"))])
    for p in pub:
        ci = p.get("ratio_mean_ci95")
        rows.append(["published", p["gpu"], p["model"], str(p["ctx"]), f"{p['arm_b']} vs {p['arm_a']}",
                     num(p["ratio_mean"], ".3f"), f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "-",
                     num(p.get("n_sessions"), "d")])
    doc.add(Heading(1, "A/B"),
            Text("Ratio = median step time of the first arm / the second, one per fresh session; mean with a 95% "
                 "percentile bootstrap interval. > 1: the second arm is faster."),
            Bullets(items), Table(["source", "GPU", "model", "ctx", "comparison", "ratio (mean)", "95% CI", "N"], rows))


# ------------------------------------------------------------------------------------------------------ explain
def explain_section(doc: Document, recs: list[dict]) -> None:
    rows = []
    for (dev, m, ctx, v), rs in C.grouped(recs, lambda r: (C.device(r), r.get("model"), r.get("ctx"), C.variant(r))):
        for r in rs:
            rows.append([dev, str(m), str(ctx), v, num(r.get("wall_ms"), ".3f"), num(r.get("gpu_busy_ms"), ".3f"),
                         num(r.get("floor_ms_measured"), ".3f"), num(r.get("kernel_excess_ms"), ".3f"),
                         num(r.get("idle_gaps_ms"), ".3f"), num(r.get("host_enqueue_ms"), ".3f"),
                         num(r.get("kernels_per_step"), ".0f")])
    doc.add(Heading(1, "Where the step goes (explain)"),
            Table(["GPU", "model", "ctx", "mode", "wall ms", "busy ms", "floor ms @meas", "kernel excess ms",
                   "idle gaps ms", "host enqueue ms", "kernels/step"], rows))
    said = [f"{r.get('model')} ctx {r.get('ctx')} {r.get('mode')}: {w}" for r in recs for w in r.get("warnings") or []]
    if said:
        doc.add(Bullets(said))


# -------------------------------------------------------------------------------------------------------- quant
def quant_section(doc: Document, recs: list[dict]) -> None:
    """Per device x model x ctx with quantised records: `floorline quant`'s tables, from the same row functions."""
    cells = C.of_kind(recs, "cell")
    doc.add(Heading(1, "Quantised backends"),
            Text("Each backend against its own floor (its stored bytes at the measured bandwidth). Ideal "
                 "speed-up = bf16 floor bytes / its floor bytes; share of the ideal saving = (t_bf16 - t_q) / "
                 "(t_bf16 - t_bf16 x bytes_q / bytes_bf16), against the bf16 record of the same mode."))
    groups = C.grouped([r for r in cells if r.get("ctx") is not None and quantrows.comparable(r)],
                       lambda r: (C.device(r), r.get("model"), r.get("ctx")))
    for (dev, m, ctx), rs in groups:
        names = quantrows.backends_in(rs)
        if names == ["bf16"] or not names:
            continue
        # the modes some quantised backend ran in (not every mode a bf16 run happened to measure)
        modes = sorted({r.get("mode") for r in rs if quantrows.label(r.get("quant")) != "bf16"}, key=C.mode_rank)
        refs = quantrows.ref_dtypes(rs) or [None]  # a table per reference dtype: a bf16 study and an fp32 one apart
        for d in refs:
            doc.add(Heading(2, f"{dev}, {_where(m, ctx)}" + (f", against {d}" if len(refs) > 1 else "")),
                    Table(display.QUANT_HEADER,
                          display.quant_rows(quantrows.rows(rs, m, ctx, modes, names, ref_dtype=d))))
        chains = [r for r in C.of_kind(recs, "kernels") if C.device(r) == dev and r.get("model") == m]
        if chains:
            doc.add(Table(display.KERNEL_HEADER, display.kernel_rows(quantrows.kernel_rows(chains, m, names)),
                          caption="Kernel level: the decoder matrices alone, batch 1, one graph-captured chain."))
    pub = quantrows.published_rows(lambda q: None)
    if pub:
        fbytes = quantrows.record_floor_bytes(cells, pub[0]["model"], pub[0]["ctx"])
        doc.add(Table(display.PUBLISHED_QUANT_HEADER, display.published_quant_rows(quantrows.published_rows(fbytes)),
                      caption=f"Published: the study's L4 rows for {pub[0]['model']} ctx {pub[0]['ctx']}; the ideal "
                              f"speed-up is derived from the floor bytes of our records of that cell ('-' where "
                              f"there are none)."))


# ---------------------------------------------------------------------------------------------------- document
def document(records: list[dict], figures: list[Figure], notes: list[str] | None = None) -> Document:
    cells = C.study_cells(records)
    ab_cells = [r for r in C.of_kind(records, "cell") if r.get("ab_key")]
    # an A/B rerun (resumed or extended) appends a new summary: keep the last of each experiment
    summaries = list({s.get("ab_key") or id(s): s for s in C.of_kind(records, "ab_summary")}.values())
    explains = C.of_kind(records, "explain")
    prompts = C.of_kind(records, "llama-bench-prompt")  # llama-bench's prompt rows: prefill, not decode
    other = sorted({C.kind(r) for r in records} - {"cell", "ab_summary", "explain", "kernels", "llama-bench-prompt"})

    doc = Document("floorline report")
    doc.add(Text(f"{plural(len(records), 'record')}: {plural(len(cells), 'cell')} ({len(C.valid(cells))} valid), "
                 f"{plural(len(ab_cells), 'A/B session cell')}, "
                 f"{plural(len(summaries), 'A/B summary', 'A/B summaries')}, "
                 f"{plural(len(explains), 'explain record')}"
                 + (f", {plural(len(C.of_kind(records, 'kernels')), 'kernel-chain record')} (`quant --kernels`)"
                    if C.of_kind(records, "kernels") else "")
                 + ". Every record, flat: results.csv."))
    cell_sections(doc, cells)
    published_section(doc, cells)
    if summaries:
        ab_section(doc, summaries)
    if explains:
        explain_section(doc, explains)
    if any(r.get("quant") not in (None, "none") and quantrows.comparable(r) for r in records):
        quant_section(doc, records)  # (a server's or llama-bench's quantised rows are not floorline's backends)
    if figures:
        doc.add(Heading(1, "Plots"))
        for f in figures:
            doc.add(Figure(f.src, f.alt, f.caption))
    notes = list(notes or [])
    if ab_cells:
        notes.append(f"{len(ab_cells)} cells of A/B sessions are left out of the tables and plots; "
                     f"their A/B summaries stand for them")
    if prompts:
        notes.append(f"{plural(len(prompts), 'llama-bench prompt record')} (prefill, not decode) are only in "
                     f"results.csv")
    if other:
        notes.append(f"records of unknown kind ({', '.join(other)}) are only in results.csv")
    if notes:
        doc.add(Heading(1, "Notes"), Bullets(notes))
    return doc
