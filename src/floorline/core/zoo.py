"""The model zoo: architectures as plain data (no torch, no transformers).

Owns: the embedded configs and resolving a model name (zoo name, local directory, Hub id) to an `Arch` (arch.py).
Figures are the public config.json of each model (../shared/facts/models.md); `params` is the published count, which
tests check against both the floor accounting and an instantiated model.
"""

from __future__ import annotations

import json
from pathlib import Path

from floorline.core.arch import Arch, arch_from_config
from floorline.core.errors import UserError


def _llama3(factor: float, original_max: int = 8192) -> dict:
    return {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": original_max}


# The study's models and the small ones edge users run: Qwen/Qwen2.5-7B, -0.5B, -1.5B, meta-llama/Llama-3.1-8B,
# Llama-3.2-1B, -3B and mistralai/Mistral-7B-v0.3 (sources: the module's docstring). The tiny models' counts are what
# transformers builds from their fields: pins, not published figures.
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


def _published(name: str, params: int, **config) -> Arch:
    """An embedded model from the fields of its public config.json (kept as the dict the HF model is built from)."""
    return arch_from_config(config, name, params=params)


# The 2026 families, each from its public config.json (the Hub repo named beside it; copies found through the search
# index, two agreeing for each); `params` the published count (model card, safetensors index total / 2, or GGUF
# general.parameter_count, exact where one gives it), which tests check against the accounting and an instantiated
# transformers model. Fields that move no bytes and that the configs share with their class defaults are omitted.
_QWEN3 = dict(model_type="qwen3", head_dim=128, hidden_act="silu", max_position_embeddings=40960, rms_norm_eps=1e-6,
              rope_theta=1000000.0, attention_bias=False, use_sliding_window=False, sliding_window=None)
_GEMMA3 = dict(model_type="gemma3_text", head_dim=256, hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6,
               query_pre_attn_scalar=256, rope_local_base_freq=10000.0, rope_theta=1000000.0, attention_bias=False,
               final_logit_softcapping=None, attn_logit_softcapping=None, tie_word_embeddings=True)
_TINY = dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
             vocab_size=2048, max_position_embeddings=8192, rope_theta=10000.0, rms_norm_eps=1e-6)
