"""Mode native on the CPU: every Triton kernel under Triton's interpreter (TRITON_INTERPRET=1, set by conftest when
there is no GPU) against its torch reference on small shapes; the native model against HF transformers in fp32 on
the tiny models, with the reference ops and with the kernels; floorline's int4 format; the CPU refusal."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import compiled_for_sm90, load_script, native_vs_hf, run_cli

from floorline import quant
from floorline.bench import models
from floorline.core import zoo
from floorline.core.errors import UserError
from floorline.native import int4_format

triton = pytest.importorskip("triton", reason="mode native's kernels need Triton: pip install 'floorline[native]'")
from floorline.native import INTERPRET  # noqa: E402
from floorline.native import attention as A  # noqa: E402
from floorline.native import ends as E  # noqa: E402
from floorline.native import gemv as G  # noqa: E402
from floorline.native import refs as R  # noqa: E402
from floorline.native.model import NativeModel  # noqa: E402
from floorline.native.tuner import TUNER  # noqa: E402

GEN = torch.Generator().manual_seed(0)
interpreted = pytest.mark.skipif(not INTERPRET, reason="runs the kernels on CPU tensors under TRITON_INTERPRET=1 "
                                                         "(set when there is no GPU); on a GPU: test_gpu_native.py")


def _rand(*shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, generator=GEN) * scale).to(dtype)


def _rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


# ---------------------------------------------------------------------------------------------------- kernels
@interpreted
@pytest.mark.parametrize("pro, glu", [(R.PRO_NONE, False), (R.PRO_RMSNORM, False), (R.PRO_RMSNORM, True)])
@pytest.mark.parametrize("bias, res, k, stages, ahead", [(False, False, 256, 0, 1), (True, True, 768, 0, 1),
                                                        (True, True, 768, 3, 1), (False, False, 256, 0, 2),
                                                        (True, True, 768, 0, 2), (True, False, 1024, 0, 2),
                                                        (False, False, 256, 4, 1), (True, False, 1024, 6, 1)])
def test_gemv_bf16_matches_its_reference(pro, glu, bias, res, k, stages, ahead):
    n = 40  # k = 768: three tiles along K (the double-buffered loads), not a multiple of 16 rows; ahead 2: the tiles
    # one and two ahead in flight (k 256: one tile, its second pre-wait load masked off; 1024: four); stages: the
    # first tile from registers, the rest (none at k 256) through the cp.async pipeline
    w = _rand(n, k, dtype=torch.bfloat16, scale=0.05)
    x = _rand(k)
    kw = dict(pro=pro, norm_w=_rand(k) + 1 if pro == R.PRO_RMSNORM else None, glu=glu,
              bias=_rand(n) if bias else None, residual=_rand(n // 2 if glu else n) if res and not glu else None)
    want = R.ref_gemv(w, x, **kw)
    got = G.tri_gemv(w, x, **kw, config={"STAGES": stages, "AHEAD": ahead})
    assert got.dtype == torch.float32 and got.shape == (n // 2 if glu else n,)
    assert _rel(got, want) < 1e-5


@pytest.mark.parametrize("table", ["_BF16", "_INT4"])
def test_autotuning_offers_split_k_only_to_in_place_plain_gemvs(table):
    """Split-K adds partial sums into the output: only with ACC, no norm (it needs all of x), no glu, 2+ tiles each."""
    def splits(k, **flags):
        kept = G._prune(getattr(G, table), {"N": 3584, "K": k}, INT4=table == "_INT4", **flags)
        # retune_in_step's trials are what the autotuner considered
        assert TUNER.gemv_candidates[(3584, k, flags["PRO"], flags["GLU"], flags["ACC"], table == "_INT4")] == kept
        return {c.kwargs["SPLIT"] for c in kept}

    assert splits(18944, PRO=R.PRO_NONE, GLU=False, ACC=True) > {1}
    assert splits(18944, PRO=R.PRO_RMSNORM, GLU=False, ACC=True) == {1}
    assert splits(18944, PRO=R.PRO_NONE, GLU=False, ACC=False) == {1}
    assert splits(512, PRO=R.PRO_NONE, GLU=False, ACC=True) == {1}  # at most two tiles: too few to split


def test_a_k_that_no_tile_divides_gets_the_narrow_tiles():
    """bf16, K 896 (qwen2.5-0.5b): no _BF16 tile divides it, so the tuner considers _narrow's tiles of 128 columns
    (the old lone fallback first; split-K only for a plain in-place GEMV); int4 keeps one fitting tile; a K that a
    _BF16 tile divides (1024) gets exactly those tiles, no narrow one."""
    kept = G._prune(G._BF16, {"N": 1152, "K": 896}, INT4=False, PRO=R.PRO_RMSNORM, GLU=False, ACC=False)
    narrow = [c for c in kept if c.kwargs["BK"] < 896]
    assert kept == narrow + G._whole(896)  # then the whole-row tiles (BK 1024, masked)
    assert len(narrow) > 5 and {c.kwargs["BK"] for c in narrow} == {128} and {c.kwargs["SPLIT"] for c in kept} == {1}
    assert (kept[0].kwargs["BN"], kept[0].num_warps, kept[0].kwargs["AHEAD"]) == (8, 4, 1)
    assert {c.kwargs["AHEAD"] for c in kept} == {1, 2}
    split = G._prune(G._BF16, {"N": 896, "K": 896}, INT4=False, PRO=R.PRO_NONE, GLU=False, ACC=True)
    assert {c.kwargs["SPLIT"] for c in split} == {1, 2}
    assert len(G._prune(G._INT4, {"N": 896, "K": 896}, INT4=True, PRO=R.PRO_NONE, GLU=False, ACC=False)) == 1
    wide = G._prune(G._BF16, {"N": 896, "K": 1024}, INT4=False, PRO=R.PRO_NONE, GLU=False, ACC=False)
    old = [c for c in G._BF16 if 1024 % c.kwargs["BK"] == 0 and c.kwargs["SPLIT"] == 1]
    assert wide[: len(old)] == old and all(c.kwargs["BK"] == 1024 and not c.kwargs["KM"] for c in wide[len(old):])


def test_the_whole_row_tiles_span_k_in_one_tile():
    """_whole: BK the power of two at or above K (masked, KM, only where above), 8 to 64 weights a thread; none past
    WHOLE_K (there a tile's rows would not fit a thread's registers) and none for int4."""
    for k in (896, 1536, 2048, 3072, 4096):
        tiles = G._whole(k)
        bk = 1 << (k - 1).bit_length()
        assert tiles and all(c.kwargs["BK"] == bk and c.kwargs["KM"] == int(bk != k) and c.kwargs["SPLIT"] == 1
                             and 8 <= c.kwargs["BN"] * bk // (32 * c.num_warps) <= 64 for c in tiles), k
    glu = G._prune(G._BF16, {"N": 9728, "K": 896}, INT4=False, PRO=R.PRO_RMSNORM, GLU=True, ACC=False)
    assert [c for c in glu if c.kwargs["BK"] > 896] == [c for c in G._whole(896) if c.kwargs["BN"] >= 2]  # pairs
    # K 1024: BK = K, no mask; _BF16's own 2x1024 w4 and 4x1024 w8 are not offered twice
    tiles = G._prune(G._BF16, {"N": 1024, "K": 1024}, INT4=False, PRO=R.PRO_NONE, GLU=False, ACC=False)
    names = [G.tile_name(c) for c in tiles]
    assert len(names) == len(set(names)) and {"2x1024 w4", "4x1024 w8", "1x1024 w2"} <= set(names)
    assert not any(c.kwargs["BK"] > 5120 for c in G._prune(G._BF16, {"N": 896, "K": 5120}, INT4=False,
                                                             PRO=R.PRO_NONE, GLU=False, ACC=False))
    assert not any(c.kwargs.get("KM") for c in G._prune(G._INT4, {"N": 896, "K": 896}, INT4=True, PRO=R.PRO_NONE,
                                                          GLU=False, ACC=False))


def _nan_after(t: torch.Tensor, extra: int) -> torch.Tensor:
    """t, as a view at the start of a buffer `extra` elements longer, filled with NaN past t: a load past t's end reads
    NaN, which no mask-less product survives."""
    buf = torch.full((t.numel() + extra,), float("nan"), dtype=t.dtype)
    buf[: t.numel()] = t.reshape(-1)
    return buf[: t.numel()].view(t.shape)


@interpreted
@pytest.mark.parametrize("pro, glu", [(R.PRO_NONE, False), (R.PRO_RMSNORM, False), (R.PRO_RMSNORM, True)])
@pytest.mark.parametrize("k, bk, bias, res", [(96, 128, False, False), (208, 256, True, True), (256, 256, True, False)])
def test_a_whole_row_tile_matches_its_reference(pro, glu, k, bk, bias, res):
    """One tile of BK >= K columns (masked past K where BK > K: KM), rows not a multiple of the tile's (37 outputs; glu:
    37 gate rows and 37 up rows): the norm's 1/rms over K values only, bias, the residual in place, glu. The weights,
    x and the norm's weights are followed by NaN, so a missing column or row mask shows."""
    n = 74 if glu else 37
    w = _nan_after(_rand(n, k, dtype=torch.bfloat16, scale=0.05), bk)
    x = _nan_after(_rand(k), bk)
    kw = dict(pro=pro, norm_w=_nan_after(_rand(k) + 1, bk) if pro == R.PRO_RMSNORM else None, glu=glu,
              bias=_rand(n) if bias else None, residual=_rand(n) if res and not glu else None)
    want = R.ref_gemv(w, x, **kw)
    got = G.tri_gemv(w, x, **kw, config={"BN": 4, "BK": bk, "KM": int(bk != k)})
    assert torch.isfinite(got).all() and _rel(got, want) < 1e-5
    with pytest.raises(ValueError, match="masked tile"):
        G.tri_gemv(w, x, **kw, config={"BN": 4, "BK": k, "KM": 1})
    if bk != k:
        with pytest.raises(ValueError, match="does not divide"):
            G.tri_gemv(w, x, **kw, config={"BN": 4, "BK": bk})


