"""int4_mlp's launch plan (pure Python; the kernel itself runs in the GPU tests): how a model's intermediate rows are
shared out over blocks, what each block reads of down, and which shapes it fits at all."""

from __future__ import annotations

import pytest

from floorline.core import zoo
from floorline.native import int4_mlp as IM

H200 = (132, IM.SMEM_BLOCK, IM.SMEM_SM)


def _spans(inter: int, p: dict) -> list[tuple]:
    """Each block's row blocks [rb0, rb1), as the kernel computes them from its index."""
    nrb, unit, grid = inter // 16, p["unit"], p["grid"]
    return [(unit * (b * (nrb // unit) // grid), unit * ((b + 1) * (nrb // unit) // grid)) for b in range(grid)]


def test_llama_3_2_1b_takes_one_block_an_sm_of_four_row_blocks():
    # 8192 intermediate rows = 512 row blocks of 16 = 128 of down's 64-input blocks
    whole = IM.plan(2048, 8192, *H200[:1], (1, 1, 2, 4))
    assert (whole["grid"], whole["lmax"], whole["kbs"], whole["warps"]) == (128, 4, 1, 8)
    even = IM.plan(2048, 8192, *H200[:1], (1, 2, 2, 1))  # 132 blocks of 3 or 4 row blocks, 16 warps
    assert (even["grid"], even["lmax"], even["kbs"], even["warps"]) == (132, 4, 2, 16)
    # a slot of down: 128 tiles x (512 B of codes + 64 B of scales and zeros) = 72 KB; n(x): 2048 x 2 halves x 2 B
    assert whole["smem"] == 16 * (8 * 4 + 8 + 16 * 32 + 4 + 32) + 128 * 576
    assert even["smem"] == 16 * (16 * 4 + 8 + 16 * 32 + 4 + 2 * 32) + 2 * 128 * 576


@pytest.mark.parametrize("name", [n for n, a in zoo.ZOO.items() if a.hidden <= 4096 and a.family in ("llama", "qwen2",
                                                                                                      "qwen3")])
def test_every_plan_shares_out_each_row_block_once_and_fits_the_gpu(name):
    a = zoo.ZOO[name]
    if a.hidden % 128 or a.intermediate % 128:
        pytest.skip("not the mma layout's shape")
    for c in IM.CANDIDATES:
        p = IM.plan(a.hidden, a.intermediate, *H200[:1], c)
        if isinstance(p, str):
            continue
        spans = _spans(a.intermediate, p)
        assert spans[0][0] == 0 and spans[-1][1] == a.intermediate // 16
        assert all(r0 < r1 for r0, r1 in spans) and all(s[1] == t[0] for s, t in zip(spans, spans[1:]))
        assert p["lmax"] == max(r1 - r0 for r0, r1 in spans) and p["warps"] == 2 * p["lmax"] * c[1] <= IM.MAX_WARPS
        blocks = [set(range(r0 // 4, (r1 - 1) // 4 + 1)) for r0, r1 in spans]  # down's 64-input blocks each reads
        assert p["kbs"] == max(len(b) for b in blocks)
        if c[3] == 4:  # whole 64-input blocks: none read by two blocks
            assert sum(len(b) for b in blocks) == a.intermediate // 64
        else:  # one by one: the most even split
            assert max(r1 - r0 for r0, r1 in spans) - min(r1 - r0 for r0, r1 in spans) <= 1
        assert p["smem"] <= IM.SMEM_BLOCK and c[0] * (p["smem"] + 1024) <= IM.SMEM_SM


@pytest.mark.parametrize("hidden, inter", [(3584, 18944), (4096, 14336), (4096, 12288)])
def test_the_7_8b_shapes_keep_the_two_gemvs(hidden, inter):
    """qwen2.5-7b, llama-3.1-8b, qwen3-8b: a slot of down's columns (hidden / 16 tiles x 576 B: 126-144 KB) leaves
    no room for a second, and the one-slot plans need more than 16 warps (7-9 row blocks a block), so no candidate
    fits and the int4 step keeps the two GEMVs it had (their figures unchanged)."""
    assert IM.fitting(hidden, inter, *H200) == []
    assert all(isinstance(IM.plan(hidden, inter, 132, c), str) for c in IM.CANDIDATES)


def test_a_misfit_shape_says_why():
    assert "multiples of 128" in IM.plan(2000, 8192, 132, (1, 1, 2, 4))
    assert "warps" in IM.plan(1536, 8960, 132, (1, 2, 2, 4))  # 8 row blocks a block x 2 x 2 slices = 32 warps
