"""The 2026 families on the CPU: every new family's tiny config measured in eager and static (valid records, the
floor of the record the accounting's), a MoE record's routing, and the one-line refusals (an unknown model_type, a
config that leaves a byte-relevant field to a class default, native on a family it does not run)."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import run_cli

from floorline.bench import config, measure, models, moe
from floorline.bench.config import RunConfig
from floorline.core import floor, zoo
from floorline.core.arch import FAMILY, arch_from_config, native_refusal, quant_refusal
from floorline.core.errors import UserError

NEW_TINY = ["tiny-qwen3", "tiny-qwen3-moe", "tiny-qwen2-moe", "tiny-mixtral", "tiny-gemma3", "tiny-gpt-oss",
            "tiny-phi3", "tiny-smollm3"]


def test_every_family_has_a_tiny_test_model():
    tiny = {zoo.ZOO[n].family for n in zoo.ZOO if n.startswith("tiny-")}
    assert tiny | {"mistral"} == set(FAMILY)  # Mistral: Llama's layer (mistral-7b-v0.3 in the zoo)
    assert set(NEW_TINY) <= set(zoo.ZOO)


@pytest.mark.parametrize("name", NEW_TINY)
def test_tiny_family_measures_in_eager_and_static(name):
    """Both HF modes run the family with a static cache where transformers has one (sliding layers included), and the
    record's floor is the accounting's to the byte."""
    a = zoo.ZOO[name]
    cfg = RunConfig(model=name, ctxs=[24], modes=["eager", "static"], device="cpu", dtype="fp32", warmup=1, steps=3,
                    energy=False)
    recs = list(measure.measure_cells(cfg))
    assert [r["mode"] for r in recs] == ["eager", "static"]
    strict = floor.floor(a, 24, floor.weight_format("fp32"))
    for r in recs:
        assert r["valid"], r["reason"]
        assert r["floor_bytes"] == strict.bytes
        assert len(r["samples_ms"]) == 3 and min(r["samples_ms"]) > 0
        assert ("moe_experts_read_per_step" in r) == bool(a.experts)
        assert r["attn_implementation"] == ("eager" if a.family == "gpt_oss" else "sdpa")
        if a.experts:
            # batch 1: each MoE layer's router picks top-k distinct experts for the one token
            assert r["moe_experts_read_samples"] == [a.top_k * a.n_moe] * 8
            assert a.top_k * a.n_moe <= r["moe_experts_distinct_over_steps"] <= a.experts * a.n_moe
            assert r["floor_bytes_routed"] == r["floor_bytes"] < r["floor_bytes_all_experts"]
            assert r["fraction_of_all_experts_floor_measured"] > r["fraction_of_floor_measured"]


def test_routing_hooks_read_each_moe_layers_router(cpu):
    a = zoo.ZOO["tiny-qwen3-moe"]  # layers 1 and 3 are MoE, 0 and 2 dense
    m = models.build_random(a, cpu, "fp32", seed=0)
    assert [i for i, _ in moe.routers(m, a)] == [1, 3]
    prompt = torch.randint(0, a.vocab, (1, 10), generator=torch.Generator().manual_seed(0))
    steps = moe.route(m, a, prompt, steps=3)
    assert len(steps) == 3 and all(len(s) == 2 and all(len(e) == 2 and e <= set(range(8)) for e in s) for s in steps)
    assert not any(r._forward_hooks for _, r in moe.routers(m, a))  # the hooks are gone


def test_a_router_that_returns_only_logits_is_read_by_its_top_k():
    logits = torch.tensor([[0.1, 3.0, -1.0, 2.0]])
    assert moe.chosen_experts(logits, 2).flatten().tolist() == [1, 3]
    idx = torch.tensor([[2, 0]])
    assert moe.chosen_experts((logits, torch.ones(1, 2), idx), 2).tolist() == [[2, 0]]


# ------------------------------------------------------------------------------------------------------ refusals
def test_unknown_model_type_is_one_line_naming_the_supported_ones(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 768, "n_layer": 12}))
    rc, out, err = run_cli(["floor", "--model", str(d), "--ctx", "128"])
    assert rc == 2 and "Traceback" not in err
    line = (out + err).strip()
    assert "gpt2" in line and "qwen3" in line and "gpt_oss" in line and len(line.splitlines()) == 1


def test_a_config_without_model_type_says_so():
    cfg = dict(zoo.ZOO["tiny-qwen3"].config)
    del cfg["model_type"]
    with pytest.raises(UserError, match="config.json has no model_type; add the one its architecture has"):
        arch_from_config({**cfg, "architectures": ["Qwen3ForCausalLM"]}, "x")


@pytest.mark.parametrize("q, flags", [
    ({"quant_method": "gptq", "bits": 4, "group_size": 32}, "--weight-bits 4 --group-size 32"),
    ({"quant_method": "gptq", "bits": 8, "group_size": -1}, "--weight-bits 8 --group-size row"),
    ({"quant_method": "awq", "w_bit": 4, "q_group_size": 128}, "--weight-bits 4 --group-size 128"),
    ({"quant_method": "fp8"}, "--weight-bits 4|8 --group-size G"),
    ({"quant_method": "gptq", "bits": 3, "group_size": 128}, "--bpw 3"),  # endpoint's --bpw counts it; floor not
])
def test_a_pre_quantised_dense_checkpoint_is_counted_only_with_its_format(q, flags):
    """A bf16 floor for a GPTQ checkpoint would be 4x its bytes: floor and endpoint ask for the format its config
    names; predict and run (which would load it) refuse it."""
    assert arch_from_config({**zoo.ZOO["tiny-qwen3"].config, "quantization_config": q}, "x").prequant == flags


def test_a_pre_quantised_folder(tmp_path):
    d = tmp_path / "gptq"
    d.mkdir()
    cfg = {**zoo.ZOO["tiny-qwen3"].config, "quantization_config": {"quant_method": "gptq", "bits": 4,
                                                                     "group_size": 32}}
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "model.safetensors").write_bytes(b"")
    for argv, says in ((["floor", "--model", str(d), "--ctx", "64"], "add --weight-bits 4 --group-size 32 to count"),
                       (["predict", "--model", str(d), "--ctx", "64", "--gpu", "h200"], "predict counts unquantised"),
                       (["run", "--model", str(d), "--ctx", "64", "--device", "cpu"], "does not load")):
        rc, out, err = run_cli(argv)
        assert rc == 2 and says in err and len(err.strip().splitlines()) == 1, err
    rc, out, err = run_cli(["floor", "--model", str(d), "--ctx", "64", "--weight-bits", "4", "--group-size", "32",
                            "--format", "json"])
    a = zoo.resolve(str(d), need="config")
    assert rc == 0 and json.loads(out)["floor_bytes"] == floor.floor(a, 64, floor.weight_format("bf16", 4, 32)).bytes
    cfg["quantization_config"]["bits"] = 3  # a width floor does not count: said so, and who does
    (d / "config.json").write_text(json.dumps(cfg))
    rc, out, err = run_cli(["floor", "--model", str(d), "--ctx", "64"])
    assert rc == 2 and "its 3-bit weights are counted by `floorline endpoint ... --bpw 3`" in err, err


def test_a_config_that_leaves_head_dim_to_the_class_default_is_refused():
    cfg = dict(zoo.ZOO["tiny-qwen3"].config)
    del cfg["head_dim"]
    with pytest.raises(UserError, match="head_dim"):
        arch_from_config(cfg, "x")


def test_a_multimodal_gemma3_config_decodes_with_its_text_config():
    text = dict(zoo.ZOO["gemma-3-4b"].config)
    del text["model_type"]
    a = arch_from_config({"model_type": "gemma3", "text_config": text, "vision_config": {"hidden_size": 1152}}, "g")
    assert a.family == "gemma3_text" and floor.parameter_count(a) == zoo.ZOO["gemma-3-4b"].params


def test_gemma3_4b_its_own_sparse_config_is_the_zoos():
    """google/gemma-3-4b-it's config.json as published names six keys of its text_config; the rest are
    Gemma3TextConfig's defaults, which arch.GEMMA3_TEXT_DEFAULTS holds (checked against transformers here)."""
    from transformers import AutoConfig

    from floorline.core.arch import GEMMA3_TEXT_DEFAULTS

    hf = AutoConfig.for_model("gemma3_text")
    assert {k: getattr(hf, k) for k in GEMMA3_TEXT_DEFAULTS} == GEMMA3_TEXT_DEFAULTS
    published = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
                 "mm_tokens_per_image": 256,
                 "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                                 "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                                 "sliding_window": 1024},
                 "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model", "num_hidden_layers": 27}}
    a, z = arch_from_config(published, "gemma-3-4b-it"), zoo.ZOO["gemma-3-4b"]
    assert floor.parameter_count(a) == z.params
    assert floor.floor(a, 2048).bytes == floor.floor(z, 2048).bytes


