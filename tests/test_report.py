"""report: results of two machines merged into report.md, results.csv, PNG plots and index.html."""

from __future__ import annotations

import copy
import csv
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from floorline.core import floor, records, zoo
from floorline.core.errors import UserError
from floorline.report import load_results, plots, write_report

ROOT = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

L4 = {"device": "cuda", "device_name": "NVIDIA L4", "gpu_key": "l4", "peak_gbps": 300,
      "peak_source": "NVIDIA L4 datasheet", "host": "box-l4", "measured_gbps": 251.0}
H100 = {"device": "cuda", "device_name": "NVIDIA H100 80GB HBM3", "gpu_key": "h100-sxm", "peak_gbps": 3350,
        "peak_source": "NVIDIA H100 datasheet", "host": "box-h100", "measured_gbps": 2905.0}
CPU = {"device": "cpu", "device_name": "AMD EPYC 7B13", "gpu_key": None, "peak_gbps": None, "peak_source": None,
       "host": "box-l4", "measured_gbps": 45.0}
# strict fraction of the floor at peak (GPUs) or at measured bandwidth (CPU) that each synthetic cell reaches
FRACTION = {("l4", "eager"): 0.78, ("l4", "graph"): 0.86, ("h100-sxm", "eager"): 0.25, ("h100-sxm", "graph"): 0.52,
            (None, "eager"): 0.30, (None, "static"): 0.50}


def _base() -> dict:
    with open(ROOT / "results" / "h200" / "core_run.jsonl", encoding="utf-8") as f:
        return json.loads(f.readline())  # a real H200 record: every key `floorline run` writes


def _cell(base: dict, dev: dict, model: str, ctx: int, mode: str, run_id: str, step_ms: float | None = None) -> dict:
    """A schema-complete cell whose derived figures agree with its step time, floor and bandwidths."""
    a = zoo.ZOO[model]
    strict, paper = floor.floor(a, ctx), floor.floor(a, ctx, convention="paper")
    peak, meas = dev["peak_gbps"], dev["measured_gbps"]
    if step_ms is None:
        step_ms = strict.ms(peak or meas) / FRACTION[(dev["gpu_key"], mode)] * (1 + ctx / 65536)
    k = step_ms / base["step_ms_median"]
    r = copy.deepcopy(base)
    r.update(dev)
    r.update({"run_id": run_id, "model": model, "ctx": ctx, "mode": mode, "floor_bytes": strict.bytes,
              "paper_floor_bytes": paper.bytes, **{f"floor_bytes_{c}": v for c, v in strict.components.items()},
              "samples_ms": [x * k for x in base["samples_ms"]],
              **{key: base[key] * k for key in base if key.startswith("step_ms_")},
              "tokens_per_s": 1e3 / step_ms, "achieved_gbps": strict.bytes / (step_ms * 1e-3) / 1e9,
              "floor_ms_peak": strict.ms(peak), "floor_ms_measured": strict.ms(meas),
              "fraction_of_floor_peak": strict.ms(peak) / step_ms if peak else None,
              "fraction_of_floor_measured": strict.ms(meas) / step_ms,
              "paper_floor_ms_peak": paper.ms(peak),
              "paper_fraction_of_floor_peak": paper.ms(peak) / step_ms if peak else None,
              "valid": True, "reason": None})
    if dev["device"] == "cpu":
        for key in ("driver_version", "cuda_version", "energy_j_per_token", "peak_mem_allocated_bytes"):
            r[key] = None
    return r


