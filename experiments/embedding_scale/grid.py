"""`embedding_scale`'s embedding inits as data (torch-free: the experiment's profiles and claims read
them)."""

from __future__ import annotations

INITS = ("normal", "xavier")  # N(0, 0.02²) (GPT-2 style, the library's default) and N(0, 1/d) (Xavier)
INIT_NAME = {"normal": "N(0, 0.02²)", "xavier": "N(0, 1/d)"}
