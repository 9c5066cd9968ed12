"""The memory floor, to the byte: the pure-Python accounting in floor.py against transformers models built on the
meta device (no memory), against a real KV cache on the CPU, and against hand-worked figures."""

from __future__ import annotations

import math
import re

import pytest
import torch

from floorline.bench import models, runtimes
from floorline.core import floor, zoo
from floorline.core.arch import Arch
from floorline.core.errors import UserError

ZOO_NAMES = list(zoo.ZOO)
BF16 = 2


def meta_model(a: Arch, dtype=torch.bfloat16):
    """The transformers model of an embedded architecture, on the meta device (shapes only, no storage)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(models.hf_config(a), dtype=dtype)
    if a.tied:
        m.tie_weights()
    return m


def unique_params(m) -> dict[str, torch.nn.Parameter]:
    """name -> parameter with tied parameters once (by identity), so nothing is counted twice."""
    seen, out = set(), {}
    for name, p in m.named_parameters(remove_duplicate=False):
        if id(p) in seen:
            continue
        seen.add(id(p))
        out[name] = p
    return out


_MATRIX = re.compile(r"^model\.layers\.\d+\.(self_attn|mlp)\.(q|k|v|o|qkv|gate|up|down|gate_up)_proj\.weight$")
_BIAS = re.compile(r"^model\.layers\.\d+\.self_attn\.\w+_proj\.bias$")
_NORM = re.compile(r"^model\.layers\.\d+\.\w*layernorm\.weight$")
_QK_NORM = re.compile(r"^model\.layers\.\d+\.self_attn\.[qk]_norm\.weight$")
_SINKS = re.compile(r"^model\.layers\.\d+\.self_attn\.sinks$")
_ROUTER = re.compile(r"^model\.layers\.\d+\.mlp\.(gate\.weight|router\.(weight|bias))$")
_EXPERTS = re.compile(r"^model\.layers\.\d+\.mlp\.experts\.\w+$")
_SHARED = re.compile(r"^model\.layers\.\d+\.mlp\.shared_expert(\.\w+_proj|_gate)\.weight$")


def component_of(name: str, tied: bool) -> str:
    """The strict-convention component an HF parameter belongs to ("embedding" = the untied input embedding matrix,
    which the strict convention does not count: only one row of it is gathered). Experts: all of them (the strict
    floor reads top-k of each layer's)."""
    for pattern, c in ((_MATRIX, "decoder_matrices"), (_BIAS, "decoder_biases"), (_NORM, "decoder_norms"),
                       (_QK_NORM, "qk_norms"), (_SINKS, "attention_sinks"), (_ROUTER, "router"),
                       (_EXPERTS, "experts"), (_SHARED, "shared_expert")):
        if pattern.match(name):
            return c
    if name == "model.norm.weight":
        return "final_norm"
    if name == "lm_head.weight":
        return "lm_head"
    if name == "model.embed_tokens.weight":
        return "lm_head" if tied else "embedding"
    raise AssertionError(f"parameter {name} belongs to no floor component")


def hf_bytes_by_component(m, tied: bool) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, p in unique_params(m).items():
        c = component_of(name, tied)
        out[c] = out.get(c, 0) + p.numel() * p.element_size()
    return out


@pytest.fixture(scope="module")
def meta_models():
    return {name: meta_model(a) for name, a in zoo.ZOO.items()}


# --------------------------------------------------------------------------------------------- parameter counts
@pytest.mark.parametrize("name", ZOO_NAMES)
def test_parameter_count_matches_instantiated_model_and_published(name, meta_models):
    a = zoo.ZOO[name]
    m = meta_models[name]
    n_hf = sum(p.numel() for p in unique_params(m).values())
    assert a.params is not None
    assert floor.parameter_count(a) == n_hf == a.params
    # model.parameters() dedups tied weights too: that is what measure.py compares with
    assert sum(p.numel() for p in m.parameters()) == n_hf


@pytest.mark.parametrize("name", [n for n, a in zoo.ZOO.items() if a.tied])
def test_tied_models_really_share_the_matrix(name, meta_models):
    m = meta_models[name]
    assert m.lm_head.weight is m.model.embed_tokens.weight


# -------------------------------------------------------------------------------------- per-component, to the byte
@pytest.mark.parametrize("ctx", [0, 2048])
@pytest.mark.parametrize("name", ZOO_NAMES)
def test_strict_components_match_hf_parameter_bytes(name, ctx, meta_models):
    a = zoo.ZOO[name]
    hf = hf_bytes_by_component(meta_models[name], a.tied)
    c = floor.components(a, ctx, convention="strict")
    kv_tok = floor.kv_bytes_per_token(a)
    expected = {
        "decoder_matrices": hf["decoder_matrices"],
        "decoder_biases": hf.get("decoder_biases", 0),
        "decoder_norms": hf["decoder_norms"],
        "final_norm": hf["final_norm"],
        "lm_head": hf["lm_head"],
        **{k: hf[k] for k in ("qk_norms", "attention_sinks", "router", "shared_expert") if k in hf},
        "embedding_row": a.hidden * BF16,
        # a sliding layer reads its window less the new token (window 8: 7 positions), the others all ctx
        "kv_read": sum(min(ctx, a.window - 1) if a.is_sliding(i) else ctx
                       for i in range(a.layers)) * kv_tok // a.layers,
        "kv_write": kv_tok,
    }
    if "experts" in hf:  # every expert the same size: top-k of each MoE layer's
        expected["experts"] = hf["experts"] * a.top_k // a.experts
    assert c == expected
    assert floor.floor(a, ctx, convention="strict").bytes == sum(expected.values())
    assert ("decoder_biases" in hf) == a.qkv_bias


@pytest.mark.parametrize("ctx", [0, 2048])
@pytest.mark.parametrize("name", ZOO_NAMES)
def test_paper_floor_is_all_parameter_bytes_plus_kv_read(name, ctx, meta_models):
    a = zoo.ZOO[name]
    m = meta_models[name]
    param_bytes = sum(p.numel() * p.element_size() for p in unique_params(m).values())
    f = floor.floor(a, ctx, convention="paper")
    kv_read = floor.components(a, ctx, convention="strict")["kv_read"]
    assert f.bytes == param_bytes + kv_read
    hf = hf_bytes_by_component(m, a.tied)
    assert f.components["embedding"] == hf.get("embedding", 0)
    assert f.components.get("experts", 0) == hf.get("experts", 0)  # every expert, as every parameter counts
    assert f.components["kv_read"] == kv_read
    if not any(a.sliding):
        assert kv_read == ctx * floor.kv_bytes_per_token(a)


@pytest.mark.parametrize("name", ZOO_NAMES)
def test_strict_and_paper_differ_only_by_embedding_and_kv_write(name):
    a = zoo.ZOO[name]
    s = floor.floor(a, 512, convention="strict")
    p = floor.floor(a, 512, convention="paper")
    emb = 0 if a.tied else a.vocab * a.hidden * BF16
    unread = (a.experts - a.top_k) * a.n_moe * floor.expert_bytes(a, floor.WeightFormat(), BF16)  # the other experts
    assert p.bytes - s.bytes == emb + unread - a.hidden * BF16 - floor.kv_bytes_per_token(a)


# ------------------------------------------------------------------------------------------ quantised formats
@pytest.mark.parametrize("name", ["qwen2.5-7b", "llama-3.2-1b", "tiny-llama"])
@pytest.mark.parametrize("bits,group", [(4, 128), (4, 32), (8, None)])
def test_quantised_decoder_matrices_from_hf_shapes(name, bits, group, meta_models):
    """Packed codes + one 2-byte scale and one 2-byte zero per group of `group` inputs of one output row, computed
    from the HF weights' own (out, in) shapes; everything else stays as in bf16."""
    a = zoo.ZOO[name]
    fmt = floor.weight_format("bf16", bits, group)
    want = 0
    for pname, p in unique_params(meta_models[name]).items():
        if component_of(pname, a.tied) == "decoder_matrices":
            out_f, in_f = p.shape
            g = group or in_f
            want += out_f * in_f * bits // 8 + out_f * math.ceil(in_f / g) * 4
    q = floor.components(a, 2048, fmt, "strict")
    dense = floor.components(a, 2048, floor.WeightFormat(), "strict")
    assert q["decoder_matrices"] == want
    assert {k: v for k, v in q.items() if k != "decoder_matrices"} == {
        k: v for k, v in dense.items() if k != "decoder_matrices"}


def test_int4_g128_matrix_by_hand():
    fmt = floor.weight_format("bf16", 4, 128)
    assert fmt.bits == 4 and fmt.group_size == 128 and fmt.scale_bits == 16 and fmt.zero_bits == 16
    # 4096 x 4096: two codes per byte, 4096 rows x 32 groups x (2 B scale + 2 B zero)
    assert fmt.matrix_bytes(4096, 4096) == 4096 * 4096 // 2 + 4096 * 32 * 4 == 8_912_896
    # a group count that does not divide: 100 inputs in groups of 64 -> 2 groups per row
    assert floor.WeightFormat(bits=4, group_size=64).matrix_bytes(3, 100) == math.ceil(300 / 2) + 3 * 2 * 4


def test_int8_per_row_by_hand():
    fmt = floor.weight_format("bf16", 8, None)
    assert fmt.matrix_bytes(4096, 14336) == 4096 * 14336 + 4096 * 4
    sym = floor.WeightFormat(bits=8, group_size=None, zero_bits=0)
    assert sym.matrix_bytes(4096, 14336) == 4096 * 14336 + 4096 * 2


def test_bits_16_with_bf16_is_unquantised():
    fmt = floor.weight_format("bf16", 16)
    assert fmt.bits is None
    assert fmt.matrix_bytes(4096, 4096) == 4096 * 4096 * 2
    a = zoo.ZOO["qwen2.5-7b"]
    assert floor.floor(a, 2048, fmt) == floor.floor(a, 2048, floor.weight_format("bf16"))
    assert floor.weight_format("fp32", 32).bits is None
    assert floor.weight_format("fp32").matrix_bytes(10, 10) == 400


def test_16_bit_weights_with_fp32_name_the_fix():
    with pytest.raises(UserError, match="use 32 \\(unquantised\\), 8 or 4"):
        floor.weight_format("fp32", 16)


@pytest.mark.parametrize("bits", [3, 2, 5, 32])
def test_bad_bits_raise(bits):
    with pytest.raises(UserError, match="use 16 \\(unquantised\\), 8 or 4"):
        floor.weight_format("bf16", bits)


def test_bad_formats_raise():
    with pytest.raises(UserError):
        floor.WeightFormat(bits=3)
    with pytest.raises(UserError, match="group size"):
        floor.weight_format("bf16", 4, 0)
    with pytest.raises(UserError, match="unknown dtype"):
        floor.weight_format("int8")
    a = zoo.ZOO["tiny-llama"]
    with pytest.raises(UserError, match="convention"):
        floor.components(a, 10, convention="loose")
    with pytest.raises(UserError, match="context"):
        floor.floor(a, -1)


def test_fp32_doubles_everything_dense():
    a = zoo.ZOO["llama-3.2-1b"]
    b = floor.floor(a, 1000, floor.weight_format("bf16"))
    f = floor.floor(a, 1000, floor.weight_format("fp32"))
    assert f.components == {k: 2 * v for k, v in b.components.items()}


# -------------------------------------------------------------------------------------------- hand-worked values
def test_qwen25_7b_paper_floor_on_l4_by_hand():
    a = zoo.ZOO["qwen2.5-7b"]
    assert floor.parameter_count(a) == 7_615_616_512
    f = floor.floor(a, 2048, convention="paper")
    assert f.bytes == 7_615_616_512 * 2 + 2048 * 57_344 == 15_348_673_536
    ms = f.ms(300)  # L4 datasheet: 300 GB/s
    assert ms == pytest.approx(51.16, abs=0.005)
    assert round(ms / 62.32, 3) == 0.821  # a 62.32 ms measured step is at 82.1% of the floor


def test_qwen25_7b_strict_floor_on_h200_by_hand():
    a = zoo.ZOO["qwen2.5-7b"]
    f = floor.floor(a, 2048, convention="strict")
    emb = 152_064 * 3_584 * 2
    assert f.bytes == 15_348_673_536 - emb + 3_584 * 2 + 57_344 == 14_258_743_296
    assert f.ms(4800) == pytest.approx(2.97, abs=0.005)
    assert f.ms(None) is None and f.ms(0) is None


@pytest.mark.parametrize("name,per_token", [
    ("qwen2.5-7b", 57_344), ("llama-3.1-8b", 131_072), ("mistral-7b-v0.3", 131_072),
    ("qwen2.5-0.5b", 12_288), ("llama-3.2-1b", 32_768), ("tiny-llama", 1_024),
])
def test_kv_bytes_per_token_by_hand(name, per_token):
    assert floor.kv_bytes_per_token(zoo.ZOO[name]) == per_token
    assert floor.kv_bytes_per_token(zoo.ZOO[name], 4) == 2 * per_token


# ------------------------------------------------------------------------------------------ KV against a real cache
def _cache_bytes(cache) -> tuple[int, list[int]]:
    total, lengths = 0, []
    for layer in cache.layers:
        total += layer.keys.numel() * layer.keys.element_size() + layer.values.numel() * layer.values.element_size()
        lengths.append(layer.keys.shape[-2])
    return total, lengths


@pytest.mark.parametrize("dtype,kv_b", [("bf16", 2), ("fp32", 4)])
@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2"])
@pytest.mark.parametrize("mode", ["eager", "static"])
def test_kv_bytes_of_a_real_cache(name, dtype, kv_b, mode, cpu):
    a = zoo.ZOO[name]
    ctx = 96
    model = models.build_random(a, cpu, dtype, seed=1)
    rt = runtimes.get(mode, "cpu")(model, max_cache_len=ctx)  # static: exactly ctx slots
    prompt = torch.randint(0, a.vocab, (1, ctx), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        rt.prefill(prompt, chunk=40)  # 40 + 40 + 16: chunks that do not divide ctx
    total, lengths = _cache_bytes(rt.cache)
    assert len(lengths) == a.layers
    assert lengths == [ctx] * a.layers
    assert total == ctx * floor.kv_bytes_per_token(a, kv_b)
    assert floor.components(a, ctx, floor.weight_format(dtype))["kv_read"] == total


@pytest.mark.parametrize("name", ["tiny-gemma3", "tiny-gpt-oss"])
def test_sliding_layers_cache_and_read_their_window_less_one(name, cpu):
    """transformers' dynamic cache keeps window - 1 positions of a sliding layer (the new token makes the window):
    what the accounting's kv_read counts, layer by layer, at contexts below, at and past the window."""
    a = zoo.ZOO[name]
    assert any(a.sliding) and not all(a.sliding) and a.window == 8
    model = models.build_random(a, cpu, "fp32", seed=1)
    for ctx in (5, 7, 8, 30):
        rt = runtimes.get("eager", "cpu")(model, max_cache_len=ctx)
        prompt = torch.randint(0, a.vocab, (1, ctx), generator=torch.Generator().manual_seed(0))
        with torch.inference_mode():
            rt.prefill(prompt, chunk=ctx)
        total, lengths = _cache_bytes(rt.cache)
        assert lengths == [min(ctx, 7) if a.is_sliding(i) else ctx for i in range(a.layers)]
        assert floor.components(a, ctx, floor.weight_format("fp32"))["kv_read"] == total


def test_sliding_window_read_matches_transformers_mask():
    """The query at position p of a sliding layer attends to kv positions p - window < j <= p (transformers'
    sliding_window_overlay): window - 1 of them cached."""
    from transformers.masking_utils import sliding_window_overlay

    inner = sliding_window_overlay(512)
    for ctx in (0, 100, 511, 512, 2048):
        seen = sum(bool(inner(0, 0, ctx, j)) for j in range(ctx))  # cached positions 0..ctx-1
        assert seen == floor.kv_positions_read(zoo.ZOO["gemma-3-1b"], 0, ctx) == min(ctx, 511)


def test_moe_floor_by_hand():
    """qwen3-30b-a3b at ctx 2048 (strict): attention 48 x (4096 + 2 x 512 + 4096) x 2048 x 2 B, top-8 of 128 experts of
    3 x 768 x 2048 x 2 B in each of 48 layers, routers 48 x 128 x 2048 x 2 B; gpt-oss-20b's experts in MXFP4."""
    a = zoo.ZOO["qwen3-30b-a3b"]
    c = floor.components(a, 2048)
    assert c["decoder_matrices"] == 48 * (4096 + 512 + 512) * 2048 * 2 + 48 * 2048 * 4096 * 2 == 1_811_939_328
    assert c["experts"] == 48 * 8 * 3 * 768 * 2048 * 2 == 3_623_878_656
    assert c["router"] == 48 * 128 * 2048 * 2
    assert c["qk_norms"] == 48 * 2 * 128 * 2
    assert c["kv_read"] == 2048 * 2 * 48 * 4 * 128 * 2
    paper = floor.components(a, 2048, convention="paper")
    assert paper["experts"] == 16 * c["experts"]  # 128 experts against 8
    g = zoo.ZOO["gpt-oss-20b"]
    assert g.expert_format == "mxfp4" and g.experts == 32 and g.top_k == 4
    mx = floor.expert_format("mxfp4")
    per = 3 * 2880 * 2880 // 2 + 3 * 2880 * 2880 // 32 + (2 * 2880 + 2880) * 2  # codes + e8m0 scales + biases
    assert floor.expert_bytes(g, mx, 2) == per
    assert floor.components(g, 0, experts=mx)["experts"] == 24 * 4 * per
    # 12 sliding layers read 127 cached positions at ctx 4096, 12 full layers 4096
    assert floor.components(g, 4096)["kv_read"] == (12 * 127 + 12 * 4096) * 2 * 8 * 64 * 2
    # routed: the experts a step was seen to read (here 100 over the 24 layers) in place of top-k
    r = floor.routed_components(g, 0, 100, experts=mx)
    assert r["experts"] == 100 * per and {k: v for k, v in r.items() if k != "experts"} == {
        k: v for k, v in floor.components(g, 0, experts=mx).items() if k != "experts"}
