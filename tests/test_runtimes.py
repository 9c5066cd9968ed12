"""runtimes on the CPU: every step is a real next token, and the modes agree with each other and with a plain
cache-free forward of the whole sequence. Graph and compile need CUDA (tests/test_gpu.py)."""

from __future__ import annotations

import inspect

import pytest
import torch

from floorline.bench import runtimes
from floorline.bench.runtimes.base import cache_kwarg
from floorline.core import zoo
from floorline.core.arch import Arch
from floorline.core.errors import UserError

CTX = 64
STEPS = 12


def greedy(model, mode: str, prompt: torch.Tensor, steps: int = STEPS, chunk: int = 1024) -> tuple[list[int], list[int]]:
    """Tokens after the prefill and after each step (read outside any timing), and the position after each."""
    rt = runtimes.get(mode, "cpu")(model, prompt.shape[1] + steps + 8)
    with torch.inference_mode():
        rt.prefill(prompt, chunk)
        toks, pos = [rt.tok.item()], [rt.pos.item()]
        assert rt.tok.shape == (1, 1) and rt.tok.dtype == torch.long
        for _ in range(steps):
            rt.step()
            toks.append(rt.tok.item())
            pos.append(rt.pos.item())
    rt.close()
    assert rt.cache is None
    return toks, pos


def reference(model, prompt: torch.Tensor, toks: list[int]) -> list[int]:
    """Greedy next tokens from one cache-free forward over prompt + generated tokens."""
    seq = torch.cat([prompt, torch.tensor([toks[:-1]])], dim=1)
    with torch.inference_mode():
        logits = model(input_ids=seq, use_cache=False).logits
    return logits[0, prompt.shape[1] - 1:].argmax(-1).tolist()


def _prompt(a: Arch, n: int = CTX, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, a.vocab, (1, n), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def llama_eager(tiny_llama_fp32):
    p = _prompt(zoo.ZOO["tiny-llama"])
    return p, greedy(tiny_llama_fp32, "eager", p)


def test_eager_and_static_give_the_same_tokens(tiny_llama_fp32, llama_eager):
    prompt, (eager_toks, eager_pos) = llama_eager
    static_toks, static_pos = greedy(tiny_llama_fp32, "static", prompt)
    assert static_toks == eager_toks
    assert static_pos == eager_pos
    assert len(set(eager_toks)) > 3  # a sequence that depends on its context, not one token repeated


def test_positions_advance_by_one_per_step(llama_eager):
    _, (_, pos) = llama_eager
    assert pos == list(range(CTX, CTX + STEPS + 1))


def test_tokens_match_a_cache_free_forward(tiny_llama_fp32, llama_eager):
    prompt, (toks, _) = llama_eager
    assert reference(tiny_llama_fp32, prompt, toks) == toks


def test_chunked_prefill_is_the_same_as_one_forward(tiny_llama_fp32, llama_eager):
    prompt, (toks, pos) = llama_eager
    assert greedy(tiny_llama_fp32, "static", prompt, chunk=24) == (toks, pos)  # 24 + 24 + 16
    assert greedy(tiny_llama_fp32, "eager", prompt, chunk=1) == (toks, pos)  # token by token


def test_tied_bias_model_eager_static_and_reference(tiny_qwen2_fp32):
    prompt = _prompt(zoo.ZOO["tiny-qwen2"], seed=2)
    e = greedy(tiny_qwen2_fp32, "eager", prompt, steps=6)
    s = greedy(tiny_qwen2_fp32, "static", prompt, steps=6)
    assert e == s
    assert reference(tiny_qwen2_fp32, prompt, e[0]) == e[0]


def test_static_runtime_uses_a_static_cache_sized_to_the_run(tiny_llama_fp32):
    from transformers import DynamicCache, StaticCache

    rt = runtimes.get("static", "cpu")(tiny_llama_fp32, 100)
    assert isinstance(rt.cache, StaticCache)
    with torch.inference_mode():
        rt.prefill(_prompt(zoo.ZOO["tiny-llama"], 10))
        rt.step()
    assert rt.cache.layers[0].keys.shape[-2] == 100
    assert isinstance(runtimes.get("eager", "cpu")(tiny_llama_fp32, 100).cache, DynamicCache)


@pytest.mark.parametrize("mode", ["graph", "compile"])
def test_cuda_modes_refused_on_cpu(mode):
    with pytest.raises(UserError, match="CUDA"):
        runtimes.get(mode, "cpu")
    assert runtimes.get(mode, "cuda").needs_cuda


def test_unknown_mode():
    with pytest.raises(UserError) as e:
        runtimes.get("turbo", "cpu")
    for m in runtimes.MODES:
        assert m in str(e.value)


def test_modes_per_device():
    assert runtimes.MODES == ("eager", "static", "graph", "compile", "native")
    assert runtimes.modes_for("cpu") == runtimes.CPU_MODES == ("eager", "static")
    assert runtimes.modes_for("cuda") == ("eager", "static", "graph", "compile", "native")  # (Triton is here)
    assert runtimes.modes_for("cuda", native=False) == ("eager", "static", "graph", "compile")
    for name, r in runtimes.RUNTIMES.items():
        assert r.name == name
    assert runtimes.RUNTIMES["graph"].prepare_tokens == 2 and runtimes.RUNTIMES["compile"].prepare_tokens == 3
    assert runtimes.RUNTIMES["eager"].prepare_tokens == 0 and runtimes.RUNTIMES["static"].prepare_tokens == 0


def test_cache_kwarg_is_one_the_model_takes(tiny_llama_fp32):
    kw = cache_kwarg(tiny_llama_fp32)
    assert kw in ("cache", "past_key_values")
    assert kw in inspect.signature(tiny_llama_fp32.forward).parameters


def test_cpu_runtimes_have_nothing_to_prepare(tiny_llama_fp32):
    for mode in runtimes.CPU_MODES:
        rt = runtimes.get(mode, "cpu")(tiny_llama_fp32, 80)
        with torch.inference_mode():
            rt.prefill(_prompt(zoo.ZOO["tiny-llama"], 8))
            before = (rt.tok.item(), rt.pos.item())
            rt.prepare()
        assert (rt.tok.item(), rt.pos.item()) == before and rt.prepare_s == 0.0
