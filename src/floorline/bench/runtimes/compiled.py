"""`compile`: torch.compile(mode="reduce-overhead") of the static-cache decode step (Inductor kernels replayed as CUDA
graphs). The token and position buffers are marked static so no input copies are added; compile time is reported."""

import time

import torch

from floorline.bench.runtimes.base import Runtime


class Compiled(Runtime):
    name = "compile"
    needs_cuda = True
    static_cache = True
    full_length_sliding = True  # base.Runtime: a sliding layer's state is host-side
    prepare_tokens = 3  # 1st call compiles, 2nd records the CUDA graph, 3rd replays: all real tokens, none timed

    def prepare(self) -> None:
        def decode(tok, pos):
            return self._forward(tok, pos).logits[:, -1:].argmax(-1)

        torch._dynamo.mark_static_address(self.tok)
        torch._dynamo.mark_static_address(self.pos)
        self.fn = torch.compile(decode, mode="reduce-overhead", fullgraph=True)
        t0 = time.perf_counter()
        for _ in range(self.prepare_tokens):
            self.step()
        torch.cuda.synchronize()
        self.prepare_s = time.perf_counter() - t0

    def step(self) -> None:
        self.tok.copy_(self.fn(self.tok, self.pos))
        self.pos.add_(1)

    def close(self) -> None:
        self.fn = None
        super().close()
