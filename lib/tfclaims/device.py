"""Device choice, seeding, and the environment recorded with every result."""

from __future__ import annotations

import os
import platform
import random

import numpy as np
import torch

DEVICES = ("auto", "cpu", "cuda")


class DeviceError(RuntimeError):
    """A device was asked for that this machine does not have."""


def resolve_device(name: str = "auto") -> torch.device:
    if name not in DEVICES:
        raise DeviceError(f"unknown device {name!r}; choose one of {', '.join(DEVICES)}")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise DeviceError("--device cuda was asked for, but no CUDA GPU is available on this machine")
    return torch.device(name)


def seed_all(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices). CPU runs are then bit-for-bit repeatable."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def synchronize(device: torch.device | str) -> None:
    """Wait for queued kernels so that wall-clock timings cover the work (a no-op on CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def environment(device: torch.device) -> dict:
    import matplotlib
    import pandas
    import scipy

    env = {
        "device": device.type,
        "device_name": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else (platform.processor() or platform.machine()),
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
    if device.type == "cuda":
        env["cuda"] = torch.version.cuda
        env["tf32_matmul"] = torch.backends.cuda.matmul.allow_tf32
        env["tf32_cudnn"] = torch.backends.cudnn.allow_tf32
    return env
