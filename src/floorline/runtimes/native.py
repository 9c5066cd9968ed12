"""`native`: floorline's own decode model (native/model.py) with Triton kernels; the whole step is one CUDA graph,
the token and position advanced on the device. Weights are the HF model's, re-laid-out once (fused q/k/v and
gate/up); a static cache sized to the run. Dense weights or floorline's int4 (--quant int4)."""

import importlib.util
import time

import torch

from floorline.runtimes.base import Runtime
from floorline.timing import capture_graph


class Native(Runtime):
    name = "native"
    needs_cuda = True
    prepare_tokens = 2  # warm-up steps (Triton compile + autotune) on a side stream before capture

    @staticmethod
    def available() -> bool:
        return importlib.util.find_spec("triton") is not None

    def __init__(self, model: torch.nn.Module, max_cache_len: int):
        from floorline import tpdist
        from floorline.native.tp_model import native_model

        self.model = model
        self.max_cache_len = max_cache_len
        self.device = next(model.parameters()).device
        self.prepare_s = 0.0
        self.graph = None
        comm = tpdist.current()  # a rank of a tensor-parallel run: its shard, all-reduces in the step
        self.net = native_model(model, max_cache_len, "triton", comm.backend if comm else "nccl")
        self.tok, self.pos = self.net.tok.view(1, 1), self.net.pos.view(1, 1)

    def describe(self) -> dict:
        from floorline.native import int4_cuda
        from floorline.native import kernels as K
        from floorline.native import mlp as M

        return {"native_pdl": K.pdl_name(), "native_attn_chunk": self.net.attn.chunk,
                "native_attn": self.net.attn.name(),
                "native_int4_configs": int4_cuda.tuned() or None,
                "native_int4_step_tuning": int4_cuda.last_step_tuning or None,
                "native_triton_step_tuning": K.last_step_tuning or None,
                **({"native_fused_mlp": M.last_step_tuning or True,
                    "native_mlp_split": M.split_mode()} if self.net.fused_mlp else {}),
                **({"native_probe_no_wait": sorted(K.PROBE_NO_WAIT)} if K.PROBE_NO_WAIT else {})}

    def prefill(self, prompt: torch.Tensor, chunk: int = 1024, progress=None) -> None:
        self.net.prefill(prompt, chunk)
        if progress:
            progress(prompt.shape[1], prompt.shape[1])

    def prepare(self) -> None:
        from floorline.native import int4_cuda
        from floorline.native import kernels as K
        from floorline.native import mlp as M

        t0 = time.perf_counter()
        self.graph = capture_graph(self.net.step, self.prepare_tokens)
        int4 = int4_cuda.STEP_TUNE and int4_cuda._RANKED
        if int4 or K.STEP_TUNE:  # launch configs and tiles re-timed inside the step itself
            self.graph = None
            capture, state = (lambda: capture_graph(self.net.step, 0)), [self.net.tok, self.net.pos]
            if int4:
                int4_cuda.retune_in_step(capture, state)
            if K.STEP_TUNE:
                K.retune_in_step(capture, state)
            if K.STEP_TUNE and self.net.fused_mlp:  # (FLOORLINE_TRITON_STEP_TUNE=0: its first candidate)
                M.retune_in_step(capture, state)
            self.graph = capture_graph(self.net.step, 0)
        self.prepare_s = time.perf_counter() - t0

    def step(self) -> None:
        self.graph.replay()

    def close(self) -> None:
        self.graph = None
        self.net = None
