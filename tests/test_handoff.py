"""The attention's handoff by counters (NativeModel.handoff, pdl.wait_count): the chunks wait on the q/k/v GEMV's
per-kv-group counters and the merge on the chunks', instead of each kernel's end. Under Triton's interpreter (each
kernel runs to its end before the next: a wrong count shows as an error word, not a race): the whole step against HF
fp32, the counters' sums, a count that cannot be met ending in one line. On a GPU: test_gpu_native.py."""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton", reason="mode native's kernels need Triton: pip install 'floorline[native]'")
from test_native import _attention_case, _compare_with_hf, interpreted  # noqa: E402

from floorline.bench import models  # noqa: E402
from floorline.core import zoo  # noqa: E402
from floorline.core.errors import UserError  # noqa: E402
from floorline.native import attention as A  # noqa: E402
from floorline.native import gemv as G  # noqa: E402
from floorline.native.model import NativeModel  # noqa: E402
from floorline.native.options import NativeOptions  # noqa: E402


@interpreted
def test_the_step_with_the_handoff_matches_hf_and_counts_every_row_and_chunk():
    """tiny-qwen3 (q/k norm, 2 kv groups of 2 query heads of 32 dims) with a 64-position cache in chunks of 16, so the
    merge waits on four chunks a kv head. Two steps: the embedding zeroes the counters at each step's start, so each
    layer's q/k/v counters end at (G + 2) D = 128 rows a group and its chunk counters at 4."""
    nets = []

    def tweak(net):
        assert net.handoff_ok and not net.handoff  # off until the step tuner chooses
        net.handoff = True
        nets.append(net)

    assert _compare_with_hf("tiny-qwen3", "triton", steps=2, options=NativeOptions(attn_chunk=16), tweak=tweak) < 1e-5
    net = nets[0]
    net.check()
    assert net.counts.tolist() == [[128, 128, 4, 4]] * 4 and int(net.count_err) == 0


@interpreted
def test_a_count_that_cannot_be_met_ends_in_one_line():
    """The chunks asked to wait on counters nobody raised: the wait gives up (one read under the interpreter; a
    second on a GPU), sets the error word, and check() names the setting that avoids it."""
    heads, kv, d, length = 4, 2, 32, 64
    qkv, cos, sin, kc, vc, p, _, _ = _attention_case(heads, kv, d, length, 20)
    scratch = A.AttnScratch(heads, kv, d, length, "cpu", chunk=16)
    cnt, err = torch.zeros(2 * kv, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    A.tri_attention(qkv, cos, sin, p, kc, vc, heads, d ** -0.5, scratch, counts=(cnt, err))
    assert int(err) == 1 and cnt.tolist() == [0, 0, 4, 4]  # every chunk still raises its kv head's counter
    m = models.build_random(zoo.ZOO["tiny-llama"], torch.device("cpu"), "fp32", seed=0)
    net = NativeModel(m, 32, ops="triton")
    net.count_err.fill_(1)
    with pytest.raises(UserError, match="step_tune=off") as e:
        net.check()
    assert "\n" not in str(e.value)


def test_the_handoff_is_refused_where_it_has_no_counters():
    """Only a bf16 q/k/v GEMV counts rows; only the Triton chunks with their merge kernel wait on counts; int4 q/k/v
    and the torch ops are never offered the handoff."""
    cnt = torch.zeros(4, dtype=torch.int32)
    with pytest.raises(ValueError, match="bf16 q/k/v GEMV"):
        G.tri_gemv(torch.zeros(8, 16), torch.zeros(16), residual=torch.zeros(8), counts=(cnt, (2, 1, 2)))
    scratch = A.AttnScratch(4, 2, 32, 64, "cpu")
    with pytest.raises(ValueError, match="the Triton chunks with their merge kernel"):
        A.tri_attention(torch.zeros(256), None, None, None, torch.zeros(2, 64, 32), None, 4, 1.0, scratch,
                        merge=False, counts=(cnt, cnt))
    m = models.build_random(zoo.ZOO["tiny-qwen2"], torch.device("cpu"), "fp32", seed=0)
    assert not NativeModel(m, 32, ops="torch").handoff_ok
    from floorline import quant

    quant.convert(m, quant.get("int4"), torch.float32)
    assert not NativeModel(m, 32, ops="triton").handoff_ok
