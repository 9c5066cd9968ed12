"""The step timeline (native/timeline.py): its slots, its reading and its summary on the CPU; the stamped kernels'
code with and without a timeline, compiled for sm_90 here (no GPU). The stamps themselves are read on a GPU
(tests/test_gpu_native.py)."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import compiled_for_sm90

from floorline.native import timeline as T


def test_slots_follow_the_launches_and_rewind_hands_them_out_again():
    line = T.Timeline("cpu", programs=10)
    a = line.slot("chunks", 4)
    b = line.slot("merge", 6)
    assert a.numel() == 4 * T.WORDS and b.numel() == 6 * T.WORDS
    assert b.data_ptr() == a.data_ptr() + 4 * T.WORDS * 8  # consecutive, in launch order
    with pytest.raises(ValueError, match="11 programs a step, room for 10"):
        line.slot("mlp", 1)
    line.rewind()
    assert line.slot("chunks", 4).data_ptr() == a.data_ptr() and line.launches == [("chunks", 0, 4)]


def test_launch_kwargs_are_empty_unless_a_timeline_is_active(monkeypatch):
    assert T.ACTIVE is None and T.launch_kwargs("mlp", 3) == {}
    line = T.Timeline("cpu", programs=8)
    monkeypatch.setattr(T, "ACTIVE", line)
    kw = T.launch_kwargs("mlp", 3)
    assert set(kw) == {"TL"} and kw["TL"].numel() == 3 * T.WORDS and line.launches == [("mlp", 0, 3)]


def _fill(line: T.Timeline, kind: str, rows: list[tuple[int, int, int, int]]) -> None:
    line.slot(kind, len(rows)).copy_(torch.tensor(rows, dtype=torch.int64).flatten())


def test_read_and_summarize_give_each_launch_its_programs_and_the_gaps_between_them():
    line = T.Timeline("cpu", programs=16)
    # (start, wait, end, sm) in ns: a chunk launch of three programs, then a merge of two
    _fill(line, "chunks", [(1000, 3000, 5000, 0), (2000, 3000, 6000, 1), (4000, 4000, 7000, 0)])
    _fill(line, "merge", [(5000, 8000, 9000, 2), (6000, 8500, 10000, 3)])
    steps = [line.read()]
    assert [x["kind"] for x in steps[0]] == ["chunks", "merge"]
    assert steps[0][0]["wait"] == [3000, 3000, 4000] and steps[0][1]["sm"] == [2, 3]
    st = T.launch_stats(steps[0][0], 1000)
    assert (st["start_first"], st["wait_med"], st["end_last"]) == (0.0, 2.0, 6.0)
    assert st["work_med"] == 3.0 and st["work_max"] == 3.0 and st["lead_med"] == 1.0 and st["sms"] == 2
    s = T.summarize(steps)
    assert s["chunks"]["span"] == 4.0 and s["chunks"]["tail"] == 1.0  # 7 - 3; 7 - 6
    assert s["merge"]["gap_after_chunks"] == 1.0  # the merge's first wait (8) after the chunks' last end (7)
    assert s["merge"]["work_med"] == 1.25 and s["merge"]["work_max"] == 1.5 and s["merge"]["programs"] == 2
    # three replays: each kind's figures are medians over the replays (the middle one's longest work, not the longest)
    more = [[{**x, "end": [e + 1000 * k for e in x["end"]]} for x in steps[0]] for k in (1, 5)]
    s3 = T.summarize(steps + more)
    assert s3["chunks"]["work_max"] == 4.0 and s3["chunks"]["work_med"] == 4.0  # replays' 3, 4, 8 and 3, 4, 8


def test_stamped_kernels_compile_their_timeline_only_when_given_one():
    """The merge kernel for sm_90 (Triton's ptxas, no GPU): with TL a pointer its code reads %globaltimer and %smid
    and stores four words a program; with TL None (the product's launches) neither, and the SASS is the same as that
    of the kernel compiled without naming TL at all."""
    out = compiled_for_sm90(
        "from floorline.native import attention as A\n"
        "ptr = dict(MO='*fp32', LO='*fp32', OO='*fp32', OUT='*fp32', POS='*i32', ZP='*fp32')\n"
        "const = dict(G=4, GP=16, D=128, CHUNK=64, CB=32, PDL=1, ZB=0, DB=32)\n"
        "kw = dict(ints=('NCHUNK', 'ZN'), divisible=())\n"
        "plain = gemv_sass.compiled(A._attn_merge, const, 1, pointers=ptr, **kw)\n"
        "stamped = gemv_sass.compiled(A._attn_merge, const, 1, pointers={**ptr, 'TL': '*i64'}, **kw)\n"
        "same = gemv_sass.sass(A._attn_merge, const, 1, pointers=ptr, **kw) == gemv_sass.sass(\n"
        "    A._attn_merge, {**const, 'TL': None}, 1, pointers=ptr, **kw)\n"
        "print(json.dumps([same, 'globaltimer' in plain.asm['ptx'],\n"
        "                  'globaltimer' in stamped.asm['ptx'], '%smid' in stamped.asm['ptx']]))")
    same, plain_timer, stamped_timer, smid = json.loads(out.splitlines()[-1])
    assert same and not plain_timer and stamped_timer and smid
