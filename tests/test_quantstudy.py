"""`floorline quant` (quantstudy) and its rows (quantrows): the share of the ideal saving, rows per backend and mode,
the kernel chain's rows, the published rows, the plan's input checks, the study end to end with resume and report."""

from __future__ import annotations

import importlib.util
import json

import pytest
from conftest import run_cli

from floorline.bench import config
from floorline.core import records
from floorline.core.errors import UserError
from floorline.report import quantrows
from floorline.study import quantstudy

HAS_BNB = importlib.util.find_spec("bitsandbytes") is not None


def _cell(q, mode, ms, fbytes, valid=True, reason=None, dtype="bf16"):
    return {"kind": "cell", "model": "m", "ctx": 2048, "mode": mode, "quant": q, "dtype": dtype, "device": "cuda",
            "step_ms_median": ms if valid else None, "floor_bytes": fbytes, "floor_ms_measured": fbytes / 4e9,
            "fraction_of_floor_measured": fbytes / 4e9 / ms if valid else None, "valid": valid, "reason": reason}


def test_share_of_the_ideal_saving():
    # 4x fewer bytes: the ideal is 2.5 ms from 10; reaching 4 ms realises 6 / 7.5 = 80%
    assert quantrows.share_realised(10.0, 4.0, 4000, 1000) == pytest.approx(0.8)
    assert quantrows.share_realised(10.0, 2.5, 4000, 1000) == pytest.approx(1.0)
    assert quantrows.share_realised(10.0, 12.0, 4000, 1000) == pytest.approx(-2 / 7.5)
    assert quantrows.share_realised(10.0, 9.0, 4000, 4000) is None  # no bytes saved: no share
    t = 31.96037499992599  # the reference against itself, where t - t*b/b rounds to 3.6e-15 (a "0%" once printed)
    assert quantrows.share_realised(t, t, 4267008, 4267008) is None


def test_rows_per_backend_and_mode():
    recs = [_cell("none", "graph", 8.0, 12e9), _cell("nf4", "graph", 7.0, 4e9),
            _cell("gptq-exllamav2", "graph", None, 3.9e9, valid=False, reason="quant check failed: x", dtype="fp16"),
            _cell("nf4", "graph", 6.0, 4e9)]  # a later rerun wins
    rows = quantrows.rows(recs, "m", 2048, ["graph"], ["bf16", "nf4", "gptq-exllamav2", "int4-gemlite"])
    by = {r["backend"]: r for r in rows}
    assert by["bf16"]["speedup"] == 1.0 and by["bf16"]["share"] is None
    assert by["nf4"]["ms"] == 6.0 and by["nf4"]["speedup"] == pytest.approx(8 / 6)
    assert by["nf4"]["ideal_speedup"] == pytest.approx(3.0)
    assert by["nf4"]["share"] == pytest.approx((8 - 6) / (8 - 8 / 3))
    assert by["gptq-exllamav2"]["status"] == "quant check failed: x" and by["gptq-exllamav2"]["ms"] is None
    assert by["int4-gemlite"]["status"] == "not run"


def test_the_bf16_reference_is_in_the_runs_dtype():
    """bf16 run, then fp32, then bf16 again: the third table's reference is the bf16 one (it once took the latest
    record of any dtype, fp32's, and gave nf4 an ideal speed-up against it); a backend that ran in another dtype only
    is still its row."""
    recs = [_cell("none", "eager", 2.0, 12e9), _cell("nf4", "eager", 4.0, 4e9),
            _cell("none", "eager", 1.0, 24e9, dtype="fp32"), _cell("gptq-exllamav2", "eager", 3.0, 3.9e9, dtype="fp16")]
    dtypes = {"bf16": "bf16", "nf4": "bf16", "gptq-exllamav2": "fp16"}  # as quant ran them this time
    by = {r["backend"]: r for r in quantrows.rows(recs, "m", 2048, ["eager"], list(dtypes), dtypes=dtypes)}
    assert (by["bf16"]["ms"], by["bf16"]["dtype"]) == (2.0, "bf16")
    assert by["nf4"]["ideal_speedup"] == pytest.approx(3.0) and by["nf4"]["speedup"] == pytest.approx(0.5)
    assert by["gptq-exllamav2"]["dtype"] == "fp16" and by["gptq-exllamav2"]["speedup"] == pytest.approx(2 / 3)
    fp32 = {"bf16": "fp32", "nf4": "bf16"}  # nf4's kernels take no fp32: its bf16 record, never another run's dtype
    by = {r["backend"]: r for r in quantrows.rows(recs + [_cell("nf4", "eager", 1.5, 4e9, dtype="fp16")], "m", 2048,
                                                   ["eager"], list(fp32), dtypes=fp32)}
    assert (by["bf16"]["ms"], by["bf16"]["dtype"]) == (1.0, "fp32") and (by["nf4"]["ms"], by["nf4"]["dtype"]) == (
        4.0, "bf16")
    # the report (no dtypes): a table per reference dtype, each backend in that dtype where it ran in it; the
    # latest record of a cell and dtype wins (a rerun)
    recs.append(_cell("none", "eager", 1.8, 12e9))
    assert quantrows.ref_dtypes(recs) == ["fp32", "bf16"]  # (the order their latest records came)
    by = {r["backend"]: r for r in quantrows.rows(recs, "m", 2048, ["eager"], ["bf16", "nf4"], ref_dtype="bf16")}
    assert (by["bf16"]["ms"], by["nf4"]["ideal_speedup"]) == (1.8, pytest.approx(3.0))
    by = {r["backend"]: r for r in quantrows.rows(recs, "m", 2048, ["eager"], ["bf16", "nf4"], ref_dtype="fp32")}
    assert by["bf16"]["dtype"] == "fp32" and by["nf4"]["dtype"] == "bf16"  # nf4's kernels took bf16


