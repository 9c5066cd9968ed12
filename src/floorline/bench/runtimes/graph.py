"""`graph`: StaticCache, one decode step captured as a CUDA graph and replayed; the position and the cache length
advance inside the graph (in-place adds on device tensors), so every replay is the next real token."""

import time

from floorline.bench.runtimes.base import Runtime
from floorline.device.timing import capture_graph


class Graph(Runtime):
    name = "graph"
    needs_cuda = True
    static_cache = True
    full_length_sliding = True  # base.Runtime: a sliding layer's state is host-side
    prepare_tokens = 2  # warm-up steps on a side stream before capture, as CUDA graphs require

    def prepare(self) -> None:
        t0 = time.perf_counter()
        # recorded, not run: the state does not advance during capture
        self.graph = capture_graph(self._step_body, self.prepare_tokens)
        self.prepare_s = time.perf_counter() - t0

    def step(self) -> None:
        self.graph.replay()

    def close(self) -> None:
        self.graph = None
        super().close()
