"""floorline import of llama-bench output, and gguf.py's widths.

Fixture: tests/data/llamabench_tiny_llama.json and .jsonl are REAL llama-bench output, made once on the CPU: llama.cpp
as vendored in llama-cpp-python 0.3.36's sdist (build 0c1e570), built with cmake + ninja in a git-ignored folder,
run on a Q8_0 GGUF of tiny-llama with seeded random weights written by gguf-py's GGUFWriter. The exact commands are
in scripts/llamabench_fixture.py; only the JSON output is committed.
  llama-bench -m tiny-llama-q8_0.gguf -p 64 -n 16 -d 0,512 -r 5 -t 2 -o json   (and -o jsonl)
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import read_jsonl_strict, run_cli

from floorline.core import floor, gguf, zoo
from floorline.core.errors import UserError

DATA = Path(__file__).parent / "data"
JSON, JSONL = DATA / "llamabench_tiny_llama.json", DATA / "llamabench_tiny_llama.jsonl"


@pytest.mark.parametrize("path", [JSON, JSONL])
def test_import_rows(path, tmp_path):
    out = tmp_path / "lb.jsonl"
    rc, stdout, err = run_cli(["import", str(path), "--model", "tiny-llama", "--output", str(out)])
    assert rc == 0, err
    rows = [json.loads(l) for l in path.read_text().splitlines() if l.strip()] if path.suffix == ".jsonl" \
        else json.loads(path.read_text())
    recs = read_jsonl_strict(out)
    assert len(recs) == len(rows) == 4
    cells = [r for r in recs if r["kind"] == "cell"]
    prompt = [r for r in recs if r["kind"] == "llama-bench-prompt"]
    assert [r["ctx"] for r in cells] == [0, 512] and len(prompt) == 2
    assert "2 prompt row(s) (pp64, pp64 @ d512)" in err and "kept out of the floor tables" in err
    a = zoo.ZOO["tiny-llama"]
    for r, row in zip(cells, [x for x in rows if x["n_gen"] and not x["n_prompt"]]):
        assert r["mode"] == "llama-bench" and r["valid"] is True and r["quant"] == "gguf Q8_0"
        assert r["samples_ms"] == [s / 16 / 1e6 for s in row["samples_ns"]] and len(r["samples_ms"]) == 5
        assert r["weight_bytes"] == row["model_size"] == 1397248
        assert row["model_n_params"] == floor.parameter_count(a)
        # paper convention: llama-bench's bytes for every parameter, plus the f16 KV cache read at the depth
        assert r["paper_floor_bytes"] == pytest.approx(row["model_size"] + r["ctx"] * floor.kv_bytes_per_token(a),
                                                       abs=16)
        assert r["floor_bytes_kv_read"] == r["ctx"] * floor.kv_bytes_per_token(a)
        # strict leaves out the untied embedding matrix but one row, at the file's average bytes per parameter
        bpp = row["model_size"] / row["model_n_params"]
        want = row["model_size"] - (a.vocab - 1) * a.hidden * bpp + (r["ctx"] + 1) * floor.kv_bytes_per_token(a)
        assert r["floor_bytes"] == pytest.approx(want, abs=16)
        assert r["llamabench_backends"] == "CPU" and r["device"] == "cpu" and r["device_name"] == row["cpu_info"]
        assert r["tokens_per_s"] == pytest.approx(1e3 / r["step_ms_median"])
    assert "llama-bench" in stdout


def test_import_twice_appends_the_rows_once(tmp_path):
    """The same file imported again into the same --output: nothing appended, said; the ids are the rows' own, so
    the same rows imported into another file are one record to `report` (a duplicate dropped with its note)."""
    out, other = tmp_path / "lb.jsonl", tmp_path / "other.jsonl"
    argv = ["import", str(JSON), "--model", "tiny-llama", "--gpu", "h200", "--output"]
    assert run_cli(argv + [str(out)])[0] == 0
    rc, _, err = run_cli(argv + [str(out)])
    assert rc == 0 and "4 of 4 record(s) already in" in err and "0 record(s) appended" in err
    assert len(read_jsonl_strict(out)) == 4
    assert run_cli(argv + [str(other)])[0] == 0
    assert [r["run_id"] for r in read_jsonl_strict(other)] == [r["run_id"] for r in read_jsonl_strict(out)]
    assert len({r["run_id"] for r in read_jsonl_strict(out)}) == 4
    from floorline.report import load_results

    recs, notes = load_results([str(out), str(other)])
    assert len(recs) == 4 and any("dropped 4 duplicate records" in n for n in notes)
    assert not any("differs" in n for n in notes)  # written at another time, the same rows
    # the same GPU however spelt is the same record; another GPU, or this host's bandwidth measured, is another
    assert run_cli(["import", str(JSON), "--model", "tiny-llama", "--gpu", "H200", "--output", str(out)])[0] == 0
    assert len(read_jsonl_strict(out)) == 4
    assert run_cli(["import", str(JSON), "--model", "tiny-llama", "--gpu", "l4", "--output", str(out)])[0] == 0
    assert len(read_jsonl_strict(out)) == 8
    assert run_cli(["import", str(JSON), "--model", "tiny-llama", "--gpu", "l4", "--device", "cpu", "--output",
                    str(out)])[0] == 0
    assert len(read_jsonl_strict(out)) == 12


def test_a_report_of_rows_from_an_empty_cache_plots_them_without_a_warning(tmp_path):
    """llama-bench's tg rows decode from depth 0: the ms-vs-context plot takes ctx 0 (it used to warn of a
    non-positive limit on its log axis, and leave the point out)."""
    import warnings

    from floorline.report import load_results, write_report

    out = tmp_path / "lb.jsonl"
    assert run_cli(["import", str(JSON), "--model", "tiny-llama", "--gpu", "h200", "--output", str(out)])[0] == 0
    records, _ = load_results([str(out)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        written = write_report(records, str(tmp_path / "rep"))
    assert "ms_vs_context.png" in {p.name for p in written}
    assert not [w for w in caught if "log-scaled" in str(w.message) or "non-positive" in str(w.message)]
    md = (tmp_path / "rep" / "report.md").read_text()
    # its GGUF rows are no floorline backend (no "Quantised backends" of published rows alone); its prompt rows are
    # a kind the report knows, not an "unknown kind"
    assert "Quantised backends" not in md and "unknown kind" not in md
    assert "2 llama-bench prompt records (prefill, not decode) are only in results.csv" in md


def test_import_measures_here_when_asked(tmp_path):
    rc, stdout, err = run_cli(["import", str(JSON), "--model", "tiny-llama", "--device", "cpu", "--format", "json"])
    assert rc == 0, err
    for r in json.loads(stdout):
        assert r["measured_gbps"] > 0 and r["fraction_of_floor_measured"] == pytest.approx(
            r["floor_bytes"] / (r["measured_gbps"] * 1e9) * 1e3 / r["step_ms_median"])


@pytest.mark.parametrize("args, want", [
    (["--model", "qwen2.5-7b"], "parameters"),
    (["--model", "tiny-llama", "--gpu", "nope"], "unknown GPU"),
])
def test_import_bad_input(args, want, tmp_path):
    rc, _, err = run_cli(["import", str(JSON), *args, "--output", str(tmp_path / "x.jsonl")])
    assert rc == 2 and want in err and err.count("\n") == 1
    assert not (tmp_path / "x.jsonl").exists()


def test_import_not_llamabench(tmp_path):
    p = tmp_path / "b.json"
    p.write_text('[{"model": "x"}]')
    rc, _, err = run_cli(["import", str(p), "--model", "tiny-llama"])
    assert rc == 2 and "not llama-bench output" in err
    p.write_text("{nope")
    rc, _, err = run_cli(["import", str(p), "--model", "tiny-llama"])
    assert rc == 2 and "not llama-bench JSON" in err


@pytest.mark.parametrize("key, value", [("samples_ns", [-1, 0, 5]), ("samples_ns", []), ("model_size", "big"),
                                        ("n_gen", -16), ("model_n_params", 0)])
def test_import_a_malformed_row_is_one_line_naming_row_and_field(key, value, tmp_path):
    rows = json.loads(JSON.read_text())
    rows[1][key] = value
    p = tmp_path / "b.json"
    p.write_text(json.dumps(rows))
    rc, _, err = run_cli(["import", str(p), "--model", "tiny-llama"])
    assert rc == 2 and err.count("\n") == 1 and f"row 2: {key} {value!r}" in err, err


def test_import_says_the_records_warnings(tmp_path):
    """A row faster than its floor (here: a 1000x faster copy) carries a warning in its record, and the command says
    it too."""
    rows = json.loads(JSON.read_text())
    for r in rows:
        r["samples_ns"] = [max(1, s // 1000) for s in r["samples_ns"]]
    p = tmp_path / "b.json"
    p.write_text(json.dumps(rows))
    rc, stdout, err = run_cli(["import", str(p), "--model", "tiny-llama", "--device", "cpu", "--format", "json"])
    recs = json.loads(stdout)
    assert rc == 0 and all(any("faster than the floor" in w for w in r["warnings"]) for r in recs)
    assert err.count("warning: faster than the floor") == len(recs) == 2


def test_ggml_widths_match_gguf_py():
    """The block table against gguf-py's own (GGML_QUANT_SIZES: weights per block, bytes per block)."""
    g = pytest.importorskip("gguf")
    for name, (nbytes, n) in gguf.BLOCKS.items():
        assert g.GGML_QUANT_SIZES[g.GGMLQuantizationType[name]] == (n, nbytes), name
    assert gguf.bits_per_weight("q4_0") == 4.5 and gguf.bits_per_weight("Q6_K") == 6.5625
    with pytest.raises(UserError, match="mixes"):
        gguf.bits_per_weight("Q4_K_M")
    assert gguf.parse_bpw("4.85") == (4.85, "bpw4.85")


