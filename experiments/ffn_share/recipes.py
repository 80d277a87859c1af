"""Run recipes of `ffn_share`: the library's modules for the published configurations of
`experiments.ffn_share.grid` (`CATALOGUE`, with the parallel and encoder–decoder layouts the library's `Block`
does not record), counted against their closed forms there.
"""

from __future__ import annotations

import torch
from torch import nn

from tfclaims.nn.attention import Attention, KVCache
from tfclaims.nn.blocks import FFN
from tfclaims.nn.config import ConfigError, ModelConfig
from tfclaims.nn.models import LM, Encoder, init_weights
from tfclaims.nn.norms import make_norm

from .grid import (  # noqa: F401 (re-exported: the experiment's count recipe reads them here)
    CATALOGUE,
    LAYOUTS,
    MODERN,
    Published,
    block_norms,
    block_params,
    built_params,
    crossover,
    decoder_block_params,
    encoder_stack_params,
    ffn_total,
    head_params,
    mean_keys,
    model_params,
    score_flops_per_key,
    token_flops,
)


# ------------------------------------------------------------------ modules
class ParallelBlock(nn.Module):
    """x + attn(n(x)) + ffn(n(x)): one norm, both branches read the same normalised input. (B, T, d) -> (B, T,
    d)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if cfg.n_experts:
            raise ConfigError("ParallelBlock takes a dense FFN")
        self.norm = make_norm(cfg.norm, cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.ffn = FFN(cfg.d_model, cfg.ff, cfg.ffn, cfg.bias)

    def forward(
        self,
        x: torch.Tensor,
        *,
        pad_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        layer: int = 0,
        rope=None,
    ) -> torch.Tensor:
        h = self.norm(x, pad_mask)  # (B, T, d), shared by both branches
        return x + self.attn(h, pad_mask=pad_mask, cache=cache, layer=layer, rope=rope) + self.ffn(h)


def parallel_lm(cfg: ModelConfig) -> LM:
    """The library's `LM` with parallel blocks in place of sequential ones (re-initialised the same way)."""
    model = LM(cfg)
    model.stack.blocks = nn.ModuleList(ParallelBlock(cfg) for _ in range(cfg.n_layers))
    init_weights(model, cfg)
    return model


def build(a: Published) -> nn.Module:
    """The library's model for `a`: an `LM` (parallel blocks where published so), an `Encoder` for a
    bidirectional model, and for an encoder–decoder its encoder stack (the library has no cross-attention
    decoder, nor T5's bucketed bias)."""
    if not a.config.causal:
        return Encoder(a.config)
    return parallel_lm(a.config) if a.layout == "parallel" else LM(a.config)
