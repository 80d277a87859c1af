"""Run recipe of `init_variance`: one draw of a deep MLP at init, its per-layer activation and gradient second
moments (`measure.signal_propagation.mlp_moments`)."""

from __future__ import annotations

from .signal_propagation import mlp_moments


def run_probe(cfg: dict, ctx) -> dict:
    return mlp_moments(
        cfg["width"], cfg["depth"], cfg["batch"], cfg["init"], cfg["act"], cfg["seed"], device=ctx.device
    )