ZOO.update({a.name: a for a in [
    # Qwen/Qwen3-0.6B, -1.7B, -4B (tied), -8B (untied): no q/k/v bias, a per-head RMSNorm on q and k. Cards: 0.6B
    # (0.44B non-embedding), 1.7B (1.4B), 4.0B (index 8,044,936,192 B), 8.2B (16,381,470,720 B). The 0.6B and 1.7B
    # repos also store a copy of the tied lm_head (their safetensors totals 751,632,384 and 2,031,739,904): counted
    # here once, as transformers loads them and a step reads them
    _published("qwen3-0.6b", 596_049_920, **_QWEN3, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
               num_attention_heads=16, num_key_value_heads=8, vocab_size=151936, tie_word_embeddings=True),
    _published("qwen3-1.7b", 1_720_574_976, **_QWEN3, hidden_size=2048, intermediate_size=6144,
               num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, vocab_size=151936,
               tie_word_embeddings=True),
    _published("qwen3-4b", 4_022_468_096, **_QWEN3, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
               num_attention_heads=32, num_key_value_heads=8, vocab_size=151936, tie_word_embeddings=True),
    _published("qwen3-8b", 8_190_735_360, **_QWEN3, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
               num_attention_heads=32, num_key_value_heads=8, vocab_size=151936, tie_word_embeddings=False),
    # Qwen/Qwen3-30B-A3B: 128 experts of 768, top-8, in all 48 layers, no shared expert; 30.5B (3.3B activated)
    _published("qwen3-30b-a3b", 30_532_122_624, **{**_QWEN3, "model_type": "qwen3_moe"}, hidden_size=2048,
               intermediate_size=6144, moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8,
               decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True, num_hidden_layers=48,
               num_attention_heads=32, num_key_value_heads=4, vocab_size=151936, tie_word_embeddings=False),
    # google/gemma-3-1b-it (gemma3_text): 5 local layers (512-token window) to 1 global, 4 norms a layer, q/k norm;
    # 999,885,952 (keras-hub's gemma3_instruct_1b preset, the Hub total)
    _published("gemma-3-1b", 999_885_952, **_GEMMA3, hidden_size=1152, intermediate_size=6912, num_hidden_layers=26,
               num_attention_heads=4, num_key_value_heads=1, vocab_size=262144, max_position_embeddings=32768,
               sliding_window=512, sliding_window_pattern=6, rope_scaling=None),
    # google/gemma-3-4b-it's text_config (the decoder; a decode step reads neither the 416,866,032-parameter SigLIP
    # tower nor the 2,950,272 of the projector, with which the repo holds 4,300,079,472): 1024-token window, linear
    # RoPE scaling 8 on the global layers; the config gives the shape, Gemma3TextConfig's defaults the rest
    _published("gemma-3-4b", 3_880_263_168, **_GEMMA3, hidden_size=2560, intermediate_size=10240,
               num_hidden_layers=34, num_attention_heads=8, num_key_value_heads=4, vocab_size=262208,
               max_position_embeddings=131072, sliding_window=1024, sliding_window_pattern=6,
               rope_scaling={"rope_type": "linear", "factor": 8.0}),
    # microsoft/Phi-4-mini-instruct (phi3): fused qkv_proj and gate_up_proj, RoPE on 3/4 of each head (LongRoPE:
    # the long factors past 4096 positions); 3,836,021,760 (Hub metadata)
    _published("phi-4-mini", 3_836_021_760, model_type="phi3", hidden_size=3072, intermediate_size=8192,
               num_hidden_layers=32, num_attention_heads=24, num_key_value_heads=8, vocab_size=200064,
               tie_word_embeddings=True, max_position_embeddings=131072, original_max_position_embeddings=4096,
               partial_rotary_factor=0.75, rope_theta=10000.0, rms_norm_eps=1e-5, hidden_act="silu",
               sliding_window=262144, rope_scaling={"type": "longrope", "short_factor": [1.0] * 48, "long_factor": [
                   1, 1.118320672, 1.250641126, 1.398617824, 1.564103225, 1.74916897, 1.956131817, 2.187582649,
                   2.446418898, 2.735880826, 3.059592084, 3.421605075, 3.826451687, 4.279200023, 4.785517845,
                   5.351743533, 5.984965424, 6.693110555, 7.485043894, 8.370679318, 9.36110372, 10.4687158,
                   11.70738129, 13.09260651, 14.64173252, 16.37415215, 18.31155283, 20.47818807, 22.90118105,
                   25.61086418, 28.64115884, 32.03, 32.1, 32.13, 32.23, 32.6, 32.61, 32.64, 32.66, 32.7, 32.71,
                   32.93, 32.97, 33.28, 33.49, 33.5, 44.16, 47.77]}),
    # openai/gpt-oss-20b: 32 experts of 2880 (MXFP4 in the checkpoint: 4.25 bits a weight), top-4, biases on
    # attention, router and experts, sinks, a 128-token window on every other layer, YaRN RoPE; 20.91B (model card,
    # arXiv 2508.10925), 20,914,757,184 (GGUF general.parameter_count)
    _published("gpt-oss-20b", 20_914_757_184, model_type="gpt_oss", hidden_size=2880, intermediate_size=2880,
               num_hidden_layers=24, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
               num_local_experts=32, num_experts_per_tok=4, vocab_size=201088, tie_word_embeddings=False,
               attention_bias=True, max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=150000.0,
               rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                             "truncate": False, "original_max_position_embeddings": 4096},
               sliding_window=128, layer_types=["sliding_attention", "full_attention"] * 12,
               quantization_config={"quant_method": "mxfp4",
                                    "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                               "model.embed_tokens", "lm_head"]}),
    # HuggingFaceTB/SmolLM3-3B: Llama-like, tied, no RoPE on every fourth layer; index total 6,150,197,248 B
    _published("smollm3-3b", 3_075_098_624, model_type="smollm3", hidden_size=2048, intermediate_size=11008,
               num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=4, vocab_size=128256,
               tie_word_embeddings=True, max_position_embeddings=65536, rope_theta=5000000.0, rms_norm_eps=1e-6,
               no_rope_layer_interval=4, attention_bias=False, use_sliding_window=False, sliding_window=None),
    # Test models of the new families, a few MB: each accounting path (q/k norm; 4 norms + sliding layers; sinks +
    # biases + MoE with expert biases; shared expert; fused q/k/v; MoE with dense layers)
    _published("tiny-qwen3", 1_049_984, **_TINY, model_type="qwen3", intermediate_size=384,
               tie_word_embeddings=True),
    _published("tiny-qwen3-moe", 1_412_480, **_TINY, model_type="qwen3_moe", intermediate_size=384,
               moe_intermediate_size=64, num_experts=8, num_experts_per_tok=2, decoder_sparse_step=2,
               mlp_only_layers=[], norm_topk_prob=True, tie_word_embeddings=False),  # layers 1 and 3 MoE
    _published("tiny-qwen2-moe", 1_710_720, **_TINY, model_type="qwen2_moe", intermediate_size=384,
               moe_intermediate_size=64, shared_expert_intermediate_size=128, num_experts=8, num_experts_per_tok=2,
               decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=False),
    _published("tiny-mixtral", 1_313_920, **_TINY, model_type="mixtral", intermediate_size=96, num_local_experts=4,
               num_experts_per_tok=2, tie_word_embeddings=False, sliding_window=None),
    _published("tiny-gemma3", 1_051_008, **_TINY, model_type="gemma3_text", intermediate_size=384, tie_word_embeddings=True,
               query_pre_attn_scalar=32, sliding_window=8, layer_types=["sliding_attention", "full_attention"] * 2),
    _published("tiny-gpt-oss", 1_917_616, **_TINY, model_type="gpt_oss", intermediate_size=96, num_local_experts=8,
               num_experts_per_tok=2, tie_word_embeddings=False, attention_bias=True, sliding_window=8,
               layer_types=["sliding_attention", "full_attention"] * 2,
               rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                             "truncate": False, "original_max_position_embeddings": 256}),
    _published("tiny-phi3", 1_049_728, **_TINY, model_type="phi3", intermediate_size=384, partial_rotary_factor=0.5,
               tie_word_embeddings=True, sliding_window=None),
    _published("tiny-smollm3", 1_049_728, **_TINY, model_type="smollm3", intermediate_size=384, no_rope_layer_interval=2,
               tie_word_embeddings=True),
]})

