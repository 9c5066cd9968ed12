"""The warp-specialised GEMV chain prototype (native/ws_chain.py): its host side on the CPU -- every page dealt once,
in stage order, the stage table's dependencies, the tensor-core layout's rotation -- and, on a GPU, the kernel (FMA
and tensor-core consumers) against the fp32 torch chain."""

import struct

import pytest
import torch

from floorline.native import ws_chain as W


def _table(c):
    raw = bytes(c.table.cpu().numpy())
    return [struct.unpack_from("<QQQQQiiii", raw, 56 * s) for s in range(c.stages)]


def test_every_page_is_dealt_once_in_stage_order_and_blocks_differ_by_at_most_one():
    c = W.build(2, 2048, 3072, 8192, torch.device("cpu"), sms=7)
    tasks, off, S = c.tasks.tolist(), c.off.tolist(), c.stages
    pages = {s: W.pages(c.weights[s // 4][s % 4]) for s in range(S)}
    seen = []
    for b in range(7):
        my = off[b * (S + 1):(b + 1) * (S + 1)]
        assert my == sorted(my)
        for s in range(S):
            assert all(t >> 16 == s for t in tasks[my[s]:my[s + 1]])
        seen += tasks[my[0]:my[S]]
    assert sorted(seen) == sorted((s << 16) | p for s in range(S) for p in range(pages[s]))
    for s in range(S):  # a stage's share of each block: within one page of the others
        share = [off[b * (S + 1) + s + 1] - off[b * (S + 1) + s] for b in range(7)]
        assert max(share) - min(share) <= 1


def test_each_stage_waits_for_all_pages_of_the_stage_it_reads():
    c = W.build(3, 2048, 3072, 8192, torch.device("cpu"), sms=5)
    rows = _table(c)
    out_of = {r[2]: s for s, r in enumerate(rows)}  # output pointer -> the stage writing it
    for s, (w, x, y, res, nw, k, kind, dep, need) in enumerate(rows):
        if s == 0:
            assert (dep, need) == (-1, 0) and x == c.h[0].data_ptr()
            continue
        assert dep == out_of[x] == s - 1
        assert need == W.pages(c.weights[dep // 4][dep % 4])
        assert k == (8192 if s % 4 == 3 else 2048) and kind == int(s % 4 == 2)
        assert (res != 0) == (s % 4 in (1, 3)) and (nw != 0) == (s % 4 in (0, 2))


def test_the_tensor_core_layout_rotates_each_virtual_row_and_undoes_it():
    w = torch.arange(2 * 8192, dtype=torch.float32).reshape(8, 2048).to(torch.bfloat16)
    r = W.rotate(w)
    assert torch.equal(W.rotate(r, inverse=True), w)
    pg = w.reshape(-1, 16, 64, 8)
    rp = r.reshape(-1, 16, 64, 8)
    for v in (0, 1, 15):  # chunk c of virtual row v sits at (c + v) % 64
        for c_ in (0, 5, 63):
            assert torch.equal(rp[:, v, (c_ + v) % 64], pg[:, v, c_])
    # ldmatrix's eight rows of a matrix fall in eight 16-B bank groups at every k-step
    for t in range(32):
        for q in (0, 1):
            for half in (0, 8):
                groups = {((v * 1024 + ((2 * t + q + v) % 64) * 16) % 128) // 16 for v in range(half, half + 8)}
                assert len(groups) == 8


def test_a_k_that_is_not_whole_segments_is_refused():
    with pytest.raises(ValueError, match="multiple of 2048"):
        W.build(1, 1536, 2048, 4096, torch.device("cpu"), sms=4)


@pytest.mark.gpu
@pytest.mark.parametrize("mma,sent,one_fence", [(False, False, False), (True, False, False), (False, True, False),
                                                (False, False, True)])
def test_the_kernel_matches_the_fp32_chain(mma, sent, one_fence):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    dev = torch.device("cuda")
    c = W.build(2, 2048, 3072, 8192, dev, torch.cuda.get_device_properties(dev).multi_processor_count, mma=mma)
    ref = W.reference(c)
    for nslot, cw in ((8, 4), (4, 4), (6, 6)):
        for h in c.h[1:]:
            h.fill_(float("nan"))
        W.launch(c, nslot, cw, sent=sent, one_fence=one_fence)
        torch.cuda.synchronize()
        assert int(c.err.item()) == 0
        assert ((c.h[-1] - ref).norm() / ref.norm()).item() < (1e-4 if mma else 1e-5)
