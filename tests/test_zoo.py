"""zoo: names, local directories, and reading an Arch back from a transformers config dict."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from floorline.bench import models
from floorline.core import floor, zoo
from floorline.core.arch import arch_from_config, native_refusal
from floorline.core.errors import UserError


def test_every_zoo_entry_is_keyed_by_its_name_and_has_a_count():
    assert zoo.DEFAULT_GPU_MODEL in zoo.ZOO and zoo.DEFAULT_CPU_MODEL in zoo.ZOO
    for name, a in zoo.ZOO.items():
        assert a.name == name
        assert a.path is None and a.params and a.params > 0
        assert a.heads % a.kv_heads == 0


def test_resolve_zoo_name():
    assert zoo.resolve("tiny-llama") is zoo.ZOO["tiny-llama"]


def test_resolve_unknown_lists_known_names(tmp_path):
    with pytest.raises(UserError) as e:
        zoo.resolve("llama-9000")
    msg = str(e.value)
    assert "llama-9000" in msg
    for name in zoo.ZOO:
        assert name in msg
    assert "\n" not in msg


def test_resolve_a_file_is_not_a_model(tmp_path):
    f = tmp_path / "config.json"
    f.write_text("{}")
    with pytest.raises(UserError, match="config.json: a file, not a directory; give the folder that holds"):
        zoo.resolve(str(f))


def _write_config(d, a=zoo.ZOO["tiny-qwen2"]):
    (d / "config.json").write_text(json.dumps(models.hf_config(a).to_dict()))


def test_local_dir_without_config(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(UserError, match="no config.json"):
        zoo.resolve(str(tmp_path))


def test_local_dir_without_safetensors(tmp_path):
    _write_config(tmp_path)
    (tmp_path / "pytorch_model.bin").write_bytes(b"not loaded")  # pickles are never a substitute
    with pytest.raises(UserError, match="safetensors"):
        zoo.resolve(str(tmp_path))


def test_local_dir_with_bad_json(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(UserError, match="not valid JSON"):
        zoo.resolve(str(tmp_path))
    for text, kind in (("[1, 2]", "list"), ('"llama"', "str"), ("null", "NoneType"), ("42", "int")):
        (tmp_path / "config.json").write_text(text)  # JSON, but no config
        with pytest.raises(UserError, match=f"a JSON {kind}, not an object"):
            zoo.resolve(str(tmp_path), need="config")
    (tmp_path / "config.json").write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(UserError, match="not a text file"):
        zoo.resolve(str(tmp_path), need="config")


def test_a_path_that_is_no_directory_is_said_so(tmp_path):
    for p in (str(tmp_path / "nonexist"), "./nonexist", "a/b/c"):
        with pytest.raises(UserError, match="no such directory; give the folder that holds the model's config.json$"):
            zoo.resolve(p, need="config")
    with pytest.raises(UserError, match="unknown model 'nonexist'; known: "):
        zoo.resolve("nonexist")


def test_a_quoted_home_path_is_the_folder_there(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "m").mkdir()
    _write_config(tmp_path / "m")
    assert zoo.resolve("~/m", need="config").path == str((tmp_path / "m").resolve())


def test_local_dir_resolves_to_its_config(tmp_path):
    d = tmp_path / "my-model"
    d.mkdir()
    _write_config(d)
    (d / "model.safetensors").write_bytes(b"")  # resolve reads only the config
    a = zoo.resolve(str(d))
    assert a.name == "my-model" and a.path == str(d.resolve()) and a.params is None
    ref = zoo.ZOO["tiny-qwen2"]
    assert dataclasses.replace(a, name=ref.name, path=None, params=ref.params) == ref


ACCOUNTING_FIELDS = ("family", "hidden", "intermediate", "layers", "heads", "kv_heads", "head_dim", "vocab", "tied",
                     "qkv_bias", "max_pos", "rope_theta", "rms_eps")


@pytest.mark.parametrize("name", list(zoo.ZOO))
def test_arch_from_config_round_trips(name):
    a = zoo.ZOO[name]
    cfg = json.loads(json.dumps(models.hf_config(a).to_dict()))  # as it would be read from config.json
    b = arch_from_config(cfg, name=a.name)
    for f in ACCOUNTING_FIELDS:
        assert getattr(b, f) == getattr(a, f), f
    # the built model's experts are dense (a random-weight build leaves the checkpoint's quantization_config out)
    assert b.expert_format == "bf16"
    assert dataclasses.replace(b, params=a.params, expert_format=a.expert_format) == a
    if a.rope_scaling is None:
        assert b.rope_scaling is None
    else:
        assert {k: b.rope_scaling[k] for k in a.rope_scaling} == a.rope_scaling


def test_arch_from_a_published_style_config():
    """A Llama-3.1-8B config.json as published (rope_scaling + top-level rope_theta, no rope_parameters)."""
    cfg = {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "hidden_size": 4096,
        "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 128256,
    }
    a = arch_from_config(cfg, "Meta-Llama-3.1-8B")
    assert dataclasses.replace(a, name="llama-3.1-8b", params=8_030_261_248) == zoo.ZOO["llama-3.1-8b"]
    assert a.rope_scaling["rope_type"] == "llama3" and a.rope_scaling["factor"] == 8.0
    assert floor.parameter_count(a) == 8_030_261_248


def test_arch_from_config_rejections():
    base = models.hf_config(zoo.ZOO["tiny-llama"]).to_dict()
    with pytest.raises(UserError, match="model_type"):
        arch_from_config({**base, "model_type": "gpt2"}, "x")
    with pytest.raises(UserError, match="vocab_size"):
        arch_from_config({k: v for k, v in base.items() if k != "vocab_size"}, "x")
    with pytest.raises(UserError, match="multiple"):
        arch_from_config({**base, "num_attention_heads": 4, "num_key_value_heads": 3}, "x")


def test_arch_rejects_unknown_family():
    with pytest.raises(UserError, match="family"):
        dataclasses.replace(zoo.ZOO["tiny-llama"], family="gpt2")


# ---------------------------------------------------------------- local configs whose biases the accounting misses
def _hf_param_count(cfg: dict) -> int:
    from transformers import AutoConfig, AutoModelForCausalLM

    hf_cfg = AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(hf_cfg, dtype=torch.bfloat16)
    if hf_cfg.tie_word_embeddings:
        m.tie_weights()
    return sum(p.numel() for p in m.parameters())


def test_local_llama_config_without_biases_counts_right():
    cfg = models.hf_config(zoo.ZOO["tiny-llama"]).to_dict()
    assert floor.parameter_count(arch_from_config(cfg, "x")) == _hf_param_count(cfg)


def test_local_llama_config_with_attention_bias_counts_o_bias_too():
    # transformers' Llama puts attention_bias on q, k, v and o_proj: counted, and native (no o bias) refuses it
    cfg = {**models.hf_config(zoo.ZOO["tiny-llama"]).to_dict(), "attention_bias": True}
    a = arch_from_config(cfg, "x")
    assert a.qkv_bias and a.o_bias
    assert floor.parameter_count(a) == _hf_param_count(cfg)
    assert "o_proj bias" in native_refusal(a)


def test_mistral_sliding_window_slides_every_layer():
    cfg = {**models.hf_config(zoo.ZOO["mistral-7b-v0.3"]).to_dict(), "sliding_window": 4096}
    a = arch_from_config(cfg, "x")
    assert a.window == 4096 and a.sliding == (True,) * 32
    assert floor.components(a, 8192)["kv_read"] == 4095 * floor.kv_bytes_per_token(a)
    assert "sliding-window" in native_refusal(a)
    assert native_refusal(zoo.ZOO["mistral-7b-v0.3"]) is None


def test_local_config_with_mlp_bias_is_refused():
    # the floor counts no MLP biases, which transformers would add to gate/up/down: refuse, do not miscount
    for model in ("tiny-llama", "tiny-qwen2"):
        cfg = {**models.hf_config(zoo.ZOO[model]).to_dict(), "mlp_bias": True}
        with pytest.raises(UserError, match="mlp_bias"):
            arch_from_config(cfg, "x")


def test_local_mistral_config_with_attention_bias_flag():
    cfg = {**models.hf_config(zoo.ZOO["mistral-7b-v0.3"]).to_dict(), "attention_bias": True}
    assert floor.parameter_count(arch_from_config(cfg, "x")) == _hf_param_count(cfg)
