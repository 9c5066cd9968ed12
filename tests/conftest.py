"""Shared fixtures for the floorline test suite.

CPU-only by default: tests marked `gpu` are skipped unless torch sees a CUDA device. The expensive objects (tiny
models) are built once per session; the CLI is driven in-process through floorline.cli.main.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

# the checkout's own sources, in this process and in the ones the tests start (sweep's cells), whichever checkout an
# installed floorline (pip install -e) points at
SRC = str(Path(__file__).resolve().parents[1] / "src")
sys.path.insert(0, SRC)
os.environ["PYTHONPATH"] = os.pathsep.join([SRC, *filter(None, [os.environ.get("PYTHONPATH")])])

if not torch.cuda.is_available():  # mode native's Triton kernels run under Triton's interpreter on the CPU;
    os.environ.setdefault("TRITON_INTERPRET", "1")  # read when triton is first imported, so before any test module


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def bf16_by_default(monkeypatch):
    """`--dtype auto` is bf16 in every in-process test, whatever this CPU: the tests' figures do not depend on the
    machine (test_measure checks the detection itself, through the real function kept in models)."""
    from floorline.bench import models

    monkeypatch.setattr(models, "cpu_has_native_bf16", lambda: True)


@pytest.fixture(scope="session")
def cpu() -> torch.device:
    return torch.device("cpu")


@pytest.fixture(scope="session")
def tiny_llama_fp32(cpu):
    from floorline.bench import models
    from floorline.core import zoo

    return models.build_random(zoo.ZOO["tiny-llama"], cpu, "fp32", seed=0)


@pytest.fixture(scope="session")
def tiny_qwen2_fp32(cpu):
    from floorline.bench import models
    from floorline.core import zoo

    return models.build_random(zoo.ZOO["tiny-qwen2"], cpu, "fp32", seed=0)


@pytest.fixture(scope="session")
def tiny_qwen2_dir(tmp_path_factory, cpu) -> Path:
    """tiny-qwen2 with random weights saved as a local model directory (config.json + model.safetensors)."""
    from floorline.bench import models
    from floorline.core import zoo

    d = tmp_path_factory.mktemp("tiny-qwen2-local")
    model = models.build_random(zoo.ZOO["tiny-qwen2"], cpu, "bf16", seed=3)
    model.save_pretrained(d, safe_serialization=True)
    assert (d / "config.json").is_file() and list(d.glob("*.safetensors"))
    return d


def inject(tmp_path: Path, monkeypatch, sitecustomize: str) -> None:
    """Put `sitecustomize` on the PYTHONPATH of every child process started from now on (fault injection)."""
    d = tmp_path / "inject"
    d.mkdir()
    (d / "sitecustomize.py").write_text(sitecustomize)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(d), os.environ.get("PYTHONPATH", "")]))


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """floorline.cli.main(argv) in-process: (exit code, stdout, stderr). An argparse rejection (SystemExit) counts as
    its exit code. Works inside and outside capsys (rich consoles look sys.stdout/sys.stderr up at each print)."""
    from floorline import cli

    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        try:
            rc = cli.main(argv)
        except SystemExit as s:
            rc = s.code if isinstance(s.code, int) else (0 if s.code is None else 1)
    return rc, o.getvalue(), e.getvalue()


@pytest.fixture
def cli_run():
    return run_cli


def load_script(name: str):
    """scripts/NAME.py as a module (the scripts are not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def compiled_for_sm90(body: str) -> str:
    """Python `body` run in a child process that compiles Triton kernels for sm_90 on this machine (no GPU: Triton's
    ptxas and cuobjdump, scripts/gemv_sass.py, importable with floorline there as `gemv_sass`); not interpreted, so
    TRITON_INTERPRET is left out of its environment. Returns its stdout; skips where this Triton build has no
    bundled cuobjdump."""
    import os
    import subprocess
    import sys

    if not load_script("gemv_sass").cuobjdump_tool().exists():
        pytest.skip("this Triton build has no bundled cuobjdump")
    root = Path(__file__).resolve().parents[1]
    code = f"import json, sys; sys.path[:0] = [{str(root / 'scripts')!r}, {str(root / 'src')!r}]\nimport gemv_sass\n"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-c", code + body], env=env, capture_output=True, text=True,
                          check=True).stdout