def test_the_bf16_reference_is_a_one_gpu_run_of_floorlines_modes():
    """A --tp 2 bf16 run, a server's or an imported llama-bench row of the same model and ctx is no reference: the
    comparison takes the one-GPU bf16 record (it once took the last bf16 record of the mode, a tp split among them)."""
    one = _cell("none", "eager", 2.153, 12e9)
    recs = [one, _cell("nf4", "eager", 4.0, 4e9), {**_cell("none", "eager", 106.872, 12e9), "tp": 2},
            {**_cell("none", "eager", 50.0, 12e9), "ab_key": "k"}]
    by = {r["backend"]: r for r in quantrows.rows(recs, "m", 2048, ["eager"], ["bf16", "nf4"])}
    assert by["bf16"]["ms"] == 2.153 and by["nf4"]["speedup"] == pytest.approx(2.153 / 4.0)
    assert not quantrows.comparable({**one, "mode": "llama-bench"}) and quantrows.comparable(one)
    assert not quantrows.comparable({**one, "endpoint_url": "http://x"})


def test_the_reports_quant_table_has_the_modes_a_quantised_backend_ran():
    """bf16 measured in eager and static, nf4 in eager only: the table's rows are eager's, not a 'not run' row for
    every backend in static; a tp split of the same cell is no row."""
    from floorline.report import display, sections
    from floorline.report.document import Document, Table

    recs = [_cell("none", "eager", 8.0, 12e9), _cell("none", "static", 7.0, 12e9), _cell("nf4", "eager", 6.0, 4e9),
            {**_cell("none", "eager", 100.0, 12e9), "tp": 2}]
    doc = Document("t")
    sections.quant_section(doc, recs)
    (table,) = [b for b in doc.blocks if isinstance(b, Table) and b.header == display.QUANT_HEADER]
    mode = display.QUANT_HEADER.index("mode")
    assert [r[mode] for r in table.rows] == ["eager", "eager"] and "8.000" in str(table.rows)


def test_kernel_rows():
    recs = [{"kind": "kernels", "model": "m", "ctx": None, "mode": "kernels", "quant": q, "valid": True,
             "chain_ms_median": ms, "chain_bytes": b, "achieved_gbps": b / ms / 1e6, "fraction_of_floor_measured": 0.5}
            for q, ms, b in (("none", 4.0, 13e9), ("nf4", 3.0, 3.6e9))]
    by = {r["backend"]: r for r in quantrows.kernel_rows(recs, "m", ["bf16", "nf4"])}
    assert by["nf4"]["speedup"] == pytest.approx(4 / 3)
    assert by["nf4"]["share"] == pytest.approx((4 - 3) / (4 - 4 * 3.6 / 13))


def test_published_rows_are_the_studys():
    rows = {r["backend"]: r for r in quantstudy.published_rows()}
    assert rows["gptq-exllamav2"]["ms"] == 17.36 and rows["bf16"]["ms"] == 62.32
    assert rows["nf4"]["speedup"] == pytest.approx(62.32 / 59.36)
    ideal = rows["nf4"]["ideal_speedup"]
    assert rows["nf4"]["share"] == pytest.approx((62.32 - 59.36) / (62.32 - 62.32 / ideal))


def test_plan_checks_input_before_anything_runs():
    base_cfg = config.RunConfig("tiny-llama", [32], ["eager"], device="cpu")
    with pytest.raises(UserError, match="unknown quant backend"):
        quantstudy.plan(quantstudy.QuantConfig(base_cfg, ["nf4", "int3"], "x.jsonl"), [])
    with pytest.raises(UserError, match="one --ctx"):
        quantstudy.plan(quantstudy.QuantConfig(config.RunConfig("tiny-llama", [32, 64], [], device="cpu"),
                                               [], "x.jsonl"), [])
    jobs = quantstudy.plan(quantstudy.QuantConfig(base_cfg, ["int4-gemlite"], "x.jsonl"), [])
    assert [j.backend for j in jobs] == ["bf16", "int4-gemlite"]  # the reference always runs
    assert jobs[1].unavailable.startswith("unavailable: int4-gemlite needs a CUDA GPU")