def _ab_summary() -> dict:
    return {"schema_version": 1, "kind": "ab_summary", "run_id": "ab-h100-1", "ab_key": "0123456789ab",
            "model": "qwen2.5-7b", "ctx": 2048, "device_name": H100["device_name"], "device": "cuda",
            "arm_a": "eager", "arm_b": "graph", "arm_a_config": {"mode": "eager", "dtype": "bf16", "attn": "sdpa"},
            "arm_b_config": {"mode": "graph", "dtype": "bf16", "attn": "sdpa"}, "steps": 30, "warmup": 5, "seed": 0,
            "n_sessions": 10, "sessions_asked": 10, "failed_sessions": [], "sessions": list(range(10)),
            "orders": ["A-B", "B-A"] * 5, "median_ms_a": [21.4] * 10, "median_ms_b": [17.0] * 10,
            "ratios": [1.2591] * 10, "ratio_mean": 1.2591, "ratio_mean_ci95": [1.2532, 1.2668],
            "ratio_gmean": 1.259, "ratio_gmean_ci95": [1.2531, 1.2667], "ratio_median": 1.259,
            "bootstrap_resamples": 10000, "bootstrap_method": "percentile (scipy.stats.bootstrap)",
            "timestamp": "2026-11-30T00:53:43+00:00", "floorline_version": "0.1.0"}


def _machines() -> tuple[list[dict], list[dict]]:
    """(records of the L4 box, records of the H100 box), as two `floorline run` machines would write them."""
    base = _base()
    l4_box, h100_box = [], []
    for dev, out in ((L4, l4_box), (H100, h100_box)):
        for model in ("qwen2.5-7b", "llama-3.1-8b"):
            for ctx in (2048, 8192):
                for mode in ("eager", "graph"):
                    out.append(_cell(base, dev, model, ctx, mode, f"{dev['gpu_key']}-{model}-{ctx}-{mode}"))
    # the CPU of the L4 box, written before `kind` existed (no kind key: a cell)
    for mode in ("eager", "static"):
        r = _cell(base, CPU, "qwen2.5-0.5b", 2048, mode, f"cpu-{mode}")
        del r["kind"]
        l4_box.append(r)
    # a second run of one L4 cell, judged invalid: faster than the floor at measured bandwidth
    fast = _cell(base, L4, "qwen2.5-7b", 8192, "graph", "l4-rerun-fast", step_ms=1.0)
    fast.update({"valid": False, "reason": "step time below the memory floor at measured bandwidth: "
                                           "a timing or accounting bug"})
    l4_box.append(fast)
    # a crashed mode on the H100 box: recorded invalid, results None
    crash = _cell(base, H100, "llama-3.1-8b", 8192, "compile", "h100-crash", step_ms=1.0)
    crash.update({k: None for k in ("step_ms_median", "step_ms_p90", "samples_ms", "floor_ms_peak",
                                    "floor_ms_measured", "fraction_of_floor_peak", "fraction_of_floor_measured",
                                    "tokens_per_s", "achieved_gbps")})
    crash.update({"valid": False, "reason": "crash: RuntimeError: CUDA graph capture failed"})
    h100_box.append(crash)
    h100_box.append(_ab_summary())
    l4_box.append(copy.deepcopy(h100_box[0]))  # the same H100 record copied into the L4 box's file: a duplicate
    return l4_box, h100_box


