"""An architecture as plain data (no torch, no transformers): the fields the byte accounting and the model builder
need, and reading them from a transformers config.json. The embedded configs live in zoo.py; building a model from an
`Arch`, in bench/models.py."""

from __future__ import annotations

from dataclasses import dataclass, field

from floorline.core.errors import UserError

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
