"""timing: the step timer covers each step whole and nothing between; the graph timer's CPU path and, on a GPU, its
captured replays."""

from __future__ import annotations

import time

import pytest
import torch

from floorline.device import timing


def test_cpu_timer_times_each_step():
    calls = []

    def step():
        calls.append(time.perf_counter())
        time.sleep(0.01 * len(calls))

    ms = timing.time_steps(step, 4, torch.device("cpu"))
    assert len(calls) == 4 and len(ms) == 4
    for i, t in enumerate(ms, 1):  # (10 ms apart: a loaded machine, such as two test workers, wakes late by a few)
        assert 10.0 * i <= t < 10.0 * i + 50  # step i sleeps 10*i ms; its sample covers it
    assert ms == sorted(ms)


def test_consecutive_marks_leave_no_gap():
    # the samples tile the timed region: their sum is the wall time from the first mark to the last
    t0 = time.perf_counter()
    ms = timing.time_steps(lambda: time.sleep(0.001), 5, torch.device("cpu"))
    wall = (time.perf_counter() - t0) * 1e3
    assert sum(ms) <= wall and sum(ms) > 0.9 * wall - 1


def test_timer_for_picks_the_clock():
    assert isinstance(timing.timer_for(torch.device("cpu"), 3), timing.CpuTimer)


def test_time_captured_on_the_cpu_runs_warmups_untimed():
    calls = []
    ms = timing.time_captured(lambda: calls.append(1), warmup=3, samples=7, device=torch.device("cpu"))
    assert len(calls) == 10 and len(ms) == 7 and all(t >= 0 for t in ms)


@pytest.mark.gpu
def test_cuda_timer_and_graph_timers():
    dev = torch.device("cuda")
    x = torch.randn(1 << 24, device=dev)
    y = torch.empty_like(x)
    ms = timing.time_steps(lambda: y.copy_(x), 5, dev)
    assert len(ms) == 5 and all(t > 0 for t in ms)
    n = []
    samples = timing.time_captured(lambda: (n.append(1), y.copy_(x)), warmup=2, samples=6, device=dev)
    assert len(samples) == 6 and all(t > 0 for t in samples)
    assert len(n) == 3  # the body runs in Python only for its warm-ups and the capture: replays are the graph's
    one = timing.graph_ms([lambda: y.copy_(x)])
    four = timing.graph_ms([lambda: y.copy_(x)] * 4)
    assert one > 0 and four == pytest.approx(one, rel=0.5)  # per call, not per graph


def test_the_step_tuner_warms_every_candidate_before_timing_any(monkeypatch):
    """fastest_in_step with `warm`: each candidate put in place and warmed (compiled outside any capture) before the
    first timed replay; then each timed; the fastest left in place."""
    log = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: log.append("sync"))
    monkeypatch.setattr(timing, "state_replay_ms", lambda capture, state, reps: {"a": 3.0, "b": 1.0, "c": 2.0}[now[0]])
    now = [None]

    def use(c):
        now[0] = c
        log.append(f"use {c}")

    times = timing.fastest_in_step(["a", "b", "c"], use, None, [], warm=lambda: log.append(f"warm {now[0]}"))
    assert log[:7] == ["use a", "warm a", "use b", "warm b", "use c", "warm c", "sync"]
    assert times == {"a": 3.0, "b": 1.0, "c": 2.0} and now[0] == "b" and log[-1] == "use b"


def test_the_step_tuner_puts_the_state_back_after_warming(monkeypatch):
    """A warm-up that runs whole steps (the early-trigger trials: net.step) advances the token and position; the
    trials are then timed from where the decode was, not from where the warm-ups left it."""
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    tok, pos = torch.tensor([7]), torch.tensor([100], dtype=torch.int32)
    seen = []
    monkeypatch.setattr(timing, "state_replay_ms", lambda capture, state, reps: seen.append(int(state[1])) or 1.0)

    def step():
        tok.fill_(3)
        pos.add_(1)

    timing.fastest_in_step(["a", "b"], lambda c: None, None, [tok, pos], warm=step)
    assert seen == [100, 100] and int(tok) == 7 and int(pos) == 100


@pytest.mark.gpu
def test_the_final_round_interleaves_the_finalists_and_keeps_the_fastest():
    """fastest_interleaved: each finalist warmed (then the state put back) and captured once; the medians rank graphs
    that sleep 3, 1 and 2 units (a, b, c) as b < c < a, the fastest left in place, the state as it was before."""
    dev = torch.device("cuda")
    pos = torch.zeros(1, device=dev, dtype=torch.int32)
    now, warmed = [None], []
    cycles = {"a": 3_000_000, "b": 1_000_000, "c": 2_000_000}

    def body():
        torch.cuda._sleep(cycles[now[0]])
        pos.add_(1)

    def use(c):
        now[0] = c

    def warm():
        warmed.append(now[0])
        body()

    times = timing.fastest_interleaved(["a", "b", "c"], use, lambda: timing.capture_graph(body, 0), [pos],
                                       rounds=2, reps=3, warm=warm)
    assert warmed == ["a", "b", "c"] and now[0] == "b" and int(pos.item()) == 0
    assert times["b"] < times["c"] < times["a"], times


def test_a_keeper_puts_the_state_back_to_its_values_when_made():
    """timing.keeper (the step tuners' and the timeline's restore): later writes to the state are undone, each time."""
    tok, pos = torch.tensor([7]), torch.tensor([100], dtype=torch.int32)
    restore = timing.keeper([tok, pos])
    for _ in range(2):
        tok.fill_(3)
        pos.add_(5)
        restore()
        assert int(tok) == 7 and int(pos) == 100
