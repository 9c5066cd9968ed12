"""Build a transformers model for an `Arch`: random weights made directly on the target device, or a local directory.

Owns: the transformers config for each family, seeded random weights (never zeros), safetensors-only local loading,
and the memory check before anything is allocated. May not time or measure anything.
"""

from __future__ import annotations

import torch

from floorline.core.arch import Arch
from floorline.core.errors import UserError

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
ATTN_IMPLEMENTATIONS = ("sdpa", "eager")  # transformers' names: PyTorch SDPA, or plain matmul + softmax


def cpu_has_native_bf16() -> bool:
    """Whether this CPU does bf16 arithmetic in hardware (and ATen may use it: ATEN_CPU_CAPABILITY=avx2 says no).
    Without it bf16 is converted in software on every matmul: slower than fp32 despite half the bytes."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = {w for line in f if line.startswith(("flags", "Features")) for w in line.split(":", 1)[1].split()}
    except OSError:
        return False
    cap = torch.backends.cpu.get_cpu_capability().upper()
    x86 = ("avx512_bf16" in flags or "amx_bf16" in flags) and cap.startswith(("AVX512", "AMX"))
    return x86 or "bf16" in flags  # aarch64: FEAT_BF16


def default_dtype(device_type: str) -> str:
    """`--dtype auto`: bf16 on a GPU and on CPUs with native bf16; fp32 on the others (the floor follows the dtype)."""
    return "bf16" if device_type == "cuda" or cpu_has_native_bf16() else "fp32"


# config.json keys that describe the checkpoint, not the architecture: a random-weight model is built without them
# (gpt-oss's quantization_config would ask for MXFP4 kernels; its experts are built in the run's dtype instead)
_NOT_ARCH = ("architectures", "torch_dtype", "dtype", "transformers_version", "quantization_config", "auto_map",
             "_name_or_path", "model_type")


def hf_config(a: Arch, dtype: str = "bf16", attn: str = "sdpa"):
    """The transformers config of an embedded architecture: from its config.json dict where it has one (the 2026
    families), else from the fields (Llama, Qwen2, Mistral)."""
    from transformers import AutoConfig, LlamaConfig, MistralConfig, Qwen2Config

    attn = a.attention(attn)
    if a.config is not None:
        fields = {k: v for k, v in a.config.items() if k not in _NOT_ARCH}
        if a.window is None and fields.get("sliding_window"):
            fields["sliding_window"] = None  # a window past the max position never applies (arch._sliding)
        try:
            cfg = AutoConfig.for_model(a.family, **{**fields, "bos_token_id": None, "eos_token_id": None,
                                                    "pad_token_id": None})
        except (KeyError, ValueError) as e:  # a transformers that predates the family, or rejects the config
            import transformers

            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
            raise UserError(f"{a.name}: transformers {transformers.__version__} cannot build model_type "
                            f"{a.family!r} ({first}); upgrade transformers (pip install -U transformers)") from None
        cfg._attn_implementation = attn
        cfg.dtype = TORCH_DTYPES[dtype]
        return cfg
    rope = {"rope_type": "default", "rope_theta": a.rope_theta}
    if a.rope_scaling:
        rope = {**a.rope_scaling, "rope_theta": a.rope_theta}
    common = dict(
        hidden_size=a.hidden, intermediate_size=a.intermediate, num_hidden_layers=a.layers,
        num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, head_dim=a.head_dim, vocab_size=a.vocab,
        tie_word_embeddings=a.tied, max_position_embeddings=a.max_pos, rms_norm_eps=a.rms_eps,
        rope_parameters=rope, bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )
    if a.family == "qwen2":
        cfg = Qwen2Config(**common, use_sliding_window=False)
    elif a.family == "mistral":
        cfg = MistralConfig(**common, sliding_window=None)  # v0.3 has none; the class default (4096) is wrong
    else:
        cfg = LlamaConfig(**common)
    cfg._attn_implementation = attn
    cfg.dtype = TORCH_DTYPES[dtype]
    return cfg


def _fill_random_(model: torch.nn.Module, seed: int) -> None:
    """Seeded random values, on the parameters' own device: matrices and biases N(0, 0.02), norm weights N(1, 0.1).

    Decode time does not depend on the values, but zeros can run faster than real data and hide unwritten outputs.
    """
    dev = next(model.parameters()).device
    gen = torch.Generator(device=dev).manual_seed(seed)
    for name, p in model.named_parameters():  # tied weights appear once
        if p.dim() == 1 and "norm" in name:
            p.normal_(1.0, 0.1, generator=gen)
        else:
            p.normal_(0.0, 0.02, generator=gen)


def build_random(a: Arch, device: torch.device, dtype: str = "bf16", seed: int = 0,
                 attn: str = "sdpa") -> torch.nn.Module:
    from transformers import AutoModelForCausalLM
    from transformers.initialization import no_init_weights

    attn = a.attention(attn)
    cfg = hf_config(a, dtype, attn)
    # Allocate on the target device in the target dtype and skip transformers' own init: we fill once, seeded.
    with torch.device(device), no_init_weights():
        model = AutoModelForCausalLM.from_config(cfg, dtype=TORCH_DTYPES[dtype], attn_implementation=attn)
    if a.tied:
        model.tie_weights()
    with torch.no_grad():
        _fill_random_(model, seed)
    return model.eval().requires_grad_(False)


def check_builds(a: Arch) -> None:
    """A local config.json that transformers cannot build (an activation or rope type it does not know, a pad id past
    the vocabulary) is one line naming the error, before a floor is counted from it or a run starts: the model is
    built on the meta device (no memory, no weights; about a second for the largest MoE). Embedded configs are
    built by the tests."""
    if a.path is None or a.config is None:
        return
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.initialization import no_init_weights
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # (its warnings about the same field would come before the one line)
    try:  # the config as from_pretrained reads it (pad and special token ids included)
        cfg = AutoConfig.from_pretrained(a.path, local_files_only=True, trust_remote_code=False)
        with torch.device("meta"), no_init_weights():
            AutoModelForCausalLM.from_config(cfg)
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever transformers raises, the config is what to fix
        import transformers

        first = (str(e).strip().splitlines() or [""])[0][:160]
        raise UserError(f"{a.path}: transformers {transformers.__version__} cannot build this {a.family} model from "
                        f"its config.json ({type(e).__name__}: {first}); fix that field of config.json") from None


def load_local(a: Arch, device: torch.device, dtype: str = "bf16", attn: str = "sdpa") -> torch.nn.Module:
    """A local directory's config.json + *.safetensors; never pickle, never remote code, no missing weights."""
    attn = a.attention(attn)
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # its bar and load report would break the one-line error contract
    hf_logging.set_verbosity_error()
    try:
        # no device_map: that would need accelerate; load, then move once
        model, info = AutoModelForCausalLM.from_pretrained(
            a.path, dtype=TORCH_DTYPES[dtype], use_safetensors=True, local_files_only=True,
            trust_remote_code=False, attn_implementation=attn, output_loading_info=True,
            ignore_mismatched_sizes=True,  # a mis-shaped weight comes back in the info, named below, not as a bare error
        )
    except (OSError, ValueError, RuntimeError, SafetensorError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        fix = ("a file of the checkpoint is missing: copy the whole checkpoint" if isinstance(e, FileNotFoundError)
               else "a safetensors file is damaged or no safetensors file: copy or save the checkpoint again"
               if isinstance(e, SafetensorError) or "deserializ" in str(e) else "check config.json matches them")
        raise UserError(f"{a.path}: could not load the safetensors weights ({first}); {fix}") from None
    if a.window is None and getattr(model.config, "sliding_window", None):
        model.config.sliding_window = None  # past the max position: never applies, and keeps the step capturable
    _check_loaded(a, info)
    return model.to(device).eval().requires_grad_(False)


def _check_loaded(a: Arch, info: dict) -> None:
    """Every weight the config needs, at its shape, and no weight it does not: a model with random gaps, or a config
    that uses only part of its checkpoint (fewer layers), would not be the model asked for. One line naming the first
    three tensors."""
    def tied(k: str) -> bool:
        return a.tied and k.startswith("lm_head")

    missing = sorted(k for k in info.get("missing_keys", []) if not tied(k))
    shapes = sorted(f"{k}: {list(ckpt)} in the files, {list(cfg)} from config.json"
                    for k, ckpt, cfg in info.get("mismatched_keys", []))
    unused = sorted(k for k in info.get("unexpected_keys", []) if not (tied(k) or k.endswith("rotary_emb.inv_freq")))
    for keys, what in ((missing, "lack weights the config needs"), (shapes, "hold weights of other shapes than config.json says"),
                       (unused, "hold weights the config does not use")):
        if keys:
            raise UserError(f"{a.path}: the safetensors files {what} ({'; '.join(keys[:3])}"
                            f"{' ...' if len(keys) > 3 else ''}); check config.json's sizes and layer count against "
                            f"the checkpoint")


def build(a: Arch, device: torch.device, dtype: str = "bf16", seed: int = 0, attn: str = "sdpa") -> torch.nn.Module:
    return load_local(a, device, dtype, attn) if a.path else build_random(a, device, dtype, seed, attn)


def memory_asked(weight_bytes: int, kv_bytes: int) -> int:
    """What a cell needs free: weights + KV cache, +10% for activations and workspaces (check_fits; sweep's dry run)."""
    return int((weight_bytes + kv_bytes) * 1.1)


def free_bytes(device: torch.device) -> int:
    """Memory free for a new allocation: cudaMemGetInfo on a GPU, MemAvailable on the CPU."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 1 << 62  # unknown: do not refuse


def check_fits(a: Arch, device: torch.device, weight_bytes: int, kv_bytes: int, have: int | None = None) -> None:
    """Refuse before allocating when weights + KV cache (+10% for activations and workspaces) exceed free memory."""
    have = free_bytes(device) if have is None else have
    need = memory_asked(weight_bytes, kv_bytes)
    if need > have:
        raise UserError(
            f"out of memory: {a.name} needs {need / 1e9:.2f} GB on {device} (weights {weight_bytes / 1e9:.2f} GB + "
            f"KV cache {kv_bytes / 1e9:.2f} GB + 10%) but {have / 1e9:.2f} GB is free; use a smaller model or --ctx")
