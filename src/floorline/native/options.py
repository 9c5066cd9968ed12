"""The settings that change mode native's timed step: one frozen dataclass, validated once, part of the run's config
(bench/config.py), written into every record and usable as an `ab` arm (`mode=native,mlp=gemv`).

  mlp         fused: each dense layer's MLP as one kernel (mlp.py; the default) | gemv: gate_up then down, two GEMVs
              (what int4 and tensor-parallel steps always run). H200, ctx 2048: qwen2.5-7b 3.475 ms fused against
              3.610, llama-3.1-8b 3.789 against 3.891.
  attn_kernel auto: the CUDA chunk kernel (attn_cuda.py) from ATTN_CUDA_FROM cache positions at head_dim 128; below
              (and at head_dim 64), Triton's chunks, with the CUDA ones among the step tuner's candidates where they
              build | triton | cuda
  attn_chunk  cache positions an attention program covers: 0 (the default) sizes it to fill the GPU, and the step
              tuner also tries its half and quarter; 16..1024 fixes it (the CUDA kernel: 64..1024)
  pdl         auto: programmatic dependent launch where the GPU has it (Hopper and newer), the step tuner choosing
              which kernels let the next launch before their own wait (pdl.py) | after-wait: every kernel after it |
              off (plain stream order)
  persist     off: one launch a kernel | on: every decoder layer in one persistent kernel (persist.py) | auto: both
              timed in the whole step by the step tuner, the faster kept (persist=auto with step_tune=off: off)
  step_tune   re-time every tuned launch choice inside the whole decode step before the graph is captured (default
              on; off keeps the one-launch timer's picks and saves 3-35 s of preparation a cell on the H200)

From a string, as the CLI and `ab` arms give it: "mlp=gemv,pdl=off" (NativeOptions.parse); bad values are one line.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

from floorline.core.errors import UserError

MLPS = ("fused", "gemv")
ATTN_KERNELS = ("auto", "triton", "cuda")
ATTN_CHUNKS = (0, 16, 32, 64, 128, 256, 512, 1024)
PDLS = ("auto", "after-wait", "off")
PERSISTS = ("off", "on", "auto")


@dataclass(frozen=True)
class NativeOptions:
    mlp: str = "fused"
    attn_kernel: str = "auto"
    attn_chunk: int = 0
    pdl: str = "auto"
    persist: str = "off"
    step_tune: bool = True

    def __post_init__(self):
        for name, allowed in (("mlp", MLPS), ("attn_kernel", ATTN_KERNELS), ("pdl", PDLS),
                              ("persist", PERSISTS)):
            if getattr(self, name) not in allowed:
                raise UserError(f"native option {name}={getattr(self, name)!r}: use {' or '.join(allowed)}")
        if self.attn_chunk not in ATTN_CHUNKS:
            raise UserError(f"native option attn_chunk={self.attn_chunk!r}: use 0 (sized to the GPU) or "
                            f"{', '.join(map(str, ATTN_CHUNKS[1:]))} cache positions")
        if not isinstance(self.step_tune, bool):
            raise UserError(f"native option step_tune={self.step_tune!r}: use on or off")

    @classmethod
    def help(cls) -> str:
        """Every option and its values, the default first (the CLI's --native help)."""
        return (f"mlp={'|'.join(MLPS)}, attn_kernel={'|'.join(ATTN_KERNELS)}, attn_chunk=0|{ATTN_CHUNKS[1]}.."
                f"{ATTN_CHUNKS[-1]}, pdl={'|'.join(PDLS)}, persist={'|'.join(PERSISTS)}, step_tune=on|off")

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    def with_items(self, items: dict[str, str]) -> NativeOptions:
        """These options with `items` (name -> text, as typed) applied; an unknown name or bad value is one line."""
        known = {f.name: f.type for f in fields(self)}
        change = {}
        for k, text in items.items():
            if k not in known:
                raise UserError(f"unknown native option {k!r}; use {', '.join(known)}")
            change[k] = _value(k, known[k], text)
        return replace(self, **change)

    @classmethod
    def parse(cls, text: str | None) -> NativeOptions:
        """"mlp=gemv,pdl=off" -> NativeOptions (empty or None: the defaults)."""
        items = {}
        for part in filter(None, (p.strip() for p in (text or "").split(","))):
            k, eq, v = part.partition("=")
            if not eq:
                raise UserError(f"native option {part!r}: write name=value, e.g. mlp=gemv")
            items[k.strip()] = v.strip()
        return cls().with_items(items)

    @classmethod
    def from_record(cls, rec: dict) -> NativeOptions:
        """The options a record was measured with (records from before the options existed: the defaults)."""
        d = cls()
        return replace(d, **{k: rec[f"native_{k}"] for k in cls.keys() if rec.get(f"native_{k}") is not None})

    def record(self) -> dict:
        """The options as a record holds them (one key each, `native_` + name)."""
        return {f"native_{k}": v for k, v in asdict(self).items()}

    def text(self) -> str:
        """The options that differ from the defaults, as parse() reads them ('' for the defaults)."""
        d = NativeOptions()
        return ",".join(f"{k}={_show(v)}" for k, v in asdict(self).items() if getattr(d, k) != v)


def _value(name: str, kind: str, text: str):
    if kind == "bool":
        if text.lower() in ("on", "1", "true", "yes"):
            return True
        if text.lower() in ("off", "0", "false", "no"):
            return False
        raise UserError(f"native option {name}={text!r}: use on or off")
    if kind == "int":
        try:
            return int(text)
        except ValueError:
            raise UserError(f"native option {name}={text!r}: use a number of cache positions") from None
    return text


def _show(v) -> str:
    return ("on" if v else "off") if isinstance(v, bool) else str(v)