@pytest.mark.parametrize("name, why", [("tiny-qwen3-moe", "qwen3_moe"), ("tiny-gemma3", "gemma3_text"),
                                       ("tiny-gpt-oss", "gpt_oss"), ("tiny-phi3", "phi3")])
def test_native_refuses_what_it_does_not_run_in_one_line(name, why):
    a = zoo.ZOO[name]
    msg = native_refusal(a)
    assert why in msg and "--mode graph or compile" in msg and "\n" not in msg
    with pytest.raises(UserError, match="--mode graph or compile"):
        config.validate(RunConfig(model=name, ctxs=[16], modes=["native"], device="cuda"), a)
    # `all` leaves native out for such a model rather than failing
    assert "native" not in config.expand_modes(["all"], torch.device("cuda"), "none", native=True, arch=a)


@pytest.mark.parametrize("name, why", [("tiny-qwen3-moe", "mixture of experts"), ("tiny-qwen2-moe", "mixture of experts"),
                                       ("tiny-mixtral", "mixture of experts"), ("tiny-gpt-oss", "mixture of experts"),
                                       ("tiny-phi3", "qkv_proj and gate_up_proj")])
def test_quant_refuses_what_its_packing_cannot_reach_before_any_build(name, why):
    """The backends pack each layer's q/k/v/o and gate/up/down linears: on an MoE or a fused-projection model that
    once crashed after the model was built (AttributeError: no gate_proj), exit 1. Now one line, exit 2."""
    assert why in quant_refusal(zoo.ZOO[name], "int4") and "--quant none" in quant_refusal(zoo.ZOO[name], "int4")
    for argv in (["run", "--model", name, "--quant", "int4", "--device", "cpu", "--ctx", "16"],
                 ["quant", "--model", name, "--backends", "int4", "--device", "cpu", "--ctx", "16", "--output",
                  "/dev/null"]):
        rc, _, err = run_cli(argv)
        assert rc == 2 and why in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-gemma3", "tiny-smollm3"])
