"""An architecture as plain data (no torch, no transformers): the fields the byte accounting and the model builder
need, and reading them from a transformers config.json. The embedded configs live in zoo.py; building a model from an
`Arch`, in bench/models.py.

A family is a transformers `model_type` whose layer floorline knows to the byte. What the families differ in, as a
batch-1 step reads it (floor.py counts each): biases (q/k/v, o), a per-head RMSNorm on q and k (Qwen3, Gemma 3), four
norms a layer (Gemma 3), sliding-window layers (Gemma 3, gpt-oss, Mistral variants), attention sinks (gpt-oss), a
mixture of experts (router, routed experts, a shared expert) in place of the dense MLP. What they differ in that moves
no bytes (the embedding scale of Gemma, partial or absent RoPE of Phi-3 and SmolLM3, fused q/k/v or gate/up storage)
is not a field.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from floorline.core.errors import UserError


@dataclass(frozen=True)
class Family:
    """What a transformers model_type builds, in the terms of the accounting (checked against instantiated models)."""

    attention_bias: str  # "never" | "qkv" (always q/k/v, no o: Qwen2) | "qkv_flag" (config qkv_bias, default on: q/k/v,
    # no o: Qwen2-MoE) | "flag" (config attention_bias: q/k/v and o)
    qk_norm: bool = False  # RMSNorm of head_dim weights on each q and k head
    layer_norms: int = 2  # RMSNorm weight vectors a layer
    sinks: bool = False  # a learned sink logit per query head a layer
    moe: str = ""  # "" dense | "qwen" (num_experts, moe_intermediate_size, sparse step) | "mixtral" | "gpt_oss"
    expert_bias: bool = False  # biases on each expert's gate_up and down, and on the router
    # which layers slide where config.json names no layer_types, as the family's transformers config builds them:
    # "all" | "from_max_window" (layers from max_window_layers on) |
    # "odd_below_max_window" (layers 0, 2, 4... below max_window_layers) | "pattern" (all but every
    # sliding_window_pattern-th) | "alternate" (0, 2, 4...) | "no_rope" (the layers without RoPE)
    slide: str = "all"
    window_flag: bool = False  # the window applies only with use_sliding_window (the Qwen families, SmolLM3)
    native: bool = False  # floorline's native decode path runs it (dense, full attention; see native_refusal)
    sdpa: bool = True  # transformers runs it with PyTorch SDPA (gpt-oss: eager attention only, for its sinks)
    fused_proj: bool = False  # one qkv_proj and one gate_up_proj matrix (Phi-3/4), not q/k/v and gate/up apart


FAMILY: dict[str, Family] = {
    "llama": Family("flag", native=True),  # no window in its attention, but transformers' cache applies one if set
    "mistral": Family("never", slide="all", native=True),
    "qwen2": Family("qkv", slide="from_max_window", window_flag=True, native=True),
    "qwen3": Family("flag", qk_norm=True, slide="from_max_window", window_flag=True, native=True),
    # RoPE on three layers of four (no_rope_layers): native applies it everywhere; the window on the others
    "smollm3": Family("flag", slide="no_rope", window_flag=True),
    "phi3": Family("never", slide="all", fused_proj=True),  # fused qkv_proj and gate_up_proj: the same bytes; partial RoPE
    "gemma3_text": Family("flag", qk_norm=True, layer_norms=4, slide="pattern"),  # pre/post attention, MLP norms; GeGLU
    # with a shared expert and its one-output gate
    "qwen2_moe": Family("qkv_flag", moe="qwen", slide="odd_below_max_window", window_flag=True),
    "qwen3_moe": Family("flag", qk_norm=True, moe="qwen", slide="all", window_flag=True),
    "mixtral": Family("never", moe="mixtral", slide="all"),
    "gpt_oss": Family("flag", sinks=True, moe="gpt_oss", expert_bias=True, slide="alternate", sdpa=False),
}
# What the family's transformers config class (5.x) assumes where a config.json leaves a key out, for the keys that
# decide how far a step reads the cache: the window (when it applies) and the max position (a window at or past it
# never slides). tests/test_families.py checks them against the installed transformers.
WINDOW_DEFAULT = {"mistral": 4096, "qwen2": 4096, "qwen3": 4096, "gemma3_text": 4096, "qwen2_moe": 4096,
                  "qwen3_moe": 4096, "gpt_oss": 128}
MAX_POS_DEFAULT = {"llama": 2048, "mistral": 131072, "qwen2": 32768, "qwen3": 32768, "smollm3": 32768, "phi3": 4096,
                   "gemma3_text": 131072, "qwen2_moe": 32768, "qwen3_moe": 32768, "mixtral": 131072, "gpt_oss": 131072}
MAX_WINDOW_LAYERS_DEFAULT = 28  # Qwen2's, Qwen3's and Qwen2-MoE's
FAMILIES = tuple(FAMILY)
EXPERT_FORMATS = ("bf16", "mxfp4")  # how a published checkpoint stores the routed experts


@dataclass(frozen=True)
class Arch:
    name: str
    family: str  # a transformers model_type of FAMILY: picks the config class and what a layer holds
    hidden: int
    intermediate: int  # the dense MLP's (layers that are not MoE)
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool  # lm_head shares the embedding matrix
    qkv_bias: bool  # biases on q, k and v (Qwen2 always; others with attention_bias)
    max_pos: int
    rope_theta: float
    rms_eps: float
    rope_scaling: dict | None = field(default=None, compare=False)
    params: int | None = None  # published parameter count, None for local models
    path: str | None = None  # local directory, None for embedded configs
    o_bias: bool = False  # a bias on o_proj too (attention_bias of Llama, Qwen3, Gemma 3, gpt-oss)
    window: int | None = None  # tokens a sliding-window layer's query sees, itself included
    sliding: tuple[bool, ...] = ()  # per layer: sliding-window attention; () = every layer full
    experts: int = 0  # routed experts of a MoE layer; 0 = a dense MLP in every layer
    top_k: int = 0  # experts each token is routed to
    expert_intermediate: int = 0
    moe_layers: tuple[bool, ...] = ()  # per layer: a MoE MLP; () with experts > 0 = every layer
    shared_intermediate: int = 0  # a shared expert every token reads (Qwen2-MoE), with a one-output gate
    expert_format: str = "bf16"  # how the published checkpoint stores the routed experts (gpt-oss: mxfp4)
    config: dict | None = field(default=None, compare=False)  # the config.json read (builds the HF config)
    # a dense checkpoint stored quantised (config.json's quantization_config): the options that count it ("--weight-bits
    # 4 --group-size 32"), which floor and endpoint ask for; "" for an unquantised one. Never loaded (run refuses it)
    prequant: str = ""

    def __post_init__(self):
        if self.family not in FAMILY:
            raise UserError(f"model family {self.family!r} is not supported; supported: {', '.join(FAMILIES)}")
        if self.heads % self.kv_heads:
            raise UserError(f"{self.name}: heads ({self.heads}) must be a multiple of kv heads ({self.kv_heads})")
        for what, t in (("sliding", self.sliding), ("moe_layers", self.moe_layers)):
            if t and len(t) != self.layers:
                raise UserError(f"{self.name}: {what} names {len(t)} layers, the model has {self.layers}")
        if any(self.sliding) and not self.window:
            raise UserError(f"{self.name}: sliding-window layers need a window")
        if self.experts and not 0 < self.top_k <= self.experts:
            raise UserError(f"{self.name}: top-k {self.top_k} must be within 1..{self.experts} experts")
        if self.expert_format not in EXPERT_FORMATS:
            raise UserError(f"{self.name}: expert format {self.expert_format!r}; known: {', '.join(EXPERT_FORMATS)}")

    @property
    def traits(self) -> Family:
        return FAMILY[self.family]

    @property
    def qk_norm(self) -> bool:
        return self.traits.qk_norm

    @property
    def layer_norms(self) -> int:
        return self.traits.layer_norms

    @property
    def sinks(self) -> bool:
        return self.traits.sinks

    @property
    def expert_bias(self) -> bool:
        return self.traits.expert_bias

    def identity(self) -> dict:
        """What a record names its model by: the name, the local directory and the digest of its config.json (both
        None for a zoo model). The digest tells two folders of one name apart, and finds one folder copied to
        another path or machine (a Hub model in any cache) to be the same model."""
        return {"model": self.name, "model_path": self.path, "model_config_sha256": config_digest(self.path)}

    def attention(self, attn: str) -> str:
        """The attention implementation transformers will run for `attn` (sdpa or eager): eager where the family has
        no SDPA path (gpt-oss, for its sinks). What a record says it ran, and so what a study looks its cell up by."""
        return attn if self.traits.sdpa else "eager"

    def is_sliding(self, i: int) -> bool:
        return bool(self.sliding) and self.sliding[i]

    def is_moe(self, i: int) -> bool:
        return self.experts > 0 and (not self.moe_layers or self.moe_layers[i])

    @property
    def n_moe(self) -> int:
        return sum(self.is_moe(i) for i in range(self.layers))


def quant_refusal(a: Arch, backend: str) -> str | None:
    """Why a quant backend cannot store `a`'s decoder matrices (None: it can). The backends replace each layer's q, k,
    v, o, gate, up and down linears (quant.base.decoder_linears); one line, naming what to run instead."""
    if a.experts:
        return (f"--quant {backend} packs the dense q/k/v/o and gate/up/down matrices; {a.name} is a mixture of "
                f"experts ({a.family}), whose experts it does not pack; run it with --quant none")
    if a.traits.fused_proj:
        return (f"--quant {backend} packs q/k/v/o and gate/up/down as separate matrices; {a.name} ({a.family}) fuses "
                f"them into qkv_proj and gate_up_proj; run it with --quant none")
    return None


def native_refusal(a: Arch) -> str | None:
    """Why floorline's native decode path cannot run `a` (None: it can). One line, naming what to use instead."""
    if not a.traits.native:
        return (f"--mode native runs the dense {', '.join(f for f, t in FAMILY.items() if t.native)} families, not "
                f"{a.family}; use --mode graph or compile for {a.name}")
    if any(a.sliding):
        return f"--mode native has no sliding-window attention ({a.name}); use --mode graph or compile"
    if a.o_bias:
        return f"--mode native has no o_proj bias ({a.name}); use --mode graph or compile"
    return None


