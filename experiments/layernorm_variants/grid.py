"""`layernorm_variants`'s pairs of formulas (torch-free: the grid and the declarations read them)."""

from __future__ import annotations

PAIRS = {"layer": ("notes_layer", "LayerNorm"), "rms": ("notes_rms", "RMSNorm")}  # standard -> (notes, name)
