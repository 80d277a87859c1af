"""`additive_vs_dot`'s attention kinds and A/A name as data (torch-free: the grid reads them before anything
runs)."""

from __future__ import annotations

KINDS = ("additive", "dot_scaled", "dot_unscaled")
AA = "dot_scaled (again)"  # the scaled dot-product callable timed a second time: the A/A pair