def test_quant_packs_the_dense_families(name):
    assert quant_refusal(zoo.ZOO[name], "int4") is None


def test_native_runs_dense_qwen3():
    assert native_refusal(zoo.ZOO["qwen3-8b"]) is None and native_refusal(zoo.ZOO["tiny-qwen3"]) is None


def test_floor_cli_counts_gpt_oss_experts_as_its_checkpoint_stores_them():
    rc, out, _ = run_cli(["floor", "--model", "gpt-oss-20b", "--ctx", "2048", "--gpu", "h200", "--format", "json"])
    assert rc == 0
    mx = json.loads(out)
    rc, out, _ = run_cli(["floor", "--model", "gpt-oss-20b", "--ctx", "2048", "--gpu", "h200", "--format", "json",
                          "--experts", "bf16"])
    dense = json.loads(out)
    a = zoo.ZOO["gpt-oss-20b"]
    per = 3 * 2880 * 2880  # weights of one expert
    assert mx["expert_format"] == "mxfp4" and dense["expert_format"] == "bf16"
    assert dense["components"]["experts"] - mx["components"]["experts"] == 24 * 4 * (per * 2 - per * 17 // 32)
    assert mx["floor_bytes"] == floor.floor(a, 2048, experts=floor.expert_format("mxfp4")).bytes


def test_floor_cli_refuses_experts_for_a_dense_model():
    """--experts on a dense model used to be accepted and change nothing: now one line naming the fix."""
    rc, out, err = run_cli(["floor", "--model", "qwen2.5-0.5b", "--ctx", "128", "--experts", "mxfp4"])
    assert rc == 2 and "is dense: drop --experts" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("name", ["tiny-gemma3", "tiny-gpt-oss"])
def test_full_length_sliding_cache_decodes_as_transformers_sliding_layers_do(name, cpu):
    """graph and compile hold sliding layers at the full cache length (the model's mask still applies the window):
    the same tokens and logits as transformers' own sliding static layers, past the window."""
    from floorline.bench.runtimes.static import Static

    class FullLength(Static):
        full_length_sliding = True

    a = zoo.ZOO[name]
    m = models.build_random(a, cpu, "fp32", seed=3)
    prompt = torch.randint(0, a.vocab, (1, 20), generator=torch.Generator().manual_seed(1))
    runs = []
    for cls in (Static, FullLength):
        rt = cls(m, 40)
        logits = []
        with torch.inference_mode():
            rt.prefill(prompt)
            for _ in range(12):
                logits.append(rt._forward(rt.tok, rt.pos).logits[0, -1].clone())
                rt.tok.copy_(logits[-1].argmax().view(1, 1))
                rt.pos.add_(1)
        runs.append((rt, torch.stack(logits)))
    (plain, a_logits), (full, b_logits) = runs
    assert not plain.sliding_full_length and full.sliding_full_length
    assert full.describe() == {"hf_sliding_cache": "full length, masked"}
    assert all(layer.max_cache_len == 40 for layer in full.cache.layers)
    assert torch.allclose(a_logits, b_logits, atol=1e-4, rtol=0)


def test_a_family_this_transformers_cannot_build_is_one_line(monkeypatch):
    """An older transformers without the family's classes: the run stops with one line naming the upgrade."""
    import transformers

    def unknown(model_type, *args, **kwargs):
        raise ValueError(f"Unrecognized model identifier: {model_type}. Should contain one of llama, qwen2")

    monkeypatch.setattr(transformers.AutoConfig, "for_model", unknown)
    with pytest.raises(UserError, match="cannot build model_type 'smollm3'.*upgrade transformers") as e:
        models.hf_config(zoo.ZOO["tiny-smollm3"])
    assert "\n" not in str(e.value)


# A tiny layer of each family with a window of 8 on 4 layers, without layer_types (the family's own rule decides
# which layers slide) and with the keys that rule reads; transformers' cache after a 30-token prefill is the truth.
_SMALL = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
              vocab_size=256, max_position_embeddings=4096, rms_norm_eps=1e-6, intermediate_size=96,
              pad_token_id=None, bos_token_id=None, eos_token_id=None)
