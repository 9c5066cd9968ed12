"""The fused MLP (native/mlp.py; the default, NativeOptions mlp=gemv turns it off): its kernel under Triton's
interpreter against the torch reference, and the native model with it against HF in fp32 (the three residual buffers
in turn, step after step)."""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton", reason="mode native's kernels need Triton: pip install 'floorline[native]'")
from conftest import compiled_for_sm90  # noqa: E402
from test_native import _compare_with_hf, _rand, _rel, interpreted  # noqa: E402

from floorline.native import INTERPRET  # noqa: E402
from floorline.native import ends as E  # noqa: E402
from floorline.native import mlp as M  # noqa: E402
from floorline.native import refs as R  # noqa: E402
from floorline.native.options import NativeOptions  # noqa: E402
from floorline.native.tuner import TUNER  # noqa: E402


@interpreted
@pytest.mark.parametrize("hidden, inter, config", [
    (48, 12, (2, 4, 1)),  # hidden not a power of two (masked columns); one program takes every tile
    (64, 12, (4, 4, 5)),  # 3 tiles over 5 programs: two with none (they still carry / zero their shares)
    (40, 14, (1, 4, 3)),  # 14 one-row tiles over 3 programs: ranges of 4, 5, 5
    (32, 16, (2, 8, 2)),
    (48, 12, (2, 4, 1, M.TWO)),  # two tiles before the wait, two a trip: 6 tiles, an even count
    (40, 14, (1, 4, 3, M.TWO)),  # ranges of 4, 5, 5 one-row tiles: an odd count (a trip's second tile all zeros)
    (64, 12, (4, 4, 5, M.TWO)),  # programs with no tiles, and one with a single tile
])
def test_fused_mlp_matches_its_reference_and_zeroes_the_next_buffer(hidden, inter, config):
    gate_up = _rand(2 * inter, hidden, dtype=torch.bfloat16, scale=0.1)
    down_t = _rand(inter, hidden, dtype=torch.bfloat16, scale=0.1)
    norm_w = _rand(hidden) + 1
    x = _rand(hidden)
    x0 = x.clone()
    out, zero = torch.zeros(hidden), _rand(hidden)
    M.tri_mlp(gate_up, down_t, x, out, zero, norm_w, 1e-6, config=config)
    want = M.ref_mlp(gate_up, down_t, x0, norm_w, 1e-6)
    assert _rel(out, want) < 1e-5
    assert torch.equal(x, x0) and not zero.any()
    # the reference is the two-GEMV path's math: gate_up with RMSNorm and glu, then down adding into the residual
    act = R.ref_gemv(gate_up, x0, pro=R.PRO_RMSNORM, norm_w=norm_w, eps=1e-6, glu=True)
    two = R.ref_gemv(down_t.t().contiguous(), act, residual=x0)
    assert _rel(two, want) < 1e-5


def test_the_fused_mlp_touches_activations_only_after_its_wait():
    """The sm_90 SASS (compiled here, no GPU: Triton's ptxas and cuobjdump, scripts/gemv_sass.py) of the step's
    candidate: before griddepcontrol.wait (ACQBULK) only the weights' evict-first loads; x, the zeroing store and the
    atomic add after it (the interpreter runs without programmatic dependent launch: no test on the CPU sees a load
    of x moved above the wait otherwise)."""
    import json

    out = compiled_for_sm90(
        "import re; from floorline.native import mlp\n"
        "ops = lambda t: sorted(set(re.findall(r'\\b(?:LDG|STG|REDG?|ATOMG?)[.\\w]*', t)))\n"
        "for two in (0, 1):\n"
        "    code = gemv_sass.mlp_sass(mlp._mlp, *mlp.CANDIDATES[1][:2], 3584, 1, two=two)\n"
        "    before, after = code.split('ACQBULK', 1)\n"
        "    print(json.dumps([ops(before), ops(after), before.count('LDG.E.EF')]))")
    (before, after, n1), (before2, after2, n2) = map(json.loads, out.splitlines()[-2:])
    for b, a in ((before, after), (before2, after2)):
        assert b == ["LDG.E.EF.128"], b
        assert {"LDG.E.128", "STG.E"} <= set(a) and any(op.startswith("REDG.E.ADD.F32x4") for op in a), a
    assert n2 == 2 * n1, (n1, n2)  # TWO: the second tile's loads before the wait too