DEFAULT_GPU_MODEL = "qwen2.5-7b"
DEFAULT_CPU_MODEL = "qwen2.5-0.5b"
DEFAULT_GPU_CTX = 2048  # the study's shortest context
DEFAULT_CPU_CTX = 1024  # the newcomer's first run finishes within a minute on 2 AVX2 cores (README)


def refuse_prequant(model: str, a: Arch) -> None:
    """A pre-quantised checkpoint is counted (floor, endpoint), never loaded: one line for the commands that would."""
    if a.prequant:
        counts = "endpoint" if a.prequant.startswith("--bpw") else "floor"
        raise UserError(f"{model}: config.json's quantization_config makes it a pre-quantised checkpoint, which "
                        f"floorline does not load; give the unquantised model (with --quant to quantise it), or count "
                        f"its floor with `floorline {counts} ... {a.prequant}`")
    if a.path and a.expert_format == "mxfp4":  # (the zoo's gpt-oss is built with bf16 experts, and counted so)
        raise UserError(f"{model}: config.json's quantization_config stores the experts in mxfp4, which floorline does "
                        f"not load (transformers fetches its kernels from the Hub); give the checkpoint dequantised to "
                        f"bf16, or count its floor with `floorline floor --model {model}`")


def resolve(model: str, need: str = "weights", download: bool = False) -> Arch:
    """A zoo name, a local directory, or a Hub id (org/name, through hub.py: the local cache first).
    need: "weights" (run: config.json + *.safetensors) or "config" (floor, predict, endpoint: config.json alone)."""
    if model in ZOO:
        return ZOO[model]
    p = Path(model).expanduser()
    if not p.is_dir():
        from floorline.core import hub

        if hub.is_hub_id(model):
            p = hub.snapshot(model, need, download)
    if p.is_dir():
        cfg_file = p / "config.json"
        if not cfg_file.is_file():
            raise UserError(f"{model}: no config.json in this directory; a local model needs config.json"
                            + (" + *.safetensors" if need == "weights" else ""))
        if need == "weights" and not any(p.glob("*.safetensors")):
            raise UserError(f"{model}: no *.safetensors weights in this directory (pickled .bin files are not loaded)")
        try:
            cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise UserError(f"{cfg_file}: not valid JSON ({e.msg} at line {e.lineno})") from None
        except ValueError as e:  # (not UTF-8)
            raise UserError(f"{cfg_file}: not a text file ({e}); give the model's config.json") from None
        except OSError as e:
            raise UserError(f"{cfg_file}: cannot be read ({e.strerror}); check its permissions") from None
        if not isinstance(cfg, dict):
            raise UserError(f"{cfg_file}: a JSON {type(cfg).__name__}, not an object; a transformers config.json is "
                            f"one {{...}} of the model's fields")
        from floorline.core import hub

        a = arch_from_config(cfg, name=hub.name_of_dir(p) or p.resolve().name, path=str(p.resolve()))
        if need == "weights":
            refuse_prequant(model, a)
        return a
    if model.startswith(("/", ".", "~")) or model.count("/") > 1:  # a path, not a name
        what = "a file, not a directory" if p.exists() else "no such directory"
        raise UserError(f"{model}: {what}; give the folder that holds the model's config.json"
                        + (" + *.safetensors" if need == "weights" else ""))
    raise UserError(f"unknown model {model!r}; known: {', '.join(ZOO)} (or a directory with config.json + "
                    f"*.safetensors, or a Hugging Face id org/name)")