def read_jsonl_strict(path: Path) -> list[dict]:
    """Every line of a JSON-lines file must be one complete JSON object (no blank or partial lines)."""
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n"), "the last record is not terminated by a newline"
    out = []
    for line in text.splitlines():
        rec = json.loads(line)
        assert isinstance(rec, dict)
        out.append(rec)
    return out


def native_vs_hf(m, exact, net, prompt, steps: int, chunk: int = 1024) -> list[dict]:
    """The same prompt through native (`net`, built over the bf16 model `m`), HF's bf16 path (`m`) and HF in fp32
    (`exact`, the same weights), each prefilled in `chunk`-token pieces, then `steps` greedy steps all fed HF fp32's
    token. Per step: the fp32 logits (`want`), native's and HF bf16's (`native`, `hf`), fp32."""
    from transformers import DynamicCache

    from floorline.bench.runtimes.base import cache_kwarg

    n, dev = prompt.shape[1], prompt.device
    out = []
    net.prefill(prompt, chunk)
    kb, kx = {cache_kwarg(m): DynamicCache(config=m.config)}, {cache_kwarg(m): DynamicCache(config=m.config)}
    for s in range(0, n, chunk):  # HF's prefill in pieces too (its fp32 attention over a long prompt at once would
        part = prompt[:, s:s + chunk]  # not fit), positions given
        pos = torch.arange(s, s + part.shape[1], device=dev)[None]
        m(input_ids=part, position_ids=pos, use_cache=True, **kb)
        tok = exact(input_ids=part, position_ids=pos, use_cache=True, **kx).logits[0, -1].argmax()
    for i in range(steps):
        net.tok.copy_(tok.view(1))
        net.step()
        pos = torch.tensor([[n + i]], device=dev)
        want = exact(input_ids=tok.view(1, 1), position_ids=pos, use_cache=True, **kx).logits[0, -1]
        hf = m(input_ids=tok.view(1, 1), position_ids=pos, use_cache=True, **kb).logits[0, -1].float()
        out.append({"want": want, "native": net.logits.clone(), "hf": hf})
        tok = want.argmax()
    return out


# ------------------------------------------------------------------------------ a study SIGKILLed mid-write
# A sitecustomize.py on the study's PYTHONPATH wraps records.append in the study process (not in its measuring
# children) so that its N-th call writes its records with the last line cut in half, flushes, and SIGKILLs itself.
TORN_SITECUSTOMIZE = """
import os, signal, sys
n = int(os.environ.get("FLOORLINE_TEST_TORN_AT", "0"))
if n:
    import floorline.core.records as records
    orig, calls = records.append, [0]
    def append(path, recs):
        main = getattr(sys.modules.get("__main__"), "__spec__", None)
        if main is not None and main.name == "floorline.study.worker":
            return orig(path, recs)
        calls[0] += 1
        if calls[0] < n or not recs:
            return orig(path, recs)
        orig(path, recs[:-1])
        line = records.json.dumps(recs[-1]) + "\\n"
        with open(path, "a") as f:
            f.write(line[: len(line) // 2])
            f.flush()
            os.fsync(f.fileno())
        os.kill(os.getpid(), signal.SIGKILL)
    records.append = append
"""


@pytest.fixture
def torn(tmp_path, monkeypatch):
    inject(tmp_path, monkeypatch, TORN_SITECUSTOMIZE)

    def run(args: list[str], at: int = 0) -> subprocess.CompletedProcess:
        env = {**os.environ, "FLOORLINE_TEST_TORN_AT": str(at)}
        return subprocess.run([sys.executable, "-m", "floorline", *args], env=env, capture_output=True, text=True,
                              timeout=600)
    return run


def complete_lines(path: Path) -> tuple[list[dict], str]:
    """The file's complete records, and what follows the last newline (the torn tail)."""
    head, _, tail = path.read_text().rpartition("\n")
    return [json.loads(ln) for ln in head.splitlines() if ln.strip()], tail
