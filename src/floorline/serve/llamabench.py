"""floorline import: llama-bench results (`-o json` or `-o jsonl`) as floorline records against the floor.

Owns: reading llama-bench's rows, turning each text-generation row (n_gen > 0, no prompt in the same test) into a
record of `run`'s schema, mode "llama-bench", at ctx = its n_depth (the tokens already in the KV cache), with
llama-bench's own model_size as the weight bytes (gguf.floor_from_size) and its KV types. Samples: llama-bench times
each repetition of n_gen tokens; samples_ms is each repetition's time per token (samples_ns / n_gen), so a sample is a
mean over n_gen steps, not one step (said in the record). Prompt rows (pp, and pg rows that mix prompt and
generation) are not decode: they are kept as records of kind "llama-bench-prompt", which the floor tables leave out.
May not run llama.cpp.
"""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path

from floorline.bench import system
from floorline.core import floor, gguf, stats, zoo
from floorline.core.errors import UserError, not_a_file
from floorline.core.records import SCHEMA_VERSION
from floorline.serve import endpoint

NEEDED = ("model_size", "model_n_params", "n_prompt", "n_gen", "samples_ns", "backends")
KV_DTYPES = {"f16": "fp16", "bf16": "bf16", "f32": "fp32"}


def read_rows(path: str | Path) -> list[dict]:
    """llama-bench rows from a JSON array (-o json) or one object per line (-o jsonl)."""
    p = Path(path)
    if not p.is_file():
        raise not_a_file(path, "give llama-bench's output (-o json or -o jsonl)")
    text = p.read_text(encoding="utf-8").strip()
    try:
        data = json.loads(text) if text.startswith("[") else [json.loads(l) for l in text.splitlines() if l.strip()]
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not llama-bench JSON or JSON lines ({e.msg} at line {e.lineno}); run llama-bench "
                        f"with -o json or -o jsonl") from None
    if not data:
        raise UserError(f"{path}: no rows")
    for i, r in enumerate(data, 1):
        missing = [k for k in NEEDED if not isinstance(r, dict) or k not in r]
        if missing:
            raise UserError(f"{path}: row {i} lacks {', '.join(missing)}: not llama-bench output (-o json / jsonl)")
        bad = [k for k in ("model_size", "model_n_params") if not _count(r[k], 1)]
        bad += [k for k in ("n_prompt", "n_gen", "n_depth") if k in r and not _count(r[k], 0)]
        if not isinstance(r["samples_ns"], list) or not r["samples_ns"] or not all(
                _number(s) and s > 0 for s in r["samples_ns"]):
            bad.append("samples_ns")
        if bad:
            raise UserError(f"{path}: row {i}: {', '.join(f'{k} {r[k]!r}' for k in bad)} (counts >= 0, sizes >= 1, "
                            f"samples > 0 ns): not llama-bench output as it writes it; repair or drop that row")
    return data


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _count(v, low: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= low


def _device(r: dict) -> tuple[str, str]:
    backends = str(r.get("backends") or "")
    gpu = str(r.get("gpu_info") or "").strip()
    on_gpu = bool(gpu) and int(r.get("n_gpu_layers") or 0) != 0 and backends not in ("CPU", "BLAS", "CPU,BLAS")
    return ("gpu" if on_gpu else "cpu"), (gpu if on_gpu else str(r.get("cpu_info") or "cpu"))


def _test_name(r: dict) -> str:
    name = (f"pp{r['n_prompt']}" if r["n_prompt"] else "") + (f"tg{r['n_gen']}" if r["n_gen"] else "")
    return name + (f" @ d{r['n_depth']}" if r.get("n_depth") else "")


def row_id(row: dict, index: int, model: str, gpu_key: str | None, device: str) -> str:
    """A record's run_id from what it measured and how it is judged (the row, its place in the file, the architecture,
    the GPU key and whether this host's bandwidth was measured: --device), so importing the same rows the same way
    again gives the same ids: `import` skips those its --output holds, and `report` drops a copy from another file as
    a duplicate."""
    return uuid.uuid5(uuid.NAMESPACE_OID,
                      json.dumps([row, index, model, gpu_key, device], sort_keys=True, default=str)).hex


def import_file(path: str, model: str, download: bool = False, gpu: str | None = None,
                device: str = "none") -> tuple[list[dict], list[str]]:
    """(records, notes). Every row is checked before any record is made."""
    rows = read_rows(path)
    a = zoo.resolve(model, need="config", download=download)
    n = floor.parameter_count(a)
    notes: list[str] = []
    for r in rows:
        got = int(r["model_n_params"])
        if abs(got - n) > 0.01 * n:
            raise UserError(f"{path}: llama-bench's model has {got:,} parameters, --model {a.name} {n:,}; give the "
                            f"architecture it benchmarked")
        for t in (r.get("type_k", "f16"), r.get("type_v", "f16")):
            gguf.kv_element_bytes(t)  # an unknown KV type fails here
    kind, name = _device(rows[0])
    dev = endpoint.local_device(device, here=False)
    key = gpu or (None if kind == "cpu" else _gpu_key(name))
    base = {"schema_version": SCHEMA_VERSION, "kind": "cell", "mode": "llama-bench", **a.identity(),
            "floor_convention": "strict", "source_file": str(path),
            **endpoint.device_info(key, dev, remote_name=name), **system.environment()}
    if dev is None:
        base["device"] = kind
    recs: list[dict] = []
    prompt = []
    for i, r in enumerate(rows):
        test = _test_name(r)
        rid = row_id(r, i, a.name, base.get("gpu_key"), device)
        bench = {f"llamabench_{k}": r.get(k) for k in ("build_commit", "build_number", "backends", "cpu_info",
                                                         "gpu_info", "model_type", "model_filename", "n_threads",
                                                         "n_gpu_layers", "n_batch", "n_ubatch", "flash_attn",
                                                         "type_k", "type_v", "test_time", "avg_ns", "stddev_ns")}
        bench["llamabench_test"] = test
        if r["n_prompt"] or not r["n_gen"]:
            prompt.append(test)
            recs.append({**base, "kind": "llama-bench-prompt", "run_id": rid, **bench,
                         "ctx": int(r.get("n_depth") or 0), "n_prompt": r["n_prompt"], "n_gen": r["n_gen"],
                         "samples_ns": r["samples_ns"], "samples_ts": r.get("samples_ts"), "valid": None,
                         "reason": "prompt processing, not decode: kept out of the floor tables"})
            continue
        depth = int(r.get("n_depth") or 0)
        tk, tv = r.get("type_k", "f16"), r.get("type_v", "f16")
        strict, paper = (gguf.floor_from_size(a, depth, int(r["model_size"]), int(r["model_n_params"]), tk, tv, c)
                         for c in ("strict", "paper"))
        samples = [s / r["n_gen"] / 1e6 for s in r["samples_ns"]]
        ftype = str(r.get("model_type") or "").split(" ", 2)[-1]
        rec = {**base, "run_id": rid, **bench, "ctx": depth, "n_gen": r["n_gen"],
               "quant": f"gguf {ftype}".strip(), "dtype": KV_DTYPES.get(tk, tk), "weight_bytes": int(r["model_size"]),
               "weight_bytes_source": "llama-bench model_size (every tensor of the GGUF)",
               "warmup": None, "steps": r["n_gen"], "samples_ms": samples,
               "samples_are": f"per-token mean of each llama-bench repetition ({r['n_gen']} tokens from depth "
                              f"{depth})", "floor_bytes": strict.bytes, "paper_floor_bytes": paper.bytes,
               **{f"floor_bytes_{k}": v for k, v in strict.components.items()}, "warnings": [],
               "valid": True, "reason": None}
        rec.update(stats.summarize(samples))
        endpoint.judge(rec, strict, paper)
        recs.append(rec)
    if prompt:
        notes.append(f"{len(prompt)} prompt row(s) ({', '.join(prompt)}) are prompt processing, not decode: written "
                     f"as kind llama-bench-prompt, kept out of the floor tables")
    if not any(r["kind"] == "cell" for r in recs):
        notes.append(f"{path}: no text-generation rows (n_gen > 0 without a prompt); run llama-bench with -n")
    if dev is None and not base.get("peak_gbps"):
        notes.append("no bandwidth to put the floor in ms: give --gpu (a datasheet peak), or --device cpu / cuda to "
                     "measure this host's streaming bandwidth (best pattern) when the bench ran here")
    return recs, notes


def _gpu_key(name: str) -> str | None:
    from floorline.core import specs

    s = specs.detect(name.split(",")[0])
    return s.key if s else None