# ------------------------------------------------------------------------------------------ reading config.json
# Gemma3TextConfig's defaults for the keys the accounting reads. A Gemma 3 checkpoint's text_config names only what
# differs from them (google/gemma-3-4b-it's: hidden and intermediate size, layers, window, RoPE scaling), and
# transformers builds the decoder with the rest; tests/test_families.py checks them against the installed transformers.
GEMMA3_TEXT_DEFAULTS = {"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 262208,
                        "max_position_embeddings": 131072, "sliding_window": 4096, "tie_word_embeddings": True,
                        "attention_bias": False, "rms_norm_eps": 1e-6}


def _text_config(cfg: dict) -> dict:
    """A multimodal config (Gemma 3's model_type "gemma3") decodes with its text_config, Gemma3TextConfig's defaults
    filling what it leaves out: the vision tower is not read by a decode step."""
    if cfg.get("model_type") == "gemma3" and isinstance(cfg.get("text_config"), dict):
        return {**GEMMA3_TEXT_DEFAULTS, **cfg["text_config"], "model_type": "gemma3_text"}
    return cfg


def _sliding(cfg: dict, fam: Family, layers: int) -> tuple[int | None, tuple[bool, ...]]:
    """(window, per-layer sliding flags) as transformers builds the cache and the attention masks: the config's
    layer_types where it names them, else the family's rule (Family.slide)."""
    family = cfg["model_type"]
    if fam.window_flag and not cfg.get("use_sliding_window"):
        return None, ()  # Qwen configs carry a window they do not use unless use_sliding_window
    window = cfg.get("sliding_window", WINDOW_DEFAULT.get(family))
    if not window or window >= cfg.get("max_position_embeddings", MAX_POS_DEFAULT[family]):
        return None, ()  # Phi-4-mini's 262144: no layer ever slides
    types = cfg.get("layer_types")
    if any(t not in ("sliding_attention", "full_attention") for t in types or ()):
        raise UserError(f"layer_types {sorted(set(types))}: only sliding_attention and full_attention are accounted")
    for what, t in (("layer_types", types), ("no_rope_layers", cfg.get("no_rope_layers"))):
        if t and len(t) != layers:
            raise UserError(f"config.json's {what} names {len(t)} layers, num_hidden_layers {layers}; fix one of them")
    if types:
        flags = tuple(t == "sliding_attention" for t in types)
    else:
        below = cfg.get("max_window_layers", MAX_WINDOW_LAYERS_DEFAULT)
        rope = (cfg.get("no_rope_layers") or [int((i + 1) % cfg.get("no_rope_layer_interval", 4) != 0)
                                              for i in range(layers)]  # SmolLM3: 1 = the layer has RoPE
                if fam.slide == "no_rope" else ())
        pattern = cfg.get("sliding_window_pattern", 6)
        rule = {"all": lambda i: True, "from_max_window": lambda i: i >= below,
                "odd_below_max_window": lambda i: i % 2 == 0 and i < below,
                "pattern": lambda i: bool((i + 1) % pattern), "alternate": lambda i: i % 2 == 0,
                "no_rope": lambda i: not rope[i]}[fam.slide]
        flags = tuple(rule(i) for i in range(layers))
    return (int(window), flags) if any(flags) else (None, ())


