"""What a record says about where it ran: software versions, host, command, and the GPU's state through NVML.

NVML readings are best effort: every reading that the device or driver does not support is None, never a guess.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path

import torch

from floorline import __version__

PACKAGE = Path(__file__).resolve().parents[1]  # the floorline package (this module sits in bench/)


def git_sha(package: Path | None = None) -> str | None:
    """The commit of the floorline checkout this code runs from, only when the package's own files are tracked in
    that repository at that commit: a copy of the package dropped, untracked, into another repository's work tree
    names no commit of that repository. `+dirty` when a tracked file of the package differs from the commit or a
    source file of it is untracked. source_sha256 always says which code ran."""
    here = (package or PACKAGE).resolve()

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=here, capture_output=True, text=True, timeout=5)

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0 or not head.stdout.strip():
            return None
        # ours only if the package itself is tracked at that commit, not merely sitting inside its work tree
        if "__init__.py" not in git("ls-tree", "--name-only", "HEAD", "--", "__init__.py").stdout.split():
            return None
        st = git("status", "--porcelain", "--untracked-files=all", "--", ".")
    except (OSError, subprocess.TimeoutExpired):
        return None
    # dirty: a tracked file changed, or a source file the commit lacks (__pycache__ and the like do not count)
    changed = [ln for ln in st.stdout.splitlines() if not ln.startswith("??") or ln.rstrip().endswith(".py")]
    return head.stdout.strip() + ("+dirty" if st.returncode == 0 and changed else "")


def source_sha256(root: Path | None = None, pattern: str = "*.py") -> str:
    """A digest of the package's Python sources (path and bytes of every .py under `root`, sorted): which code ran,
    also where the checkout's git metadata is stale or absent. 16 hex digits. With pattern "*.cu*": the CUDA sources
    (native/cuda/), which a record keeps beside as kernel_sources_sha256."""
    root = root or PACKAGE
    h = hashlib.sha256()
    for f in sorted(root.rglob(pattern)):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def nvml_gpu_names() -> list[str]:
    """The NVIDIA GPUs of this host, asked through NVML so a parent process never opens a CUDA context of its own."""
    try:
        import pynvml

        pynvml.nvmlInit()
        names = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
                 for i in range(pynvml.nvmlDeviceGetCount())]
        return [n.decode() if isinstance(n, bytes) else n for n in names]
    except Exception:
        return []


def device_name(device: str) -> str:
    """Without opening a CUDA context: NVML's name of the GPU `device` names, or the CPU's name."""
    if str(device).startswith("cuda"):
        names = nvml_gpu_names()
        idx = int(device.split(":")[1]) if ":" in device else 0
        return names[idx] if idx < len(names) else device
    return cpu_name()


COMMAND_ENV = "FLOORLINE_COMMAND"  # the user's command line, handed by the launcher to the processes it starts


def command_line() -> str:
    """The command the user typed: this process's own, or in a child the launcher started (a sweep's cell, a
    tensor-parallel rank), the launcher's."""
    return os.environ.get(COMMAND_ENV) or " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])


def environment() -> dict:
    import transformers

    return {
        "floorline_version": __version__, "git_sha": git_sha(), "source_sha256": source_sha256(),
        "kernel_sources_sha256": source_sha256(pattern="*.cu*"),
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__, "cuda_version": torch.version.cuda,
        "python_version": platform.python_version(), "host": socket.gethostname(), "cpu_name": cpu_name(),
        "torch_threads": torch.get_num_threads(),
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(),
    }


class Nvml:
    """NVML handle of a torch CUDA device, matched by UUID (CUDA_VISIBLE_DEVICES renumbers devices, UUIDs stay)."""

    def __init__(self, device: torch.device):
        self.h = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nv = pynvml
            uuid = str(torch.cuda.get_device_properties(device).uuid)
            self.h = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else "GPU-" + uuid)
        except Exception:  # no driver library, no permission, a MIG slice: records get None
            self.h = None

    def _get(self, fn, *args):
        if self.h is None:
            return None
        try:
            return fn(self.h, *args)
        except Exception:
            return None

    def driver(self) -> str | None:
        try:
            return self.nv.nvmlSystemGetDriverVersion() if self.h is not None else None
        except Exception:
            return None

    def snapshot(self) -> dict:
        nv = getattr(self, "nv", None)
        if nv is None or self.h is None:
            return {"sm_clock_mhz": None, "mem_clock_mhz": None, "power_w": None, "temperature_c": None}
        p = self._get(nv.nvmlDeviceGetPowerUsage)
        return {
            "sm_clock_mhz": self._get(nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_SM),
            "mem_clock_mhz": self._get(nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_MEM),
            "power_w": None if p is None else p / 1000,
            "temperature_c": self._get(nv.nvmlDeviceGetTemperature, nv.NVML_TEMPERATURE_GPU),
        }

    def energy_mj(self) -> int | None:
        """Total energy since driver load, millijoules (Volta and newer); updates about every 100 ms."""
        nv = getattr(self, "nv", None)
        return None if nv is None else self._get(nv.nvmlDeviceGetTotalEnergyConsumption)
