"""The machine code (SASS) of mode native's Triton kernels for sm_90, built on any machine (no GPU: Triton's bundled
ptxas and cuobjdump), with the JIT's own specialisation (pointers and sizes divisible by 16).

  python scripts/gemv_sass.py show BN BK WARPS AHEAD [PRO] [--stages S]
                                                             the GEMV's weight loads before griddepcontrol.wait,
                                                             barriers (json)
  python scripts/gemv_sass.py tiles [PRO GLU ACC SPLIT] [--try BN,BK,WARPS,STAGES,AHEAD ...]
                                                             every tile of gemv._BF16 (and others): registers,
                                                             programs an SM holds, weight bytes an SM has in flight

scripts/sass_same.py compares every native kernel with a git revision's (is a change of the sources a change of what
was measured?) with the helpers here.
"""

from __future__ import annotations

import argparse
import inspect
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POINTERS = dict(W="*bf16", S="*bf16", Z="*bf16", X="*fp32", NW="*bf16", B="*bf16", Y="*fp32")


def constants(bn, bk, ahead, pro=1, glu=0, acc=0, split=1, bias=0, stages=0, int4=0, pdl=1) -> dict:
    return dict(PRO=pro, GLU=glu, HAS_BIAS=bias, ACC=acc, INT4=int4, GROUP_K=128, BN=bn, BK=bk, PDL=pdl,
                STAGES=stages, SPLIT=split, AHEAD=ahead)


def compiled(kernel, const: dict, warps: int, pointers: dict = POINTERS, ints=("N", "K", "KW"),
             divisible=("N", "K", "KW"), maxnreg=None):
    """`kernel` (gemv._gemv, or another: its pointer types and int arguments given) compiled for sm_90 with
    these constexprs, pointers and `divisible` ints specialised as divisible by 16: Triton's CompiledKernel."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = list(kernel.arg_names)
    # a constexpr left out of `const` takes the kernel's own default (ASTSource would make it None)
    const = {**{p.name: p.default for p in kernel.params if p.is_constexpr and p.name not in const
                and p.default is not inspect.Parameter.empty and p.default is not None}, **const}
    if const.get("INT4"):  # int4: the words of 8 codes
        pointers = {**pointers, "W": "*i32"}
    sig = {n: pointers.get(n, "i32" if n in ints else "fp32" if n in ("eps", "scale") else "constexpr")
           for n in names}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in (*pointers, *divisible)}
    src = ASTSource(fn=kernel, signature=sig, constexprs={(names.index(k),): v for k, v in const.items()}, attrs=attrs)
    options = dict(num_warps=warps, **({"maxnreg": maxnreg} if maxnreg else {}))
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def cuobjdump_tool() -> Path:
    """Triton's bundled cuobjdump (absent from some Triton builds: callers check)."""
    import triton

    return Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"