def _moe(cfg: dict, fam: Family, layers: int) -> dict:
    if not fam.moe:
        return {}
    experts = cfg.get("num_experts") or cfg.get("num_local_experts")
    kw = dict(experts=experts, top_k=cfg.get("num_experts_per_tok") or cfg.get("experts_per_token"))
    if fam.moe == "qwen":  # MoE every decoder_sparse_step-th layer, except mlp_only_layers
        step, dense = cfg.get("decoder_sparse_step", 1), set(cfg.get("mlp_only_layers") or ())
        flags = tuple(i not in dense and experts > 0 and (i + 1) % step == 0 for i in range(layers))
        kw.update(expert_intermediate=cfg["moe_intermediate_size"], moe_layers=() if all(flags) else flags,
                  shared_intermediate=cfg.get("shared_expert_intermediate_size", 0) or 0)
    else:  # mixtral, gpt_oss: intermediate_size is the expert's
        kw.update(expert_intermediate=cfg["intermediate_size"])
    q = cfg.get("quantization_config") or {}
    if q.get("quant_method") == "mxfp4":
        kw["expert_format"] = "mxfp4"
    elif q:
        raise UserError(f"quantization_config {q.get('quant_method')!r}: floorline counts pre-quantised experts in "
                        f"mxfp4 only; give the unquantised config and --weight-bits")
    if not kw["experts"] or not kw["top_k"]:
        raise UserError("a MoE config needs num_experts (or num_local_experts) and num_experts_per_tok")
    return kw


