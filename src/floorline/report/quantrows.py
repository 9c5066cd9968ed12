"""The quant comparison as rows: each backend against its own floor and against bf16. Pure functions of records
(no torch): `floorline quant` and the report build their tables from the same rows.

Share of the ideal saving realised, per mode, against the bf16 reference of the same mode:
  ideal time t_ideal = t_bf16 * bytes_q / bytes_bf16    (the step scales with its floor bytes)
  share = (t_bf16 - t_q) / (t_bf16 - t_ideal)          (1 = all of the cut in bytes became time; 0 = none; < 0 slower)
"""

from __future__ import annotations

from typing import Callable

from floorline.core import published
from floorline.core.modes import MODES
from floorline.core.records import quant_label as label


def comparable(r: dict) -> bool:
    """A record the comparison takes: measured in floorline's own modes on one GPU (not a tensor-parallel split, a
    server, an imported llama-bench row or an A/B session), whose time a one-GPU bf16 reference can stand beside."""
    return (r.get("mode") in MODES and (r.get("tp") or 1) == 1 and not r.get("ab_key")
            and not r.get("endpoint_url"))


def _latest(recs: list[dict], kind: str, attn: str) -> dict:
    """(model, ctx, mode, backend) -> {dtype: its latest record}, dtypes in the order their latest came."""
    out: dict = {}
    for r in recs:  # later records win (a rerun, or a library installed since)
        if ((r.get("kind") or "cell") == kind and (kind != "cell" or comparable(r))
                and (r.get("attn_implementation") or "sdpa") == attn):
            by_dtype = out.setdefault((r.get("model"), r.get("ctx"), r.get("mode"), label(r.get("quant"))), {})
            by_dtype.pop(r.get("dtype"), None)
            by_dtype[r.get("dtype")] = r
    return out


def ref_dtypes(recs: list[dict], attn: str = "sdpa") -> list:
    """The dtypes of the unquantised records (the references) among `recs`, in the order their latest came."""
    return list(dict.fromkeys(r.get("dtype") for by in _latest(recs, "cell", attn).values() for r in by.values()
                              if label(r.get("quant")) == "bf16"))


def _pick(cells: dict, key: tuple, dtype: str | None, exact: bool = False) -> dict | None:
    """The record of `key` in `dtype`; not exact: else its latest in any dtype (a backend whose kernels take another:
    ExLlamaV2's fp16 in a bf16 run; its row says the dtype)."""
    by_dtype = cells.get(key) or {}
    if exact or dtype in by_dtype:
        return by_dtype.get(dtype)
    return list(by_dtype.values())[-1] if by_dtype else None


def share_realised(t_ref: float, t_q: float, bytes_ref: int, bytes_q: int) -> float | None:
    """(t_bf16 - t_q) / (t_bf16 - t_bf16 * bytes_q / bytes_bf16); None when the format saves no bytes."""
    if bytes_q >= bytes_ref:  # (the reference itself: t - t*b/b rounds to 3.6e-15, not 0)
        return None
    ideal_saving = t_ref - t_ref * bytes_q / bytes_ref
    return (t_ref - t_q) / ideal_saving


def rows(recs: list[dict], model: str, ctx: int, modes: list[str], backends: list[str],
         attn: str = "sdpa", dtypes: dict[str, str] | None = None, ref_dtype: str | None = None) -> list[dict]:
    """One row per backend x mode: its time, its floor, speed-up over bf16, ideal speed-up, share realised. `dtypes`
    (quant: the dtype each backend ran in this time, "bf16" the reference's) picks each record exactly; without it
    (report, a table per reference dtype: ref_dtypes) the reference is the unquantised record in `ref_dtype`, and
    each backend's in that dtype where it ran in it, else in the one its kernels took."""
    cells = _latest(recs, "cell", attn)
    out = []
    for mode in modes:
        ref = _pick(cells, (model, ctx, mode, "bf16"), (dtypes or {}).get("bf16", ref_dtype),
                    exact=dtypes is not None)
        ref_ok = ref is not None and ref.get("valid")
        for b in backends:
            r = (_pick(cells, (model, ctx, mode, b), dtypes.get(b), exact=True) if dtypes is not None
                 else _pick(cells, (model, ctx, mode, b), ref.get("dtype") if ref else None))
            row = {"backend": b, "mode": mode, "status": "not run", "dtype": None, "ms": None, "floor_ms": None,
                   "fraction": None, "floor_bytes": None, "speedup": None, "ideal_speedup": None, "share": None}
            if r is None:
                out.append(row)
                continue
            row.update({"dtype": r.get("dtype"), "floor_bytes": r.get("floor_bytes"),
                        "floor_ms": r.get("floor_ms_measured")})
            if ref is not None and r.get("floor_bytes"):
                row["ideal_speedup"] = ref["floor_bytes"] / r["floor_bytes"]
            if not r.get("valid"):
                row["status"] = r.get("reason") or "invalid"
                out.append(row)
                continue
            row.update({"status": "ok", "ms": r["step_ms_median"], "fraction": r.get("fraction_of_floor_measured")})
            if ref_ok:
                row["speedup"] = ref["step_ms_median"] / r["step_ms_median"]
                row["share"] = share_realised(ref["step_ms_median"], r["step_ms_median"], ref["floor_bytes"],
                                              r["floor_bytes"])
            out.append(row)
    return out


