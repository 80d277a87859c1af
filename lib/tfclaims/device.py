"""Device choice, seeding, and the environment recorded with every result.

Importing it imports no torch (`tfclaims plan` resolves the device type with `device_type`); the functions
that need torch import it when called."""

from __future__ import annotations

import os
import platform
import random
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

DEVICES = ("auto", "cpu", "cuda")


class DeviceError(RuntimeError):
    """A device was asked for that this machine does not have."""


# where a GPU driver shows itself; without any of them torch cannot see a CUDA (or ROCm) device either
GPU_DRIVER_PATHS = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/kfd")


def device_type(name: str = "auto") -> str:
    """The device type ("cpu" or "cuda") that `name` resolves to on this machine. Torch is asked whether CUDA
    works only where a GPU driver is present: elsewhere the answer is the CPU without importing it."""
    if name not in DEVICES:
        raise DeviceError(f"unknown device {name!r}; choose one of {', '.join(DEVICES)}")
    if name == "cpu":
        return "cpu"
    usable = any(Path(p).exists() for p in GPU_DRIVER_PATHS)
    if usable:
        import torch

        usable = torch.cuda.is_available()
    if name == "cuda" and not usable:
        raise DeviceError("--device cuda was asked for, but no CUDA GPU is available on this machine")
    return "cuda" if usable else "cpu"


def resolve_device(name: str = "auto") -> torch.device:
    import torch

    return torch.device(device_type(name))


def seed_all(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices). CPU runs are then bit-for-bit repeatable."""
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def fix_precision() -> dict:
    """float32 computes in float32 on every device: TF32 off for CUDA matmuls, cuDNN and oneDNN (one switch,
    torch's fp32_precision API; CUDA's matmuls would otherwise follow whatever the process set). Returns the
    settings read back after setting them, for the run record."""
    import torch

    torch.backends.fp32_precision = "ieee"
    return precision()


def precision() -> dict:
    """The fp32 settings in force (read through the fp32_precision API only: reading the legacy allow_tf32
    flags after setting the new ones raises)."""
    import torch

    b = torch.backends
    return {
        "fp32": b.fp32_precision,
        "cuda_matmul": b.cuda.matmul.fp32_precision,
        "cudnn_conv": b.cudnn.conv.fp32_precision,
        "mkldnn": b.mkldnn.fp32_precision,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


def synchronize(device: torch.device | str) -> None:
    """Wait for queued kernels so that wall-clock timings cover the work (a no-op on CPU)."""
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what the platform says: which machine analysed a
    result, since the last digits of its floats depend on it (`harness.sameness`)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(device: torch.device) -> dict:
    import matplotlib
    import pandas
    import scipy
    import torch

    env = {
        "device": device.type,
        "device_name": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else (platform.processor() or platform.machine()),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "numpy": np.__version__,
            "pandas": pandas.__version__,
            "scipy": scipy.__version__,
            "matplotlib": matplotlib.__version__,
        },
        "platform": platform.platform(),
    }
    env["precision"] = fix_precision()  # what every run sets, whether or not this process ran one
    if device.type == "cuda":
        env["cuda"] = torch.version.cuda
    return env
