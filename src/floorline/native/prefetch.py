"""L2 prefetch across kernels: while a latency-bound kernel of the decode step (q/k/v, o: a few MB each, DRAM mostly
idle) runs, it asks the L2 for the bytes a later kernel will read, so that kernel finds them there.

The napkin math (qwen2.5-7b int4 on the H200, a layer): q/k/v + attention + o take ~16 us and move ~20 MB, time
enough for ~65 MB at the copy bandwidth; gate_up (72 MB) and down (36 MB) then stream at 70-90% of it. What the
idle DRAM fetches ahead, the bandwidth-bound kernels do not wait for. The L2 (50 MB on an H100/H200) bounds what
may be in flight: a plan prefetches a few tens of MB a layer.

A plan is FLOORLINE_L2PF: comma-separated `target@source[:fraction][/start|/end]`, e.g.
"o@qkv,gate_up@qkv:0.25/end,qkv@down/end": the `source` GEMV of each layer prefetches `fraction` (default 1) of the
`target` matrix's weights (int4: codes, scales and zeros), spread evenly over them (table), at the start of the
kernel (after its own first loads) or at its end (after its last loads; the default). A target at or before its
source in the layer (qkv@down) is the next layer's. The int4 CUDA GEMV and the Triton GEMV (bf16) prefetch; attention
and lm_head do not. The empty plan (the default) compiles no prefetch code at all.
"""

from __future__ import annotations

import os

import torch

from floorline.errors import UserError

MATRICES = ("qkv", "o", "gate_up", "down")  # a layer's GEMVs in the order the step launches them
WHERE = {"start": 1, "end": 2}


def parse(spec: str) -> list[tuple[str, str, float, int]]:
    """FLOORLINE_L2PF's text -> [(target, source, fraction, where)]; a bad item is a UserError naming the form."""
    plan = []
    for item in filter(None, (p.strip() for p in spec.split(","))):
        body, _, where = item.partition("/")
        pair, _, frac = body.partition(":")
        target, _, source = pair.partition("@")
        try:
            fraction = float(frac) if frac else 1.0
        except ValueError:
            fraction = -1.0
        if target not in MATRICES or source not in MATRICES or not 0 < fraction <= 1 or where not in ("", *WHERE):
            raise UserError(f"FLOORLINE_L2PF item {item!r}: use target@source[:fraction][/start|/end] with matrices "
                            f"{', '.join(MATRICES)} and 0 < fraction <= 1, e.g. o@qkv,gate_up@o:0.25/end")
        plan.append((target, source, fraction, WHERE[where or "end"]))
    wheres = {}
    for _, source, _, where in plan:
        if wheres.setdefault(source, where) != where:
            raise UserError(f"FLOORLINE_L2PF: the {source} GEMV prefetches at one place (start or end), not both")
    return plan


def plan_from_env() -> list[tuple[str, str, float, int]]:
    return parse(os.environ.get("FLOORLINE_L2PF", ""))


PIECE = 4096  # bytes of one piece where a fraction of a tensor is prefetched


def table(parts: list, device) -> torch.Tensor:
    """The L2 prefetch ranges the kernels read (int4_cuda's l2_prefetch, kernels._l2_prefetch), an int64 (ranges, 4)
    tensor of (address, bytes, stride, count): for each (tensor, fraction) in `parts`, all of its bytes (fraction 1:
    one piece) or `fraction` of them as PIECE-byte pieces spread evenly (one every PIECE / fraction bytes), so that
    every block of the kernel that reads the tensor finds the same share of its loads in L2, whichever launch config
    it runs. Addresses and sizes are 16-byte multiples (the bulk form's rule); every piece lies inside its tensor."""
    rows = []
    for t, frac in parts:
        a, n = t.data_ptr(), t.numel() * t.element_size() // 16 * 16
        if a % 16:
            raise ValueError("an L2 prefetch range starts at a 16-byte boundary")
        if frac >= 1 or n <= PIECE:
            rows.append((a, n, n, 1))
        else:
            stride = -(-int(PIECE / frac) // 16) * 16
            rows.append((a, PIECE, stride, n // stride))
    return torch.tensor(rows, dtype=torch.int64).reshape(-1, 4).to(device)


def assign(plan: list, n_layers: int) -> list[dict]:
    """For each layer i, {(source, where): [(layer j, target, fraction)]}: what its GEMVs prefetch. A target at or
    before its source in MATRICES is layer i + 1's; past the last layer it is left out."""
    out = [{} for _ in range(n_layers)]
    for i in range(n_layers):
        for target, source, fraction, where in plan:
            j = i + (MATRICES.index(target) <= MATRICES.index(source))
            if j < n_layers:
                out[i].setdefault((source, where), []).append((j, target, fraction))
    return out


def tables(layers: list[dict], plan: list, device) -> list[dict]:
    """For each layer, {source: (prefetch table, where)} over the matrices in `layers` (model.py's dicts: w, and
    scales and zeros for int4), as assign() pairs them."""
    if torch.device(device).type != "cuda":
        raise UserError("FLOORLINE_L2PF prefetches into a GPU's L2: unset it on the CPU")
    out = []
    for per in assign(plan, len(layers)):
        out.append({source: (table([(layers[j][t][k], f) for j, t, f in items for k in ("w", "scales", "zeros")
                                    if k in layers[j][t]], device), where)
                    for (source, where), items in per.items()})
    return out


def describe(plan: list) -> str:
    """The plan as the records keep it ('' when off)."""
    name = {v: k for k, v in WHERE.items()}
    text = ",".join(f"{t}@{s}:{f:g}/{name[w]}" for t, s, f, w in plan)
    return text + " (bulk)" if text and os.environ.get("FLOORLINE_L2PF_BULK") == "1" else text
