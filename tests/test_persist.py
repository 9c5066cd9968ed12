"""The persistent layer kernel (native/persist.py) on the CPU, under Triton's interpreter: the whole model against HF
transformers in fp32 (one chunk a kv head, and several with their merge tasks), the deadlock that must end in one
line instead of a hang, and the option's refusals. On a GPU: test_gpu_native.py."""

from __future__ import annotations

import pytest
import torch
from test_native import _compare_with_hf, interpreted

from floorline.bench import models
from floorline.core import zoo
from floorline.core.errors import UserError
from floorline.native import persist as PS
from floorline.native.model import NativeModel
from floorline.native.options import NativeOptions

ON = NativeOptions(persist="on")


@interpreted
@pytest.mark.parametrize("name, chunk", [("tiny-qwen2", 0), ("tiny-qwen3", 16)])
def test_persistent_layers_match_hf_in_fp32(name, chunk):
    """tiny-qwen2: q/k/v biases, one chunk a kv head (its output written by the chunk task itself); tiny-qwen3: the
    q/k norm, a cache of 64 positions in chunks of 16, so the merge tasks run and the o tasks wait on them. Two
    steps: the last program out must have zeroed the counters and the ticket, or the second step's waits would pass
    at once (wrong logits) or its tickets start past the end (no step at all)."""
    launches = []

    def tweak(net):
        assert net.persist is not None and net.persist_on
        if chunk:
            net.persist = PS.PersistStep(net, chunk=chunk)
            assert net.persist.nchunk == 64 // chunk
        launch = net.persist.launch
        net.persist.launch = lambda: (launches.append(1), launch())

    assert _compare_with_hf(name, "triton", steps=2, options=ON, tweak=tweak) < 1e-5
    assert len(launches) == 2


def _tiny_net(name="tiny-llama", options=ON, quant_name=None):
    from floorline import quant

    m = models.build_random(zoo.ZOO[name], torch.device("cpu"), "fp32", seed=0)
    if quant_name:
        quant.convert(m, quant.get(quant_name), torch.float32)
    return NativeModel(m, 64, ops="triton", options=options)


@interpreted
def test_a_wait_that_cannot_be_met_ends_in_one_line_not_a_hang(monkeypatch):
    """Every wait on a layer's MLP asks for one task more than the layer has: the first such wait runs out its
    deadline (polls under the interpreter), writes its ticket into the error word, and every later one finds the
    deadline passed; the kernel returns and check() names the kernel and persist=off."""
    monkeypatch.setattr(PS, "LIMIT_POLLS", 200)
    net = _tiny_net()
    net.persist.drop = 1
    net.tok.fill_(3)
    net.pos.fill_(5)
    net.step()
    with pytest.raises(UserError, match="persist=off") as e:
        net.persist.check()
    assert "\n" not in str(e.value)
    net.persist.drop = 0  # counters zeroed by the last program out: the next step runs clean
    net.persist.err.zero_()
    net.step()
    net.persist.check()
    assert int(net.pos) == 7 and int(net.persist.cnt.abs().sum()) == 0


@interpreted
def test_persist_on_refuses_int4_in_one_line_and_auto_leaves_it_off():
    with pytest.raises(UserError, match="persist=off"):
        _tiny_net("tiny-qwen2", quant_name="int4")
    net = _tiny_net("tiny-qwen2", options=NativeOptions(persist="auto"), quant_name="int4")
    assert net.persist is None and not net.persist_on


@interpreted
def test_persist_on_refuses_a_tensor_parallel_shard_in_one_line():
    """The tensor-parallel step (a NativeModel subclass with its own step) has no persistent form: `on` says so
    instead of running the per-kernel step silently."""
    class Shard(NativeModel):
        pass

    m = models.build_random(zoo.ZOO["tiny-llama"], torch.device("cpu"), "fp32", seed=0)
    with pytest.raises(UserError, match="tensor parallelism"):
        Shard(m, 64, ops="triton", options=ON)
    assert Shard(m, 64, ops="triton", options=NativeOptions(persist="auto")).persist is None


def test_the_persist_option_takes_off_on_auto_and_says_so_otherwise():
    assert NativeOptions.parse("persist=auto").persist == "auto"
    assert NativeOptions().persist == "off"
    with pytest.raises(UserError, match="off or on or auto"):
        NativeOptions.parse("persist=yes")


def test_gemv_tasks_tile_k_by_the_largest_power_of_two_that_divides_it():
    assert [PS.tile_k(k, 512) for k in (2048, 896, 1536, 3072, 4096, 64)] == [512, 128, 512, 512, 512, 64]
    with pytest.raises(UserError, match="multiple of 16"):
        PS.tile_k(100, 512)