_QWEN_MOE = dict(moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2)
SLIDING = {
    "qwen2": dict(use_sliding_window=True, sliding_window=8, max_window_layers=2),
    "qwen3": dict(use_sliding_window=True, sliding_window=8, max_window_layers=2),
    "qwen3_moe": dict(use_sliding_window=True, sliding_window=8, max_window_layers=2, **_QWEN_MOE),
    "qwen2_moe": dict(use_sliding_window=True, sliding_window=8, max_window_layers=3,
                      shared_expert_intermediate_size=32, **_QWEN_MOE),
    "mistral": dict(sliding_window=8),
    "mixtral": dict(sliding_window=8, num_local_experts=4, num_experts_per_tok=2),
    "phi3": dict(sliding_window=8),
    "smollm3": dict(use_sliding_window=True, sliding_window=8, no_rope_layer_interval=2),
    "gemma3_text": dict(sliding_window=8, sliding_window_pattern=3, query_pre_attn_scalar=16),
    "gpt_oss": dict(sliding_window=8, num_local_experts=4, num_experts_per_tok=2),
    "llama": dict(sliding_window=8),  # Llama's attention has no window, but transformers' cache keeps only its last
}


def test_every_family_has_a_sliding_case():
    assert set(SLIDING) == set(FAMILY)


