"""floorline's native decode model split over N GPUs (tensor parallelism), one process per rank.

The rank's shard is cut from the HF model by tp.shard's numbers and dressed as a small HF-shaped module tree
(config with the rank's head counts, nn.Linear shards), so NativeModel lays it out exactly as it does a whole model
(fused q/k/v and gate/up, static KV cache of the rank's KV heads). What differs is the step:
- o and down write the rank's partial sum of the residual update; rank 0 adds the residual itself (the others zero
  their part first, so every rank runs the same kernel), then one all-reduce sums the parts into the residual stream;
- lm_head is the rank's vocabulary rows; the token is the argmax across ranks (tpdist.argmax_across, on the device).
Every collective reads and writes fixed buffers, so the step is still one CUDA graph per GPU, all-reduces inside.
Prefill: NativeModel's, with an all-reduce after o and after down (plain collectives, not timed).
Dense weights only (int4 shards: not yet).
"""

from __future__ import annotations

import copy

import torch

from floorline.core import tp
from floorline.core.arch import Arch
from floorline.core.errors import UserError
from floorline.device import tpdist
from floorline.native.model import NativeModel
from floorline.native.options import NativeOptions
from floorline.native.refs import PRO_RMSNORM


def arch_of(hf) -> Arch:
    """The numbers tp.shard needs, from an HF config (name and the fields the split does not read are nominal)."""
    c = hf.config
    heads = c.num_attention_heads
    return Arch("hf", "llama", c.hidden_size, c.intermediate_size, c.num_hidden_layers, heads,
                c.num_key_value_heads, getattr(c, "head_dim", None) or c.hidden_size // heads, c.vocab_size,
                bool(getattr(c, "tie_word_embeddings", False)), hf.model.layers[0].self_attn.q_proj.bias is not None,
                1, 1.0, 1e-6)


def _linear(w: torch.Tensor, b: torch.Tensor | None = None) -> torch.nn.Linear:
    m = torch.nn.Linear(w.shape[1], w.shape[0], bias=b is not None, device="meta")
    m.weight = torch.nn.Parameter(w, requires_grad=False)
    if b is not None:
        m.bias = torch.nn.Parameter(b, requires_grad=False)
    return m


def _mod(**children) -> torch.nn.Module:
    m = torch.nn.Module()
    for k, v in children.items():
        setattr(m, k, v)
    return m


def shard_hf(hf, n: int, rank: int) -> torch.nn.Module:
    """Rank `rank`'s shard of an HF Llama / Qwen2 / Mistral model as an HF-shaped tree NativeModel can take.
    Column-split matrices are row slices (views); row-split ones (o, down) contiguous copies of column slices.
    Norms, the embedding, the final norm and the rotary tables are the HF model's own (replicated)."""
    a = arch_of(hf)
    if not tp.uniform(a, n):
        raise UserError(f"native --tp {n}: {a.kv_heads} KV heads can neither be split nor shared evenly over {n} "
                        f"ranks; use a --tp that divides {a.kv_heads} or is a multiple of it")
    s = tp.shard(a, n, rank)
    d = a.head_dim
    q = slice(s.q_first * d, (s.q_first + s.heads) * d)
    kv = slice(s.kv_first * d, (s.kv_first + s.kv_heads) * d)
    it = slice(s.inter_first, s.inter_first + s.inter)
    layers = []
    for lay in hf.model.layers:
        at, mlp = lay.self_attn, lay.mlp

        def bias(m, rows):
            return None if m.bias is None else m.bias[rows]

        attn = _mod(q_proj=_linear(at.q_proj.weight[q], bias(at.q_proj, q)),
                    k_proj=_linear(at.k_proj.weight[kv], bias(at.k_proj, kv)),
                    v_proj=_linear(at.v_proj.weight[kv], bias(at.v_proj, kv)),
                    o_proj=_linear(at.o_proj.weight[:, q].contiguous()))
        ffn = _mod(gate_proj=_linear(mlp.gate_proj.weight[it]), up_proj=_linear(mlp.up_proj.weight[it]),
                   down_proj=_linear(mlp.down_proj.weight[:, it].contiguous()))
        layers.append(_mod(self_attn=attn, mlp=ffn, input_layernorm=lay.input_layernorm,
                           post_attention_layernorm=lay.post_attention_layernorm))
    cfg = copy.copy(hf.config)
    cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim = s.heads, s.kv_heads, d
    cfg.intermediate_size = s.inter
    lm = hf.lm_head.weight[s.vocab_first:s.vocab_first + s.vocab]  # tied: rows of the embedding itself (a view)
    out = _mod(model=_mod(embed_tokens=hf.model.embed_tokens, norm=hf.model.norm, rotary_emb=hf.model.rotary_emb,
                          layers=torch.nn.ModuleList(layers)), lm_head=_linear(lm))
    out.config = cfg
    out.shard = s
    return out