def test_a_whole_row_tile_requests_every_weight_before_the_wait():
    """sm_90 SASS (no GPU): a masked whole-row tile (K 896 in a BK 1024 tile) issues all its weight loads before
    griddepcontrol.wait (ACQBULK) and none after it."""
    import json

    out = compiled_for_sm90(
        "from floorline.native import gemv\n"
        "code = gemv_sass.sass(gemv._gemv, {**gemv_sass.constants(8, 1024, 1), 'KM': 1}, 4)\n"
        "before, after = code.split('ACQBULK', 1)\n"
        "print(json.dumps([before.count('LDG.E.EF.128'), after.count('LDG.E.EF')]))")
    before, after = json.loads(out.splitlines()[-1])
    # 8 rows x 1024 bf16 over 128 threads: 8 loads of 16 bytes a thread, all before the wait (K 896 divisible by 16)
    assert before == 8 and after == 0, (before, after)


@interpreted
def test_the_narrow_tiles_compute_the_reference_product():
    """The first and last of _narrow's tiles for K 896 (rows, columns, tiles ahead; warps do not apply in the
    interpreter), with the RMSNorm prologue, against ref_gemv."""
    kept = G._prune(G._BF16, {"N": 1152, "K": 896}, INT4=False, PRO=R.PRO_RMSNORM, GLU=False, ACC=False)
    w, x, nw = _rand(40, 896, dtype=torch.bfloat16, scale=0.05), _rand(896), _rand(896) + 1
    want = R.ref_gemv(w, x, pro=R.PRO_RMSNORM, norm_w=nw)
    for c in kept[:1] + kept[-1:]:
        got = G.tri_gemv(w, x, pro=R.PRO_RMSNORM, norm_w=nw, config=dict(c.kwargs))
        assert _rel(got, want) < 1e-5, c


def test_gemv_reference_is_the_plain_product():
    w, x = _rand(8, 64, scale=0.1), _rand(64)
    assert torch.allclose(R.ref_gemv(w, x), w @ x, atol=1e-6)
    g = _rand(64) + 1
    normed = x / torch.sqrt((x * x).mean() + 1e-6) * g
    assert torch.allclose(R.ref_gemv(w, x, pro=R.PRO_RMSNORM, norm_w=g), w @ normed, atol=1e-5)


@interpreted
@pytest.mark.parametrize("fmt", ["bf16", "int4"])
@pytest.mark.parametrize("split, stages, ahead", [(1, 0, 1), (2, 0, 1), (3, 0, 1), (3, 3, 1), (3, 0, 2)])
def test_gemv_adds_into_its_output_in_place_and_split_k_sums_every_tile_once(fmt, split, stages, ahead):
    """residual=out: out += W x (the residual stream); split-K over 8 tiles in 2 or 3 uneven ranges, atomically
    (ahead 2, bf16: the loads two tiles ahead stop at each range's end)."""
    n, k = 40, 1024
    lin = torch.nn.Linear(k, n, bias=True)
    torch.nn.init.normal_(lin.weight, 0, 0.02)
    if fmt == "int4":
        m = quant.get("int4").pack(lin).module
        w, kw = m.words, dict(scales=m.scales, zeros=m.zeros, bias=m.bias)
    else:
        w, kw = lin.weight.data.to(torch.bfloat16), dict(bias=lin.bias.data)
    x, res = _rand(k), _rand(n)
    want = R.ref_gemv(w, x, residual=res, **kw)
    out = res.clone()
    got = G.tri_gemv(w, x, residual=out, out=out, config={"BK": 128, "SPLIT": split, "STAGES": stages,
                                                          "AHEAD": ahead}, **kw)
    assert got is out
    assert _rel(out, want) < (3e-4 if fmt == "int4" else 1e-5)
    # another residual tensor is copied into the output first, then added to the same way
    assert _rel(G.tri_gemv(w, x, residual=res, config={"BK": 128, "SPLIT": split}, **kw), want) < (
        3e-4 if fmt == "int4" else 1e-5)
    with pytest.raises(ValueError, match="split-K"):  # partial sums need an output that already holds the start
        G.tri_gemv(w, x, config={"SPLIT": 2}, **kw)