@pytest.mark.parametrize("family", sorted(SLIDING))
def test_which_layers_slide_is_what_transformers_caches(family, cpu):
    """The positions each layer reads (floor.kv_positions_read) are the positions transformers' own cache holds for
    that layer after a prefill past the window: from the raw config.json (the family's rule) and from transformers'
    to_dict (its layer_types)."""
    from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache

    from floorline.bench.runtimes.base import cache_kwarg

    raw = {**_SMALL, **SLIDING[family], "model_type": family}
    hf = AutoConfig.for_model(**raw)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hf).eval()
    cache, ctx = DynamicCache(config=hf), 30
    with torch.inference_mode():
        model(torch.randint(0, 256, (1, ctx)), use_cache=True, **{cache_kwarg(model): cache})
    held = [layer.keys.shape[-2] for layer in cache.layers]
    assert len(set(held)) > 1 or FAMILY[family].slide == "all"  # the rule is seen
    for cfg in (raw, json.loads(json.dumps(hf.to_dict()))):
        a = arch_from_config(cfg, family)
        assert [floor.kv_positions_read(a, i, ctx) for i in range(a.layers)] == held


@pytest.mark.parametrize("family", sorted(FAMILY))
def test_the_defaults_the_accounting_assumes_are_transformers(family):
    """A config.json that leaves out the window, the max position or max_window_layers is counted with the family's
    transformers defaults (arch.WINDOW_DEFAULT, MAX_POS_DEFAULT, MAX_WINDOW_LAYERS_DEFAULT), not a guess."""
    from transformers import AutoConfig

    from floorline.core import arch

    fam = FAMILY[family]
    hf = AutoConfig.for_model(family, **({"use_sliding_window": True} if fam.window_flag else {}))
    assert hf.max_position_embeddings == arch.MAX_POS_DEFAULT[family]
    assert (getattr(hf, "sliding_window", None) or None) == arch.WINDOW_DEFAULT.get(family)
    if fam.slide in ("from_max_window", "odd_below_max_window"):
        assert hf.max_window_layers == arch.MAX_WINDOW_LAYERS_DEFAULT


def test_qwen2_moe_counts_its_qkv_biases_by_its_flag():
    cfg = {**zoo.ZOO["tiny-qwen2-moe"].config}
    on, off = arch_from_config(cfg, "on"), arch_from_config({**cfg, "qkv_bias": False}, "off")
    assert on.qkv_bias and not off.qkv_bias and not on.o_bias
    # q, k and v biases: layers x (heads + 2 kv heads) x head_dim parameters fewer
    assert floor.parameter_count(on) - floor.parameter_count(off) == off.layers * (off.heads + 2 * off.kv_heads) * \
        off.head_dim
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(models.hf_config(off))
    assert sum(p.numel() for p in m.parameters()) == floor.parameter_count(off)


@pytest.mark.parametrize("key, value", [("num_hidden_layers", "two"), ("num_hidden_layers", -2),
                                        ("num_key_value_heads", 0), ("hidden_size", 64.5), ("vocab_size", True),
                                        ("intermediate_size", -1), ("sliding_window_pattern", 0),
                                        ("no_rope_layer_interval", 0)])
def test_a_size_that_is_not_a_count_is_one_line_naming_the_field(key, value):
    """A hand-edited config.json: a wrong type or a negative size is one line naming the field, never a traceback or
    a floor of negative bytes (nor a zero of kv heads read as `heads`)."""
    cfg = {**zoo.ZOO["tiny-qwen3"].config, key: value}
    with pytest.raises(UserError, match=f"config.json's {key} is {value!r}"):
        arch_from_config(cfg, "x")


