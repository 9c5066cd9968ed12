"""scripts/suite.py's choice of entries (the GPU suite itself runs on the device: scripts/gpu_check.sh suite)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


def test_the_suite_selects_by_group_and_by_model_mode_and_quant():
    """--groups keeps whole groups; --only takes model:mode (every quant of it) or model:mode:quant (one of them,
    "none" for an entry without a quant), as the H200 suite's small group has llama-3.2-1b in bf16 and in int4."""
    suite = load_script("suite")
    entries = tomllib.loads((ROOT / "scripts" / "h200_suite.toml").read_text())["run"]
    small = suite.select(entries, "small", None)
    assert small and {e["group"] for e in small} == {"small"}

    def pick(only):
        return [(e["model"], e.get("quant", "none")) for e in suite.select(entries, "small", only)]

    assert pick("llama-3.2-1b:native") == [("llama-3.2-1b", "none"), ("llama-3.2-1b", "int4")]
    assert pick("llama-3.2-1b:native:int4") == [("llama-3.2-1b", "int4")]
    assert pick("llama-3.2-1b:native:none qwen2.5-0.5b:native") == [("llama-3.2-1b", "none"), ("qwen2.5-0.5b", "none")]
    assert pick("llama-3.2-1b:graph") == [] and suite.select(entries, None, None) == entries