def test_fused_mlp_refuses_bad_operands():
    gate_up, down_t = torch.zeros(8, 16, dtype=torch.bfloat16), torch.zeros(4, 16, dtype=torch.bfloat16)
    x, one = torch.zeros(16), torch.ones(16)
    with pytest.raises(ValueError, match="three distinct fp32 vectors of 16"):
        M.tri_mlp(gate_up, down_t, x, x, torch.zeros(16), one, 1e-6)
    with pytest.raises(ValueError, match="three distinct fp32 vectors of 16"):
        M.tri_mlp(gate_up, down_t, x, torch.zeros(15), torch.zeros(16), one, 1e-6)
    with pytest.raises(ValueError, match="three distinct fp32 vectors of 16"):
        M.tri_mlp(gate_up, down_t, x, torch.zeros(16, dtype=torch.bfloat16), torch.zeros(16), one, 1e-6)
    with pytest.raises(ValueError, match="contiguous gate_up"):
        M.tri_mlp(gate_up, torch.zeros(16, 4, dtype=torch.bfloat16).t(), x, torch.zeros(16), torch.zeros(16), one,
                  1e-6)
    with pytest.raises(ValueError, match="followed by n more floats"):  # the embedding's zero_next needs row 1
        E.tri_embed(torch.zeros(8, 16), torch.zeros(1, dtype=torch.long), torch.zeros(16), zero_next=True)
    assert M.fitting(18944)[0] == M.CANDIDATES[0] and M.fitting(7) == [(1, 16, 1)]
    # small hidden sizes add the candidates that keep more bytes in flight, and the two-tiles-before-the-wait form;
    # 7-8B shapes keep the five
    assert M.fitting(18944, 3584) == M.CANDIDATES and M.fitting(12288, 4096) == M.CANDIDATES
    assert M.fitting(8192, 2048) == M.CANDIDATES + M.SMALL[2048] + M.SMALL_TWO
    assert M.fitting(4864, 896) == M.CANDIDATES + M.SMALL[2048] + M.SMALL[1024] + M.SMALL_TWO
    assert M.name((4, 16, 1)) == "bj4 w16 x1" and M.name((2, 16, 1, M.TWO)) == "bj2 w16 x1 two"


