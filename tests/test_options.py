"""Mode native's options (NativeOptions): validated once, one line for a bad value, written into every record, part of
a sweep's resume key and usable as an A/B arm; `floorline check` without a GPU."""

from __future__ import annotations

import pytest
from conftest import read_jsonl_strict, run_cli

from floorline.bench.config import RunConfig
from floorline.core.errors import UserError
from floorline.native.options import NativeOptions
from floorline.study import ab, resume


def test_the_defaults_and_what_a_string_changes():
    d = NativeOptions()
    assert (d.mlp, d.attn_kernel, d.attn_chunk, d.pdl, d.step_tune) == ("fused", "auto", 0, "auto", True)
    o = NativeOptions.parse("mlp=gemv, pdl=off,attn_chunk=128,step_tune=off")
    assert (o.mlp, o.pdl, o.attn_chunk, o.step_tune) == ("gemv", "off", 128, False)
    assert o.text() == "mlp=gemv,attn_chunk=128,pdl=off,step_tune=off" and d.text() == ""
    assert NativeOptions.parse(o.text()) == o and NativeOptions.parse("") == NativeOptions.parse(None) == d
    assert NativeOptions.parse("pdl=after-wait").pdl == "after-wait"


@pytest.mark.parametrize("text, says", [
    ("mlp=x", "mlp='x': use fused or gemv"),
    ("attn_kernel=fast", "use auto or triton or cuda"),
    ("attn_chunk=100", "attn_chunk=100: use 0"),
    ("attn_chunk=big", "a number of cache positions"),
    ("pdl=early", "pdl='early': use auto or after-wait or off"),
    ("step_tune=maybe", "use on or off"),
    ("fused_mlp=0", "unknown native option 'fused_mlp'"),
    ("mlp", "write name=value"),
])
def test_a_bad_option_is_one_line_naming_the_values(text, says):
    with pytest.raises(UserError, match=says.replace("(", r"\(").replace(")", r"\)")):
        NativeOptions.parse(text)


def test_records_hold_the_options_and_give_them_back():
    o = NativeOptions.parse("mlp=gemv,pdl=off")
    rec = o.record()
    assert rec == {"native_mlp": "gemv", "native_attn_kernel": "auto", "native_attn_chunk": 0, "native_pdl": "off",
                   "native_persist": "off", "native_step_tune": True}
    assert NativeOptions.from_record(rec) == o
    assert NativeOptions.from_record({}) == NativeOptions()  # records from before the options: the defaults


def test_the_run_config_takes_them_from_a_string_a_dict_or_the_dataclass():
    assert RunConfig("m", [1], [], native="pdl=off").native == NativeOptions(pdl="off")
    assert RunConfig("m", [1], [], native={"mlp": "gemv"}).native == NativeOptions(mlp="gemv")  # a worker's JSON
    assert RunConfig("m", [1], []).native == NativeOptions()


def test_the_resume_key_of_a_native_cell_holds_its_options():
    base = {"model": "m", "ctx": 16, "mode": "native", "quant": "none", "dtype": "bf16", "device": "cuda"}
    plain = resume.cell_key({**base, **NativeOptions().record()})
    assert resume.cell_key(base) == plain  # an old record: the defaults
    assert resume.cell_key({**base, **NativeOptions(pdl="off").record()}) != plain
    eager = {**base, "mode": "eager"}  # the options do not split other modes' cells
    assert resume.cell_key({**eager, **NativeOptions(pdl="off").record()}) == resume.cell_key(eager)


def test_an_ab_arm_carries_mode_natives_options():
    a = ab.parse_arm("native")
    b = ab.parse_arm("mode=native,mlp=gemv,pdl=off")
    assert a.native == "" and b.native == "mlp=gemv,pdl=off" and b.label == "native/mlp=gemv,pdl=off"
    assert b.options() == NativeOptions(mlp="gemv", pdl="off") and a != b
    assert b.fields()["native"] == "mlp=gemv,pdl=off" and "native" not in a.fields()
    # the run's --native is every arm's starting point
    c = ab.parse_arm("mode=native,pdl=auto", native=NativeOptions(mlp="gemv"))
    assert c.options() == NativeOptions(mlp="gemv")
    with pytest.raises(UserError, match="an option of mode native; add mode=native"):
        ab.parse_arm("mode=graph,pdl=off")
    with pytest.raises(UserError, match="pdl='on': use auto or after-wait or off"):
        ab.parse_arm("mode=native,pdl=on")
    cfg = ab.ABConfig(RunConfig("tiny-llama", [16], []), a, b)
    recs = [{"mode": "native", "dtype": "bf16", "attn_implementation": "sdpa", **o.record()}
            for o in (NativeOptions(), b.options())]
    assert [ab._arm_of(r, cfg) for r in recs] == ["A", "B"]
    first, second = ab.session_configs(cfg, a, b)  # two option sets: one RunConfig each
    assert first.native == NativeOptions() and second.native == b.options()


def test_run_refuses_a_bad_native_option_in_one_line():
    rc, _, err = run_cli(["run", "--model", "tiny-llama", "--ctx", "16", "--device", "cpu", "--mode", "eager",
                          "--native", "pdl=sometimes"])
    assert rc == 2 and "pdl='sometimes': use auto or after-wait or off" in err and len(err.strip().splitlines()) == 1


def test_every_record_carries_the_options(tmp_path):
    """Every record, whatever its mode, says which native options its run had (the defaults here: mode native needs a
    GPU, and --native beside modes without native is refused); a record's options read back as they were given."""
    out = tmp_path / "r.jsonl"
    rc, _, err = run_cli(["run", "--model", "tiny-llama", "--ctx", "16", "--device", "cpu", "--mode", "eager",
                          "--steps", "2", "--warmup", "0", "--output", str(out)])
    assert rc == 0, err
    (r,) = read_jsonl_strict(out)
    assert r["native_mlp"] == "fused" and r["native_pdl"] == "auto" and r["native_step_tune"] is True
    assert r["kernel_sources_sha256"] and r["source_sha256"]
    given = NativeOptions.parse("mlp=gemv,pdl=off")
    assert NativeOptions.from_record({**r, **given.record()}) == given


def test_check_without_a_gpu_says_where_the_kernels_run(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rc, _, err = run_cli(["check"])
    assert rc == 2 and "none is visible here" in err and "tests/test_native.py" in err
    for bad, named in ((["--model", "nope"], "nope"), (["--ctx", "0"], "--ctx"), (["--output", "/"], "/")):
        rc, _, err = run_cli(["check", *bad])  # the arguments are checked first, GPU or not
        assert rc == 2 and named in err and "none is visible" not in err, err
