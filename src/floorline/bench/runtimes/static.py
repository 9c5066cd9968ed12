"""`static`: a StaticCache sized to the run (fixed shapes and addresses), plain forward, no graph."""

from floorline.bench.runtimes.base import Runtime


class Static(Runtime):
    name = "static"
    static_cache = True