def kernel_rows(recs: list[dict], model: str, backends: list[str], dtypes: dict[str, str] | None = None) -> list[dict]:
    """One row per backend: the decoder-matrix chain's time against its bytes, and against the bf16 chain (records
    picked as rows() picks them)."""
    chains = _latest(recs, "kernels", "sdpa")  # the chain has no attention
    ref = _pick(chains, (model, None, "kernels", "bf16"), (dtypes or {}).get("bf16"), exact=dtypes is not None)
    out = []
    for b in backends:
        r = (_pick(chains, (model, None, "kernels", b), dtypes.get(b), exact=True) if dtypes is not None
             else _pick(chains, (model, None, "kernels", b), ref.get("dtype") if ref else None))
        row = {"backend": b, "status": "not run", "ms": None, "bytes": None, "gbps": None, "fraction": None,
               "speedup": None, "ideal_speedup": None, "share": None}
        if r is not None:
            row["bytes"] = r.get("chain_bytes")
            if not r.get("valid"):
                row["status"] = r.get("reason") or "invalid"
            else:
                row.update({"status": "ok", "ms": r["chain_ms_median"], "gbps": r["achieved_gbps"],
                            "fraction": r["fraction_of_floor_measured"]})
                if ref is not None and ref.get("valid"):
                    row["speedup"] = ref["chain_ms_median"] / r["chain_ms_median"]
                    row["ideal_speedup"] = ref["chain_bytes"] / r["chain_bytes"]
                    row["share"] = share_realised(ref["chain_ms_median"], r["chain_ms_median"], ref["chain_bytes"],
                                                  r["chain_bytes"])
        out.append(row)
    return out


def published_rows(floor_bytes: Callable[[str], int | None]) -> list[dict]:
    """The study's L4 rows as published, with speed-ups over its bf16 row. The ideal speed-up (derived, not published)
    is bf16 floor bytes / the format's, for the published model and context: floor_bytes(backend) gives them (None:
    unknown, no ideal speed-up or share)."""
    pts = published.load().get("quant_l4", [])
    ref = next((p for p in pts if p["quant"] == "bf16"), None)
    if ref is None:
        return []
    out = []
    b_ref = floor_bytes("bf16")
    for p in pts:
        b = floor_bytes(p["quant"])
        t_ref, t = ref["step_ms_median"], p["step_ms_median"]
        known = b_ref is not None and b is not None
        out.append({"backend": p["quant"], "library": p.get("library", "PyTorch"), "gpu": p["gpu_key"],
                    "model": p["model"], "ctx": p["ctx"], "ms": t, "speedup": t_ref / t,
                    "ideal_speedup": b_ref / b if known else None,
                    "share": share_realised(t_ref, t, b_ref, b) if known else None})
    return out


def record_floor_bytes(recs: list[dict], model: str, ctx: int) -> Callable[[str], int | None]:
    """floor_bytes(backend) from records of that model and context (any device, mode or run: the bytes are the
    format's), for published_rows where no byte accounting is at hand."""
    by = {label(r.get("quant")): r["floor_bytes"] for r in recs
          if r.get("model") == model and r.get("ctx") == ctx and r.get("floor_bytes")}
    return lambda q: by.get(label(q))


def backends_in(recs: list[dict]) -> list[str]:
    """The backends records hold, bf16 first, then in the order they first appear."""
    names = list(dict.fromkeys(label(r.get("quant")) for r in recs))
    return sorted(names, key=lambda n: n != "bf16")
