"""native/prefetch.py: the FLOORLINE_L2PF plan, which GEMV prefetches what, and the ranges it hands the kernels."""

import pytest
import torch

from floorline.errors import UserError
from floorline.native import prefetch as P


def test_parse_reads_targets_sources_fractions_and_places():
    assert P.parse("") == []
    assert P.parse("o@qkv, gate_up@o:0.25/start,qkv@down/end") == [
        ("o", "qkv", 1.0, 2), ("gate_up", "o", 0.25, 1), ("qkv", "down", 1.0, 2)]
    assert P.describe(P.parse("o@qkv,gate_up@o:0.25/start")) == "o@qkv:1/end,gate_up@o:0.25/start"


@pytest.mark.parametrize("bad", ["o", "o@attn", "lm_head@down", "o@qkv:0", "o@qkv:1.5", "o@qkv:x", "o@qkv/late"])
def test_parse_refuses_bad_items_with_the_form(bad):
    with pytest.raises(UserError, match="target@source"):
        P.parse(bad)


def test_one_source_prefetches_at_one_place():
    with pytest.raises(UserError, match="one place"):
        P.parse("o@qkv/start,gate_up@qkv/end")


def test_assign_pairs_each_layer_with_this_or_the_next_layers_target():
    per = P.assign(P.parse("o@qkv,gate_up@qkv:0.5,qkv@down,down@down:0.2,gate_up@o/start"), 3)
    assert per[0] == {("qkv", 2): [(0, "o", 1.0), (0, "gate_up", 0.5)], ("o", 1): [(0, "gate_up", 1.0)],
                      ("down", 2): [(1, "qkv", 1.0), (1, "down", 0.2)]}
    # the last layer's down has no next layer to prefetch for
    assert per[2] == {("qkv", 2): [(2, "o", 1.0), (2, "gate_up", 0.5)], ("o", 1): [(2, "gate_up", 1.0)]}


def test_table_covers_a_whole_tensor_or_spreads_a_fraction_inside_it():
    whole = torch.zeros(1000, dtype=torch.int32)  # 4000 bytes: one piece
    big = torch.zeros(100_000, dtype=torch.int32)  # 400000 bytes
    t = P.table([(whole, 1.0), (big, 0.25), (big, 1.0)], "cpu")
    assert t.dtype == torch.int64 and t.shape == (3, 4)
    a, n, stride, count = t[0].tolist()
    assert (a, n, stride, count) == (whole.data_ptr(), 4000, 4000, 1)
    a, n, stride, count = t[1].tolist()
    assert a == big.data_ptr() and n == P.PIECE and stride == 4 * P.PIECE and count == 400000 // stride
    assert (count - 1) * stride + n <= 400000  # the last piece ends inside the tensor
    assert abs(count * n / 400000 - 0.25) < 0.02
    assert t[2].tolist() == [big.data_ptr(), 400000, 400000, 1]
    assert all(v % 16 == 0 for row in t.tolist() for v in row[:3])


def test_tables_need_a_gpu():
    with pytest.raises(UserError, match="GPU"):
        P.tables([{"o": {"w": torch.zeros(4)}}], P.parse("o@qkv"), "cpu")