def _prequant(q: dict) -> str:
    """The floor's options for a pre-quantised dense checkpoint: its bits and group size (GPTQ's and transformers'
    AWQ names, AutoAWQ's w_bit / q_group_size; a group of -1 is one a row); "--bpw N" for N bits floor does not
    count with groups (a 3-bit GPTQ: endpoint's --bpw takes it); "--weight-bits 4|8 --group-size G" where the config
    names no bits (fp8, bitsandbytes)."""
    bits, group = q.get("bits") or q.get("w_bit"), q.get("group_size") or q.get("q_group_size")
    if isinstance(bits, int) and bits not in (4, 8):
        return f"--bpw {bits}"
    if bits not in (4, 8):
        return "--weight-bits 4|8 --group-size G"
    return f"--weight-bits {bits}" + (f" --group-size {group if group > 0 else 'row'}" if isinstance(group, int) else "")


def config_digest(path: str | None) -> str | None:
    """The first 16 hex digits of the sha256 of `path`/config.json's bytes (what `sha256sum config.json` prints); None
    for no path, or a folder that is not here (a record's from another machine). Read again when the file changes."""
    if not path:
        return None
    try:
        st = (Path(path) / "config.json").stat()
    except OSError:
        return None
    return _file_digest(str(Path(path) / "config.json"), st.st_ino, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=256)
def _file_digest(file: str, ino: int, mtime_ns: int, size: int) -> str | None:
    try:
        return hashlib.sha256(Path(file).read_bytes()).hexdigest()[:16]
    except OSError:
        return None