class TPNativeModel(NativeModel):
    def __init__(self, hf, max_len: int, ops: str = "triton", comm: tpdist.Comm | None = None,
                 backend: str = "nccl", options: NativeOptions = NativeOptions()):
        comm = comm or tpdist.current()
        if comm is None:
            raise UserError("native tensor parallelism needs the process group floorline's launcher starts")
        self.comm = comm
        self.sharded = shard_hf(hf, comm.size, comm.rank)
        self.vocab = hf.config.vocab_size
        self.vocab_first = self.sharded.shard.vocab_first
        super().__init__(self.sharded, max_len, ops, options)
        self.ar = tpdist.AllReduce(backend, self.hidden, torch.float32, comm)
        self.x = self.ar.dst  # the residual stream is where the all-reduce lands
        self.key = torch.zeros(1, dtype=torch.long, device=self.x.device)

    # ----------------------------------------------------------------------------------------------- step
    def _row_split(self, m: dict, inp) -> None:
        """x += sum over ranks of m's partial product: rank 0 folds the residual into its part."""
        part = self.ar.src
        if self.comm.rank == 0:
            self._gemv(m, inp, part, residual=self.x)  # in place when the all-reduce is (nccl, gloo)
        else:
            part.zero_()  # then the same accumulating kernel as rank 0 (split-K allowed), not a plain store
            self._gemv(m, inp, part, residual=part)
        self.ar.run()

    def step(self) -> None:
        x = self.x
        x.copy_(self.embed.index_select(0, self.tok)[0])
        for i, lay in enumerate(self.layers):
            self._qkv(lay, x)
            self._row_split(lay["o"], self._attention(i))
            self._gemv(lay["gate_up"], x, self.act, pro=PRO_RMSNORM, norm_w=lay["ffn_norm"], glu=True)
            self._row_split(lay["down"], self.act)
        self._gemv({"w": self.lm_head}, x, self.logits, pro=PRO_RMSNORM, norm_w=self.final_norm)
        self.tok.copy_(tpdist.argmax_across(self.logits, self.vocab_first, self.key))
        self.pos.add_(1)

    # ---------------------------------------------------------------------------------------------- prefill
    def _reduce(self, t: torch.Tensor) -> torch.Tensor:
        torch.distributed.all_reduce(t)
        return t

    @torch.no_grad()
    def prefill(self, prompt: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
        local = super().prefill(prompt, chunk)  # its token is this shard's argmax: replaced below
        full = self.full_logits(local)
        self.tok.copy_(full.argmax().view(1))
        return full

    def full_logits(self, local: torch.Tensor | None = None) -> torch.Tensor:
        """Every rank's logits shard gathered (ranks pad to the first rank's rows): for prefill and the tests."""
        local = self.logits if local is None else local
        rows = -(-self.vocab // self.comm.size)
        padded = torch.full((rows,), float("-inf"), device=local.device)
        padded[:local.numel()] = local
        parts = [torch.empty_like(padded) for _ in range(self.comm.size)]
        torch.distributed.all_gather(parts, padded)
        return torch.cat(parts)[:self.vocab]


def native_model(hf, max_len: int, ops: str = "triton", backend: str = "nccl",
                 options: NativeOptions = NativeOptions()) -> NativeModel:
    """The model mode native runs: sharded when this process is a rank of a tensor-parallel group."""
    comm = tpdist.current()
    if comm is None or comm.size == 1:
        return NativeModel(hf, max_len, ops, options)
    return TPNativeModel(hf, max_len, ops, comm, backend, options)
