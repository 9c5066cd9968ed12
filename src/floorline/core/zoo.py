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


def resolve(model: str, need: str = "weights", download: bool = False) -> Arch:
    """A zoo name, a local directory, or a Hub id (org/name, through hub.py: the local cache first).
    need: "weights" (run: config.json + *.safetensors) or "config" (floor, predict, endpoint: config.json alone)."""
    if model in ZOO:
        return ZOO[model]
    p = Path(model)
    if not p.is_dir():
        from floorline.core import hub

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
        from floorline.core import hub

        return arch_from_config(cfg, name=hub.name_of_dir(p) or p.name, path=str(p.resolve()))
    raise UserError(f"unknown model {model!r}; known: {', '.join(ZOO)} (or a directory with config.json + "
                    f"*.safetensors, or a Hugging Face id org/name)")