if triton is not None:
    import triton.language as tl

    @triton.jit
    def _lines(OUT, pos, L, N, KVH: tl.constexpr, D: tl.constexpr, B: tl.constexpr):
        i = tl.arange(0, B)
        kv, off = M._kv_line(i, (pos * D + 63) // 64, L, KVH, D)
        tl.store(OUT + i, kv, mask=i < N)
        tl.store(OUT + B + i, off, mask=i < N)


@interpreted
@pytest.mark.parametrize("kvh, d, length, pos", [(2, 64, 40, 33), (3, 128, 16, 16), (1, 64, 8, 1), (2, 32, 12, 5)])
def test_the_kv_prefetch_asks_for_every_line_of_positions_before_the_current_one(kvh, d, length, pos):
    """The prefetch's lines (mlp._kv_line, under the interpreter; the prefetch instruction itself is inline PTX that
    only a GPU runs): K's and V's positions 0..pos-1 of every head, each 128-byte line once, none past a head's
    positions but the last line's tail (head_dim 32: two positions a line), and lines past the last point at the
    cache's start."""
    lh = -(-pos * d // 64)
    n = 2 * kvh * lh + 3  # three lanes past the last line
    out = torch.zeros(2 * 256, dtype=torch.int32)
    _lines[(1,)](out, pos, length, n, KVH=kvh, D=d, B=256)
    kv, off = out[:n].tolist(), out[256:256 + n].tolist()
    got = sorted(zip(kv[:-3], off[:-3]))
    want = sorted((c, h * length * d + e) for c in (0, 1) for h in range(kvh) for e in range(0, pos * d, 64))
    assert got == want
    assert kv[-3:] == [0] * 3 and off[-3:] == [0] * 3


def test_the_kv_prefetch_compiles_only_where_asked():
    """sm_90 SASS (compiled here, no GPU): the fused MLP without the prefetch's pointers is the same machine code as
    before it existed (None); with them, the prefetch (CCTL.E.PF2, or .PML2 for evict_last) follows the residual's
    atomic add, so a program asks for the next layer's KV only as it leaves; evict_last only in that form."""
    import json

    out = compiled_for_sm90(
        "from floorline.native import mlp as M\n"
        "ptr = dict(WGU='*bf16', WDT='*bf16', X='*fp32', NW='*fp32', XO='*fp32', XZ='*fp32')\n"
        "const, kw = dict(BJ=2, HP=4096, PDL=1, TWO=0), dict(ints=('H', 'I', 'PL'), divisible=())\n"
        "pf = {**ptr, 'PK': '*bf16', 'PV': '*bf16', 'PPOS': '*i32'}\n"
        "plain = gemv_sass.sass(M._mlp, const, 16, pointers=ptr, **kw)\n"
        "none = gemv_sass.sass(M._mlp, {**const, 'PK': None, 'PV': None, 'PPOS': None}, 16, pointers=ptr, **kw)\n"
        "res = [plain == none, 'CCTL' in plain]\n"
        "for last in (0, 1):\n"
        "    c = gemv_sass.compiled(M._mlp, {**const, 'PKVH': 8, 'PD': 128, 'PLAST': last, 'PB': 512}, 16,\n"
        "                           pointers=pf, **kw)\n"
        "    code = gemv_sass.cuobjdump(c.asm['cubin'])\n"
        "    res += [code.count('CCTL.E.P'), code.index('REDG') < code.index('CCTL'), 'evict_last' in c.asm['ptx']]\n"
        "print(json.dumps(res))")
    same, plain_pf, n0, after0, last0, n1, after1, last1 = json.loads(out.splitlines()[-1])
    assert same and not plain_pf
    assert n0 >= 1 and n1 >= 1 and after0 and after1
    assert not last0 and last1


def test_the_kv_prefetch_is_offered_only_on_a_gpu(monkeypatch):
    """On the CPU (and under the interpreter) the step tuner offers no prefetch and tri_mlp refuses one."""
    from floorline.bench import models
    from floorline.core import zoo
    from floorline.device import timing
    from floorline.native.model import NativeModel

    monkeypatch.setattr(timing, "fastest_in_step", lambda *a, **k: pytest.fail("no prefetch to time on the CPU"))
    net = NativeModel(models.build_random(zoo.ZOO["tiny-qwen2"], torch.device("cpu"), "bf16", seed=0), 64, ops="torch")
    assert net.fused_mlp and net.kv_prefetch == 0 and not M.kv_prefetch_fits(net)
    M.retune_prefetch_in_step(net, None, [])
    assert "kv_prefetch" not in TUNER.step_tuning
    gate_up, down_t = torch.zeros(8, 16, dtype=torch.bfloat16), torch.zeros(4, 16, dtype=torch.bfloat16)
    cache = torch.zeros(2, 8, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="prefetch takes"):
        M.tri_mlp(gate_up, down_t, torch.zeros(16), torch.zeros(16), torch.zeros(16), torch.ones(16), 1e-6,
                  prefetch=(cache, cache, torch.zeros(1, dtype=torch.int32), 1))


@interpreted
def test_the_step_retune_times_only_the_shapes_this_step_launches(monkeypatch):
    """A shape left from an earlier model in the process is not re-timed (nor reported) for this one."""
    from floorline.device import timing

    tuned = []
    monkeypatch.setattr(timing, "fastest_in_step", lambda cands, use, capture, state, reps: (
        tuned.append(list(cands)), use(cands[0]), {c: 1.0 for c in cands})[2])
    monkeypatch.setattr(TUNER, "used", {("mlp", (4096, 14336))})  # an earlier model's
    gate_up, down_t = _rand(24, 32, dtype=torch.bfloat16), _rand(12, 32, dtype=torch.bfloat16)
    bufs = torch.zeros(3, 32)
    M.retune_in_step(lambda: M.tri_mlp(gate_up, down_t, bufs[0], bufs[1], bufs[2], torch.ones(32), 1e-6), [])
    assert tuned == [M.fitting(12, 32)] and list(TUNER.step_tuning["mlp"]) == ["12x32 mlp"]


def test_the_native_step_fuses_dense_mlps_by_default():
    """The default: three residual buffers and down^T; test_native's comparisons with HF (both tiny models, both ops)
    run this path. int4 keeps the two GEMVs."""
    from floorline import quant
    from floorline.bench import models
    from floorline.core import zoo
    from floorline.native.model import NativeModel

    m = models.build_random(zoo.ZOO["tiny-qwen2"], torch.device("cpu"), "fp32", seed=0)
    net = NativeModel(m, 64, ops="torch")
    assert net.fused_mlp and net.xs.shape[0] == 3 and len(net.layers) % 3 != 0  # the last output not in buffer 0
    assert torch.equal(net.layers[0]["down_t"], net.layers[0]["down"]["w"].t())
    quant.convert(m, quant.get("int4"), torch.float32)
    assert not NativeModel(m, 64, ops="torch").fused_mlp


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2"])
@pytest.mark.parametrize("ops", ["torch", "triton"])
def test_native_without_the_fused_mlp_matches_hf_in_fp32(name, ops):
    """mlp=gemv: gate_up then down, the residual in place (dense weights; what int4 always runs)."""
    if ops == "triton" and not INTERPRET:
        pytest.skip("Triton on CPU tensors needs TRITON_INTERPRET=1; on a GPU: test_gpu_native.py")
    from floorline.bench import models
    from floorline.core import zoo
    from floorline.native.model import NativeModel

    gemv = NativeOptions(mlp="gemv")
    net = NativeModel(models.build_random(zoo.ZOO[name], torch.device("cpu"), "fp32", seed=0), 64, ops=ops,
                      options=gemv)
    assert not net.fused_mlp and net.xs.shape[0] == 1
    assert _compare_with_hf(name, ops, options=gemv) < 1e-5


@interpreted
@pytest.mark.parametrize("hidden, inter, config", [
    (48, 14, (4, 4, 3)),  # 14 rows over 3 programs: 4, 5, 5 -- a full tile, then a short one (1 row)
    (40, 12, (4, 4, 5)),  # 2-3 rows a program: every tile short
    (32, 16, (2, 8, 2)),  # even
])
def test_the_row_split_of_the_mlp_matches_its_reference(hidden, inter, config):
    """Each program an even share of the intermediate rows, its last tile masked where short (zero rows give h = 0)."""
    gate_up = _rand(2 * inter, hidden, dtype=torch.bfloat16, scale=0.1)
    down_t = _rand(inter, hidden, dtype=torch.bfloat16, scale=0.1)
    norm_w, x = _rand(hidden) + 1, _rand(hidden)
    out, zero = torch.zeros(hidden), _rand(hidden)
    M.tri_mlp(gate_up, down_t, x, out, zero, norm_w, 1e-6, config=config)
    want = M.ref_mlp(gate_up, down_t, x, norm_w, 1e-6)
    assert _rel(out, want) < 1e-5 and not zero.any()
