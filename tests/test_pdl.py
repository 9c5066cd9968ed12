"""Programmatic dependent launch's switches (native/pdl.py): which kernels let the next one launch before their own
wait (EARLY), the sets the step tuner times, and the order of the two griddepcontrol instructions in the kernels'
code."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import compiled_for_sm90

from floorline.native import pdl as P
from floorline.native.tuner import TUNER


def test_a_role_named_early_gets_the_early_switch_only_where_pdl_is_on():
    early = frozenset({"chunks", "merge"})
    assert P.switch(1, "chunks", early) == P.EARLY == 2
    assert P.switch(1, "o", early) == 1 and P.switch(0, "chunks", early) == 0
    assert P.switch(1, "qkv", frozenset()) == 1
    with pytest.raises(ValueError, match="unknown kernel role 'attn'"):
        P.switch(1, "attn", early)


def test_after_wait_and_auto_are_both_on_where_the_gpu_has_pdl_and_off_on_a_cpu():
    assert P.mode("auto", "cpu") == P.mode("after-wait", "cpu") == P.mode("off", "cpu") == 0
    with pytest.raises(Exception, match="pdl='early': use auto or after-wait or off"):
        P.mode("early", "cpu")


def test_the_tuner_times_none_and_each_role_then_the_union_of_the_winners():
    roles = ["qkv", "chunks", "merge", "o", "mlp"]
    first = P.early_candidates(roles)
    assert first == [frozenset()] + [frozenset([r]) for r in roles]
    times = dict(zip(first, [1.0, 1.01, 0.99, 0.98, 1.0, 1.2]))  # chunks and merge beat none; o ties
    assert P.early_candidates(roles, times) == [frozenset({"chunks", "merge"})]
    times[frozenset(["merge"])] = 1.05  # one winner: nothing more to try
    assert P.early_candidates(roles, times) == []
    assert P.early_name(frozenset({"mlp", "chunks", "qkv"})) == "qkv+chunks+mlp" and P.early_name(frozenset()) == "none"


class _Net:
    """What retune_early_in_step touches of a NativeModel: its PDL switch, early set and step (a counter)."""

    def __init__(self, pdl):
        self.pdl, self.early, self.steps = pdl, frozenset(), 0

    def step(self):
        self.steps += 1


def test_the_early_retune_keeps_the_second_rounds_fastest_and_records_both_rounds(monkeypatch):
    """Round one: none and each role; two roles beat none, so round two times none, the fastest single and their
    union again. The choice is round two's fastest (the union), not a single timed faster only in round one
    (merge); the record keeps both rounds. With one winner there is no second round; without PDL, no trial."""
    from floorline.device import timing

    rounds = [{frozenset(): 1.0, frozenset(["qkv"]): 1.02, frozenset(["chunks"]): 0.97, frozenset(["merge"]): 0.98},
              {frozenset(): 1.01, frozenset(["chunks"]): 0.995, frozenset(["chunks", "merge"]): 0.99}]
    calls = []

    def fake(cands, use, capture, state, reps, warm=None):
        cost = rounds[len(calls)]
        calls.append(list(cands))
        for c in cands:
            use(c)
            warm()
        use(min(cands, key=cost.get))
        return {c: cost[c] for c in cands}

    monkeypatch.setattr(timing, "fastest_in_step", fake)
    net, tok = _Net(1), torch.tensor([5])
    P.retune_early_in_step(net, None, [tok], ["qkv", "chunks", "merge"])
    assert calls[1] == [frozenset(), frozenset(["chunks"]), frozenset(["chunks", "merge"])]
    assert net.early == frozenset(["chunks", "merge"]) and net.steps == 7 and tok.item() == 5
    assert TUNER.step_tuning["pdl_early"] == {"none": 1.0, "qkv": 1.02, "chunks": 0.97, "merge": 0.98,
                                              "again none": 1.01, "again chunks": 0.995, "again chunks+merge": 0.99}
    calls.clear()
    rounds[0] = {frozenset(): 1.0, frozenset(["qkv"]): 0.99, frozenset(["chunks"]): 1.01}  # one winner: one round
    one = _Net(1)
    P.retune_early_in_step(one, None, [tok], ["qkv", "chunks"])
    assert len(calls) == 1 and one.early == frozenset(["qkv"])
    calls.clear()
    off = _Net(0)
    P.retune_early_in_step(off, None, [tok], ["qkv"])  # no PDL: nothing to time
    assert calls == [] and off.early == frozenset()


def test_the_early_switch_puts_the_launch_of_the_next_kernel_before_the_wait():
    """The merge kernel for sm_90 (Triton's ptxas, no GPU): with PDL 1 its PTX waits, then lets the next kernel launch;
    with PDL 2 (EARLY) the other way round; with PDL 0 neither."""
    out = compiled_for_sm90(
        "from floorline.native import attention as A\n"
        "ptr = dict(MO='*fp32', LO='*fp32', OO='*fp32', OUT='*fp32', POS='*i32', ZP='*fp32')\n"
        "kw = dict(ints=('NCHUNK', 'ZN'), divisible=())\n"
        "res = []\n"
        "for pdl in (0, 1, 2):\n"
        "    const = dict(G=4, GP=16, D=128, CHUNK=64, CB=32, PDL=pdl, ZB=0, DB=32)\n"
        "    ptx = gemv_sass.compiled(A._attn_merge, const, 1, pointers=ptr, **kw).asm['ptx']\n"
        "    res.append([ptx.find('griddepcontrol.wait'), ptx.find('griddepcontrol.launch_dependents')])\n"
        "print(json.dumps(res))")
    (w0, l0), (w1, l1), (w2, l2) = json.loads(out.splitlines()[-1])
    assert w0 == l0 == -1
    assert 0 < w1 < l1 and 0 < l2 < w2
