"""The machine code (SASS) of mode native's Triton GEMV for sm_90, built on any machine (no GPU: Triton's bundled
ptxas and cuobjdump), with the JIT's own specialisation (pointers and sizes divisible by 16).

  python scripts/gemv_sass.py show BN BK WARPS AHEAD [PRO]   weight loads before griddepcontrol.wait, barriers (json)
  python scripts/gemv_sass.py same REV                       this tree's bf16 GEMV against git revision REV's, tile by
                                                             tile: whether a change to kernels.py changes the code

`same` is how a refactor of measured sources is checked not to change what was measured (source_sha256 hashes the
text, comments included).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import itertools
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POINTERS = dict(W="*bf16", S="*bf16", Z="*bf16", X="*fp32", NW="*bf16", B="*bf16", Y="*fp32")
# (BN, BK, warps) x AHEAD x (PRO, GLU, ACC, SPLIT, HAS_BIAS): q/k/v, gate_up, o / down split and not, lm_head
TILES = [(8, 256, 4), (4, 256, 2), (4, 512, 4), (2, 512, 2)]
FLAGS = [(1, 0, 0, 1, 1), (1, 1, 0, 1, 0), (0, 0, 1, 2, 0), (0, 0, 1, 1, 0), (1, 0, 0, 1, 0)]


def constants(bn, bk, ahead, pro=1, glu=0, acc=0, split=1, bias=0, stages=0) -> dict:
    return dict(PRO=pro, GLU=glu, HAS_BIAS=bias, ACC=acc, INT4=0, GROUP_K=128, BN=bn, BK=bk, PDL=3, STAGES=stages,
                SPLIT=split, AHEAD=ahead)


def sass(gemv, const: dict, warps: int) -> str:
    """cuobjdump -sass of `gemv` (a kernels._gemv) compiled for sm_90 with these constexprs."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = list(gemv.arg_names)
    sig = {n: POINTERS.get(n, "i32" if n in ("N", "K", "KW") else "fp32" if n == "eps" else "constexpr")
           for n in names}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in (*POINTERS, "N", "K", "KW")}
    src = ASTSource(fn=gemv, signature=sig, constexprs={(names.index(k),): v for k, v in const.items()}, attrs=attrs)
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps))
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as d:
        cubin = Path(d) / "k.cubin"
        cubin.write_bytes(kernel.asm["cubin"])
        out = subprocess.run([str(tool), "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    return "\n".join(ln for ln in out.splitlines() if "Function" not in ln and "code for" not in ln)


def summary(code: str) -> dict:
    """Weight loads (LDG.E.EF: evict-first) before the wait (ACQBULK), and barriers in the whole kernel."""
    before = code.split("ACQBULK", 1)[0]
    return {"wait": "ACQBULK" in code, "weight_loads_before_wait": before.count("LDG.E.EF"),
            "barriers": code.count("BAR.SYNC")}


def _kernels_at(rev: str):
    text = subprocess.run(["git", "show", f"{rev}:src/floorline/native/kernels.py"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "kernels_at_rev.py"  # a real file: Triton reads the kernels' source back
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("kernels_at_rev", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("show")
    for name in ("bn", "bk", "warps", "ahead"):
        s.add_argument(name, type=int)
    s.add_argument("pro", type=int, nargs="?", default=1)
    c = sub.add_parser("same")
    c.add_argument("rev")
    a = p.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    from floorline.native import kernels

    if a.cmd == "show":
        print(json.dumps(summary(sass(kernels._gemv, constants(a.bn, a.bk, a.ahead, a.pro), a.warps))))
        return 0
    old = _kernels_at(a.rev)
    differ = []
    for (bn, bk, warps), ahead, (pro, glu, acc, split, bias) in itertools.product(TILES, (1, 2), FLAGS):
        const = constants(bn, bk, ahead, pro, glu, acc, split, bias)
        if sass(kernels._gemv, const, warps) != sass(old._gemv, const, warps):
            differ.append((bn, bk, warps, ahead, pro, glu, acc, split, bias))
    n = len(TILES) * 2 * len(FLAGS)
    print(f"{n - len(differ)} of {n} bf16 GEMV variants compile to the same SASS as at {a.rev}"
          + "".join(f"\n  differs: BN {d[0]} BK {d[1]} w{d[2]} AHEAD {d[3]} PRO/GLU/ACC/SPLIT/BIAS {d[4:]}"
                    for d in differ))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
