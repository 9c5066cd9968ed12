"""The study's published reference points (src/floorline/core/data/published.json), always labelled as published.

Owns loading them; nothing here is measured. A figure computed from published ones lists how in its `derived` field.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources


@lru_cache(maxsize=1)
def load() -> dict:
    return json.loads(resources.files("floorline.core").joinpath("data/published.json").read_text(encoding="utf-8"))