def cuobjdump(cubin: bytes, what: str = "-sass") -> str:
    """cuobjdump's -sass (or `what`: -res-usage) of a cubin."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "k.cubin"
        path.write_bytes(cubin)
        return subprocess.run([str(cuobjdump_tool()), what, str(path)], capture_output=True, text=True,
                              check=True).stdout


def sass(kernel, const: dict, warps: int, **kw) -> str:
    """The SASS of `compiled`, without the headers that name the module (so two modules' code compares)."""
    out = cuobjdump(compiled(kernel, const, warps, **kw).asm["cubin"])
    return "\n".join(ln for ln in out.splitlines() if "Function" not in ln and "code for" not in ln)


def summary(code: str) -> dict:
    """Weight loads (LDG.E.EF: evict-first) before the wait (ACQBULK), and barriers in the whole kernel."""
    before = code.split("ACQBULK", 1)[0]
    return {"wait": "ACQBULK" in code, "weight_loads_before_wait": before.count("LDG.E.EF"),
            "barriers": code.count("BAR.SYNC")}


MLP_POINTERS = dict(WGU="*bf16", WDT="*bf16", X="*fp32", NW="*fp32", XO="*fp32", XZ="*fp32")


def mlp_sass(fn, bj: int, warps: int, hidden: int, pdl: int, two: int = 0) -> str:
    """The SASS of mlp._mlp (or a revision's: one with the split switch gets its row split) for sm_90, as `sass`
    gives the GEMV's."""
    import triton

    const = dict(BJ=bj, HP=triton.next_power_of_2(hidden), PDL=pdl)
    if "SPLIT" in fn.arg_names:
        const["SPLIT"] = 1
    if two:  # mlp._mlp's TWO form
        const["TWO"] = 1
    return sass(fn, const, warps, pointers=MLP_POINTERS, ints=("H", "I", "TILES"), divisible=("H", "I"))


def residency(regs: int, shared: int, warps: int) -> int:
    """Programs of `warps` warps one H100/H200 SM holds at once: 64K registers (allocated per warp in 256s), 228 KB of
    shared memory (1 KB of it reserved per block), 64 warps, 32 blocks."""
    per_warp = -(-regs * 32 // 256) * 256
    by_regs = 65536 // (per_warp * warps)
    by_smem = 233472 // (shared + 1024)
    return min(by_regs, by_smem, 64 // warps, 32)


def tile_table(pro: int, glu: int, acc: int, split: int, extra=()) -> list[dict]:
    """For each bf16 tile of gemv._BF16 and of `extra` ((BN, BK, warps, STAGES, AHEAD) tuples), with these flags:
    registers a thread, shared memory a program (Triton's dynamic allocation), programs an SM, and the weight bytes an
    SM has requested at once when every program has its AHEAD tiles in flight (the cp.async tiles: STAGES - 1)."""
    import re

    import triton

    from floorline.native import gemv

    tried = [triton.Config({"BN": t[0], "BK": t[1], "STAGES": t[3], "SPLIT": split, "AHEAD": t[4]}, num_warps=t[2])
             for t in extra]
    rows = []
    for cfg in list(gemv._BF16) + tried:
        kw = cfg.kwargs
        if kw.get("SPLIT", 1) > 1 and not (acc and not pro and not glu):
            continue
        const = constants(kw["BN"], kw["BK"], kw.get("AHEAD", 1), pro, glu, acc, kw.get("SPLIT", 1) if acc else 1,
                          0, kw.get("STAGES", 0))
        kernel = compiled(gemv._gemv, const, cfg.num_warps)
        regs = int(re.search(r"REG:(\d+)", cuobjdump(kernel.asm["cubin"], "-res-usage")).group(1))
        shared = kernel.metadata.shared
        progs = residency(regs, shared, cfg.num_warps)
        ahead = kw["STAGES"] - 1 if kw.get("STAGES") else kw.get("AHEAD", 1)
        rows.append({"tile": gemv.tile_name(cfg), "regs": regs, "shared": shared, "programs_an_sm": progs,
                     "kb_in_flight_an_sm": progs * ahead * kw["BN"] * kw["BK"] * 2 / 1024,
                     "in_the_autotuner": cfg not in tried})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("show")
    for name in ("bn", "bk", "warps", "ahead"):
        s.add_argument(name, type=int)
    s.add_argument("pro", type=int, nargs="?", default=1)
    s.add_argument("--stages", type=int, default=0, help="Triton's cp.async pipeline instead of register buffers")
    t = sub.add_parser("tiles")
    for name, default in (("pro", 1), ("glu", 1), ("acc", 0), ("split", 1)):
        t.add_argument(name, type=int, nargs="?", default=default)
    t.add_argument("--try", dest="extra", nargs="*", default=[], metavar="BN,BK,WARPS,STAGES,AHEAD",
                   help="tiles not in gemv._BF16, shown beside them (marked +)")
    a = p.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    from floorline.native import gemv

    if a.cmd == "tiles":
        extra = [tuple(int(v) for v in e.split(",")) for e in a.extra]
        for r in tile_table(a.pro, a.glu, a.acc, a.split, extra):
            mark = "" if r["in_the_autotuner"] else "+"
            print(f"{mark}{r['tile']:<18} {r['regs']:>4} regs {r['shared']:>6} B shared {r['programs_an_sm']:>3} "
                  f"programs an SM {r['kb_in_flight_an_sm']:>5.0f} KB of weights in flight")
        return 0
    if a.cmd == "show":
        const = constants(a.bn, a.bk, a.ahead, a.pro, stages=a.stages)
        print(json.dumps(summary(sass(gemv._gemv, const, a.warps))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
