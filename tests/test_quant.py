"""Quantised backends on the CPU: each format's bytes by hand and (nf4, whose library runs here) against the converted
tensors; the shared quantisation math; the protocol, conversion and the check on a fake backend; every unavailable
path's one-line message (the study `floorline quant` and its rows: test_quantstudy.py)."""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch
from conftest import run_cli

from floorline import quant
from floorline.bench import config, measure, models
from floorline.core import floor, zoo
from floorline.core.errors import UserError
from floorline.quant import base

HAS_BNB = importlib.util.find_spec("bitsandbytes") is not None
QWEN = zoo.ZOO["qwen2.5-7b"]


# ------------------------------------------------------------------------------------------ formats by hand
# qwen2.5-7b's q_proj is 3584 x 3584 (28 groups of 128 per row) and its down_proj 3584 x 18944 (148 groups)
Q_CODES = 3584 * 3584 // 2  # 6,422,528 B: two 4-bit codes per byte
Q_GROUPS = 3584 * 28  # 100,352 groups of 128


@pytest.mark.parametrize("name, want", [
    # 4-bit codes + an fp32 absmax per 64 weights + the 16-entry fp32 code book
    ("nf4", Q_CODES + 3584 * 3584 // 64 * 4 + 64),
    # 4-bit codes + an fp16 scale and a 4-bit zero per group
    ("gptq-exllamav2", Q_CODES + Q_GROUPS * 2 + Q_GROUPS // 2),
    # 4-bit codes + an fp16 scale per group (symmetric)
    ("awq-marlin", Q_CODES + Q_GROUPS * 2),
    # in padded to 4096: 3584 x 4096 / 2 codes + 3584 x 32 groups x (bf16 scale + bf16 zero)
    ("int4-tinygemm", 3584 * 4096 // 2 + 3584 * 32 * 4),
    # 4-bit codes + a bf16 scale and a bf16 zero per group
    ("int4-gemlite", Q_CODES + Q_GROUPS * 4),
])
def test_q_proj_bytes_by_hand(name, want):
    assert quant.get(name).format(2).matrix_bytes(3584, 3584) == want


def test_tinygemm_pads_in_and_out():
    fmt = quant.get("int4-tinygemm").format(2)
    # down_proj: in 18944 -> 19456 (19 x 1024); out 3584 is a multiple of 8
    assert fmt.matrix_bytes(3584, 18944) == 3584 * 19456 // 2 + 3584 * (19456 // 128) * 4
    # k_proj of a tiny model: out 60 -> 64, in 100 -> 1024
    assert fmt.matrix_bytes(60, 100) == 64 * 1024 // 2 + 64 * 8 * 4


def test_ideal_speedups_for_qwen():
    """The whole strict floor at ctx 2048: lm_head (1.09 GB) and the KV read stay bf16, so int4 cannot reach 4x."""
    dense = floor.floor(QWEN, 2048).bytes
    for name in quant.BACKENDS:
        q = floor.floor(QWEN, 2048, quant.get(name).format(2)).bytes
        assert 2.5 < dense / q < 3.3, name
        assert q - floor.floor(QWEN, 2048, quant.get(name).format(2)).components["decoder_matrices"] == \
            dense - floor.floor(QWEN, 2048).components["decoder_matrices"]


# ----------------------------------------------------------------------------------------------- shared math
def test_rtn_codes_scales_and_zeros():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(8, 256, generator=g) * 0.02
    codes, scales, zeros = base.rtn(w, 128)
    assert codes.dtype == torch.uint8 and codes.shape == (8, 256) and scales.shape == zeros.shape == (8, 2)
    assert int(codes.max()) <= 15 and len(torch.unique(codes)) > 8  # random codes, never all zeros
    ref = base.dequant(codes, scales, zeros)
    assert (ref - w).abs().max() <= scales.max() / 2 + 1e-7  # round to nearest: half a step at most
    _, _, z1 = base.rtn(torch.rand(4, 128) + 1, 128, min_zero=1)  # all positive: zero would be 0
    assert int(z1.min()) == 1
    c, s, z = base.rtn(w, 128, symmetric=True)
    assert (z == 8).all() and (base.dequant(c, s, z) - w).abs().max() <= s.max() / 2 + 1e-7


def test_rtn_rejects_a_partial_group():
    with pytest.raises(UserError, match="multiple of the group size"):
        base.rtn(torch.zeros(2, 100), 128)


def test_pack_int4_int32_puts_the_first_code_lowest():
    codes = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 12, 13, 14, 15]], dtype=torch.uint8)
    words = base.pack_int4_int32(codes, 1)
    assert words.dtype == torch.int32 and words.shape == (2, 1)
    assert int(words[0, 0]) == 0x76543210
    assert int(words[1, 0]) & 0xFFFFFFFF == 0xFEDCBA98  # the same bits, read as a signed int32
    assert base.pack_int4_int32(codes.t().contiguous(), 0).equal(words.t())


