"""Does a change of mode native's sources change what was measured? Every native kernel of this tree against a git
revision's, compiled for sm_90 on any machine (no GPU), variant by variant, machine code (SASS) compared.

  python scripts/sass_same.py REV

Triton kernels (the GEMV, the fused MLP, the attention's chunks and merge, the step's ends) through Triton's
bundled ptxas and cuobjdump; the CUDA C++ kernels (the int4 GEMV, the CUDA attention chunks) through NVRTC, which on
a machine without a GPU comes from the nvidia-cuda-nvrtc wheel (`pip download nvidia-cuda-nvrtc`, unzipped; give
its libnvrtc.so with --nvrtc, or they are skipped with a line saying so). Each tree is compiled in a child process of
its own (sys.path on that tree's src/), which finds its kernels by their names at that revision: floorline's layout
before the packages (native/kernels.py, PDL after-wait = 3) and after (native/gemv.py ..., PDL on = 1). Exit 1 when
any variant differs. source_sha256 hashes the text, comments included; this says whether the code is the same.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import itertools
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the GEMV: (BN, BK, warps, STAGES, AHEAD, INT4) x (PRO, GLU, ACC, SPLIT, HAS_BIAS): register tiles one and two ahead,
# a cp.async tile, int4 tiles (registers and cp.async) x q/k/v, gate_up, o / down split and not, lm_head
TILES = [(8, 256, 4, 0, 1, 0), (4, 256, 2, 0, 1, 0), (4, 512, 4, 0, 1, 0), (2, 512, 2, 0, 1, 0), (8, 256, 4, 0, 2, 0),
         (4, 256, 2, 0, 2, 0), (4, 512, 4, 0, 2, 0), (2, 512, 2, 0, 2, 0), (8, 512, 4, 3, 1, 0), (4, 512, 1, 0, 1, 1),
         (8, 512, 2, 6, 1, 1)]
FLAGS = [(1, 0, 0, 1, 1), (1, 1, 0, 1, 0), (0, 0, 1, 2, 0), (0, 0, 1, 1, 0), (1, 0, 0, 1, 0)]
MLP = [(4, 16), (2, 16), (2, 8), (4, 8), (2, 4)]  # (rows a tile, warps): mlp.CANDIDATES
# attention chunks: (H, KVH, G, GP, D, CHUNK, BL, warps); merge: (G, GP, D, CHUNK, CB, ZB, DB, warps)
ATTN = [(28, 4, 7, 16, 128, 64, 64, 8), (32, 8, 4, 16, 128, 256, 64, 8), (14, 2, 7, 16, 64, 64, 64, 8)]
MERGE = [(7, 16, 128, 64, 64, 0, 32, 1), (4, 16, 128, 256, 64, 0, 32, 1), (7, 16, 128, 64, 32, 64, 32, 1),
         (7, 16, 64, 64, 64, 0, 16, 1)]
# the int4 CUDA GEMV: (pro, glu, bias, acc, atomic, xbf16, ybf16, xpt) x a launch config; the CUDA attention's defines
INT4 = [((1, 0, 1, 1, 0, 0, 0, 1), (8, 2, 1, 0, 0)), ((1, 1, 0, 0, 0, 0, 0, 4), (16, 2, 1, 0, 0, 0, 1)),
        ((0, 0, 0, 1, 1, 0, 0, 1), (8, 1, 4, 0, 6)), ((1, 0, 1, 0, 0, 0, 0, 4), (8, 2, 1, 0, 0, 1)),
        ((0, 0, 0, 1, 1, 0, 0, 1), (16, 2, 4, 0, 0, 0, 4)), ((1, 0, 1, 0, 0, 0, 0, 2), (8, 1, 1, 0, 4, 0, 2)),
        ((0, 0, 0, 0, 0, 1, 1, 1), (4, 2, 1, 1, 0))]
ATTN_CUDA = [(28, 4, 4, 512, 34, 16), (32, 8, 8, 128, 16, 16), (28, 4, 8, 256, 64, 16)]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def dump(nvrtc_lib: str | None) -> dict:
    """This tree's kernels (the `floorline` on sys.path), variant name -> digest of its SASS."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import gemv_sass as S

    from floorline import native

    new = hasattr(native, "INTERPRET")  # the packages' layout (gemv.py, mlp.py, attention.py, ends.py, pdl.py)
    if new:
        from floorline.native import attention, ends, gemv, mlp
        kern = {"gemv": gemv._gemv, "mlp": mlp._mlp, "chunk": attention._attn_chunk, "merge": attention._attn_merge,
                "embed": ends._embed, "next": ends._next_token}
    else:
        from floorline.native import kernels, mlp
        kern = {"gemv": kernels._gemv, "mlp": mlp._mlp, "chunk": kernels._attn_chunk, "merge": kernels._attn_merge,
                "embed": kernels._embed, "next": kernels._next_token}
    on = 1 if new else 3  # PDL: each layout's value for "wait, then let the next kernel launch"
    out = {}
    for pdl in (0, on):
        name = "pdl" if pdl else "plain"
        for (bn, bk, warps, stages, ahead, int4), flags in itertools.product(TILES, FLAGS):
            const = S.constants(bn, bk, ahead, *flags, stages=stages, int4=int4, pdl=pdl)
            out[f"gemv {name} {bn}x{bk} w{warps} s{stages} a{ahead} int4 {int4} {flags}"] = _digest(
                S.sass(kern["gemv"], const, warps))
        for (bj, warps), hidden in itertools.product(MLP, (3584, 4096, 2048)):
            out[f"mlp {name} bj{bj} w{warps} h{hidden}"] = _digest(S.mlp_sass(kern["mlp"], bj, warps, hidden, pdl))
        for h, kvh, g, gp, d, chunk, bl, warps in ATTN:
            const = dict(H=h, KVH=kvh, G=g, GP=gp, D=d, CHUNK=chunk, BL=bl, DOT_F32=0, PDL=pdl, STAGES=3)
            ptrs = dict(QKV="*fp32", COS="*fp32", SIN="*fp32", POS="*i32", KC="*bf16", VC="*bf16", MO="*fp32",
                        LO="*fp32", OO="*fp32")
            out[f"attn chunk {name} {h}/{kvh} d{d} c{chunk}"] = _digest(S.sass(
                kern["chunk"], const, warps, pointers=ptrs, ints=("stride_kh", "NCHUNK"), divisible=("stride_kh",)))
        for g, gp, d, chunk, cb, zb, db, warps in MERGE:
            const = dict(G=g, GP=gp, D=d, CHUNK=chunk, CB=cb, PDL=pdl, ZB=zb, DB=db)
            ptrs = dict(MO="*fp32", LO="*fp32", OO="*fp32", OUT="*fp32", POS="*i32", ZP="*fp32")
            out[f"attn merge {name} g{g} d{d} c{chunk} cb{cb} zb{zb} db{db}"] = _digest(S.sass(
                kern["merge"], const, warps, pointers=ptrs, ints=("NCHUNK", "ZN"), divisible=()))
        for zero_next in (0, 1):
            const = dict(BLOCK=1024, PDL=pdl, ZERO_NEXT=zero_next)
            ptrs = dict(E="*bf16", TOK="*i64", X="*fp32")
            out[f"embed {name} zero_next {zero_next}"] = _digest(S.sass(
                kern["embed"], const, 4, pointers=ptrs, ints=("stride_e", "H"), divisible=("stride_e", "H")))
        ptrs = dict(LOGITS="*fp32", STATE="*i64", TOK="*i64", POS="*i32")
        out[f"next_token {name}"] = _digest(S.sass(kern["next"], dict(BLOCK=1024, PDL=pdl), 4, pointers=ptrs,
                                                   ints=("N",), divisible=()))
    if nvrtc_lib:
        import torch

        lib = ctypes.CDLL(nvrtc_lib)
        torch.cuda._utils._get_gpu_rtc_library = lambda: lib  # NVRTC without a GPU
        from floorline.native import attn_cuda, int4_cuda

        for pdl in (0, on):
            name = "pdl" if pdl else "plain"
            for (pro, glu, bias, acc, atomic, xbf16, ybf16, xpt), cfg in INT4:
                flags = int4_cuda._flags(pro, glu, bias, acc, atomic, xbf16, ybf16, pdl, xpt)
                cfg = int4_cuda.check_config(cfg)
                cubin = int4_cuda.compile_source(flags, int4_cuda.compile_key(cfg), "sm_90")
                out[f"int4 cuda {name} {(pro, glu, bias, acc, atomic, xbf16, ybf16, xpt)} {cfg}"] = _digest(
                    S.cuobjdump(cubin))
            for h, kvh, warps, chunk, nchunk, gp in ATTN_CUDA:
                cubin = attn_cuda.compile_source(attn_cuda._defines(h, kvh, warps, chunk, nchunk, gp, pdl), "sm_90")
                out[f"attn cuda {name} {h}/{kvh} w{warps} c{chunk}"] = _digest(S.cuobjdump(cubin))
    return out