def _write(path: Path, recs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    return path


def _expected_counts(recs: list[dict]) -> dict[tuple, tuple[int, int]]:
    """(device, model, ctx) -> (valid, total) over cell records, each run_id once."""
    unique = {r["run_id"]: r for r in recs}.values()
    total, ok = Counter(), Counter()
    for r in unique:
        if r.get("kind", "cell") == "cell":
            key = (r["device_name"], r["model"], r["ctx"])
            total[key] += 1
            ok[key] += bool(r["valid"])
    return {k: (ok[k], total[k]) for k in total}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    l4_box, h100_box = _machines()
    files = [_write(d / "l4.jsonl", l4_box), _write(d / "h100.jsonl", h100_box)]
    records, notes = load_results([str(f) for f in files])
    written = write_report(records, str(d / "out"))
    return {"dir": d / "out", "records": records, "notes": notes, "written": written, "raw": l4_box + h100_box}


def test_every_file_is_written(report):
    names = {p.name for p in report["written"]}
    assert {"report.md", "results.csv", "index.html"} <= names
    pngs = [p for p in report["written"] if p.suffix == ".png"]
    assert len(pngs) == 3
    assert all(p.is_file() and p.parent == report["dir"] for p in report["written"])


def test_plots_are_real_pngs(report):
    from matplotlib.image import imread

    pngs = sorted(report["dir"].glob("*.png"))
    assert len(pngs) == 3
    for p in pngs:
        assert p.read_bytes()[:8] == PNG_SIGNATURE, p
        assert p.stat().st_size > 10_000, p
        img = imread(p)
        assert img.ndim == 3 and img.shape[0] > 300 and img.shape[1] > 500 and img.shape[2] in (3, 4), img.shape
        assert img[..., :3].std() > 0.05, f"{p} is nearly blank"


def test_a_reused_out_keeps_no_plot_of_earlier_results(tmp_path):
    """A second report into the same --out whose records have no data for a plot removes the first's file of it."""
    l4_box, h100_box = _machines()
    files = [_write(tmp_path / "l4.jsonl", l4_box), _write(tmp_path / "h100.jsonl", h100_box)]
    records, _ = load_results([str(f) for f in files])
    out = tmp_path / "out"
    write_report(records, str(out))
    assert (out / "achieved_vs_copy_bandwidth.png").is_file()
    for r in records:
        r["measured_gbps"] = None  # no bandwidth probe: nothing for the achieved-vs-copy plot
    written = write_report(records, str(out))
    assert not (out / "achieved_vs_copy_bandwidth.png").exists()
    assert "achieved_vs_copy_bandwidth.png" not in (out / "index.html").read_text()
    assert sorted(p.name for p in out.glob("*.png")) == sorted(p.name for p in written if p.suffix == ".png")


def test_duplicates_dropped_with_a_note(report):
    raw, recs = report["raw"], report["records"]
    assert len(raw) - len(recs) == 1
    assert len({r["run_id"] for r in recs}) == len(recs)
    assert any("dropped 1 duplicate record" in n for n in report["notes"])


def test_report_md_counts_valid_of_total(report):
    md = (report["dir"] / "report.md").read_text(encoding="utf-8")
    expected = _expected_counts(report["raw"])
    assert expected[(L4["device_name"], "qwen2.5-7b", 8192)] == (2, 3)  # the fixture is what the test assumes
    assert expected[(H100["device_name"], "llama-3.1-8b", 8192)] == (2, 3)
    assert expected[(H100["device_name"], "qwen2.5-7b", 2048)] == (2, 2)  # the duplicate counts once
    assert expected[(CPU["device_name"], "qwen2.5-0.5b", 2048)] == (2, 2)  # cells without `kind`
    lines = md.splitlines()
    for (dev, model, ctx), (v, t) in expected.items():
        rows = [ln for ln in lines if ln.startswith(f"| {dev} | {model} | {ctx} | ")]
        assert len(rows) == 1, (dev, model, ctx, rows)
        assert rows[0].endswith(f" | {v}/{t} |"), rows[0]
    v_all = sum(v for v, _ in expected.values())
    t_all = sum(t for _, t in expected.values())
    assert (v_all, t_all) == (18, 20)
    assert f"Total: {v_all} of {t_all} cells valid" in md


def test_report_md_medians_leave_invalid_cells_out(report):
    md = (report["dir"] / "report.md").read_text(encoding="utf-8")
    section = md.split("### NVIDIA L4")[1].split("### ")[0]
    good = next(r for r in report["records"] if r["run_id"] == "l4-qwen2.5-7b-8192-graph")
    row = next(ln for ln in section.splitlines() if ln.startswith("| qwen2.5-7b | 8192 | graph |"))
    cols = [c.strip() for c in row.strip("|").split("|")]
    assert cols[3] == f"{good['step_ms_median']:.3f}"  # not the median with the invalid 1 ms record
    assert cols[-1] == "1/2"
    assert "Invalid cells" in md
    assert "timing or accounting bug" in md and "CUDA graph capture failed" in md


def test_report_md_published_beside_ours(report):
    md = (report["dir"] / "report.md").read_text(encoding="utf-8")
    assert "| published | L4 | 300 | qwen2.5-7b | 2048 | eager |" in md and "| 82.1% |" in md
    assert "| published | H100 SXM5 | 3350 |" in md and "| 27.0% |" in md
    ours = next(r for r in report["records"] if r["run_id"] == "l4-qwen2.5-7b-2048-eager")
    row = next(ln for ln in md.splitlines() if ln.startswith("| ours | NVIDIA L4 | 300 | qwen2.5-7b | 2048 | eager |"))
    assert f"| {ours['paper_fraction_of_floor_peak']:.1%} | paper (W+K) |" in row
    # A/B: our headline and the published rows
    assert "graph vs eager: 1.259x [1.253, 1.267], N=10" in md
    assert "ours, NVIDIA H100 80GB HBM3, qwen2.5-7b ctx 2048: graph vs eager: 1.259x" in md
    assert "published, H100 SXM5, qwen2.5-7b ctx 2048: graph vs eager: 1.259x [1.253, 1.267], N=10" in md
    assert "published, L4, qwen2.5-7b ctx 2048: graph vs eager: 1.028x" in md


def test_results_csv_one_row_per_record(report):
    with open(report["dir"] / "results.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    recs = report["records"]
    assert len(rows) == len(recs) == len({r["run_id"] for r in report["raw"]})
    assert [r["run_id"] for r in rows] == [r["run_id"] for r in recs]
    samples = json.loads(rows[0]["samples_ms"])
    assert samples == pytest.approx(recs[0]["samples_ms"])
    assert json.loads(next(r for r in rows if r["kind"] == "ab_summary")["ratio_mean_ci95"]) == [1.2532, 1.2668]


def test_index_html_shows_every_plot(report):
    html = (report["dir"] / "index.html").read_text(encoding="utf-8")
    srcs = re.findall(r'<img src="([^"]+)"', html)
    pngs = {p.name for p in report["dir"].glob("*.png")}
    assert set(srcs) == pngs and len(srcs) == 3
    for s in srcs:
        assert not s.startswith(("/", "http")) and (report["dir"] / s).is_file()
    assert "<script" not in html and "http" not in html.replace("arXiv", "")
    assert "<table>" in html and "published" in html and "1.259x" in html


def test_fraction_plot_leaves_cpus_out(report):
    from floorline.report import cells

    pts = plots.fraction_points(cells.study_cells(report["records"]))
    assert {p["device"] for p in pts} == {L4["device_name"], H100["device_name"]}
    assert {(p["device"], p["variant"]) for p in pts} == {(d["device_name"], m) for d in (L4, H100)
                                                          for m in ("eager", "graph")}
    l4_eager = next(p for p in pts if p["device"] == L4["device_name"] and p["variant"] == "eager")
    want = sorted(r["paper_fraction_of_floor_peak"] for r in report["records"]
                  if r.get("gpu_key") == "l4" and r["mode"] == "eager" and r["valid"])
    assert len(want) == 4 and l4_eager["paper_lo"] == want[0] and l4_eager["paper_hi"] == want[-1]


def test_corrupt_line_names_file_and_line(tmp_path):
    good = _write(tmp_path / "good.jsonl", [_machines()[0][0]])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(_machines()[1][0]) + "\n" + '{"schema_version": 1, "run_id": "x", "samp\n')
    with pytest.raises(UserError) as e:
        load_results([str(good), str(bad)])
    assert f"{bad}:2:" in str(e.value)


def test_a_torn_last_line_is_left_out_with_a_note(tmp_path):
    """What a killed sweep leaves (or one still writing): the line sweep's resume drops; report leaves it out too."""
    cells = _machines()[0][:2]
    p = tmp_path / "torn.jsonl"
    p.write_text(json.dumps(cells[0]) + "\n" + json.dumps(cells[1])[:300])
    recs, notes = load_results([str(p)])
    assert recs == [cells[0]] and any("truncated" in n and str(p) in n for n in notes), notes
    assert p.read_text().endswith(json.dumps(cells[1])[:300])  # left as it was: report repairs nothing
    only = tmp_path / "only.jsonl"
    only.write_text(json.dumps(cells[1])[:300])  # a file that holds only a torn line says why there is nothing
    recs, notes = load_results([str(only)])
    with pytest.raises(UserError, match=r"nothing to report: the results hold no records \(.*truncated"):
        write_report(recs, str(tmp_path / "out"), notes)


def test_two_folders_of_one_name_are_two_rows(tmp_path):
    """Two local models named by one folder name ("llama") are two models: never one row's median over both."""
    r = _machines()[0][0]
    one = {**r, "model": "llama", "model_path": "/a/llama", "model_config_sha256": "1" * 16}
    recs = [one, {**one, "run_id": "x2", "model_path": "/b/llama", "model_config_sha256": "2" * 16},
            {**one, "run_id": "x3", "model_path": "/elsewhere/llama"}]  # one's folder copied to another machine
    got, notes = load_results([str(_write(tmp_path / "m.jsonl", recs))])
    assert [g["model"] for g in got] == ["llama (/a/llama)", "llama (/b/llama)", "llama (/a/llama)"]
    assert any("one name, several local folders" in n for n in notes)
    got, notes = load_results([str(_write(tmp_path / "n.jsonl", [one, {**one, "run_id": "y2",
                                                                     "model_path": "/elsewhere/llama"}]))])
    assert [g["model"] for g in got] == ["llama", "llama"] and not any("several" in n for n in notes)
    # one path, two configs (two machines): told apart by the config; a zoo model's records keep its name
    zoo_rec = {**r, "run_id": "z1"}
    local = {**zoo_rec, "run_id": "z2", "model_path": "/m/x", "model_config_sha256": "3" * 16}
    got, _ = load_results([str(_write(tmp_path / "o.jsonl", [
        zoo_rec, local, {**local, "run_id": "z3", "model_config_sha256": "4" * 16}]))])
    m = r["model"]
    assert [g["model"] for g in got] == [m, f"{m} (/m/x, config 33333333)", f"{m} (/m/x, config 44444444)"]
    # a record from before the digest, its folder not here: the one digest seen at its path, so one model; a Hub
    # model's older records from two caches, or an older explain record (no folder named), name no second model
    older = {k: v for k, v in one.items() if k != "model_config_sha256"} | {"run_id": "w2"}
    hub2 = older | {"run_id": "w3", "model_path": "/root/.cache/llama"}
    explain = {"schema_version": 2, "kind": "explain", "model": "llama", "ctx": 64, "mode": "eager"}
    got, notes = load_results([str(_write(tmp_path / "p.jsonl", [one, older, hub2, explain]))])
    assert [g["model"] for g in got] == ["llama"] * 4 and not any("several" in n for n in notes)


def test_a_cell_lacking_a_required_key_is_read_with_a_note(tmp_path):
    r = {k: v for k, v in _machines()[0][0].items() if k not in ("samples_ms", "tokens_per_s")}
    recs, notes = load_results([str(_write(tmp_path / "old.jsonl", [r]))])
    assert recs == [r] and "some cell records lack samples_ms, tokens_per_s; shown as '-'" in notes


def test_newer_schema_is_refused(tmp_path):
    r = _machines()[0][0]
    p = _write(tmp_path / "new.jsonl", [r, {**r, "run_id": "later", "schema_version": records.SCHEMA_VERSION + 1}])
    with pytest.raises(UserError) as e:
        load_results([str(p)])
    assert f"{p}:2:" in str(e.value) and "schema_version" in str(e.value)


def test_missing_file_is_named(tmp_path):
    good = _write(tmp_path / "good.jsonl", [_machines()[0][0]])
    missing = tmp_path / "nowhere" / "h100.jsonl"
    with pytest.raises(UserError) as e:
        load_results([str(good), str(missing)])
    assert str(missing) in str(e.value)


def test_nothing_to_report(tmp_path):
    empty = _write(tmp_path / "empty.jsonl", [])
    recs, _ = load_results([str(empty)])
    assert recs == []
    with pytest.raises(UserError, match="nothing to report"):
        write_report(recs, str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()  # a report that fails leaves no folder behind


def test_cli_report_on_the_committed_h200_grid(tmp_path, capsys):
    from floorline import cli

    grid = Path(__file__).resolve().parents[1] / "results" / "h200" / "grid_default.jsonl"
    rc = cli.main(["report", str(grid), "--out", str(tmp_path / "rep")])
    first = capsys.readouterr().err
    assert rc == 0, first
    assert "read 24 records from 1 file" in first
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "Total: 24 of 24 cells valid" in md
    for png in ("fraction_vs_peak_bandwidth.png", "ms_vs_context.png", "achieved_vs_copy_bandwidth.png"):
        assert (tmp_path / "rep" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rc = cli.main(["report", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "rep2")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "no such results file" in err[0]


def test_the_report_imports_no_torch(tmp_path):
    # records and pure helpers only: a report of every kind of record (cells, A/B, explain, quant, kernel chains)
    import subprocess
    import sys

    h200 = Path(__file__).resolve().parents[1] / "results" / "h200"
    code = ("import sys; from floorline import report; recs, notes = report.load_results([sys.argv[1]]); "
            "report.write_report(recs, sys.argv[2], notes); "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers')); "
            "print(bad); sys.exit(1 if bad else 0)")
    p = subprocess.run([sys.executable, "-c", code, str(h200), str(tmp_path / "rep")], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Quantised backends" in md and "# A/B" in md


def test_a_row_of_two_runs_reads_as_its_header_says():
    """Two valid runs of one cell (5 and 17.5 ms, the second on a slower lease): the row's % is its floor over its
    median step, and its GB/s the floor bytes over that step. Medians of each run's own share once printed 21.0%
    beside 1.651 ms / 11.294 ms (14.6%)."""
    from floorline.report import sections

    base = _base()
    fast = _cell(base, H100, "qwen2.5-7b", 2048, "graph", "a", step_ms=5.0)
    slow = _cell(base, dict(H100, measured_gbps=2000.0), "qwen2.5-7b", 2048, "graph", "b", step_ms=17.5)
    row = sections.cell_row("qwen2.5-7b", 2048, "graph", [fast, slow])
    step, floor_peak, floor_meas = float(row[3]), float(row[5]), float(row[6])
    assert step == pytest.approx(11.25, abs=1e-3) and floor_peak == pytest.approx(fast["floor_ms_peak"], abs=1e-3)
    assert floor_meas == pytest.approx((fast["floor_ms_measured"] + slow["floor_ms_measured"]) / 2, abs=1e-3)
    assert row[7] == f"{fast['floor_ms_peak'] / 11.25:.1%}" and row[8] == f"{floor_meas / step:.1%}"
    assert row[9] == f"{fast['paper_floor_ms_peak'] / 11.25:.1%}"
    assert float(row[10]) == pytest.approx(fast["floor_bytes"] / 11.25e-3 / 1e9, rel=1e-2) and row[-1] == "2/2"


def test_moe_rows_say_why_their_paper_share_can_pass_100(tmp_path):
    """gpt-oss-20b's compile cell once read 146.2% of its paper floor without a word: that floor counts every expert."""
    base = _base()
    dense = _cell(base, H100, "qwen2.5-7b", 2048, "graph", "d")
    out = tmp_path / "r"
    write_report(load_results([str(_write(tmp_path / "d.jsonl", [dense]))])[0], str(out))
    assert "Mixture-of-experts rows" not in (out / "report.md").read_text(encoding="utf-8")
    moe = dict(_cell(base, H100, "qwen3-30b-a3b", 2048, "graph", "m"), moe_experts=128, moe_top_k=8)
    write_report(load_results([str(_write(tmp_path / "m.jsonl", [dense, moe]))])[0], str(out))
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "Mixture-of-experts rows (qwen3-30b-a3b): the paper floor counts every expert" in md


def test_a_folder_skips_other_tools_jsonl_with_a_note(tmp_path):
    """`report results/` once stopped on a probe's ws_chain.jsonl under results/lab: a folder's search skips a *.jsonl
    file whose first line is no floorline record, with a note; a floorline file with a corrupt line is still an
    error, and a foreign file named on its own still is."""
    d = tmp_path / "results"
    (d / "lab").mkdir(parents=True)
    good = _write(d / "good.jsonl", [_machines()[0][0]])
    probe = d / "lab" / "ws_chain.jsonl"
    probe.write_text('{"us": 1.5, "tile": 64}\n{"us": 1.6, "tile": 128}\n')
    recs, notes = load_results([str(d)])
    assert len(recs) == 1 and any(f"skipped 1 *.jsonl file whose first line is no floorline record: {probe}" in n
                                  for n in notes), notes
    with pytest.raises(UserError, match="ws_chain.jsonl:1: not a floorline record"):
        load_results([str(good), str(probe)])
    (d / "torn.jsonl").write_text(good.read_text() + "not json\n" + good.read_text())
    with pytest.raises(UserError, match="torn.jsonl:2:"):
        load_results([str(d)])
    with pytest.raises(UserError, match="no floorline records in"):
        load_results([str(d / "lab")])


def test_the_header_names_every_kind_of_record_it_counts():
    """212 records were once listed as 161 + 40 + 2 + 3: the six kernel-chain records of `quant --kernels` unnamed."""
    from floorline.report import sections

    base = _base()
    recs = [_cell(base, H100, "qwen2.5-7b", 2048, "graph", "c"),
            {"kind": "kernels", "schema_version": 2, "run_id": "k1"}, {"kind": "kernels", "schema_version": 2}]
    text = sections.document(recs, []).blocks[0].text
    assert text.startswith("3 records: 1 cell (1 valid)") and "2 kernel-chain records" in text, text
    assert "kernel-chain" not in sections.document(recs[:1], []).blocks[0].text


def test_a_folder_still_names_floorline_files_it_cannot_read(tmp_path):
    """The folder search skips other tools' files only: a floorline file from a newer version, or with a corrupt first
    record, is still the error it was (not skipped as "another tool's"), and a binary file is not read whole."""
    d = tmp_path / "results"
    d.mkdir()
    _write(d / "good.jsonl", [_machines()[0][0]])
    (d / "blob.jsonl").write_bytes(b"\x00\xff" * (3 << 20))  # no newline, 6 MiB: skipped
    recs, notes = load_results([str(d)])
    assert len(recs) == 1 and any("blob.jsonl" in n for n in notes)
    (d / "newer.jsonl").write_text(json.dumps({"schema_version": 99, "run_id": "n"}) + "\n")
    with pytest.raises(UserError, match="newer.jsonl:1: schema_version 99 is newer"):
        load_results([str(d)])
    (d / "newer.jsonl").write_text('{"schema_version": 2, "run_id": "cut\n')
    with pytest.raises(UserError, match="newer.jsonl:1: not a JSON record"):
        load_results([str(d)])
