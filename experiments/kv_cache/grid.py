"""`kv_cache`'s models as data (torch-free: the grid validates them before anything runs)."""

from __future__ import annotations

from tfclaims.nn.config import ModelConfig


def linear_model_config(cfg: dict) -> ModelConfig:
    d, layers, heads = cfg["linear_model"]
    return ModelConfig(
        vocab_size=96, d_model=d, n_layers=layers, n_heads=heads, max_seq_len=max(cfg["linear_ns"])
    )


def step_model_config(cfg: dict, max_len: int) -> ModelConfig:
    return ModelConfig(
        vocab_size=96,
        d_model=cfg["d_model"],
        n_heads=cfg["n_heads"],
        n_layers=cfg["n_layers"],
        max_seq_len=max_len,
    )
