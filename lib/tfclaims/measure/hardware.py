"""What the machine's memory system offers a kernel: the size of its last-level cache.

A working set that fits the last-level cache is read at cache speed; one that does not is read from DRAM
(HBM on a GPU), so a time exponent fitted across that boundary measures the memory system as well as the
algorithm. Timing recipes record the size so that their analysis can say where each size sits.
"""

from __future__ import annotations

from pathlib import Path

import torch

SYSFS_CPU0 = Path("/sys/devices/system/cpu/cpu0/cache")
UNITS = {"K": 2**10, "M": 2**20, "G": 2**30}


def _sysfs_size(text: str) -> int:
    """'32768K' -> 33554432 (sysfs writes sizes with a binary unit suffix, or plain bytes)."""
    text = text.strip()
    return int(text[:-1]) * UNITS[text[-1]] if text[-1] in UNITS else int(text)


def cpu_last_level_cache(root: Path = SYSFS_CPU0) -> dict | None:
    """The highest-level data or unified cache of CPU 0 as {'level', 'bytes', 'source'}; None where sysfs does
    not describe it (the size is then unknown: no guess)."""
    best = None
    for index in sorted(root.glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            size = _sysfs_size((index / "size").read_text())
        except (OSError, ValueError, KeyError, IndexError):
            continue
        if kind in ("Data", "Unified") and (best is None or level > best["level"]):
            best = {"level": level, "bytes": size, "source": f"sysfs {index.name}"}
    return best


def last_level_cache(device: torch.device | str) -> dict | None:
    """The device's last-level cache: the GPU's L2 on CUDA, the CPU's highest-level cache otherwise."""
    device = torch.device(device)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return {"level": 2, "bytes": int(props.L2_cache_size), "source": "cuda device properties"}
    return cpu_last_level_cache()
