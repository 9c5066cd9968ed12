"""The tables and figures of the README and docs/ are floorline's own rendering of committed records: every generated
block is what scripts/readme_tables.py makes of results/ now (a stale block, or a hand edit inside one, fails here);
the README stays a user's page (at most 350 lines)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


def _script():
    return load_script("readme_tables")


def test_every_block_is_what_the_records_give():
    mod = _script()
    names = []
    for doc in mod.DOCS:
        text = doc.read_text(encoding="utf-8")
        names += [m["name"] for m in mod.BLOCK.finditer(text)]
        _, changed = mod.render(text)
        assert not changed, f"stale blocks {changed} in {doc.name}: run python scripts/readme_tables.py"
    assert sorted(names) == sorted(mod.BLOCKS), "every generator has one block in one document, no block lacks one"


def test_the_readme_is_a_users_page():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 350
    for doc in ["docs/method.md", "docs/models.md", "docs/native.md", "docs/quant.md", "docs/endpoint.md", "docs/tp.md",
                "docs/architecture.md", "docs/lab/README.md"]:
        assert doc in text and (ROOT / doc).exists(), doc


def test_a_hand_edit_inside_a_block_is_caught():
    mod = _script()
    text = (ROOT / "docs" / "method.md").read_text(encoding="utf-8")
    m = next(mod.BLOCK.finditer(text))
    edited = text[:m.start("body")] + "91.693\n" + text[m.start("body"):]
    assert mod.render(edited)[1] == [m["name"]]


def test_the_headline_table_is_the_records():
    from floorline.core import records

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    core = records.read(ROOT / "results" / "h200" / "core_run.jsonl")
    for r in core:
        if r["ctx"] == 2048 and r["mode"] in ("eager", "graph", "compile"):
            assert f"| {r['model']} | 2048 | {r['mode']} | bf16 | {r['step_ms_median']:.3f} |" in text
    suite = [r for f in sorted((ROOT / "results" / "h200" / "suite").glob("*.jsonl")) if f.stem != "today"
             for r in records.read(f) if r.get("valid")]  # today's families: docs/models.md
    assert suite and all(f"| {r['step_ms_median']:.3f} |" in text for r in suite if r["mode"] == "native"
                         and r is max((s for s in suite if (s["model"], s["ctx"], s.get("quant")) ==
                                       (r["model"], r["ctx"], r.get("quant"))), key=lambda s: s["timestamp"]))
    assert "91.693" not in text  # the old figure that no record holds


@pytest.mark.parametrize("name", ["predict-validation", "h200-quant", "grid"])
def test_generated_blocks_hold_numbers(name):
    text = _script().BLOCKS[name]()
    assert any(ch.isdigit() for ch in text) and "nan" not in text


def test_the_bandwidth_block_says_when_no_record_is_of_this_versions_sources(monkeypatch):
    """Changed sources not measured yet: the block names the newest record of any sources and says whose they are
    not (it may be a dropped experiment's); this version's records are named plainly."""
    from floorline.bench import system
    from floorline.core import records

    mod = _script()
    cpu = records.read(ROOT / "results" / "cpu" / "default_run.jsonl")[0]["source_sha256"]
    monkeypatch.setattr(system, "source_sha256", lambda root=None: cpu)  # the CPU record's own sources
    lines = mod.bandwidth().splitlines()
    assert "no record of this version" not in lines[0] and lines[0].startswith("   - CPU")
    monkeypatch.setattr(system, "source_sha256", lambda root=None: "0123456789abcdef")
    other = mod.bandwidth()
    assert other.count("(no record of this version's sources 0123456789abcdef yet)") == 2