@interpreted
@pytest.mark.parametrize("pro, glu, k", [(R.PRO_NONE, False, 384), (R.PRO_RMSNORM, False, 1024),
                                         (R.PRO_RMSNORM, True, 768), (R.PRO_NONE, False, 512)])
@pytest.mark.parametrize("stages", [0, 3])
def test_gemv_int4_matches_its_reference(pro, glu, k, stages):
    """k = 384, 768: an odd number of tiles (the second register buffer's tail); 1024, 512: an even number."""
    n = 24
    lin = torch.nn.Linear(k, n, bias=True)
    torch.nn.init.normal_(lin.weight, 0, 0.02)
    p = quant.get("int4").pack(lin)
    m = p.module
    x = _rand(k)
    kw = dict(pro=pro, norm_w=_rand(k) + 1 if pro == R.PRO_RMSNORM else None, bias=m.bias, scales=m.scales,
              zeros=m.zeros, residual=None if glu else _rand(n), glu=glu)
    want = R.ref_gemv(m.words, x, **kw)
    # the kernel sums (2048 + c) x in fp32 and takes 2048 sum x off after: ~2^-13 of the sums (bf16 rounds at 2^-9)
    assert _rel(G.tri_gemv(m.words, x, **kw, config={"STAGES": stages}), want) < 3e-4
    # and the reference applies exactly the dequantised weights the check uses
    assert torch.equal(R.dequant_int4(m.words, m.scales, m.zeros), p.reference)


def test_gemv_glu_is_silu_of_the_gate_half_times_the_up_half():
    w, x = _rand(8, 64, scale=0.1), _rand(64)
    y = w @ x
    assert torch.allclose(R.ref_gemv(w, x, glu=True), torch.nn.functional.silu(y[:4]) * y[4:], atol=1e-6)


@interpreted
@pytest.mark.parametrize("heads, kv", [(4, 2), (4, 4), (7, 1)])
@pytest.mark.parametrize("pos", [0, 31, 63, 64, 150])
def test_rope_kv_write_and_flash_decoding_match_their_references(heads, kv, pos):
    """One launch rotates q and k at pos, writes k and v into the caches there and attends over 0..pos (in 64-position
    chunks, then a merge): against ref_rope_kv then ref_attention on copies of the same caches."""
    d, length = 32, 160
    qkv = _rand((heads + 2 * kv) * d)
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    cos, sin = R.rope_tables(inv, length, 1.0, "cpu")
    kc, vc = _rand(kv, length, d, dtype=torch.bfloat16), _rand(kv, length, d, dtype=torch.bfloat16)
    kc[:, pos:], vc[:, pos:] = 0, 0  # the cache holds positions 0..pos-1
    kr, vr = kc.clone(), vc.clone()
    p = torch.tensor([pos], dtype=torch.int32)
    want = R.ref_attention(R.ref_rope_kv(qkv, cos, sin, p, kr, vr, heads, kv, d), kr, vr, p, d ** -0.5)
    scratch = A.AttnScratch(heads, kv, d, length, "cpu")
    got = A.tri_attention(qkv, cos, sin, p, kc, vc, heads, d ** -0.5, scratch)
    assert _rel(got, want) < 2e-2  # on a GPU q and the probabilities go through bf16 tensor-core products
    for mine, ref in ((kc, kr), (vc, vr)):  # the written row within one bf16 step (rounding may differ), the rest
        assert torch.allclose(mine[:, pos].float(), ref[:, pos].float(), rtol=2 ** -7, atol=0)  # untouched
        assert mine[:, pos].abs().sum() > 0 and torch.equal(mine[:, :pos], ref[:, :pos])
        assert mine[:, pos + 1:].abs().sum() == 0
    kc[:, pos + 1:], vc[:, pos + 1:] = 1e3, 1e3  # positions after pos are never read
    assert torch.equal(A.tri_attention(qkv, cos, sin, p, kc, vc, heads, d ** -0.5, scratch), got)


@interpreted
@pytest.mark.parametrize("pos", [0, 70, 150])
def test_qk_norm_in_the_attention_kernel_matches_its_reference(pos):
    """Qwen3: each q and k head RMS-normalised with its own weights before the rotation, in the chunk kernel (every
    chunk program normalises q; the one holding pos writes the normalised, rotated k into the cache)."""
    heads, kv, d, length = 4, 2, 32, 160
    qkv = _rand((heads + 2 * kv) * d, scale=3.0)
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    cos, sin = R.rope_tables(inv, length, 1.0, "cpu")
    norm = (_rand(d, scale=0.1) + 1, _rand(d, scale=0.1) + 1, 1e-6)  # near 1, as trained norms are
    kc, vc = _rand(kv, length, d, dtype=torch.bfloat16), _rand(kv, length, d, dtype=torch.bfloat16)
    kc[:, pos:], vc[:, pos:] = 0, 0
    kr, vr = kc.clone(), vc.clone()
    p = torch.tensor([pos], dtype=torch.int32)
    want = R.ref_attention(R.ref_rope_kv(qkv, cos, sin, p, kr, vr, heads, kv, d, norm), kr, vr, p, d ** -0.5)
    kp = kc.clone()
    R.ref_rope_kv(qkv, cos, sin, p, kp, vc.clone(), heads, kv, d)  # without the norm: another k (scale 3 vs ~1)
    scratch = A.AttnScratch(heads, kv, d, length, "cpu")
    got = A.tri_attention(qkv, cos, sin, p, kc, vc, heads, d ** -0.5, scratch, qk_norm=norm)
    assert _rel(got, want) < 2e-2
    assert torch.allclose(kc[:, pos].float(), kr[:, pos].float(), rtol=2 ** -7, atol=1e-6)
    assert _rel(kp[:, pos], kr[:, pos]) > 0.1