def test_nf4_reference_reads_the_high_nibble_first():
    from floorline.quant import nf4

    code = torch.linspace(-1, 1, 16)
    codes = torch.arange(128) % 16  # one row of 128 weights, two blocks of 64
    packed = ((codes[0::2] << 4) | codes[1::2]).to(torch.uint8).reshape(-1, 1)
    absmax = torch.tensor([2.0, 3.0])
    ref = nf4.reference(packed, absmax, code, (1, 128))
    want = code[codes] * torch.tensor([2.0] * 64 + [3.0] * 64)
    assert torch.equal(ref, want.reshape(1, 128))


# ---------------------------------------------------------------------------------------------- fake backend
class FakeLinear(torch.nn.Module):
    def __init__(self, packed, scales, zeros, bias, in_features, out_features, swap):
        super().__init__()
        self.packed, self.scales, self.zeros, self.bias = packed, scales, zeros, bias
        self.in_features, self.out_features, self.swap = in_features, out_features, swap

    def forward(self, x):
        hi, lo = (self.packed >> 4), (self.packed & 0xF)
        first, second = (lo, hi) if self.swap else (hi, lo)  # swap: a layout bug
        codes = torch.stack([first, second], -1).reshape(self.out_features, self.in_features)
        w = base.dequant(codes, self.scales, self.zeros)
        return torch.nn.functional.linear(x, w.to(x.dtype), self.bias)


class Fake(base.Backend):
    """Two codes per byte, a bf16 scale and a bf16 zero per group of 32: floorline's own math, torch's matmul."""

    name, library, dist, extra = "fake", "torch", "torch", "fake"
    devices, dtypes = ("cpu", "cuda"), ("bf16", "fp32")
    quantiser, kernel = "round-to-nearest", "dequantise + torch linear"
    swap = False

    def format(self, dense_bytes=2):
        return floor.WeightFormat(bits=4, group_size=32, scale_bits=16, zero_bits=16, dense_bytes=dense_bytes,
                                  name="fake int4 g32")

    def pack(self, linear):
        codes, scales, zeros = base.rtn(linear.weight.data, 32)
        s, z = scales.to(torch.bfloat16), zeros.to(torch.bfloat16)
        packed = ((codes[:, 0::2] << 4) | codes[:, 1::2]).contiguous()
        bias = None if linear.bias is None else linear.bias.data
        m = FakeLinear(packed, s, z, bias, linear.in_features, linear.out_features, self.swap)
        return base.Packed(m, base.dequant(codes, s, z), [packed, s, z])


class Broken(Fake):
    name = "broken"
    swap = True


@pytest.fixture
def fake_backends(monkeypatch):
    monkeypatch.setitem(quant.BACKENDS, "fake", Fake)
    monkeypatch.setitem(quant.BACKENDS, "broken", Broken)


def test_convert_replaces_every_matrix_and_stores_what_the_floor_counts(cpu):
    a = zoo.ZOO["tiny-qwen2"]
    m = models.build_random(a, cpu, "fp32", seed=1)
    conv = quant.convert(m, Fake(), torch.float32)
    assert conv.layers == a.layers * 7
    assert all(isinstance(mod, FakeLinear) for _, _, _, mod in quant.decoder_linears(m))
    fmt = Fake().format(4)
    assert conv.stored_bytes == a.layers * sum(fmt.matrix_bytes(o, i) for o, i in floor.decoder_matrix_shapes(a))
    assert conv.max_check_error < 1e-5  # fp32 end to end: only summation order differs
    assert 0.02 < conv.quant_error < 0.2
    assert isinstance(m.lm_head, torch.nn.Linear) and m.lm_head.weight.dtype == torch.float32  # lm_head stays dense


def test_the_check_catches_a_layout_bug(cpu):
    m = models.build_random(zoo.ZOO["tiny-llama"], cpu, "fp32", seed=1)
    with pytest.raises(base.QuantCheckError, match=r"layers\.0\.self_attn\.q_proj: relative error"):
        quant.convert(m, Broken(), torch.float32)


def test_measure_records_the_quant_fields_and_the_kernel_chain(fake_backends):
    cfg = config.RunConfig("tiny-llama", [32], ["eager"], dtype="fp32", device="cpu", warmup=1, steps=3,
                            quant="fake", kernels=True)
    cell, chain = list(measure.measure_cells(cfg))
    assert cell["valid"], cell["reason"]
    assert cell["quant"] == "fake" and cell["quant_format"] == "fake int4 g32"
    assert cell["quant_stored_matrix_bytes"] == cell["floor_bytes_decoder_matrices"]
    assert cell["quant_matrices"] == zoo.ZOO["tiny-llama"].layers * 7 and cell["quant_check_max_rel_error"] < 1e-5
    assert cell["floor_bytes"] == floor.floor(zoo.ZOO["tiny-llama"], 32, Fake().format(4)).bytes
    assert chain["kind"] == "kernels" and chain["valid"] and len(chain["samples_ms"]) == 30
    assert chain["chain_bytes"] == cell["floor_bytes_decoder_matrices"]  # tiny-llama has no biases