def test_per_layer_lists_of_another_length_are_one_line():
    cfg = {**zoo.ZOO["tiny-smollm3"].config, "use_sliding_window": True, "sliding_window": 8}
    a = arch_from_config(cfg, "x")
    assert a.sliding == (False, True, False, True)  # no RoPE every second layer (no_rope_layer_interval 2)
    for key in ("layer_types", "no_rope_layers"):
        with pytest.raises(UserError, match=f"{key} names 3 layers, num_hidden_layers 4"):
            arch_from_config({**cfg, key: ["full_attention"] * 3 if key == "layer_types" else [1, 0, 1]}, "x")


def test_floor_experts_bf16_is_two_bytes_whatever_the_dtype():
    """`--experts bf16 --dtype fp32` once counted the experts at 4 bytes a weight (and said "stored fp32"); the
    checkpoint's own bf16 experts still follow --dtype, as a run in that dtype builds them."""
    base = ["floor", "--model", "qwen3-30b-a3b", "--ctx", "2048", "--format", "json"]
    got = {}
    for extra in ([], ["--dtype", "fp32"], ["--dtype", "fp32", "--experts", "bf16"]):
        rc, out, err = run_cli([*base, *extra])
        assert rc == 0, err
        got[" ".join(extra)] = json.loads(out)["components"]["experts"]
    assert got["--dtype fp32 --experts bf16"] == got[""] and got["--dtype fp32"] == 2 * got[""]


def test_floor_weight_bits_quantise_a_moes_bf16_experts_too():
    """--weight-bits 4 on qwen3-30b-a3b: its bf16 checkpoint's experts are read as int4 g128 like the other matrices
    (floor.experts_read gives None: the decoder's format). A step reads 48 layers x 8 experts x (gate, up: 768 x 2048;
    down: 2048 x 768), each 4-bit codes plus a 2-byte scale and zero per 128 inputs."""
    rc, out, err = run_cli(["floor", "--model", "qwen3-30b-a3b", "--ctx", "2048", "--weight-bits", "4",
                            "--format", "json"])
    assert rc == 0, err
    per_expert = 2 * (768 * 2048 // 2 + 2 * 2 * 768 * 16) + (2048 * 768 // 2 + 2 * 2 * 2048 * 6)
    assert json.loads(out)["components"]["experts"] == 48 * 8 * per_expert == 962_592_768


@pytest.mark.parametrize("base, change, says", [
    ("tiny-qwen3", {"hidden_act": "frobact"}, "KeyError: 'frobact'"),
    ("tiny-qwen3", {"rope_scaling": {"rope_type": "frob", "factor": 2.0}}, "KeyError: 'frob'"),
    ("tiny-phi3", {"pad_token_id": 10**6}, "AssertionError: Padding_idx must be within num_embeddings")])
def test_a_config_transformers_cannot_build_is_one_line_in_every_command(tmp_path, base, change, says):
    """A field the accounting does not read, but transformers cannot build (floor, predict: no floor of it; run: no
    traceback from inside transformers)."""
    from floorline.serve import servedir

    d = servedir.write_model_dir(zoo.ZOO[base], tmp_path / "m")
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, **change}))
    for argv in (["floor", "--model", str(d), "--ctx", "64"],
                 ["predict", "--model", str(d), "--ctx", "64", "--gpu", "h200"],
                 ["run", "--model", str(d), "--ctx", "64", "--device", "cpu", "--mode", "eager", "--steps", "2"]):
        rc, out, err = run_cli(argv)
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1 and "cannot build this" in lines[0] and says in lines[0], (argv, err)
    (d / "config.json").write_text(json.dumps(cfg))  # as written: it builds
    assert run_cli(["floor", "--model", str(d), "--ctx", "64"])[0] == 0


