"""The packages' imports point one way, with no cycles, and core and report never load torch.

Read from the sources (every import statement, at module level or inside a function: a deferred import is still a
dependency), so an upward or circular import fails here before it can fail at run time."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "floorline"
# what each package may import (besides itself): the layers, lowest first
ALLOWED = {
    "core": set(),
    "device": {"core"},
    "native": {"core", "device"},
    "quant": {"core", "device", "native"},
    "bench": {"core", "device", "native", "quant"},
    "serve": {"core", "device", "bench"},
    "study": {"core", "device", "native", "quant", "bench", "serve", "report"},
    "report": {"core"},
    "cli": {"core", "device", "native", "quant", "bench", "serve", "study", "report"},
    "__main__": {"cli"},
    "__init__": set(),
}
NO_TORCH = {"core", "report"}  # `floor`, `predict` and `report` run without torch
HEAVY = {"torch", "transformers", "triton", "safetensors"}


def _modules() -> dict[str, Path]:
    out = {}
    for f in sorted(PKG.rglob("*.py")):
        parts = f.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = f
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every module `path` imports, by dotted name (a name imported from a package is the submodule where one
    exists)."""
    found = set()
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg.split(".")[: len(pkg.split(".")) - node.level + 1] + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.add(sub if sub in MODULES else base)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(name: str) -> str:
    parts = name.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def test_every_module_sits_in_a_known_package():
    assert {_layer(n) for n in MODULES} <= set(ALLOWED)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_point_down(name):
    own = _layer(name)
    bad = sorted(d for d in GRAPH[name] if d in MODULES and d != "floorline" and _layer(d) not in ALLOWED[own] | {own})
    assert not bad, f"{name} ({own}) imports {bad}: {own} may import only {sorted(ALLOWED[own])}"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if _layer(n) in NO_TORCH))
def test_core_and_report_import_no_torch(name):
    heavy = sorted(d for d in GRAPH[name] if d.split(".")[0] in HEAVY)
    assert not heavy, f"{name} imports {heavy}"


def test_no_import_cycles():
    """Tarjan's strongly connected components over the module graph: every one a single module."""
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in GRAPH[v]:
            if w not in MODULES or w == v:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in MODULES:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_checks_see_deferred_and_relative_imports(tmp_path):
    """The reader counts an import inside a function, and `from floorline.x import y` as the submodule y."""
    f = tmp_path / "m.py"
    f.write_text("def g():\n    from floorline.bench import measure\n    import torch\n")
    assert {"floorline.bench.measure", "torch"} <= _imports("floorline.core.m", f)


def test_floor_and_report_load_without_torch():
    code = ("import sys; import floorline.core.floor, floorline.core.zoo, floorline.report.predict, "
            "floorline.report.write, floorline.report.display; "
            "sys.exit(1 if {'torch', 'transformers'} & set(sys.modules) else 0)")
    assert subprocess.run([sys.executable, "-c", code], cwd=SRC).returncode == 0
