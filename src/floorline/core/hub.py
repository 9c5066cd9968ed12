"""Hugging Face Hub model names (`--model Qwen/Qwen2.5-7B-Instruct`): the local cache first, downloads only when allowed.

Owns: telling a Hub id from a zoo name or a directory, finding a repo's files in the huggingface_hub cache (offline
works when they are there), and downloading only what a command needs — config.json for floor, predict and endpoint;
config.json + the safetensors weights for run — and only when allowed: `--download`, or HF_HUB_OFFLINE=0 set
explicitly (HF_HUB_OFFLINE=1 forbids it even with --download). The cache is huggingface_hub's own (HF_HUB_CACHE /
HF_HOME). Returns a snapshot directory, which zoo.resolve reads as any local model; never loads pickled weights.
"""

from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path

from floorline.core.errors import UserError

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")  # org/name, as the Hub spells repo ids
SNAPSHOT = re.compile(r"models--(?P<org>[^/]+?)--(?P<name>[^/]+)/snapshots/[^/]+/?$")
NEEDS = ("config", "weights")


def is_hub_id(model: str) -> bool:
    """'org/name' that is not an existing path."""
    return bool(HUB_ID.match(model)) and not Path(model).exists()


def name_of_dir(path: Path) -> str | None:
    """'org/name' for a directory inside the hub cache (models--org--name/snapshots/<commit>), else None."""
    m = SNAPSHOT.search(path.resolve().as_posix())
    return f"{m['org']}/{m['name']}" if m else None


def _env_allows() -> bool | None:
    v = os.environ.get("HF_HUB_OFFLINE")
    if v is None:
        return None
    return v.strip().lower() in ("0", "false", "no", "off")


def _cached(repo: str, filename: str) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    p = try_to_load_from_cache(repo, filename)
    return Path(p) if isinstance(p, str) and Path(p).is_file() else None


def _get(repo: str, filename: str, allowed: bool, what: str) -> Path:
    p = _cached(repo, filename)
    if p is not None:
        return p
    if not allowed:
        raise UserError(f"{repo}: {filename} is not in the Hugging Face cache ({_cache_dir()}); pass --download to "
                        f"fetch {what} (or set HF_HUB_OFFLINE=0), or give a local directory")
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        return Path(hf_hub_download(repo, filename))
    except LocalEntryNotFoundError as e:
        raise UserError(f"{repo}: could not download {filename} ({_first(e)}); check the network, or HF_HUB_OFFLINE")
    except HfHubHTTPError as e:
        raise UserError(f"{repo}: the Hub refused {filename} ({_first(e)}); check the repo id and HF_TOKEN for "
                        f"gated models") from None


def _first(e: Exception) -> str:
    """The error's first line, at most 160 characters, cut at a word (never mid-word)."""
    return textwrap.shorten((str(e).strip().splitlines() or [type(e).__name__])[0], 160, placeholder=" ...")


def _cache_dir() -> str:
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def snapshot(repo: str, need: str = "config", download: bool = False) -> Path:
    """The snapshot directory holding what `need` asks for: config.json, and for "weights" every safetensors file
    (one model.safetensors, or the shards its index names)."""
    if need not in NEEDS:
        raise ValueError(need)
    env = _env_allows()
    if download and env is False:
        raise UserError("--download given but HF_HUB_OFFLINE=1 forbids downloads; unset it")
    allowed = download or env is True
    cfg = _get(repo, "config.json", allowed, "its config.json (a few KB)")
    if need == "weights":
        index = _cached(repo, "model.safetensors.index.json")
        single = _cached(repo, "model.safetensors")
        if index is None and single is None:
            if not allowed:
                raise UserError(f"{repo}: its safetensors weights are not in the Hugging Face cache; pass --download "
                                f"to fetch them (the whole model), or use floor / predict / endpoint, which need only "
                                f"config.json")
            try:
                index = _get(repo, "model.safetensors.index.json", True, "the weights index")
            except UserError:
                single = _get(repo, "model.safetensors", True, "the weights")
        if index is not None:
            try:
                shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            except (json.JSONDecodeError, KeyError):
                raise UserError(f"{index}: not a safetensors index (no weight_map); delete it from the cache") from None
            for s in shards:
                _get(repo, s, allowed, f"weight shard {s}")
    return cfg.parent