def test_a_failed_check_is_recorded_not_timed(fake_backends):
    cfg = config.RunConfig("tiny-llama", [32], ["eager", "static"], dtype="fp32", device="cpu", warmup=1, steps=3,
                            quant="broken", kernels=True)
    recs = list(measure.measure_cells(cfg))
    assert [r.get("mode") for r in recs] == ["eager", "static", "kernels"]
    for r in recs:
        assert r["valid"] is False and r["reason"].startswith("quant check failed: layers.0.self_attn.q_proj")
    assert recs[0]["step_ms_median"] is None and recs[0]["samples_ms"] is None


def test_cli_run_with_a_failed_check_exits_1(fake_backends, tmp_path):
    rc, _, err = run_cli(["run", "--model", "tiny-llama", "--ctx", "32", "--device", "cpu", "--dtype", "fp32",
                          "--mode", "eager", "--steps", "2", "--warmup", "0", "--quant", "broken"])
    assert rc == 1


@pytest.mark.skipif(not HAS_BNB, reason="bitsandbytes is not installed (pip install 'floorline[nf4]')")
def test_nf4_on_the_cpu_stores_exactly_what_the_floor_counts(cpu):
    a = zoo.ZOO["tiny-qwen2"]
    m = models.build_random(a, cpu, "bf16", seed=2)
    b = quant.get("nf4")
    conv = quant.convert(m, b, torch.bfloat16)
    want = a.layers * sum(b.format(2).matrix_bytes(o, i) for o, i in floor.decoder_matrix_shapes(a))
    assert conv.stored_bytes == want  # to the byte: uint8 codes + fp32 absmax + code book, per matrix
    assert conv.max_check_error < b.check_tolerance and 0.05 < conv.quant_error < 0.2
    with torch.inference_mode():
        assert torch.isfinite(m(input_ids=torch.arange(8)[None], use_cache=False).logits).all()


# ------------------------------------------------------------------------------------------------ unavailable
@pytest.mark.parametrize("name", list(quant.BACKENDS))
def test_a_missing_library_names_its_install(name, monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None)
    why = quant.get(name).missing("cuda")
    assert why and "\n" not in why and name in why
    hint = {"awq-marlin": "github.com/IST-DASLab/marlin", "int4": "pip install triton"}
    assert hint.get(name, "pip install 'floorline[") in why


def test_floorlines_int4_needs_nothing_on_the_cpu(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None)
    assert quant.get("int4").missing("cpu") is None  # its torch reference runs there


@pytest.mark.parametrize("name", [n for n in quant.BACKENDS if n not in ("nf4", "int4")])
def test_cuda_only_backends_refuse_the_cpu(name):
    why = quant.get(name).missing("cpu")
    assert why and "needs a CUDA GPU" in why and "\n" not in why


@pytest.mark.parametrize("argv, words", [
    (["--quant", "int4-gemlite"], ["int4-gemlite", "CUDA GPU"]),
    (["--quant", "gptq-exllamav2"], ["CUDA GPU"]),  # (not "--dtype fp16", which would only lead there)
    (["--quant", "gptq-exllamav2", "--dtype", "fp16"], ["CUDA GPU"]),
    (["--quant", "nf4", "--dtype", "fp32"], ["nf4 runs bf16/fp16 activations", "--dtype bf16"]),
    (["--quant", "int3"], ["unknown quant backend", "nf4"]),
])
def test_cli_unavailable_is_one_line_exit_2(argv, words):
    rc, out, err = run_cli(["run", "--model", "tiny-llama", "--ctx", "16", "--device", "cpu", *argv])
    assert rc == 2 and out == ""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("floorline: error:") and "Traceback" not in err
    for w in words:
        assert w in lines[0]


def test_canonical_names():
    assert quant.canonical("bf16") == quant.canonical("none") == quant.canonical("") == "none"
    assert quant.canonical("nf4") == "nf4" and quant.label("none") == "bf16"
    assert quant.get("bf16") is None


def test_ab_arms_with_different_quant_build_separately():
    from floorline.study import ab

    cfg = ab.ABConfig(config.RunConfig("tiny-llama", [32], [], device="cpu"), ab.parse_arm("graph"),
                      ab.parse_arm("graph,quant=nf4"))
    both = ab.session_configs(cfg, cfg.a, cfg.b)
    assert [c.quant for c in both] == ["none", "nf4"] and all(c.modes == ["graph"] for c in both)
    assert ab.parse_arm("eager", quant_="nf4").label == "eager/nf4"


def test_weight_format_of_a_run():
    assert config.weight_format(config.RunConfig("m", [1], [], quant="nf4")).name.startswith("bitsandbytes nf4")
    assert config.weight_format(config.RunConfig("m", [1], [], dtype="fp32")).matrix_bytes(2, 2) == 16
    assert math.isclose(floor.floor(QWEN, 2048, config.weight_format(
        config.RunConfig("m", [1], [], quant="int4-gemlite"))).components["decoder_matrices"] / 1e9, 3.467, rel_tol=1e-3)
