"""`eager`: DynamicCache and a plain forward per token: what most users run."""

from floorline.bench.runtimes.base import Runtime


class Eager(Runtime):
    name = "eager"
