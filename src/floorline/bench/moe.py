"""Routing of a mixture-of-experts model: which experts a decode step reads, from its routers' own choices.

Owns: one untimed pass over the cell's prompt (HF eager, a dynamic cache) that records, through forward hooks on each
MoE layer's router, the experts each token is routed to; and the record fields it gives. A step reads the experts its
token was routed to (top-k a layer: distinct by construction at batch 1) whatever the runtime; a runtime that reads
every expert (a dense grouped product over all of them) moves the `floor_bytes_all_experts` of the record instead.
May not time anything: the pass runs before the timed modes and leaves the model as it was.
"""

from __future__ import annotations

import torch

from floorline.core import floor
from floorline.core.arch import Arch


def routers(model: torch.nn.Module, a: Arch) -> list[tuple[int, torch.nn.Module]]:
    """(layer index, router module) of each MoE layer: `mlp.gate` (Qwen-MoE, Mixtral) or `mlp.router` (gpt-oss)."""
    out = []
    for i, layer in enumerate(model.model.layers):
        mlp = layer.mlp
        r = getattr(mlp, "router", None) or (getattr(mlp, "gate", None) if hasattr(mlp, "experts") else None)
        if a.is_moe(i):
            if r is None:
                raise RuntimeError(f"layer {i} of {a.name} is MoE in the accounting but has no router module")
            out.append((i, r))
    return out


def chosen_experts(output, top_k: int) -> torch.Tensor:
    """The (tokens, top_k) expert indices a router returned: its integer tensor where it returns one (transformers 5:
    logits, scores, indices), else the top-k of the logits it returned (older routers are a plain Linear)."""
    items = output if isinstance(output, (tuple, list)) else (output,)
    for t in items:
        if isinstance(t, torch.Tensor) and not t.is_floating_point():
            return t.reshape(-1, t.shape[-1])
    logits = items[0]
    return logits.reshape(-1, logits.shape[-1]).topk(top_k, dim=-1).indices


@torch.inference_mode()
def route(model: torch.nn.Module, a: Arch, prompt: torch.Tensor, steps: int = 8) -> list[list[set[int]]]:
    """Prefill `prompt` (1, n) with HF eager and decode `steps` greedy tokens: for each decoded step, the set of
    experts each MoE layer's router chose (in layer order)."""
    from transformers import DynamicCache

    from floorline.bench.runtimes.base import cache_kwarg

    hooked = routers(model, a)
    seen: list[set[int]] = []

    def hook(mod, args, output):
        seen.append(set(chosen_experts(output, a.top_k).flatten().tolist()))

    handles = [r.register_forward_hook(hook) for _, r in hooked]
    try:
        kw = {cache_kwarg(model): DynamicCache(config=model.config)}
        n = prompt.shape[1]
        pos = torch.arange(n, device=prompt.device)[None]
        tok = model(input_ids=prompt, position_ids=pos, use_cache=True, **kw).logits[0, -1].argmax()
        per_step = []
        for s in range(steps):
            seen.clear()
            pos = torch.tensor([[n + s]], device=prompt.device)
            tok = model(input_ids=tok.view(1, 1), position_ids=pos, use_cache=True, **kw).logits[0, -1].argmax()
            per_step.append(list(seen))
    finally:
        for h in handles:
            h.remove()
    return per_step


def record_fields(a: Arch, per_step: list[list[set[int]]], ctx: int, fmt: floor.WeightFormat) -> dict:
    """What a MoE cell's record carries: experts read a step (summed over the MoE layers; per step), the distinct
    experts the counted steps touched together, and the floors of the routed experts and of every expert."""
    read = [sum(len(s) for s in step) for step in per_step]
    union = [set().union(*(step[j] for step in per_step)) for j in range(len(per_step[0]))] if per_step else []
    mean = sum(read) / len(read) if read else float(a.top_k * a.n_moe)
    routed = floor.routed_components(a, ctx, mean, fmt)
    every = floor.routed_components(a, ctx, a.experts * a.n_moe, fmt)
    return {"moe_experts": a.experts, "moe_top_k": a.top_k, "moe_layers": a.n_moe,
            "moe_experts_read_per_step": mean, "moe_experts_read_samples": read,
            "moe_experts_distinct_over_steps": sum(len(u) for u in union), "moe_route_steps": len(per_step),
            "floor_bytes_routed": sum(routed.values()), "floor_bytes_all_experts": sum(every.values())}