def test_floor_at_bpw():
    a = zoo.ZOO["tiny-llama"]
    dense = floor.floor(a, 100)
    q = gguf.floor_at_bpw(a, 100, 4.5)
    for k in ("decoder_matrices", "lm_head", "embedding_row"):
        assert q.components[k] == math.ceil(dense.components[k] / 2 * 4.5 / 8)
    for k in ("decoder_norms", "final_norm", "kv_read", "kv_write"):
        assert q.components[k] == dense.components[k]


def test_floor_at_bpw_of_a_moe_with_sliding_layers():
    """gguf's widths on gpt-oss's parts: the experts and matrices at the file's width (llama.cpp ships gpt-oss as
    MXFP4 experts), the router, sinks, norms and biases dense; the KV read of its sliding layers capped at the window."""
    a = zoo.ZOO["gpt-oss-20b"]
    dense = floor.floor(a, 4096)
    q = gguf.floor_at_bpw(a, 4096, gguf.bits_per_weight("MXFP4"))
    assert q.components["experts"] == math.ceil(dense.components["experts"] / 2 * 4.25 / 8)
    for k in ("router", "attention_sinks", "decoder_biases", "decoder_norms", "kv_read"):
        assert q.components[k] == dense.components[k]
    s = gguf.floor_from_size(a, 4096, 12_000_000_000, None)  # a 12 GB file, every parameter at its average
    per = 12_000_000_000 / floor.parameter_count(a)
    assert s.components["experts"] == math.ceil(dense.components["experts"] / 2 * per)
    assert s.components["kv_read"] == (12 * 127 + 12 * 4096) * 8 * 64 * 4  # f16 K and V, 12 sliding + 12 full layers
