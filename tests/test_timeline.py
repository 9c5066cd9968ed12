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
    """The merge kernel and the Triton GEMV (a bf16 q/k/v tile two ahead, an int4 tile, an o tile split over K) for
    sm_90 (Triton's ptxas, no GPU): with TL a pointer their code reads %globaltimer and %smid; with TL None (every
    product launch) neither. (Whether their code with TL None is that of a revision before TL: scripts/sass_same.py.)"""
    out = compiled_for_sm90(
        "from floorline.native import attention as A, gemv as G\n"
        "def timers(kernel, const, warps, ptr, **kw):\n"
        "    plain = gemv_sass.compiled(kernel, {**const, 'TL': None}, warps, pointers=ptr, **kw).asm['ptx']\n"
        "    stamped = gemv_sass.compiled(kernel, const, warps, pointers={**ptr, 'TL': '*i64'}, **kw).asm['ptx']\n"
        "    return ['globaltimer' in plain, '%smid' in plain, 'globaltimer' in stamped, '%smid' in stamped]\n"
        "ptr = dict(MO='*fp32', LO='*fp32', OO='*fp32', OUT='*fp32', POS='*i32', ZP='*fp32')\n"
        "res = [timers(A._attn_merge, dict(G=4, GP=16, D=128, CHUNK=64, CB=32, PDL=1, ZB=0, DB=32), 1, ptr,\n"
        "              ints=('NCHUNK', 'ZN'), divisible=())]\n"
        "tiles = [(8, 256, 4, 2, 0, (1, 0, 0, 1, 1)), (4, 512, 1, 1, 1, (1, 0, 0, 1, 0)),\n"
        "         (8, 256, 4, 2, 0, (0, 0, 1, 2, 0))]\n"
        "for bn, bk, warps, ahead, int4, flags in tiles:\n"
        "    const = gemv_sass.constants(bn, bk, ahead, *flags, int4=int4)\n"
        "    res.append(timers(G._gemv, const, warps, gemv_sass.POINTERS))\n"
        "print(json.dumps(res))")
    assert json.loads(out.splitlines()[-1]) == [[False, False, True, True]] * 4


def test_a_stamped_gemv_runs_the_tuned_tile_with_a_slot_for_its_programs(monkeypatch):
    """tri_gemv on a GPU (stubbed: no launch, the autotuner's cache faked) with a step timeline active and a kind: the
    tile the autotuner chose for the shape (N, K, prologue, glu, acc), launched directly with a slot of ACTIVE for its
    grid's programs (rows / BN x splits), not through the autotuner, whose key would count the slot; without a kind or
    a timeline the autotuner launches, unstamped; a shape never tuned is a one-line error."""
    import types

    triton = pytest.importorskip("triton", reason="mode native's kernels need Triton: pip install 'floorline[native]'")
    from floorline.native import gemv as G

    tile = triton.Config({"BN": 8, "BK": 256, "STAGES": 0, "SPLIT": 2, "AHEAD": 1}, num_warps=4)
    other = triton.Config({"BN": 4, "BK": 512, "STAGES": 0, "SPLIT": 1, "AHEAD": 1}, num_warps=2)
    launched = []

    class Kernel:  # kernel[grid](*args, **kw): the launch, recorded
        def __init__(self, name, cache=None):
            self.name, self.cache = name, cache or {}

        def __getitem__(self, grid):
            return lambda *args, **kw: launched.append((self.name, grid, kw))

    monkeypatch.setattr(G, "INTERPRET", False)
    monkeypatch.setattr(G, "_gemv", Kernel("direct"))
    bf, f32 = "torch.bfloat16", "torch.float32"  # the key: N, K, PRO, GLU, ACC, then the tensors' dtypes
    wide = triton.Config({"BN": 16, "BK": 256, "STAGES": 0, "SPLIT": 1, "AHEAD": 1}, num_warps=8)
    cache = {(100, 512, 0, False, False, bf, f32, f32, f32, f32, f32, f32): other,  # the shape but not acc
             (100, 512, 1, False, True, bf, f32, f32, f32, f32, f32, f32): other,  # nor pro
             (100, 512, 0, True, True, bf, f32, f32, f32, f32, f32, f32): other,  # nor glu
             (100, 512, 0, False, True, f32, f32, f32, f32, f32, f32, f32): wide,  # the shape, other dtypes
             (100, 512, 0, False, True, bf, f32, f32, f32, f32, f32, f32): tile,
             (100, 512, 1, True, False, bf, f32, f32, f32, f32, f32, f32): wide}
    monkeypatch.setattr(G, "_gemv_bf16", Kernel("autotuned", cache))
    w = types.SimpleNamespace(shape=(100, 512), is_cuda=True, device=torch.device("cpu"), dtype=torch.bfloat16)
    y = torch.zeros(100)
    line = T.Timeline("cpu", programs=64)
    monkeypatch.setattr(T, "ACTIVE", line)
    G.tri_gemv(w, torch.zeros(512), residual=y, out=y, pdl=0, kind="o")
    name, grid, kw = launched[-1]
    assert name == "direct" and grid == (13, 2) and kw["BN"] == 8 and kw["num_warps"] == 4 and kw["SPLIT"] == 2
    assert kw["TL"].numel() == 26 * T.WORDS and line.launches == [("o", 0, 26, ())]  # 13 row blocks x 2 splits
    g = torch.zeros(50)
    G.tri_gemv(w, torch.zeros(512), out=g, pdl=0, pro=1, glu=True, kind="gate_up")  # 50 outputs, 8 a program
    assert launched[-1][:2] == ("direct", (7, 1)) and line.launches[-1] == ("gate_up", 26 * T.WORDS, 7, ())
    G.tri_gemv(w, torch.zeros(512), residual=y, out=y, pdl=0)  # no kind: the autotuner's launch, unstamped
    assert launched[-1][0] == "autotuned" and "TL" not in launched[-1][2] and len(line.launches) == 2
    with pytest.raises(ValueError, match="no tuned GEMV tiles for 100x512"):
        G.tri_gemv(w, torch.zeros(512), out=y, pdl=0, glu=True, kind="gate_up")
    monkeypatch.setattr(G, "INTERPRET", True)  # the interpreter: the fixed tile, never stamped (no timer there)
    G.tri_gemv(w, torch.zeros(512), residual=y, out=y, pdl=0, kind="o")
    assert launched[-1][0] == "direct" and "TL" not in launched[-1][2] and len(line.launches) == 2
    monkeypatch.setattr(G, "INTERPRET", False)
    monkeypatch.setattr(T, "ACTIVE", None)
    G.tri_gemv(w, torch.zeros(512), residual=y, out=y, pdl=0, kind="o")
    assert launched[-1][0] == "autotuned" and "TL" not in launched[-1][2]
