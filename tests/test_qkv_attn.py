"""q/k/v, the attention's chunks and its merge in one launch (native/qkv_attn.py), under Triton's interpreter: the
whole native step with it against HF fp32, the deadlock that must end in one line, and which layers are offered it.
On a GPU: test_gpu_native.py."""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton", reason="mode native's kernels need Triton: pip install 'floorline[native]'")
from test_native import _compare_with_hf, interpreted  # noqa: E402

from floorline.bench import models  # noqa: E402
from floorline.core import zoo  # noqa: E402
from floorline.core.errors import UserError  # noqa: E402
from floorline.native import qkv_attn as QA  # noqa: E402
from floorline.native.model import NativeModel  # noqa: E402
from floorline.native.options import NativeOptions  # noqa: E402


@interpreted
@pytest.mark.parametrize("name, config, chunk", [("tiny-qwen3", QA.Config(), 16), ("tiny-qwen2", QA.Config(qkv=0), 0)])
def test_the_step_with_one_launch_matches_hf(name, config, chunk):
    """tiny-qwen3 (the q/k norm): q/k/v tasks in the launch, a 64-position cache in chunks of 16, so the merge tasks
    wait on the chunks and the chunks on their group's q/k/v rows; tiny-qwen2 (q/k/v biases): the GEMV before the
    launch and one chunk a kv head (no merge tasks). Two steps over four layers: a layer's counters left unzeroed
    would let the next step's waits pass early (or its tickets start past the end)."""
    launches = []

    def tweak(net):
        qa = net.qkv_attn
        assert qa is not None and qa.config is None  # off until the step tuner chooses
        qa.config = config
        assert net.attn.nchunk == (64 // chunk if chunk else 1)
        launch = qa.launch
        qa.launch = lambda i, x: (launches.append(i), launch(i, x))[1]

    options = NativeOptions(attn_chunk=chunk) if chunk else None
    assert _compare_with_hf(name, "triton", steps=2, options=options, tweak=tweak) < 1e-5
    assert launches == list(range(4)) * 2


def _tiny_net(name="tiny-llama", quant_name=None, ops="triton"):
    from floorline import quant

    m = models.build_random(zoo.ZOO[name], torch.device("cpu"), "fp32", seed=0)
    if quant_name:
        quant.convert(m, quant.get(quant_name), torch.float32)
    return NativeModel(m, 64, ops=ops)


@interpreted
def test_a_wait_that_cannot_be_met_ends_in_one_line_not_a_hang(monkeypatch):
    """Every chunk waits for one q/k/v task more than its group has: the wait runs out its deadline (polls under the
    interpreter), writes its ticket into the error word, and the launch returns; check() names the kernel and the
    setting that avoids it. The last program out still zeroes the counters: the next step runs clean."""
    from floorline.native import persist as PS

    monkeypatch.setattr(PS, "LIMIT_POLLS", 200)
    net = _tiny_net()
    qa = net.qkv_attn
    qa.config, qa.drop = QA.Config(), 1
    net.tok.fill_(3)
    net.pos.fill_(5)
    net.step()
    with pytest.raises(UserError, match="step_tune=off") as e:
        qa.check()
    assert "\n" not in str(e.value) and "q/k/v + attention" in str(e.value)
    qa.drop = 0
    qa.err.zero_()
    net.step()
    qa.check()
    assert int(net.pos) == 7 and int(qa.cnt.abs().sum()) == 0


@interpreted
def test_only_dense_triton_layers_are_offered_one_launch():
    """int4 q/k/v (its split-K GEMV adds into the vector) and the torch ops have no one launch; the tuner's names
    say what each candidate runs."""
    assert _tiny_net().qkv_attn is not None
    assert _tiny_net(ops="torch").qkv_attn is None
    assert _tiny_net("tiny-qwen2", quant_name="int4").qkv_attn is None
    assert QA.Config().name() == "q/k/v 16x512 + chunks + merge w8"
    assert QA.Config(qkv=0, warps=4).name() == "chunks + merge w4"
    assert len(set(QA.CANDIDATES)) == len(QA.CANDIDATES)
