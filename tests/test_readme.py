"""The README's tables and figures are floorline's own rendering of committed records: every generated block is
what scripts/readme_tables.py makes of results/ now (a stale block, or a hand edit inside one, fails here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


def _script():
    return load_script("readme_tables")


def test_every_readme_block_is_what_the_records_give():
    mod = _script()
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    names = [m["name"] for m in mod.BLOCK.finditer(text)]
    assert set(names) == set(mod.BLOCKS), "every generator has its block in the README, and no block lacks one"
    _, changed = mod.render(text)
    assert not changed, f"stale README blocks {changed}: run python scripts/readme_tables.py"


def test_a_hand_edit_inside_a_block_is_caught():
    mod = _script()
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = next(mod.BLOCK.finditer(text))
    edited = text[:m.start("body")] + "91.693\n" + text[m.start("body"):]
    assert mod.render(edited)[1] == [m["name"]]


def test_the_first_h200_table_is_the_core_run_record():
    from floorline import records

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    core = records.read(ROOT / "results" / "h200" / "core_run.jsonl")
    for r in core:
        if (r["model"], r["ctx"]) == ("qwen2.5-7b", 2048):
            assert f"| {r['mode']} | {r['step_ms_median']:.3f} |" in text
    assert "91.693" not in text  # the old figure that no record holds


@pytest.mark.parametrize("name", ["predict-validation", "h200-quant", "grid"])
def test_generated_blocks_hold_numbers(name):
    text = _script().BLOCKS[name]()
    assert any(ch.isdigit() for ch in text) and "nan" not in text


def test_the_bandwidth_block_says_when_no_record_is_of_this_versions_sources(monkeypatch):
    """Changed sources not measured yet: the block names the newest record of any sources and says whose they are
    not (it may be a dropped experiment's); this version's records are named plainly."""
    from floorline import records, system

    mod = _script()
    cpu = records.read(ROOT / "results" / "cpu" / "default_run.jsonl")[0]["source_sha256"]
    monkeypatch.setattr(system, "source_sha256", lambda root=None: cpu)  # the CPU record's own sources
    lines = mod.bandwidth().splitlines()
    assert "no record of this version" not in lines[0] and lines[0].startswith("   - CPU")
    monkeypatch.setattr(system, "source_sha256", lambda root=None: "0123456789abcdef")
    other = mod.bandwidth()
    assert other.count("(no record of this version's sources 0123456789abcdef yet)") == 2