def test_default_modes_on_the_cpu_are_eager_and_static():
    # no --mode: the study's eager and graph on a GPU; graph cannot run on the CPU, its counterpart there is static
    jobs = quantstudy.plan(quantstudy.QuantConfig(config.RunConfig("tiny-llama", [32], [], device="cpu"),
                                                  ["nf4"], "x.jsonl"), [])
    assert [j.modes for j in jobs] == [["eager", "static"]] * 2


@pytest.mark.skipif(not HAS_BNB, reason="bitsandbytes is not installed (pip install 'floorline[nf4]')")
def test_quant_command_end_to_end_and_resume(tmp_path):
    out = tmp_path / "results.jsonl"
    argv = ["quant", "--model", "tiny-llama", "--ctx", "32", "--device", "cpu", "--mode", "eager", "--steps", "3",
            "--warmup", "1", "--backends", "nf4,int4-tinygemm", "--kernels", "--output", str(out)]
    rc, stdout, err = run_cli(argv)
    assert rc == 0, err
    recs = [json.loads(ln) for ln in out.read_text().splitlines()]
    cells = {(r["quant"], r["kind"]): r for r in recs}
    assert cells[("none", "cell")]["valid"] and cells[("nf4", "cell")]["valid"]
    assert cells[("none", "kernels")]["valid"] and cells[("nf4", "kernels")]["valid"]
    assert cells[("int4-tinygemm", "cell")]["reason"].startswith("unavailable: int4-tinygemm needs a CUDA GPU")
    for w in ("nf4", "int4-tinygemm", "share of ideal saving", "published", "17.36", "kernel level"):
        assert w in stdout
    rc, _, _ = run_cli(argv)  # resumes: nothing new to run, the unavailable reason is not repeated
    assert rc == 0 and len(out.read_text().splitlines()) == len(recs)
    # the exit code says what the tables show: a sweep's timeout of another mode in the shared file does not fail it
    # (it once did), the latest record of a shown cell crashing does
    nf4 = cells[("nf4", "cell")]
    other = dict(nf4, run_id="sweep-static", mode="static", valid=False, reason="timeout after 20 s")
    records.append(out, [other])
    assert run_cli(argv)[0] == 0
    records.append(out, [dict(nf4, run_id="later", valid=False, reason="crash: exit code 7: it fell over")])
    rc, stdout, _ = run_cli(argv)
    assert rc == 1 and "crash: exit code 7" in stdout
    rc, _, err = run_cli(["report", str(out), "--out", str(tmp_path / "rep")])
    assert rc == 0, err
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Quantised backends" in md and "unavailable: int4-tinygemm" in md


def test_published_rows_from_record_bytes_or_none():
    # the report has no byte accounting at hand: the ideal speed-up comes from records of that cell, else none
    pub = quantstudy.published_rows()
    model, ctx = pub[0]["model"], pub[0]["ctx"]
    recs = [{"model": model, "ctx": ctx, "quant": "none", "floor_bytes": 15e9},
            {"model": model, "ctx": ctx, "quant": "nf4", "floor_bytes": 5e9},
            {"model": model, "ctx": 4096, "quant": "gptq-exllamav2", "floor_bytes": 1}]  # another ctx: not used
    rows = {r["backend"]: r for r in quantrows.published_rows(quantrows.record_floor_bytes(recs, model, ctx))}
    assert rows["nf4"]["ideal_speedup"] == pytest.approx(3.0)
    assert rows["gptq-exllamav2"]["ideal_speedup"] is None and rows["gptq-exllamav2"]["share"] is None
    assert rows["gptq-exllamav2"]["speedup"] == pytest.approx(62.32 / 17.36)


def test_backends_in_puts_bf16_first():
    recs = [{"quant": "nf4"}, {"quant": None}, {"quant": "int4"}, {"quant": "nf4"}]
    assert quantrows.backends_in(recs) == ["bf16", "nf4", "int4"]


def test_the_tables_take_this_models_records_only(tmp_path, monkeypatch):
    """A results file shared with other runs may hold a folder of the same name that is another model: quant's
    tables are of the model it was asked for (by its config), never a mix."""
    from floorline.core import zoo
    from floorline.serve import servedir
    from floorline.study import resume

    here = servedir.write_model_dir(zoo.ZOO["tiny-llama"], tmp_path / "a" / "llama")
    other = servedir.write_model_dir(zoo.ZOO["tiny-qwen2"], tmp_path / "b" / "llama")
    ids = [zoo.resolve(str(d)).identity() for d in (here, other)]
    out = tmp_path / "r.jsonl"
    records.append(out, [{**_cell("none", "eager", ms, 1e6, dtype="fp32"), **i, "device": "cpu",
                          "schema_version": records.SCHEMA_VERSION} for ms, i in ((2.0, ids[0]), (9.0, ids[1]))])
    monkeypatch.setattr(resume, "run", lambda *a, **k: None)  # nothing measured here: the file is what it holds
    base = config.RunConfig(str(here), [2048], ["eager"], dtype="fp32", device="cpu")
    jobs, recs = quantstudy.run(quantstudy.QuantConfig(base, ["bf16"], str(out)))
    assert [r["step_ms_median"] for r in recs] == [2.0]
