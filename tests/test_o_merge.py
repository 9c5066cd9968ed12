"""The attention's merge folded into the o GEMV (native/o_merge.py), under Triton's interpreter: against the merge
kernel then the o GEMV's reference, and the whole native step with it against HF fp32."""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton", reason="mode native's kernels need Triton: pip install 'floorline[native]'")
from test_native import _attention_case, _compare_with_hf, _rand, _rel, interpreted  # noqa: E402

from floorline.native import attention as A  # noqa: E402
from floorline.native import o_merge as OM  # noqa: E402


@interpreted
@pytest.mark.parametrize("chunk, pos, n, config", [(16, 201, 40, (16, 2, 4)), (64, 201, 64, (32, 4, 4)),
                                                   (16, 5, 40, (64, 2, 4)), (32, 1119, 48, (16, 8, 2)),
                                                   (16, 201, 200, (128, 1, 4)), (64, 70, 40, (64, 1, 4))])
def test_o_with_the_merge_inside_adds_what_the_merge_then_o_add(chunk, pos, n, config):
    """y += W_o a, a merged inside the kernel from the chunks' partials: the same as the merge kernel's output times
    W_o added to y, for one chunk or many (1119 // 16 + 1 = 70 chunks: the merge's loop over two blocks), rows not a
    multiple of a program's (masked), and the partials' buffers wider than the chunks (the step tuner's stride)."""
    heads, kv, d, length = 4, 2, 32, 1200
    qkv, cos, sin, kc, vc, p, _, _ = _attention_case(heads, kv, d, length, pos)
    scratch = A.AttnScratch(heads, kv, d, length, "cpu", chunk=16)
    scratch.use((chunk, 8))
    a = A.tri_attention(qkv, cos, sin, p, kc.clone(), vc.clone(), heads, d ** -0.5, scratch).clone()
    w = _rand(n, heads * d, dtype=torch.bfloat16)
    y0 = _rand(n)
    want = y0 + w.float() @ a
    y = y0.clone()
    assert A.tri_attention(qkv, cos, sin, p, kc, vc, heads, d ** -0.5, scratch, merge=False) is None
    OM.tri_o_merge(w, scratch, p, y, config)
    assert _rel(y, want) < 1e-5


def test_o_merge_refuses_what_it_cannot_read():
    scratch = A.AttnScratch(4, 2, 32, 100, "cpu")
    with pytest.raises(ValueError, match=r"a contiguous o of \(N, 4 x 32\)"):
        OM.tri_o_merge(torch.zeros(8, 96, dtype=torch.bfloat16), scratch, torch.zeros(1, dtype=torch.int32),
                       torch.zeros(8))
    with pytest.raises(ValueError, match="zero_qkv is the merge's work"):
        A.tri_attention(torch.zeros(256), None, None, None, torch.zeros(2, 100, 32), None, 4, 1.0, scratch,
                        zero_qkv=True, merge=False)
    assert OM.name((32, 4, 4)) == "32x4 w4"


@interpreted
def test_the_step_with_the_merge_inside_o_matches_hf():
    """The whole native step with o_merge on (every layer's merge inside its o GEMV, the residual added into by
    atomics) against HF fp32, on tiny-qwen3 (the q/k norm; 4 query heads of 32 dims, 2 kv heads). One model: the GPU
    tests run it on three more (test_gpu_native.py), and each tiny model costs CI ~15-30 s under the interpreter."""
    name = "tiny-qwen3"
    def tweak(net):
        assert net.o_merge_ok
        net.o_merge = OM.CANDIDATES[0]

    assert _compare_with_hf(name, "triton", steps=3, tweak=tweak) < 1e-5


@interpreted
def test_int4_o_keeps_the_merge_kernel():
    """int4 o (the CUDA GEMV's layout or Triton's rows) is never offered the merge inside, bf16 o is."""
    from floorline import quant
    from floorline.bench import models
    from floorline.core import zoo
    from floorline.native.model import NativeModel

    m = models.build_random(zoo.ZOO["tiny-llama"], torch.device("cpu"), "fp32", seed=0)
    assert NativeModel(m, 32, ops="triton").o_merge_ok and not NativeModel(m, 32, ops="torch").o_merge_ok
    quant.convert(m, quant.get("int4"), torch.float32)
    assert not NativeModel(m, 32, ops="triton").o_merge_ok


@interpreted
def test_floorline_check_has_a_row_for_the_merge_inside_o():
    """`floorline check`'s attention rows (bench/check.py) carry the merge inside o, checked against the reference
    attention's output times W_o (on the CPU here, under the interpreter; on the user's GPU in `floorline check`)."""
    from floorline.bench import check
    from floorline.core import zoo

    rows = check.attention_rows(zoo.ZOO["tiny-qwen2"], torch.device("cpu"), 100, timed=False)
    row = next(r for r in rows if r.kernel.startswith("o with the merge inside"))
    assert row.ok and row.rel_err < 2e-2 and row.config == OM.name(OM.CANDIDATES[0])


def test_the_final_round_pairs_the_attention_and_o_finalists(monkeypatch):
    """retune_finals_in_step: the FINALS[0] fastest attention candidates of their round times the FINALS[1] fastest
    o candidates of theirs, timed together (timing.fastest_interleaved, stubbed: the pair it returns fastest is put in
    place) and recorded as "<attention> / <o>"; with o's round empty (no merge inside o: int4, tensor parallelism),
    the attention's finalists with the o in place; nothing with fewer than two pairs or the persistent kernel."""
    from floorline.device import timing
    from floorline.native.tuner import TUNER

    seen = []

    def fake(pairs, use, capture, state, warm=None):
        seen.append(pairs)
        times = {p: 1.0 + 0.01 * i for i, p in enumerate(pairs)}  # the first pair fastest: not the state it starts in
        use(min(times, key=times.get))
        return times

    monkeypatch.setattr(timing, "fastest_interleaved", fake)
    net = type("Net", (), {})()
    net.persist_on, net.o_merge = False, None
    net.attn = A.AttnScratch(4, 2, 32, 4096, "cpu")
    attn = {(64, 8): 1.03, (32, 8): 1.01, ("cuda", 128, 4): 1.02, (16, 8): 1.2}
    o = {None: 1.01, (128, 1, 4): 1.0, (32, 4, 4): 1.05}
    OM.retune_finals_in_step(net, None, [], attn, o, warm=None)
    assert seen[-1] == [(a, m) for a in [(32, 8), ("cuda", 128, 4), (64, 8)] for m in [(128, 1, 4), None]]
    assert net.attn.choice() == (32, 8) and net.o_merge == (128, 1, 4)
    rec = TUNER.step_tuning["finals"]
    assert len(rec) == 6 and "chunk 32 w8 / 128x1 w4" in rec and "cuda chunk 128 w4 / off" in rec
    net.attn.use((64, 8))
    net.o_merge = None
    OM.retune_finals_in_step(net, None, [], attn, {}, warm=None)
    assert seen[-1] == [((32, 8), None), (("cuda", 128, 4), None), ((64, 8), None)]
    assert net.attn.choice() == (32, 8) and net.o_merge is None
    n = len(seen)
    OM.retune_finals_in_step(net, None, [], {}, {}, warm=None)  # one pair: nothing to choose
    net.persist_on = True
    OM.retune_finals_in_step(net, None, [], attn, o, warm=None)
    assert len(seen) == n
