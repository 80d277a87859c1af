"""Multi-head attention with any number of K/V heads (MHA, GQA, MQA), two backends and a KV cache.

Shapes: B batch, T query length, S key length, h query heads, g = h / kv query heads per K/V head,
dk head size. Masks are boolean with True meaning "may attend".
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig
from .positions import apply_rope


class KVCache:
    """Preallocated keys and values for incremental decoding: per layer (B, kv, max_len, dk)."""

    def __init__(
        self,
        n_layers: int,
        batch: int,
        kv_heads: int,
        max_len: int,
        dk: int,
        *,
        dtype=torch.float32,
        device=None,
    ):
        shape = (batch, kv_heads, max_len, dk)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.max_len = max_len
        self.pos = 0  # number of positions filled; advanced by the model after all layers ran

    @classmethod
    def for_model(
        cls, cfg: ModelConfig, batch: int, max_len: int | None = None, *, dtype=torch.float32, device=None
    ) -> KVCache:
        return cls(
            cfg.n_layers, batch, cfg.kv_heads, max_len or cfg.max_seq_len, cfg.dk, dtype=dtype, device=device
        )

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write (B, kv, T, dk) at the current position; return all keys/values so far (B, kv, pos+T, dk)."""
        end = self.pos + k.shape[2]
        if end > self.max_len:
            raise ValueError(f"KV cache holds {self.max_len} positions; cannot write up to {end}")
        self.k[layer][:, :, self.pos : end] = k
        self.v[layer][:, :, self.pos : end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)


def build_mask(
    T: int, S: int, *, causal: bool, offset: int = 0, pad_mask: torch.Tensor | None = None, device=None
) -> torch.Tensor | None:
    """Boolean mask (B|1, 1, T, S): query i sits at absolute position offset+i; pad_mask (B, S) marks real
    keys."""
    mask = None
    if causal and not (T == 1 and offset == S - 1):  # a single newest query sees every key
        q_pos = torch.arange(T, device=device).unsqueeze(1) + offset
        mask = (torch.arange(S, device=device).unsqueeze(0) <= q_pos)[None, None]  # (1, 1, T, S)
    if pad_mask is not None:
        keys = pad_mask[:, None, None, :].bool()  # (B, 1, 1, S)
        mask = keys if mask is None else mask & keys
    return mask


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, *, causal: bool | None = None):
        super().__init__()
        self.h, self.kv, self.dk = cfg.n_heads, cfg.kv_heads, cfg.dk
        self.scale = cfg.scale
        self.backend = cfg.attn_backend
        self.causal = cfg.causal if causal is None else causal
        self.wq = nn.Linear(cfg.d_model, self.h * self.dk, bias=cfg.bias)
        self.wk = nn.Linear(cfg.d_model, self.kv * self.dk, bias=cfg.bias)
        self.wv = nn.Linear(cfg.d_model, self.kv * self.dk, bias=cfg.bias)
        self.wo = nn.Linear(self.h * self.dk, cfg.d_model, bias=cfg.bias)
        # Called as hook(logits, probs, mask) by the explicit backend; for probing saturation.
        self.score_hook: Callable | None = None

    def forward(
        self,
        x: torch.Tensor,
        *,
        pad_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        layer: int = 0,
        rope: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.h, self.dk).transpose(1, 2)  # (B, h, T, dk)
        k = self.wk(x).view(B, T, self.kv, self.dk).transpose(1, 2)  # (B, kv, T, dk)
        v = self.wv(x).view(B, T, self.kv, self.dk).transpose(1, 2)
        if rope is not None:  # tables already sliced to this chunk's positions: (T, dk/2)
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        offset = 0
        if cache is not None:
            offset = cache.pos
            k, v = cache.update(layer, k, v)  # (B, kv, offset+T, dk)
        S = k.shape[2]
        fast_causal = self.causal and pad_mask is None and offset == 0 and T == S
        mask = (
            None
            if fast_causal
            else build_mask(T, S, causal=self.causal, offset=offset, pad_mask=pad_mask, device=x.device)
        )
        if self.backend == "sdpa" and self.score_hook is None:
            y = F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=mask,
                is_causal=fast_causal and T > 1,
                scale=self.scale,
                enable_gqa=self.kv != self.h,
            )
        else:
            if fast_causal:
                mask = build_mask(T, S, causal=True, device=x.device)
            y = self._explicit(q, k, v, mask)
        return self.wo(y.transpose(1, 2).reshape(B, T, self.h * self.dk))

    def _explicit(self, q, k, v, mask):
        """Materialises the (T, S) score matrix. For GQA the g query heads that share a K/V head are
        stacked as extra rows, (B, kv, g*T, dk) @ (B, kv, dk, S): K and V are read in place, never
        repeated or broadcast into copies (which would give back the memory GQA saves).

        A query row with no allowed key (a padding query of a causal model whose pads come before its tokens)
        has every logit −inf and comes out NaN, where SDPA gives zeros; through a second layer the NaN reaches
        real tokens (0 · NaN). Pad after the tokens, or use SDPA, for such batches (`masking` measures
        both)."""
        B, h, T, dk = q.shape
        g = h // self.kv
        S = k.shape[2]
        rows = q.reshape(B, self.kv, g * T, dk)  # head index = kv_index * g + j, as in SDPA's enable_gqa
        logits = ((rows @ k.transpose(-2, -1)) * self.scale).view(B, self.kv, g, T, S)
        m = None if mask is None else mask.unsqueeze(1)  # (B|1, 1, 1, T, S)
        if m is not None:
            logits = logits.masked_fill(~m, float("-inf"))
        probs = logits.softmax(dim=-1)
        if self.score_hook is not None:
            self.score_hook(logits, probs, m)
        return (probs.view(B, self.kv, g * T, S) @ v).view(B, h, T, dk)
