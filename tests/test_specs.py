"""specs: the datasheet table and matching CUDA device names to it."""

from __future__ import annotations

import re

import pytest

from floorline.core import specs
from floorline.core.errors import UserError


@pytest.mark.parametrize("device_name,key,gbps", [
    ("NVIDIA H200", "h200", 4800),
    ("NVIDIA H100 80GB HBM3", "h100-sxm", 3350),
    ("NVIDIA H100 PCIe", "h100-pcie", 2000),
    ("NVIDIA H100 NVL", "h100-nvl", 3900),
    ("NVIDIA GH200 480GB", "gh200-hbm3", 4000),
    ("NVIDIA GH200 144G HBM3e", "gh200", 4900),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb-sxm", 2039),
    ("NVIDIA A100 80GB PCIe", "a100-80gb-pcie", 1935),
    ("NVIDIA A100-SXM4-40GB", "a100-40gb", 1555),
    ("NVIDIA A100-PCIE-40GB", "a100-40gb", 1555),
    ("NVIDIA L4", "l4", 300),
    ("NVIDIA L40S", "l40s", 864),
    ("NVIDIA GeForce RTX 4090", "rtx-4090", 1008),
    ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada", 960),
    ("NVIDIA B200", "b200", 8000),
])
def test_detect_realistic_names(device_name, key, gbps):
    g = specs.detect(device_name)
    assert g is not None, device_name
    assert g.key == key
    assert g.peak_gbps == gbps


@pytest.mark.parametrize("device_name", ["Tesla T4", "NVIDIA L40", "Tesla V100-SXM2-16GB", "NVIDIA H20",
                                         "NVIDIA GeForce RTX 3090", ""])
def test_detect_unknown_is_none(device_name):
    assert specs.detect(device_name) is None


def test_laptop_4090_is_not_the_desktop_card():
    g = specs.detect("NVIDIA GeForce RTX 4090 Laptop GPU")
    assert g is None or g.peak_gbps < 700


def test_every_row_is_complete():
    keys = [g.key for g in specs.GPUS]
    assert len(keys) == len(set(keys))
    assert set(specs.BY_KEY) == set(keys)
    for g in specs.GPUS:
        assert g.peak_gbps > 0, g.key
        assert g.source.strip(), g.key
        assert g.name.strip() and g.memory.strip()
        re.compile(g.pattern)
        assert g.key == g.key.lower()


def test_lookup_by_key_and_by_device_name():
    assert specs.lookup("l4").peak_gbps == 300
    assert specs.lookup("H200").key == "h200"
    assert specs.lookup("NVIDIA A100-SXM4-80GB").key == "a100-80gb-sxm"


def test_lookup_unknown_lists_keys():
    with pytest.raises(UserError) as e:
        specs.lookup("t4")
    msg = str(e.value)
    assert "'t4'" in msg
    for g in specs.GPUS:
        assert g.key in msg
