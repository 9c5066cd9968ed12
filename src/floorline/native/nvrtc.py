"""CUDA C++ compiled at run time by NVRTC (which CUDA builds of torch bring: no nvcc on a user's machine), kept on disk,
loaded through torch, launched with cuLaunchKernelEx (programmatic dependent launch). The sources are the package's
cuda/*.cu files (int4_gemv.cu: int4_cuda; attn_chunk.cu: attn_cuda), which include cuda/pdl.cuh."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
from importlib import resources
from pathlib import Path

import torch

PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CUlaunchAttributeID

HEADERS = ("pdl.cuh",)  # what the .cu files may include


def source(name: str) -> str:
    """The text of cuda/`name`, shipped as package data."""
    return resources.files("floorline.native").joinpath("cuda", name).read_text(encoding="utf-8")


def source_digest(name: str) -> str:
    """sha256 of a .cu file and every header it may include: what a cached cubin is keyed by."""
    return hashlib.sha256("\0".join(source(n) for n in (name, *HEADERS)).encode()).hexdigest()


def no_tensor_core_gpu(device: torch.device, what: str) -> str | None:
    """Why `what` (a kernel of this package) cannot run on `device`, one line, or None: it needs a CUDA GPU of compute
    capability 8.0 or newer (mma.m16n8k16) and a torch with the CUDA runtime (whose NVRTC compiles it)."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return f"no CUDA GPU ({what} runs on NVIDIA GPUs; the Triton interpreter and torch serve the CPU)"
    if torch.version.cuda is None:
        return "this torch has no CUDA runtime"
    if torch.cuda.get_device_capability(device) < (8, 0):
        return f"{what} needs compute capability 8.0 or newer (tensor-core mma.m16n8k16)"
    return None


class LaunchAttr(ctypes.Structure):
    # CUlaunchAttribute: an id, padding to 8 bytes, a 64-byte union (ints: a c_char array field would read as a copy)
    _fields_ = [("id", ctypes.c_uint), ("pad", ctypes.c_uint), ("value", ctypes.c_int * 16)]


class LaunchConfig(ctypes.Structure):
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(LaunchAttr)), ("nattrs", ctypes.c_uint)]


def compile_cubin(name: str, defines: dict, arch: str) -> bytes:
    """NVRTC: cuda/`name` with `defines` (-D name=int) -> a cubin for `arch` (e.g. "sm_90")."""
    opts = [f"--gpu-architecture={arch}", "-std=c++17", "--use_fast_math"] + [f"-D{k}={int(v)}" for k, v in
                                                                             defines.items()]
    nvrtc = torch.cuda._utils._get_gpu_rtc_library()
    prog = ctypes.c_void_p()
    heads = (ctypes.c_char_p * len(HEADERS))(*[source(h).encode() for h in HEADERS])
    names = (ctypes.c_char_p * len(HEADERS))(*[h.encode() for h in HEADERS])
    _ok(nvrtc, nvrtc.nvrtcCreateProgram(ctypes.byref(prog), source(name).encode(), name.encode(), len(HEADERS), heads,
                                        names))
    try:
        arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        if nvrtc.nvrtcCompileProgram(prog, len(opts), arr) != 0:
            size = ctypes.c_size_t()
            nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise RuntimeError(f"NVRTC failed for {defines}:\n{log.value.decode()}")
        size = ctypes.c_size_t()
        _ok(nvrtc, nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size)))
        cubin = ctypes.create_string_buffer(size.value)
        _ok(nvrtc, nvrtc.nvrtcGetCUBIN(prog, cubin))
        return cubin.raw
    finally:
        nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))


def _ok(nvrtc, code: int) -> None:
    if code != 0:
        nvrtc.nvrtcGetErrorString.restype = ctypes.c_char_p
        raise RuntimeError(f"NVRTC error {code}: {nvrtc.nvrtcGetErrorString(code)}")


def cache_dir() -> Path:
    """Where compiled cubins are kept across processes (each run cell is a fresh one): $FLOORLINE_CACHE or
    ~/.cache/floorline."""
    return Path(os.environ.get("FLOORLINE_CACHE") or Path.home() / ".cache" / "floorline")


def cached(path: Path, build) -> bytes:
    """The cubin at `path`, or build() written there atomically (concurrent processes never read half a file; a
    read-only home compiles every time)."""
    try:
        return path.read_bytes()
    except OSError:
        pass
    cubin = build()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(cubin)
        os.replace(tmp, path)
    except OSError:
        pass
    return cubin


@functools.lru_cache(maxsize=None)
def libcuda():
    """The driver library, loaded once (eager modes launch kernels once per matrix per step)."""
    return torch.cuda._utils._get_gpu_runtime_library()


def launch(func, grid: tuple, block: int, shared: int, stream: int, vals: list, pdl: bool = False) -> None:
    """cuLaunchKernelEx of `func` with arguments `vals` (ctypes values), on `stream`; pdl: the launch may start while
    the previous kernel runs (programmatic stream serialization)."""
    args = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in vals])
    cfg = LaunchConfig()
    cfg.grid[:] = grid
    cfg.block[:] = (block, 1, 1)
    cfg.shared = shared
    cfg.stream = stream
    attr = LaunchAttr()
    if pdl:
        attr.id = PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value[0] = 1  # programmaticStreamSerializationAllowed
        cfg.attrs, cfg.nattrs = ctypes.pointer(attr), 1
    torch.cuda._utils._check_cuda(libcuda().cuLaunchKernelEx(ctypes.byref(cfg), func, args, None))
