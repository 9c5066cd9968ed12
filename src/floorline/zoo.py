"""The model zoo: architectures as plain data (no torch, no transformers).

Owns: the embedded configs, `Arch` (the fields the byte accounting and the model builder need), and reading an
`Arch` from a local directory's config.json. Building a model from an `Arch` lives in models.py.
Figures are the public config.json of each model (../shared/facts/models.md); `params` is the published count, which
tests check against both the floor accounting and an instantiated model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from floorline.errors import UserError

FAMILIES = ("llama", "qwen2", "mistral")


@dataclass(frozen=True)
class Arch:
    name: str
    family: str  # llama | qwen2 | mistral: picks the transformers config class
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool  # lm_head shares the embedding matrix
    qkv_bias: bool  # Qwen2 has biases on q, k and v (not on o)
    max_pos: int
    rope_theta: float
    rms_eps: float
    rope_scaling: dict | None = field(default=None, compare=False)
    params: int | None = None  # published parameter count, None for local models
    path: str | None = None  # local directory, None for embedded configs

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise UserError(f"model family {self.family!r} is not supported; supported: {', '.join(FAMILIES)}")
        if self.heads % self.kv_heads:
            raise UserError(f"{self.name}: heads ({self.heads}) must be a multiple of kv heads ({self.kv_heads})")


def _llama3(factor: float, original_max: int = 8192) -> dict:
    return {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": original_max}


ZOO: dict[str, Arch] = {a.name: a for a in [
    Arch("qwen2.5-7b", "qwen2", 3584, 18944, 28, 28, 4, 128, 152064, False, True, 32768, 1e6, 1e-6,
         params=7_615_616_512),
    Arch("llama-3.1-8b", "llama", 4096, 14336, 32, 32, 8, 128, 128256, False, False, 131072, 5e5, 1e-5,
         rope_scaling=_llama3(8.0), params=8_030_261_248),
    Arch("mistral-7b-v0.3", "mistral", 4096, 14336, 32, 32, 8, 128, 32768, False, False, 32768, 1e6, 1e-5,
         params=7_248_023_552),
    Arch("qwen2.5-0.5b", "qwen2", 896, 4864, 24, 14, 2, 64, 151936, True, True, 32768, 1e6, 1e-6,
         params=494_032_768),
    Arch("qwen2.5-1.5b", "qwen2", 1536, 8960, 28, 12, 2, 128, 151936, True, True, 32768, 1e6, 1e-6,
         params=1_543_714_304),
    Arch("llama-3.2-1b", "llama", 2048, 8192, 16, 32, 8, 64, 128256, True, False, 131072, 5e5, 1e-5,
         rope_scaling=_llama3(32.0), params=1_235_814_400),
    Arch("llama-3.2-3b", "llama", 3072, 8192, 28, 24, 8, 128, 128256, True, False, 131072, 5e5, 1e-5,
         rope_scaling=_llama3(32.0), params=3_212_749_824),
    # Test models, a few MB: one per code path that matters to the accounting (untied + llama3 RoPE; tied + bias).
    Arch("tiny-llama", "llama", 128, 384, 4, 4, 2, 32, 2048, False, False, 8192, 5e5, 1e-5,
         rope_scaling=_llama3(8.0, 1024), params=1_311_872),
    Arch("tiny-qwen2", "qwen2", 128, 384, 4, 4, 2, 32, 2048, True, True, 8192, 1e6, 1e-6,
         params=1_050_752),
]}

DEFAULT_GPU_MODEL = "qwen2.5-7b"
DEFAULT_CPU_MODEL = "qwen2.5-0.5b"
DEFAULT_GPU_CTX = 2048  # the study's shortest context
DEFAULT_CPU_CTX = 1024  # the newcomer's first run finishes within a minute on 2 AVX2 cores (README)


def arch_from_config(cfg: dict, name: str, path: str | None = None) -> Arch:
    """An `Arch` from a transformers config.json dict (llama, qwen2, mistral)."""
    family = cfg.get("model_type")
    if family not in FAMILIES:
        raise UserError(f"{name}: model_type {family!r} is not supported; supported: {', '.join(FAMILIES)}")
    try:
        heads = cfg["num_attention_heads"]
        hidden = cfg["hidden_size"]
        if family == "mistral" and cfg.get("sliding_window"):
            raise UserError(f"{name}: sliding-window attention is not supported; set sliding_window to null")
        if cfg.get("mlp_bias") or (family == "llama" and cfg.get("attention_bias")):
            raise UserError(f"{name}: biases on the MLP or on o_proj (mlp_bias / llama attention_bias) are not in "
                            f"the floor accounting; use a model without them")
        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        theta = cfg.get("rope_theta", rope.get("rope_theta", 10000.0))
        scaling = rope if rope.get("rope_type", rope.get("type", "default")) != "default" else None
        return Arch(
            name=name, family=family, hidden=hidden, intermediate=cfg["intermediate_size"],
            layers=cfg["num_hidden_layers"], heads=heads, kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or hidden // heads, vocab=cfg["vocab_size"],
            tied=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=family == "qwen2",  # transformers' Qwen2 always has q/k/v biases; Mistral never has
            max_pos=cfg.get("max_position_embeddings", 4096), rope_theta=float(theta),
            rms_eps=float(cfg.get("rms_norm_eps", 1e-6)), rope_scaling=scaling, path=path,
        )
    except KeyError as e:
        raise UserError(f"{name}: config.json lacks {e.args[0]!r}; give a complete transformers config") from None


def resolve(model: str, need: str = "weights", download: bool = False) -> Arch:
    """A zoo name, a local directory, or a Hub id (org/name, through hub.py: the local cache first).
    need: "weights" (run: config.json + *.safetensors) or "config" (floor, predict, endpoint: config.json alone)."""
    if model in ZOO:
        return ZOO[model]
    p = Path(model)
    if not p.is_dir():
        from floorline import hub

        if hub.is_hub_id(model):
            p = hub.snapshot(model, need, download)
    if p.is_dir():
        cfg_file = p / "config.json"
        if not cfg_file.is_file():
            raise UserError(f"{model}: no config.json in this directory; a local model needs config.json + *.safetensors")
        if need == "weights" and not any(p.glob("*.safetensors")):
            raise UserError(f"{model}: no *.safetensors weights in this directory (pickled .bin files are not loaded)")
        try:
            cfg = json.loads(cfg_file.read_text())
        except json.JSONDecodeError as e:
            raise UserError(f"{cfg_file}: not valid JSON ({e.msg} at line {e.lineno})") from None
        from floorline import hub

        return arch_from_config(cfg, name=hub.name_of_dir(p) or p.name, path=str(p.resolve()))
    raise UserError(f"unknown model {model!r}; known: {', '.join(ZOO)} (or a directory with config.json + "
                    f"*.safetensors, or a Hugging Face id org/name)")