def _tree(rev: str, where: Path) -> Path:
    """src/ of git revision `rev`, unpacked under `where`."""
    data = subprocess.run(["git", "archive", rev, "src"], cwd=ROOT, capture_output=True, check=True).stdout
    tar = where / "src.tar"
    tar.write_bytes(data)
    with tarfile.open(tar) as t:
        t.extractall(where, filter="data")
    return where / "src"


def _child(src: Path, nvrtc_lib: str | None, out: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # compiled, not interpreted
    env["PYTHONPATH"] = str(src)
    cmd = [sys.executable, __file__, "--dump", str(out)] + (["--nvrtc", nvrtc_lib] if nvrtc_lib else [])
    subprocess.run(cmd, env=env, check=True, cwd=src.parent)
    return json.loads(out.read_text())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("rev", nargs="?", help="the git revision to compare with")
    p.add_argument("--nvrtc", default=os.environ.get("FLOORLINE_NVRTC_LIB"),
                   help="a libnvrtc.so to compile the CUDA kernels with (default $FLOORLINE_NVRTC_LIB; none: skipped)")
    p.add_argument("--dump", help=argparse.SUPPRESS)  # the child: this tree's digests into this file
    a = p.parse_args(argv)
    if a.dump:
        Path(a.dump).write_text(json.dumps(dump(a.nvrtc)))
        return 0
    if not a.rev:
        p.error("give the git revision to compare with")
    with tempfile.TemporaryDirectory() as d:
        old = _child(_tree(a.rev, Path(d)), a.nvrtc, Path(d) / "old.json")
        new = _child(ROOT / "src", a.nvrtc, Path(d) / "new.json")
    both = sorted(set(old) & set(new))
    differ = [k for k in both if old[k] != new[k]]
    only = sorted(set(old) ^ set(new))
    kinds = sorted({k.split(" ")[0] + (" " + k.split(" ")[1] if k.startswith(("attn", "int4")) else "") for k in both})
    print(f"{len(both) - len(differ)} of {len(both)} kernel variants compile to the same SASS as at {a.rev} "
          f"({', '.join(kinds)})" + ("" if a.nvrtc else "; CUDA kernels skipped: no --nvrtc library"))
    for k in differ:
        print(f"  differs: {k}")
    for k in only:
        print(f"  in one tree only: {k}")
    return 1 if differ or only else 0


if __name__ == "__main__":
    sys.exit(main())