def test_a_moe_runs_routing_is_printed_and_reported(tmp_path):
    """The experts a step read and the floors of those bytes and of every expert: said under run's table and in the
    report, not only in the record."""
    out = tmp_path / "moe.jsonl"
    rc, _, err = run_cli(["run", "--model", "tiny-qwen3-moe", "--ctx", "24", "--mode", "eager", "--device", "cpu",
                          "--steps", "2", "--warmup", "0", "--output", str(out)])
    assert rc == 0, err
    (r,) = [json.loads(ln) for ln in out.read_text().splitlines()]
    a = zoo.ZOO["tiny-qwen3-moe"]
    def ms(b):
        return f"{b / (r['measured_gbps'] * 1e9) * 1e3:.3g} ms"
    said = (f"tiny-qwen3-moe ctx 24 eager: routed to {a.top_k * a.n_moe} experts a step (top {a.top_k} of "
            f"{a.experts} in each of {a.n_moe} layers; {r['moe_experts_distinct_over_steps']} distinct over "
            f"{r['moe_route_steps']} steps); floor of the experts read {ms(r['floor_bytes_routed'])}, of every expert "
            f"{ms(r['floor_bytes_all_experts'])}, at the measured bandwidth")
    assert said in err, err
    assert run_cli(["report", str(out), "--out", str(tmp_path / "rep")])[0] == 0
    assert said.split(": ", 1)[1] in (tmp_path / "rep" / "report.md").read_text()


def test_an_mxfp4_checkpoint_is_counted_not_loaded(tmp_path):
    """gpt-oss as shipped (mxfp4 experts): floor counts it; run says it does not load it (transformers would fetch
    its kernels from the Hub) instead of an error from inside transformers."""
    d = tmp_path / "gpt-oss"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**zoo.ZOO["tiny-gpt-oss"].config,
                                               "quantization_config": {"quant_method": "mxfp4"}}))
    (d / "model.safetensors").write_bytes(b"")
    rc, out, err = run_cli(["floor", "--model", str(d), "--ctx", "16", "--format", "json"])
    assert rc == 0 and json.loads(out)["expert_format"] == "mxfp4", err
    rc, out, err = run_cli(["run", "--model", str(d), "--ctx", "16", "--device", "cpu"])
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "stores the experts in mxfp4" in err, err


def test_a_multimodal_gemma3_folder_runs_its_text_decoder_without_a_parameter_warning(tmp_path):
    """Gemma 3 4B+ ships as a multimodal checkpoint: its vision tower is loaded but a text decode step never reads it,
    so the parameter check counts the decoder and the record says how many parameters were left unread; --quant
    packs its language model's matrices."""
    from transformers import AutoModelForCausalLM, Gemma3Config

    text = {"model_type": "gemma3_text", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 512,
            "max_position_embeddings": 1024, "sliding_window": 16, "query_pre_attn_scalar": 16,
            "layer_types": ["sliding_attention", "full_attention"], "pad_token_id": 0}
    vision = {"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
              "num_attention_heads": 2, "image_size": 28, "patch_size": 14}
    cfg = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4)
    torch.manual_seed(0)
    m = AutoModelForCausalLM.from_config(cfg)
    assert type(m).__name__ == "Gemma3ForConditionalGeneration"
    m.save_pretrained(tmp_path / "g3", safe_serialization=True)
    vision_params = sum(p.numel() for n, p in m.named_parameters() if "vision_tower" in n or "multi_modal" in n)
    out = tmp_path / "r.jsonl"
    rc, _, err = run_cli(["run", "--model", str(tmp_path / "g3"), "--ctx", "16", "--mode", "eager", "--device", "cpu",
                          "--steps", "2", "--warmup", "0", "--output", str(out)])
    assert rc == 0, err
    (r,) = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert r["valid"] and r["unread_parameters"] == vision_params > 0
    assert not any("parameters" in w for w in r["warnings"]), r["warnings"]  # (a spread warning may come: 2 steps)
    rc, _, err = run_cli(["run", "--model", str(tmp_path / "g3"), "--ctx", "16", "--mode", "eager", "--device", "cpu",
                          "--steps", "2", "--warmup", "0", "--quant", "int4", "--output", str(out)])
    q = json.loads(out.read_text().splitlines()[-1])
    assert rc == 0 and q["valid"] and q["quant"] == "int4", (err, q["reason"])
