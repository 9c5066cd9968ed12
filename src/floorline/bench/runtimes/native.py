"""`native`: floorline's own decode model (native/model.py) with its own kernels; the whole step is one CUDA graph,
the token and position advanced on the device. Weights are the HF model's, re-laid-out once (fused q/k/v and
gate/up); a static cache sized to the run. Dense weights or floorline's int4 (--quant int4). `options`
(NativeOptions, the run's --native) are the settings that change the step."""

import importlib.util
import time

import torch

from floorline.bench.runtimes.base import Runtime
from floorline.device.timing import capture_graph
from floorline.native.options import NativeOptions


class Native(Runtime):
    name = "native"
    needs_cuda = True
    prepare_tokens = 2  # warm-up steps (Triton compile + autotune) on a side stream before capture

    @staticmethod
    def available() -> bool:
        return importlib.util.find_spec("triton") is not None

    def __init__(self, model: torch.nn.Module, max_cache_len: int, options: NativeOptions = NativeOptions()):
        from floorline.device import tpdist
        from floorline.native.tp_model import native_model

        self.model = model
        self.max_cache_len = max_cache_len
        self.options = options
        self.device = next(model.parameters()).device
        self.prepare_s = 0.0
        self.graph = None
        comm = tpdist.current()  # a rank of a tensor-parallel run: its shard, all-reduces in the step
        self.net = native_model(model, max_cache_len, "triton", comm.backend if comm else "nccl", options)
        self.tok, self.pos = self.net.tok.view(1, 1), self.net.pos.view(1, 1)

    def describe(self) -> dict:
        """The options asked for, and what the step resolved them to and tuned (kept in the record)."""
        from floorline.native import int4_cuda, mlp, o_merge
        from floorline.native import pdl as P
        from floorline.native.tuner import TUNER

        persist = self.net.persist.config.name() if self.net.persist_on else None
        om = o_merge.name(self.net.o_merge) if self.net.o_merge is not None else None
        early = P.early_name(self.net.early) if self.net.pdl and not self.net.persist_on else None
        return {"native_pdl_launch": bool(self.net.pdl), "native_pdl_early_used": early,
                "native_persist_used": persist, "native_o_merge_used": om,
                "native_kv_prefetch_used": None if self.net.persist_on else mlp.PREFETCH_NAMES[self.net.kv_prefetch],
                "native_fused_mlp": self.net.fused_mlp, "native_attn": self.net.attn.name(),
                "native_attn_chunk_used": self.net.attn.chunk, "native_int4_configs": int4_cuda.tuned() or None,
                **TUNER.record()}

    def prefill(self, prompt: torch.Tensor, chunk: int = 1024, progress=None) -> None:
        self.net.prefill(prompt, chunk)
        if progress:
            progress(prompt.shape[1], prompt.shape[1])

    def prepare(self) -> None:
        """Capture the step (its warm-up steps compile and tune every kernel first); with step_tune, re-time the
        tuned launch choices inside the whole step (int4 GEMV configs, Triton GEMV tiles, fused-MLP tiles, the
        attention's chunk, the merge inside the o GEMV or not, then those two together in a final round, the KV
        prefetch, with pdl=auto which kernels let the next launch before their wait, the persistent kernel's launches
        and, with persist=auto, whether to run it), then capture again."""
        from floorline.native import attention, gemv, int4_cuda, mlp, o_merge, persist
        from floorline.native import pdl as P
        from floorline.native.tuner import TUNER

        t0 = time.perf_counter()
        TUNER.step_tuning.clear()
        net = self.net
        # persist=on starts from the persistent kernel; auto from the per-kernel step, whose own choices are tuned
        # first, and then the persistent candidates are timed against it
        net.persist_on = net.persist is not None and self.options.persist == "on"
        self.graph = capture_graph(net.step, self.prepare_tokens)
        if self.options.step_tune:
            self.graph = None
            capture, state = (lambda: capture_graph(net.step, 0)), [net.tok, net.pos]
            if TUNER.int4_ranked:
                int4_cuda.retune_in_step(capture, state)
            gemv.retune_in_step(capture, state)
            if net.fused_mlp:
                mlp.retune_in_step(capture, state)
            attn_times = attention.retune_in_step(net.attn, capture, state, warm=lambda: net._attention(0))
            o_times = o_merge.retune_in_step(net, capture, state)
            o_merge.retune_finals_in_step(net, capture, state, attn_times, o_times, warm=net.step)
            mlp.retune_prefetch_in_step(net, capture, state)
            if self.options.pdl == "auto":
                P.retune_early_in_step(net, capture, state, net.roles())
            if net.persist is not None:
                persist.retune_in_step(net, capture, state, with_off=self.options.persist == "auto")
            self.graph = capture_graph(net.step, 0)
        self.check()
        self.prepare_s = time.perf_counter() - t0

    def step(self) -> None:
        self.graph.replay()

    def check(self) -> None:
        if self.net.persist is not None:
            torch.cuda.synchronize()
            self.net.persist.check()

    def close(self) -> None:
        self.graph = None
        self.net = None
