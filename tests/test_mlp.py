"""The fused MLP (native/mlp.py; the default, FLOORLINE_FUSED_MLP=0 turns it off): its kernel under Triton's
interpreter against the torch reference, and the native model with it against HF in fp32 (the three residual buffers
in turn, step after step)."""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton", reason="mode native's kernels need Triton: pip install 'floorline[native]'")
from floorline.errors import UserError  # noqa: E402
from floorline.native import kernels as K  # noqa: E402
from floorline.native import mlp as M  # noqa: E402
from test_native import _compare_with_hf, _rand, _rel, interpreted  # noqa: E402


@interpreted
@pytest.mark.parametrize("hidden, inter, config", [
    (48, 12, (2, 4, 1)),  # hidden not a power of two (masked columns); one program takes every tile
    (64, 12, (4, 4, 5)),  # 3 tiles over 5 programs: two with none (they still carry / zero their shares)
    (40, 14, (1, 4, 3)),  # 14 one-row tiles over 3 programs: ranges of 4, 5, 5
    (32, 16, (2, 8, 2)),
])
def test_fused_mlp_matches_its_reference_and_zeroes_the_next_buffer(hidden, inter, config):
    gate_up = _rand(2 * inter, hidden, dtype=torch.bfloat16, scale=0.1)
    down_t = _rand(inter, hidden, dtype=torch.bfloat16, scale=0.1)
    norm_w = _rand(hidden) + 1
    x = _rand(hidden)
    x0 = x.clone()
    out, zero = torch.zeros(hidden), _rand(hidden)
    M.tri_mlp(gate_up, down_t, x, out, zero, norm_w, 1e-6, config=config)
    want = M.ref_mlp(gate_up, down_t, x0, norm_w, 1e-6)
    assert _rel(out, want) < 1e-5
    assert torch.equal(x, x0) and not zero.any()
    # the reference is the two-GEMV path's math: gate_up with RMSNorm and glu, then down adding into the residual
    act = K.ref_gemv(gate_up, x0, pro=K.PRO_RMSNORM, norm_w=norm_w, eps=1e-6, glu=True)
    two = K.ref_gemv(down_t.t().contiguous(), act, residual=x0)
    assert _rel(two, want) < 1e-5


def test_fused_mlp_refuses_shared_buffers_and_a_bad_switch(monkeypatch):
    gate_up, down_t = torch.zeros(8, 16, dtype=torch.bfloat16), torch.zeros(4, 16, dtype=torch.bfloat16)
    x = torch.zeros(16)
    with pytest.raises(ValueError, match="three distinct"):
        M.tri_mlp(gate_up, down_t, x, x, torch.zeros(16), torch.ones(16), 1e-6)
    with pytest.raises(ValueError, match="contiguous"):
        M.tri_mlp(gate_up, torch.zeros(16, 4, dtype=torch.bfloat16).t(), x, torch.zeros(16), torch.zeros(16),
                  torch.ones(16), 1e-6)
    assert M.fitting(18944)[0] == M.CANDIDATES[0] and M.fitting(7) == [(1, 16, 1)]
    monkeypatch.setenv("FLOORLINE_FUSED_MLP", "yes")
    with pytest.raises(UserError, match="FLOORLINE_FUSED_MLP='yes': use 0 or 1"):
        M.enabled()
    monkeypatch.setenv("FLOORLINE_FUSED_MLP", "0")
    assert not M.enabled()
    monkeypatch.delenv("FLOORLINE_FUSED_MLP")
    assert M.enabled()  # the default


def test_the_native_step_fuses_dense_mlps_by_default(monkeypatch):
    """The default: three residual buffers and down^T; test_native's comparisons with HF (both tiny models, both ops)
    run this path. int4 keeps the two GEMVs."""
    from floorline import models, quant, zoo
    from floorline.native.model import NativeModel

    monkeypatch.delenv("FLOORLINE_FUSED_MLP", raising=False)
    m = models.build_random(zoo.ZOO["tiny-qwen2"], torch.device("cpu"), "fp32", seed=0)
    net = NativeModel(m, 64, ops="torch")
    assert net.fused_mlp and net.xs.shape[0] == 3 and len(net.layers) % 3 != 0  # the last output not in buffer 0
    assert torch.equal(net.layers[0]["down_t"], net.layers[0]["down"]["w"].t())
    quant.convert(m, quant.get("int4"), torch.float32)
    assert not NativeModel(m, 64, ops="torch").fused_mlp


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2"])
@pytest.mark.parametrize("ops", ["torch", "triton"])
def test_native_without_the_fused_mlp_matches_hf_in_fp32(name, ops, monkeypatch):
    """FLOORLINE_FUSED_MLP=0: gate_up then down, the residual in place (dense weights; what int4 always runs)."""
    if ops == "triton" and not K.INTERPRET:
        pytest.skip("Triton on CPU tensors needs TRITON_INTERPRET=1; on a GPU: test_gpu_native.py")
    monkeypatch.setenv("FLOORLINE_FUSED_MLP", "0")
    from floorline import models, zoo
    from floorline.native.model import NativeModel

    net = NativeModel(models.build_random(zoo.ZOO[name], torch.device("cpu"), "fp32", seed=0), 64, ops=ops)
    assert not net.fused_mlp and net.xs.shape[0] == 1
    assert _compare_with_hf(name, ops) < 1e-5