def _attention_case(heads, kv, d, length, pos):
    """Random q/k/v, RoPE tables and bf16 caches (empty from `pos` on), the position, the reference's attention
    output and the cache of k the reference wrote."""
    qkv = _rand((heads + 2 * kv) * d)
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    cos, sin = R.rope_tables(inv, length, 1.0, "cpu")
    kc, vc = _rand(kv, length, d, dtype=torch.bfloat16), _rand(kv, length, d, dtype=torch.bfloat16)
    kc[:, pos:], vc[:, pos:] = 0, 0
    kr, vr = kc.clone(), vc.clone()
    p = torch.tensor([pos], dtype=torch.int32)
    want = R.ref_attention(R.ref_rope_kv(qkv, cos, sin, p, kr, vr, heads, kv, d), kr, vr, p, d ** -0.5)
    return qkv, cos, sin, kc, vc, p, want, kr


@interpreted
@pytest.mark.parametrize("merge", [(1, 4), (2, 1)])
@pytest.mark.parametrize("chunk, tile, length, pos", [(128, 32, 300, 200), (256, 64, 600, 517), (16, 16, 1120, 1105),
                                                      (32, 16, 2200, 2150)])
def test_long_context_attention_tiles_and_merge_blocks_match_the_reference(chunk, tile, length, pos, merge):
    """The code the long contexts run: several tiles inside one program (chunk > tile: the online softmax's loop) and
    more than 64 chunks (the merge's loop over several blocks of chunks), at positions that end mid-tile; the merge
    as one program a head and as two a head (each half the dims)."""
    heads, kv, d = 4, 2, 32
    qkv, cos, sin, kc, vc, p, want, kr = _attention_case(heads, kv, d, length, pos)
    scratch = A.AttnScratch(heads, kv, d, length, "cpu", chunk=chunk, tile=tile, merge=merge)
    assert scratch.tile == tile and (pos + 1) % tile != 0  # the last live tile is cut mid-way
    if chunk == 16:
        assert scratch.nchunk > 64  # the merge reads its chunks in more than one block
    got = A.tri_attention(qkv, cos, sin, p, kc, vc, heads, d ** -0.5, scratch)
    assert _rel(got, want) < 2e-2
    assert torch.equal(kc[:, :pos], kr[:, :pos]) and kc[:, pos].abs().sum() > 0


