"""Hub ids (org/name) through huggingface_hub's cache, with the hub offline: a cache directory this test fills itself
in the cache's documented layout (models--org--name/refs/main + snapshots/<commit>/files). Nothing is downloaded."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import run_cli

from floorline.core import floor, hub, zoo
from floorline.core.errors import UserError

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def cache(tmp_path, monkeypatch, tiny_qwen2_dir):
    """An offline hub cache holding acme/tiny-qwen2 (config.json only) and acme/tiny-full (config + weights)."""
    from huggingface_hub import constants

    root = tmp_path / "hub"
    for repo, files in (("tiny-qwen2", ["config.json"]), ("tiny-full", ["config.json", "model.safetensors"])):
        d = root / f"models--acme--{repo}"
        snap = d / "snapshots" / COMMIT
        snap.mkdir(parents=True)
        (d / "refs").mkdir()
        (d / "refs" / "main").write_text(COMMIT)
        for f in files:
            shutil.copy(tiny_qwen2_dir / f, snap / f)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(root))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return root


def test_is_hub_id(tmp_path):
    assert hub.is_hub_id("Qwen/Qwen2.5-7B-Instruct") and not hub.is_hub_id("qwen2.5-7b")
    assert not hub.is_hub_id(str(tmp_path))


def test_floor_from_cached_config(cache):
    rc, out, err = run_cli(["floor", "--model", "acme/tiny-qwen2", "--ctx", "128", "--format", "json"])
    assert rc == 0, err
    j = json.loads(out)
    assert j["model"] == "acme/tiny-qwen2"
    assert j["floor_bytes"] == floor.floor(zoo.ZOO["tiny-qwen2"], 128).bytes  # same architecture, same bytes


def test_config_only_is_enough_for_floor_not_for_run(cache):
    a = zoo.resolve("acme/tiny-qwen2", need="config")
    assert a.path.endswith(COMMIT) and a.vocab == zoo.ZOO["tiny-qwen2"].vocab
    rc, _, err = run_cli(["run", "--model", "acme/tiny-qwen2", "--device", "cpu", "--ctx", "16"])
    assert rc == 2 and "safetensors weights are not in the Hugging Face cache" in err and "--download" in err
    assert err.count("\n") == 1


def test_run_from_cached_weights(cache):
    rc, out, err = run_cli(["run", "--model", "acme/tiny-full", "--device", "cpu", "--ctx", "16", "--mode", "eager",
                            "--steps", "2", "--warmup", "0", "--format", "json"])
    assert rc == 0, err
    r = json.loads(out)[0]
    assert r["model"] == "acme/tiny-full" and r["model_path"].endswith(COMMIT) and r["valid"] is True


def test_not_cached_and_not_allowed(cache):
    with pytest.raises(UserError, match="not in the Hugging Face cache.*--download"):
        hub.snapshot("acme/absent", "config")
    rc, _, err = run_cli(["floor", "--model", "acme/absent", "--ctx", "8", "--download"])
    assert rc == 2 and "HF_HUB_OFFLINE=1 forbids downloads" in err


def test_a_pre_quantised_hub_checkpoint_is_refused_before_its_weights(cache, monkeypatch):
    """run of org/X-GPTQ: its config.json (a few KB) says what it is, so no shard is fetched for a refusal."""
    d = cache / "models--acme--tiny-qwen2" / "snapshots" / COMMIT
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "quantization_config": {"quant_method": "gptq", "bits": 4,
                                                                               "group_size": 128}}))
    fetched = []
    real = hub.snapshot
    monkeypatch.setattr(hub, "snapshot", lambda m, need="config", download=False: (fetched.append(need),
                                                                                    real(m, need, download))[1])
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # downloads allowed: the weights would be fetched, were they asked for
    rc, _, err = run_cli(["run", "--model", "acme/tiny-qwen2", "--device", "cpu", "--ctx", "16"])
    assert rc == 2 and "pre-quantised checkpoint" in err and "--weight-bits 4 --group-size 128" in err, err
    assert "weights" not in fetched