# sizes a config.json gives as integers: at least 1, or (the second set) at least 0 where 0 means none
POSITIVE = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
            "max_position_embeddings", "num_experts", "num_local_experts", "num_experts_per_tok", "experts_per_token",
            "moe_intermediate_size", "decoder_sparse_step", "sliding_window_pattern", "no_rope_layer_interval")
NON_NEGATIVE = ("intermediate_size", "sliding_window", "max_window_layers", "shared_expert_intermediate_size")


def _check_sizes(cfg: dict, name: str) -> None:
    for keys, low in ((POSITIVE, 1), (NON_NEGATIVE, 0)):
        for k in keys:
            v = cfg.get(k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < low):
                raise UserError(f"{name}: config.json's {k} is {v!r}, not an integer >= {low}; fix that field")


def arch_from_config(cfg: dict, name: str, path: str | None = None, params: int | None = None) -> Arch:
    """An `Arch` from a transformers config.json dict (any model_type of FAMILY). The dict is kept (`config`) so the
    same transformers config can be built from it."""
    cfg = _text_config(cfg)
    family = cfg.get("model_type")
    if family is None:
        raise UserError(f"{name}: config.json has no model_type; add the one its architecture has (llama for "
                        f"LlamaForCausalLM, qwen3 for Qwen3ForCausalLM, ...; supported: {', '.join(FAMILIES)})")
    if family not in FAMILY:
        raise UserError(f"{name}: model_type {family!r} is not supported; supported: {', '.join(FAMILIES)} (a model "
                        f"of another type has no byte accounting here: open an issue with its config.json)")
    fam = FAMILY[family]
    _check_sizes(cfg, name)
    if family in ("qwen3", "qwen3_moe", "gemma3_text", "gpt_oss") and "head_dim" not in cfg:
        # their config classes default head_dim to a constant, not hidden / heads: do not guess which
        raise UserError(f"{name}: config.json lacks 'head_dim' ({family} does not derive it); give the full config")
    try:
        heads = cfg["num_attention_heads"]
        hidden = cfg["hidden_size"]
        layers = cfg["num_hidden_layers"]
        if cfg.get("mlp_bias"):
            raise UserError(f"{name}: biases on the MLP (mlp_bias) are not in the floor accounting; use a model "
                            f"without them")
        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        rope = rope.get("full_attention", rope)  # Gemma 3 (transformers 5): one set per layer type
        theta = cfg.get("rope_theta", rope.get("rope_theta", 10000.0))
        scaling = rope if rope.get("rope_type", rope.get("type", "default")) != "default" else None
        flag_bias = fam.attention_bias == "flag" and bool(cfg.get("attention_bias", family == "gpt_oss"))
        qkv_bias = fam.attention_bias == "qkv" or (fam.attention_bias == "qkv_flag" and bool(cfg.get("qkv_bias", True)))
        window, sliding = _sliding(cfg, fam, layers)
        moe = _moe(cfg, fam, layers)
        q = cfg.get("quantization_config")
        prequant = _prequant(q) if q and not moe else ""  # (a MoE's mxfp4 experts are counted: _moe)
        intermediate = cfg.get("intermediate_size", 0) if moe and fam.moe == "qwen" else cfg["intermediate_size"]
        return Arch(
            name=name, family=family, hidden=hidden, intermediate=intermediate, layers=layers, heads=heads,
            kv_heads=cfg.get("num_key_value_heads") or heads, head_dim=cfg.get("head_dim") or hidden // heads,
            vocab=cfg["vocab_size"], tied=bool(cfg.get("tie_word_embeddings", family in ("gemma3_text", "smollm3"))),
            qkv_bias=qkv_bias or flag_bias, o_bias=flag_bias,
            max_pos=cfg.get("max_position_embeddings", MAX_POS_DEFAULT[family]), rope_theta=float(theta),
            rms_eps=float(cfg.get("rms_norm_eps", 1e-6)), rope_scaling=scaling, path=path, params=params,
            window=window, sliding=sliding, config=dict(cfg), prequant=prequant, **moe,
        )
    except KeyError as e:
        raise UserError(f"{name}: config.json lacks {e.args[0]!r}; give a complete transformers config") from None