@interpreted
@pytest.mark.parametrize("first, then", [(16, (64, 8)), (16, (32, 4)), (64, (64, 8))])
def test_a_step_tuner_chunk_runs_on_buffers_sized_for_the_smallest(first, then):
    """The step tuner switches the chunk (AttnScratch.use) on partials' buffers sized for its smallest candidate: the
    kernels index them by the buffers' own stride, not the chunk's count, and agree with the reference."""
    heads, kv, d, length, pos = 4, 2, 32, 300, 201
    qkv, cos, sin, kc, vc, p, want, _ = _attention_case(heads, kv, d, length, pos)
    scratch = A.AttnScratch(heads, kv, d, length, "cpu", chunk=first)
    scratch.use(then)
    assert scratch.m.shape[1] == -(-length // first) and scratch.nchunk == -(-length // then[0])
    assert scratch.tile == min(A.ATTN_BL, then[0]) and scratch.warps == then[1]
    got = A.tri_attention(qkv, cos, sin, p, kc, vc, heads, d ** -0.5, scratch)
    assert _rel(got, want) < 2e-2


def test_the_step_tuner_tries_smaller_attention_chunks_only_where_the_chunk_is_not_fixed():
    """The rule's chunk first, then its half and quarter (8 and 4 warps), never below one tile of 16 positions; no
    candidates for a fixed chunk or the CPU (nothing to time there)."""
    assert A.chunk_candidates(64, 8) == [(64, 8), (32, 8), (32, 4), (16, 8), (16, 4)]
    assert A.chunk_candidates(32, 8) == [(32, 8), (16, 8), (16, 4)]
    assert A.chunk_candidates(16, 8) == [(16, 8)]
    assert A.AttnScratch(4, 2, 32, 4096, "cpu").cands == []
    tuned = []
    A.retune_in_step(A.AttnScratch(4, 2, 32, 4096, "cpu"), lambda: tuned.append(1), [], warm=lambda: tuned.append(2))
    assert tuned == []  # fewer than two candidates: nothing compiled, nothing timed


def test_the_cuda_chunks_the_step_tuner_tries_are_the_rules_its_eight_warps_and_its_half(monkeypatch):
    """Where the CUDA chunks build, the tuner's CUDA candidates are attn_cuda.config's (chunk, warps), that chunk on 8
    warps where the rule gave fewer, and half that chunk on 4 warps where it is at least CUDA_CHUNK_MIN."""
    from floorline.native import attn_cuda

    monkeypatch.setattr(attn_cuda, "unavailable", lambda *a: None)
    def cand(length, kv):
        return A.AttnScratch._cuda_cand("auto", 32, kv, 128, torch.bfloat16, length, 132, "cpu")

    assert attn_cuda.config(2600, 8, 132) == (4, 128)  # 21 x 8 CTAs: more than 1.1 an SM, 4 warps
    assert cand(2600, 8) == [("cuda", 128, 4), ("cuda", 128, 8), ("cuda", 64, 4)]
    assert attn_cuda.config(2300, 8, 132) == (8, 128)  # 18 x 8 CTAs
    assert cand(2300, 8) == [("cuda", 128, 8), ("cuda", 64, 4)]
    assert attn_cuda.config(5000, 8, 132) == (4, 256)  # 40 x 8 CTAs of 128 would be more than two an SM
    assert cand(5000, 8) == [("cuda", 256, 4), ("cuda", 256, 8), ("cuda", 128, 4)]
    assert attn_cuda.config(2300, 2, 132) == (8, 128) and cand(2300, 2) == [("cuda", 128, 8), ("cuda", 64, 4)]
    assert A.AttnScratch._cuda_cand("triton", 32, 8, 128, torch.bfloat16, 2600, 132, "cpu") == []


def test_an_attention_choice_sets_its_kernel_chunk_and_program_count():
    """AttnScratch.use takes the step tuner's candidates of both kernels: ("cuda", chunk, warps) switches the step to
    the CUDA chunks, (chunk, warps) back to Triton's, each with its own count of chunk programs."""
    s = A.AttnScratch(4, 2, 32, 4096, "cpu")
    s.use(("cuda", 128, 4))
    assert A.is_cuda(("cuda", 128, 4)) and (s.backend, s.chunk, s.warps, s.nchunk) == ("cuda", 128, 4, 32)
    s.use((32, 8))
    assert not A.is_cuda((32, 8)) and (s.backend, s.chunk, s.warps, s.nchunk, s.tile) == ("triton", 32, 8, 128, 32)



@interpreted
@pytest.mark.parametrize("case", ["tie across programs", "all negative", "one program", "max in the last element"])
def test_the_step_ends_take_the_embedding_row_and_the_first_argmax_and_advance_the_position(case):
    """_embed and _next_token against index_select and torch.argmax: several programs (the last one partial), equal
    maxima in different programs (the first index wins), negative logits (the packed key's reversed magnitudes), three
    steps in a row on one state (the last program resets it)."""
    n = {"one program": 700}.get(case, 3 * E.STEP_BLOCK - 100)
    state = E.next_token_state("cpu")
    tok, pos = torch.zeros(1, dtype=torch.long), torch.tensor([5], dtype=torch.int32)
    embed = _rand(n, 40, dtype=torch.bfloat16)
    x = torch.zeros(40)
    for step in range(3):
        logits = _rand(n) - (50.0 if case == "all negative" else 0.0)
        top = {"tie across programs": [E.STEP_BLOCK + 7, 2 * E.STEP_BLOCK + 3], "max in the last element": [n - 1]}
        for i in top.get(case, []):
            logits[i] = logits.max() + 1.0 if i == top[case][0] else logits[top[case][0]]
        E.tri_next_token(logits, tok, pos, state)
        assert int(tok) == int(logits.argmax()) and int(pos) == 6 + step
        assert state.tolist() == [-(2**63), 0]
        E.tri_embed(embed, tok, x)
        assert torch.equal(x, embed[int(tok)].float())
    if case == "tie across programs":
        assert int(tok) == E.STEP_BLOCK + 7
    logits[E.STEP_BLOCK // 2] = float("nan")  # a broken model's logits still give a row of the embedding
    E.tri_next_token(logits, tok, pos, state)
    assert 0 <= int(tok) < n and state.tolist() == [-(2**63), 0]

def test_attention_chunks_grow_with_the_context_to_fill_the_gpu():
    assert A.attn_chunk_len(2048, 4, 132) == 64  # 4 kv heads x 32 chunks: about one program per SM
    assert A.attn_chunk_len(16384, 4, 132) == 256  # 256 programs
    assert A.attn_chunk_len(10 ** 6, 8, 132) == 512  # the most
    c = A.attn_chunk_len(16384, 8, 132)
    assert 16384 // c * 8 >= 1.5 * 132 and 16384 // (2 * c) * 8 < 1.5 * 132


def test_int4_words_hold_codes_sixteen_columns_apart_in_each_group():
    """Word i of a group of 128 holds columns i, i + 16, ..., i + 112, the first in the lowest bits."""
    codes = torch.randint(0, 16, (3, 256), generator=GEN)
    words = int4_format.pack(codes, torch.ones(3, 2), torch.zeros(3, 2), "rows")[0]
    assert words.shape == (3, 32) and words.dtype == torch.int32
    s = torch.ones(3, 2, dtype=torch.bfloat16)
    z = torch.zeros(3, 2, dtype=torch.bfloat16)
    assert torch.equal(R.dequant_int4(words, s, z), codes.float())
    word = int(words[1, 16 + 5]) & 0xFFFFFFFF  # group 1, word 5
    assert [(word >> 4 * j) & 0xF for j in range(8)] == [int(codes[1, 128 + 16 * j + 5]) for j in range(8)]


# ------------------------------------------------------------------------------------------- the whole model
def _compare_with_hf(name, ops, steps=2, quant_name=None, options=None, tweak=None):
    """Prefill 40 tokens, then `steps` decode steps (two: the second starts from what the first left), each step's
    logits and token against HF's on the same weights; returns the worst relative logit error."""
    from transformers import DynamicCache

    from floorline.bench.runtimes.base import cache_kwarg

    a = zoo.ZOO[name]
    m = models.build_random(a, torch.device("cpu"), "fp32", seed=0)
    if quant_name:
        quant.convert(m, quant.get(quant_name), torch.float32)
    prompt = torch.randint(0, a.vocab, (1, 40), generator=torch.Generator().manual_seed(1))
    net = NativeModel(m, 64, ops=ops, **({"options": options} if options else {}))
    if tweak:
        tweak(net)
    worst = 0.0
    with torch.inference_mode():
        lg = net.prefill(prompt, 16)
        cache = DynamicCache(config=m.config)
        kw = {cache_kwarg(m): cache}
        want = m(input_ids=prompt, use_cache=True, **kw).logits[0, -1]
        worst = max(worst, _rel(lg, want))
        assert int(net.tok) == int(want.argmax())
        for i in range(steps):
            t = net.tok.clone()
            net.step()
            want = m(input_ids=t.view(1, 1), position_ids=torch.tensor([[40 + i]]), use_cache=True, **kw).logits[0, -1]
            worst = max(worst, _rel(net.logits, want))
            assert int(net.tok) == int(want.argmax()) and int(net.pos) == 41 + i
    return worst


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2", "tiny-qwen3"])
@pytest.mark.parametrize("ops", ["torch", "triton"])
def test_native_matches_hf_in_fp32(name, ops):
    """llama3 RoPE scaling (tiny-llama), q/k/v biases with tied embeddings (tiny-qwen2), Qwen3's per-head q/k norm
    inside the attention kernel (tiny-qwen3), prefill and decode. Each
    MLP one kernel (mlp.py, the default): the 4 layers cycle through its three residual buffers and back to the first,
    and each step starts over (the embedding zeroes buffer 1 again), so a buffer left unzeroed or read after its layer
    would show in the logits (test_mlp.py: without it)."""
    if ops == "triton" and not INTERPRET:
        pytest.skip("Triton on CPU tensors needs TRITON_INTERPRET=1; on a GPU: test_gpu_native.py")
    assert _compare_with_hf(name, ops) < 1e-5


@pytest.mark.parametrize("ops", ["torch", "triton"])
def test_native_int4_matches_hf_on_the_same_int4_weights(ops):
    if ops == "triton" and not INTERPRET:
        pytest.skip("Triton on CPU tensors needs TRITON_INTERPRET=1; on a GPU: test_gpu_native.py")
    assert _compare_with_hf("tiny-qwen2", ops, quant_name="int4") < 1e-4


def test_native_int4_mma_layout_adds_qkv_into_the_zeros_the_attention_leaves(monkeypatch):
    """In the CUDA GEMV's `mma` layout q/k/v is added into self.qkv (so it may split K), which the attention zeroes
    after reading it: the reference ops must still match HF layer after layer (a stale q/k/v would add up)."""
    from floorline.quant import int4

    monkeypatch.setattr(int4, "layout_for", lambda *a: "mma")
    m = models.build_random(zoo.ZOO["tiny-qwen2"], torch.device("cpu"), "fp32", seed=0)
    quant.convert(m, quant.get("int4"), torch.float32)
    net = NativeModel(m, 64, ops="torch")
    assert net.qkv_acc and net.layers[0]["qkv"]["layout"] == "mma"
    assert _compare_with_hf("tiny-qwen2", "torch", quant_name="int4") < 1e-4


@interpreted
@pytest.mark.parametrize("merge", [(1, 4), (2, 1)])
def test_attention_merge_zeroes_the_qkv_vector_once_read(merge):
    """With zero_qkv the merge zeroes q/k/v (every element, once; with the merge split over the dims, the first
    program of a head) and gives the same output."""
    heads, kv, d, length, pos = 4, 2, 32, 160, 100
    qkv = _rand((heads + 2 * kv) * d)
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    cos, sin = R.rope_tables(inv, length, 1.0, "cpu")
    kc, vc = _rand(kv, length, d, dtype=torch.bfloat16), _rand(kv, length, d, dtype=torch.bfloat16)
    p = torch.tensor([pos], dtype=torch.int32)
    scratch = A.AttnScratch(heads, kv, d, length, "cpu", merge=merge)
    want = A.tri_attention(qkv, cos, sin, p, kc.clone(), vc.clone(), heads, d ** -0.5, scratch).clone()
    assert qkv.abs().sum() > 0
    got = A.tri_attention(qkv, cos, sin, p, kc, vc, heads, d ** -0.5, scratch, zero_qkv=True)
    assert torch.equal(got, want) and torch.equal(qkv, torch.zeros_like(qkv))


def test_prefill_product_and_bias_are_rounded_once():
    """The prefill writes the cache from q/k/v = W x + b: rounded to bf16 once, its error has no part common to every
    position. (Rounding W x first and then W x + b rounds the constant b a second time, the same error wherever the
    values share a binade; attention averages v over the positions and keeps it.)"""
    from floorline.native.model import _mm

    n, k, o = 4096, 512, 128
    x = _rand(n, k)
    w, b = _rand(o, k, dtype=torch.bfloat16, scale=0.02), _rand(o, dtype=torch.bfloat16, scale=0.02)
    exact = x.bfloat16().float() @ w.float().t() + b.float()
    err = _mm(x, {"w": w}, b).bfloat16().float() - exact
    rms = err.pow(2).mean().sqrt()
    # the per-column means of n independent rounding errors: ~rms / sqrt(n) each; 128 columns stay under 6x that
    # (rounding twice gives ~30x here)
    assert err.mean(0).abs().max() < 6 * rms / n ** 0.5


def test_native_long_prompt_error_is_below_hf_bf16_on_a_biased_model():
    """A Qwen2-shaped model (q/k/v biases) in bf16 after a 2048-token prompt: native (fp32 activations and residual,
    torch reference ops) stays well below HF's own bf16 path in relative logit error against HF in fp32 on the same
    weights, over 4 steps. With the bias added after a rounded product in its prefill it was above it."""
    import copy
    import dataclasses

    a = dataclasses.replace(zoo.ZOO["qwen2.5-7b"], hidden=256, intermediate=768, layers=4, heads=14, kv_heads=2,
                            head_dim=64, vocab=4096, params=None)
    m = models.build_random(a, torch.device("cpu"), "bf16", seed=0)
    exact = copy.deepcopy(m).float()
    ctx = 2048
    prompt = torch.randint(0, a.vocab, (1, ctx), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        trace = native_vs_hf(m, exact, NativeModel(m, ctx + 8, ops="torch"), prompt, 4)
    errs = {k: [_rel(t[k], t["want"]) for t in trace] for k in ("native", "hf")}
    assert max(errs["native"]) < 0.6 * min(errs["hf"]), errs


def test_native_needs_a_gpu_and_a_supported_quant():
    rc, _, err = run_cli(["run", "--model", "tiny-llama", "--ctx", "16", "--device", "cpu", "--mode", "native"])
    assert rc == 2 and "needs a CUDA GPU" in err and len(err.strip().splitlines()) == 1

    from floorline.bench import config

    with pytest.raises(config.UserError, match="--quant int4 or none"):
        config.validate(config.RunConfig("tiny-llama", [16], ["native"], quant="nf4"), zoo.ZOO["tiny-llama"])


def test_int4_backend_on_the_cpu_bytes_and_check(cpu):
    from floorline.core import floor

    a = zoo.ZOO["tiny-llama"]
    m = models.build_random(a, cpu, "bf16", seed=4)
    b = quant.get("int4")
    conv = quant.convert(m, b, torch.bfloat16)
    assert conv.stored_bytes == a.layers * sum(b.format(2).matrix_bytes(o, i) for o, i in floor.decoder_matrix_shapes(a))
    assert conv.max_check_error < b.check_tolerance


def test_the_attention_chunk_option_fixes_it_for_either_kernel():
    """NativeOptions.attn_chunk fixes the chunk (0: sized to the GPU); the CUDA kernel keeps its warps' rule, never
    more warps than the chunk has tiles of 16."""
    from floorline.native import attn_cuda

    assert A.AttnScratch(4, 2, 32, 4096, "cpu", chunk=128).chunk == 128
    assert A.AttnScratch(4, 2, 32, 4096, "cpu", chunk=16).chunk == 16
    with pytest.raises(UserError, match="at least 64 positions"):  # the CUDA kernel's warps take tiles of 16
        A.attn_backend("cpu", 4, 2, 128, torch.bfloat16, 4096, "cuda", chunk=32)
    assert A.AttnScratch(4, 2, 32, 4096, "cpu").chunk == A.ATTN_CHUNK  # the interpreter's
    assert attn_cuda.config(2048, 4, 132, 256) == (8, 256)
    assert attn_cuda.config(2048, 4, 132, 64) == (4, 64)


def test_the_cuda_attention_chunk_fills_the_gpu_at_most_twice():
    """attn_cuda.config: the smallest chunk of 128..512 positions with at most two (chunk, kv head) CTAs an SM, 8
    warps where the CTAs about fill the SMs once, else 4."""
    from floorline.native import attn_cuda

    assert attn_cuda.config(2048, 4, 132) == (8, 128)  # 4 kv heads x 16 chunks: 64 CTAs, 8 warps each
    assert attn_cuda.config(16384, 4, 132) == (4, 256)  # 4 x 64 CTAs: 256 <= 264
    assert attn_cuda.config(16939, 4, 132) == (8, 512)  # a ctx-16384 run's cache: 4 x 34 CTAs, one an SM
    assert attn_cuda.config(16384, 8, 132) == (4, 512)  # 8 x 32
    assert attn_cuda.config(10 ** 6, 8, 132) == (4, 512)  # the most


def test_the_cuda_attention_says_in_one_line_why_it_cannot_serve_the_cpu():
    from floorline.native import attn_cuda

    why = attn_cuda.unavailable(torch.device("cpu"), 28, 4, 128, torch.bfloat16)
    assert why and "GPU" in why and "\n" not in why


def test_the_cuda_attention_takes_head_dim_128_and_64_and_builds_each_for_its_own(monkeypatch):
    """On a GPU with tensor cores (stubbed), head_dim 128 and 64 build the kernel (its D define only where not 128,
    so 128's build is the one it always was); 96, more than 8 query heads a KV head or an fp16 cache are one line."""
    from floorline.native import attn_cuda, nvrtc

    built = []
    monkeypatch.setattr(nvrtc, "no_tensor_core_gpu", lambda *a: None)
    monkeypatch.setattr(attn_cuda, "_kernel", lambda index, defines: built.append(dict(defines)))
    dev = torch.device("cuda", 0)
    assert attn_cuda.unavailable(dev, 32, 8, 128, torch.bfloat16) is None
    assert attn_cuda.unavailable(dev, 14, 2, 64, torch.bfloat16) is None
    assert "D" not in built[0] and built[1]["D"] == 64 and built[1]["G"] == 7
    for why in (attn_cuda.unavailable(dev, 32, 8, 96, torch.bfloat16),
                attn_cuda.unavailable(dev, 36, 4, 128, torch.bfloat16),
                attn_cuda.unavailable(dev, 32, 8, 64, torch.float16)):
        assert why and "128 or 64" in why and "\n" not in why
    assert len(built) == 2


def test_the_cuda_attention_chunks_build_for_the_caches_head_dim(monkeypatch):
    """attn_cuda.chunks compiles for the head_dim of the cache it is handed (its last dim): 64 gets D 64, 128 no D
    define; the launch (stubbed) is one CTA a (chunk, KV head) of the given warps."""
    import types

    from floorline.native import attn_cuda, nvrtc

    built, launched = [], []
    monkeypatch.setattr(attn_cuda, "_kernel", lambda index, defines: built.append(dict(defines)) or
                        types.SimpleNamespace(func=None))
    monkeypatch.setattr(nvrtc, "launch", lambda func, grid, block, *a, **k: launched.append((grid, block)))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: types.SimpleNamespace(cuda_stream=0))
    for d in (64, 128):
        kc = torch.zeros(2, 300, d, dtype=torch.bfloat16)
        m = torch.zeros(2, 5, 16)
        t = torch.zeros(1)
        attn_cuda.chunks(torch.zeros(18 * d), t, t, torch.zeros(1, dtype=torch.int32), kc, kc, 14, 0.1, m, m,
                         torch.zeros(2, 5, 16, d), warps=8, chunk=64)
    assert built[0]["D"] == 64 and "D" not in built[1] and built[0]["G"] == 7 and built[0]["NCH"] == 5
    assert launched == [((5, 2, 1), 256)] * 2


def test_the_cuda_attention_chunks_take_a_timeline_slot_only_where_the_diagnostic_is_on(monkeypatch):
    """tri_attention over the CUDA chunks (kernel and launch stubbed): with no timeline active the kernel is built
    without TL and takes its 14 arguments; with one active it is built with TL and handed a slot of ACTIVE as a 15th,
    6 words a (chunk, KV head) program (the four stamps and attn_cuda.MARKS, the kernel's TLW), recorded with its
    marks; a slot of the wrong size is refused before any build or launch."""
    import types

    from floorline.native import attn_cuda, nvrtc
    from floorline.native import timeline as T

    built, launched = [], []
    monkeypatch.setattr(attn_cuda, "_kernel", lambda index, defines: built.append(dict(defines)) or
                        types.SimpleNamespace(func=None))
    monkeypatch.setattr(nvrtc, "launch", lambda func, grid, block, shared, stream, vals, pdl=False:
                        launched.append((grid, vals)))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: types.SimpleNamespace(cuda_stream=0))
    scratch = A.AttnScratch(14, 2, 64, 300, "cpu")
    scratch.use(("cuda", 64, 4))
    kc = torch.zeros(2, 300, 64, dtype=torch.bfloat16)
    t = torch.zeros(1)
    args = (torch.zeros(18 * 64), t, t, torch.zeros(1, dtype=torch.int32), kc, kc, 14, 0.1, scratch)
    A.tri_attention(*args, merge=False)
    line = T.Timeline("cpu", programs=64)
    monkeypatch.setattr(T, "ACTIVE", line)
    A.tri_attention(*args, merge=False)
    assert "TL" not in built[0] and built[1]["TL"] == 1 and len(launched[0][1]) == 14
    (grid, vals), n = launched[1], 5 * 2
    assert grid == (5, 2, 1) and len(vals) == 15 and vals[-1].value == line.buf.data_ptr()
    assert line.launches == [("chunks", 0, n, ("qkv", "tiles"))] and line.used == n * 6
    with pytest.raises(ValueError, match="timeline slot of 40 words for 10 programs of 6"):
        attn_cuda.chunks(*args[:8], scratch.m, scratch.l, scratch.o, 4, 64, tl=torch.zeros(40, dtype=torch.int64))
    assert len(launched) == 2 and len(built) == 2  # refused before a build
    # the kernel's slot width (TLW) is the four stamps and the marks
    assert re.search(r"#define TLW (\d+)", nvrtc.source("attn_chunk.cu")).group(1) == str(attn_cuda.TL_WORDS) == "6"


def test_the_merge_splits_each_head_over_programs_of_at_least_16_dims():
    """merge_launch: MERGE, a split that would leave a program fewer than 16 dims halved. The scratch names a merge
    other than one 4-warp program a head."""
    assert A.merge_launch(128) == A.MERGE
    assert A.merge_launch(128, (8, 2)) == (8, 2) and A.merge_launch(32, (8, 2)) == (2, 2)
    assert A.AttnScratch(4, 2, 32, 160, "cpu", merge=(8, 2)).name().endswith("merge 2 x w2")
    assert "merge" not in A.AttnScratch(4, 2, 32, 160, "cpu", merge=(1, 4)).name()


def test_the_attention_backend_is_triton_off_the_gpu_and_a_bad_choice_says_the_values():
    """attn_kernel auto (the default) or cuda pick the CUDA chunk kernel only on a CUDA GPU (auto only for long
    caches); on the CPU the Triton kernels (interpreter) serve; an unknown value is a one-line error."""
    from floorline.core.errors import UserError

    assert A.attn_backend("cpu", 28, 4, 128, torch.bfloat16, 32768) == "triton"
    assert A.attn_backend("cpu", 28, 4, 128, torch.bfloat16, 32768, "cuda") == "triton"
    assert A.AttnScratch(28, 4, 128, 300, "cpu").backend == "triton"
    with pytest.raises(UserError, match="auto, cuda or triton"):
        A.attn_backend("cpu", 28, 4, 128, torch.bfloat16, 300, "fast")


def test_auto_takes_the_cuda_chunks_by_rule_only_at_head_dim_128(monkeypatch):
    """From ATTN_CUDA_FROM positions, auto runs the CUDA chunks where they build at head_dim 128 (measured faster
    there); at head_dim 64 (measured up to 2048 positions) Triton's start, the CUDA chunks among the step tuner's
    candidates; attn_kernel=cuda takes them at either."""
    from floorline.native import attn_cuda

    monkeypatch.setattr(A, "INTERPRET", False)
    monkeypatch.setattr(attn_cuda, "unavailable", lambda *a: None)
    assert A.attn_backend("cuda", 32, 8, 128, torch.bfloat16, 16384) == "cuda"
    assert A.attn_backend("cuda", 32, 8, 128, torch.bfloat16, 4096) == "triton"
    assert A.attn_backend("cuda", 32, 8, 64, torch.bfloat16, 16384) == "triton"
    assert A.attn_backend("cuda", 32, 8, 64, torch.bfloat16, 16384, "cuda") == "cuda"
    # the tuner's CUDA candidates there: the rule's 512 positions on 4 and 8 warps, and half of it
    assert A.AttnScratch._cuda_cand("auto", 32, 8, 64, torch.bfloat16, 16384, 132, "cpu") == [
        ("cuda", 512, 4), ("cuda", 512, 8), ("cuda", 256, 4)]


def _fake_step(monkeypatch, ms_of):
    """timing.state_replay_ms replaced by `ms_of()` (what the current choices would cost): the step tuners' selection
    logic without a GPU. Returns the list of the trials' times."""
    from floorline.device import timing

    trials = []

    def fake(capture, state, reps=30):
        capture()
        trials.append(ms_of())
        return trials[-1]

    monkeypatch.setattr(timing, "state_replay_ms", fake)
    return trials


def test_triton_tiles_retuned_in_the_step_keep_the_fastest_of_the_step_shapes(monkeypatch):
    """Every tile the autotuner considered for a shape the step launched is timed in the step, the fastest kept in the
    autotuner's cache and every trial named in the tuner's step_tuning; a shape the step does not launch, or with one
    tile, is left alone."""
    if G.triton is None:
        pytest.skip("the Triton GEMV's autotuner needs Triton (floorline[native])")
    tiles = list(G._BF16)
    step_key = (3584, 18944, 0, False, True, "torch.bfloat16")
    other_key = (512, 512, 0, False, False, "torch.bfloat16")
    single_key = (64, 128, 1, False, False, "torch.bfloat16")
    monkeypatch.setattr(G._gemv_bf16, "cache", {step_key: tiles[0], other_key: tiles[0], single_key: tiles[1]})
    monkeypatch.setattr(TUNER, "gemv_candidates", {(*step_key[:5], False): tiles[:5],
                                                   (*other_key[:5], False): tiles[:5],
                                                   (*single_key[:5], False): tiles[1:2]})
    monkeypatch.setattr(TUNER, "used", set())
    cost = {id(t): 3.0 + i for i, t in enumerate(tiles)}
    cost[id(tiles[3])] = 2.5  # the fastest in the step

    def capture():  # the step launches two of the shapes
        TUNER.used.update({("gemv", (*step_key[:5], False)), ("gemv", (*single_key[:5], False))})

    trials = _fake_step(monkeypatch, lambda: cost[id(G._gemv_bf16.cache[step_key])])
    G.retune_in_step(capture, [torch.zeros(1)])
    assert G._gemv_bf16.cache[step_key] is tiles[3] and G._gemv_bf16.cache[other_key] is tiles[0]
    assert G._gemv_bf16.cache[single_key] is tiles[1] and len(trials) == 5
    assert TUNER.step_tuning["gemv"] == {"3584x18944 acc": {G.tile_name(t): cost[id(t)] for t in tiles[:5]}}


def test_int4_configs_retuned_in_the_step_keep_the_fastest_of_the_shortlist(monkeypatch):
    """The int4 CUDA GEMV's step tuning: the one-launch timer's `top` configs of each shape the step launched, timed in
    the step, the fastest kept."""
    from floorline.native import int4_cuda

    key = ("cuda:0", 3584, 18944, 0, False, True, False, torch.float32, torch.float32, 3)
    idle = ("cuda:0", 512, 1024, 0, False, False, False, torch.float32, torch.float32, 3)
    ranked = [(8, 2, 4, 0, 0, 2), (4, 2, 4, 0, 0, 0), (16, 1, 1, 0, 0, 0), (8, 1, 4, 0, 0, 0)]
    monkeypatch.setattr(TUNER, "int4_ranked", {key: ranked, idle: ranked})
    monkeypatch.setattr(TUNER, "int4_best", {key: ranked[0], idle: ranked[0]})
    monkeypatch.setattr(TUNER, "used", set())
    cost = {ranked[0]: 1.66, ranked[1]: 1.65, ranked[2]: 1.64, ranked[3]: 1.60}
    trials = _fake_step(monkeypatch, lambda: cost[TUNER.int4_best[key]])
    int4_cuda.retune_in_step(lambda: TUNER.used.add(("int4", key)), [torch.zeros(1)], top=3)
    assert TUNER.int4_best[key] == ranked[2] and TUNER.int4_best[idle] == ranked[0] and len(trials) == 3
    assert TUNER.step_tuning["int4"] == {"3584x18944 acc": {int4_cuda.config_name(c): cost[c] for c in ranked[:3]}}


@pytest.mark.parametrize("ahead, stages", [(1, 0), (2, 0), (1, 3)])
def test_the_bf16_gemv_requests_its_first_tiles_before_the_wait_in_its_sm90_machine_code(ahead, stages):
    """scripts/gemv_sass.py builds the GEMV for sm_90 here (Triton's bundled ptxas and cuobjdump, no GPU): an 8x256
    tile of 4 warps is two 128-bit loads a thread, and AHEAD tiles of them must come before griddepcontrol.wait
    (ACQBULK) -- ptxas may legally hoist the wait above them, as it did in the CUDA int4 GEMV's first version. A cp.async
    tile (stages 3) too: its first tile in registers, before the pipeline's own loads, which follow the wait."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    if not load_script("gemv_sass").cuobjdump_tool().exists():
        pytest.skip("Triton without its bundled cuobjdump")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # compiled, not interpreted
    out = subprocess.run([sys.executable, str(root / "scripts" / "gemv_sass.py"), "show", "8", "256", "4", str(ahead),
                          "--stages", str(stages)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["wait"] and got["weight_loads_before_wait"] == 2 * ahead, got
