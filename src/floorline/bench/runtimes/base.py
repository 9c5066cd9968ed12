"""The runtime protocol and what every HF-based runtime shares: the cache keyword, chunked prefill, one step body."""

from __future__ import annotations

import inspect
from typing import Callable

import torch


def cache_kwarg(model: torch.nn.Module) -> str:
    """transformers >= 5.2x names the cache argument `cache` (and deprecates `past_key_values`); 5.17 knows only the
    old name. Ask the model's own signature rather than the version number."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class Runtime:
    """prefill(prompt) fills the cache and leaves the first next token in `self.tok` (shape (1, 1), on the device);
    each step() consumes `self.tok` and replaces it with the following token. `prepare_tokens` steps (real tokens,
    never timed) are spent in prepare() by runtimes that must warm up before they capture or compile."""

    name = ""
    needs_cuda = False
    static_cache = False
    # sliding-window layers held at the full cache length (graph, compile): transformers' own sliding static layer
    # keeps its fill level in a Python int and rolls its buffer with a tensor made in the step, which a CUDA graph
    # freezes (wrong positions, or a host copy during capture) and Dynamo re-specialises every step. The model's
    # sliding mask still applies the window; the step reads the masked positions too (more than the floor's window).
    full_length_sliding = False
    prepare_tokens = 0

    @staticmethod
    def available() -> bool:
        """Whether what the runtime needs beyond torch is installed."""
        return True

    def describe(self) -> dict:
        """Settings of this runtime worth keeping in its records."""
        return {"hf_sliding_cache": "full length, masked"} if self.sliding_full_length else {}

    def __init__(self, model: torch.nn.Module, max_cache_len: int):
        self.model = model
        self.max_cache_len = max_cache_len
        self.kw = cache_kwarg(model)
        self.device = next(model.parameters()).device
        self.sliding_full_length = False
        self.cache = self._new_cache()
        self.tok = torch.zeros(1, 1, dtype=torch.long, device=self.device)
        self.pos = torch.zeros(1, 1, dtype=torch.long, device=self.device)  # position of self.tok
        self.prepare_s = 0.0  # capture or compile time, reported, never timed as a step

    def _new_cache(self):
        from transformers import DynamicCache, StaticCache

        cfg = self.model.config
        if not self.static_cache:
            return DynamicCache(config=cfg)
        cache = StaticCache(config=cfg, max_cache_len=self.max_cache_len)
        if self.full_length_sliding and any(cache.is_sliding):
            from transformers.cache_utils import StaticLayer

            cache.layers = [StaticLayer(max_cache_len=self.max_cache_len) for _ in cache.layers]
            self.sliding_full_length = True
        return cache

    def _forward(self, input_ids, position_ids, **kw):
        return self.model(input_ids=input_ids, position_ids=position_ids, use_cache=True, **{self.kw: self.cache}, **kw)

    def prefill(self, prompt: torch.Tensor, chunk: int = 1024,
                progress: Callable[[int, int], None] | None = None) -> None:
        """Prompt (1, n) into the cache, `chunk` tokens at a time so the attention matrix of a long context stays small;
        progress(tokens done, n) after each chunk."""
        n = prompt.shape[1]
        for s in range(0, n, chunk):
            e = min(n, s + chunk)
            pos = torch.arange(s, e, device=self.device).unsqueeze(0)
            logits = self._forward(prompt[:, s:e], pos, logits_to_keep=1).logits
            if progress:
                progress(e, n)
        self.tok.copy_(logits[:, -1:].argmax(-1))
        self.pos.fill_(n)

    def prepare(self) -> None:
        """Capture or compile, after the prefill, spending `prepare_tokens` real tokens; default nothing."""

    def _step_body(self) -> None:
        """One token, all in place on fixed buffers (what a CUDA graph can capture)."""
        logits = self._forward(self.tok, self.pos).logits
        self.tok.copy_(logits[:, -1:].argmax(-1))
        self.pos.add_(1)

    def step(self) -> None:
        self._step_body()

    def check(self) -> None:
        """After the timed steps: raise (one line) if the steps went wrong in a way only the device knows; default
        nothing (native's persistent kernel: a wait that timed out)."""

    def close(self) -> None:
        self.cache = None
