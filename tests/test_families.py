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
from floorline.core.arch import FAMILY, arch_from_config, native_refusal
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
