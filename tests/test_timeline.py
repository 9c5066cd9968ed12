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
    with pytest.raises(ValueError, match="44 words a step, room for 40"):
        line.slot("mlp", 1)
    line.rewind()
    assert line.slot("chunks", 4).data_ptr() == a.data_ptr() and line.launches == [("chunks", 0, 4, ())]
    c = line.slot("cuda", 2, ("qkv", "tiles"))  # a mark is one more word a program
    assert c.numel() == 2 * (T.WORDS + 2) and line.slot("merge", 1).data_ptr() == c.data_ptr() + c.numel() * 8


def test_launch_kwargs_are_empty_unless_a_timeline_is_active(monkeypatch):
    assert T.ACTIVE is None and T.launch_kwargs("mlp", 3) == {}
    line = T.Timeline("cpu", programs=8)
    monkeypatch.setattr(T, "ACTIVE", line)
    kw = T.launch_kwargs("mlp", 3)
    assert set(kw) == {"TL"} and kw["TL"].numel() == 3 * T.WORDS and line.launches == [("mlp", 0, 3, ())]
    assert T.slot("chunks", 2, ("qkv",)).numel() == 2 * (T.WORDS + 1)
    monkeypatch.setattr(T, "ACTIVE", None)
    assert T.slot("chunks", 2, ("qkv",)) is None


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


def test_marks_and_programs_that_left_without_waiting():
    """A launch with marks reads them as lists beside the stamps and summarizes each as its median time after the
    wait; a program stamped with wait 0 (the CUDA chunks past the position: they leave without waiting) counts in the
    starts and ends but not in the waits, the work, the lead or the marks, nor in the next launch's gap."""
    line = T.Timeline("cpu", programs=16)
    # (start, wait, end, sm, qkv, tiles): two live chunk programs, one past the position
    line.slot("chunks", 3, ("qkv", "tiles")).copy_(torch.tensor(
        [(1000, 3000, 6000, 0, 3500, 5000), (2000, 4000, 8000, 1, 4700, 7000), (1500, 0, 1600, 2, 0, 0)],
        dtype=torch.int64).flatten())
    _fill(line, "merge", [(7000, 9000, 9500, 3)])
    steps = [line.read()]
    x = steps[0][0]
    assert x["marks"] == ["qkv", "tiles"] and x["qkv"] == [3500, 4700, 0] and x["tiles"] == [5000, 7000, 0]
    assert steps[0][1]["marks"] == [] and "qkv" not in steps[0][1]
    st = T.launch_stats(x, 1000)
    assert st["programs"] == 3 and st["waited"] == 2 and st["sms"] == 3
    assert (st["start_first"], st["end_first"], st["wait_first"], st["wait_last"]) == (0.0, 5.0, 2.0, 3.0)
    assert st["work_med"] == 3.5 and st["work_max"] == 4.0 and st["lead_med"] == 2.0  # (3, 4); (2, 2)
    assert st["qkv_med"] == 0.6 and st["tiles_med"] == 2.5  # (0.5, 0.7); (2, 3)
    rel = T.shifted(x, 1000)  # what scripts/timeline.py keeps: ns from the step's first start, 0 where not waited
    assert rel["start"] == [0, 1000, 500] and rel["wait"] == [2000, 3000, 0] and rel["qkv"] == [2500, 3700, 0]
    assert rel["end"] == [5000, 7000, 600] and rel["sm"] == x["sm"] and x["start"][0] == 1000  # (a copy)
    s = T.summarize(steps)
    assert s["chunks"]["qkv_med"] == 0.6 and s["chunks"]["waited"] == 2 and s["chunks"]["span"] == 5.0
    assert s["chunks"]["tail"] == 1.0  # 7 - 6: the live programs' ends (with the third's, 6 - 5 would be 2)
    assert s["merge"]["gap_after_chunks"] == 1.0 and "qkv_med" not in s["merge"]  # 9 - 8
    # a next layer's chunks: the program that left (its wait 0) is not its first wait
    line.slot("chunks", 2, ("qkv", "tiles")).copy_(torch.tensor(
        [(9100, 0, 9200, 4, 0, 0), (9200, 11000, 12000, 5, 11200, 11800)], dtype=torch.int64).flatten())
    two = T.summarize([line.read()])
    assert two["chunks"]["gap_after_merge"] == 1.5  # 11 - 9.5
    with pytest.raises(ValueError, match="no program of a 'chunks' launch waited"):
        T.launch_stats({**x, "wait": [0, 0, 0]}, 1000)


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
