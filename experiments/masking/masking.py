"""Attention masks in the two boolean conventions, a fill value for masked scores, and attention weights read
back from SDPA.

A boolean attention mask is read one of two ways: True = may attend ("keep": SDPA's `attn_mask`, Hugging
Face's masks, this library's `attention.build_mask`) or True = not attended ("masked":
`torch.nn.MultiheadAttention`'s `key_padding_mask`, and the pad and future masks built in note 004, which pass
it to `masked_fill`). The functions named `*_masked` below build the second kind, from token id 0 as the pad
and from the strict upper triangle as the future, as that note describes; `past_kept` is note 001's lower
triangle (True = keep).

Shapes: B batch, T queries, S keys, h heads, d head size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tfclaims.nn.attention import Attention
from tfclaims.nn.config import ModelConfig

PAD_ID = 0  # the notes' pad token: a key is padding where its id equals 0


def pad_keys_masked(idx: torch.Tensor) -> torch.Tensor:
    """(B, S) token ids -> (B, 1, 1, S), True at pad keys: every query row sees the same key mask."""
    return idx.eq(PAD_ID)[:, None, None, :]


def future_masked(T: int, device=None) -> torch.Tensor:
    """(T, T), True strictly above the diagonal: query i may not see key j > i."""
    return torch.ones(T, T, dtype=torch.bool, device=device).triu(1)


def past_kept(T: int, device=None) -> torch.Tensor:
    """(T, T), True on and below the diagonal: query i may see key j ≤ i."""
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def notes_mask(idx: torch.Tensor, causal: bool) -> torch.Tensor:
    """True = masked: pad keys, and in a decoder the future too (the union of the two masks).
    (B, 1, T|1, S)."""
    m = pad_keys_masked(idx)
    return m | future_masked(idx.shape[1], idx.device) if causal else m


def _scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5  # (B, h, T, S), in the inputs' dtype


def fill_weights(q: torch.Tensor, k: torch.Tensor, masked: torch.Tensor | None, fill: float) -> torch.Tensor:
    """Softmax weights (B, h, T, S) of the scores with the masked ones (True in `masked`) overwritten by
    `fill`, in the inputs' dtype. Raises where `fill` does not fit the dtype (torch refuses an overflowing
    scalar)."""
    s = _scores(q, k)
    return (s if masked is None else s.masked_fill(masked, fill)).softmax(-1)


def fill_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, masked: torch.Tensor | None, fill: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Explicit attention with masked scores set to `fill`: (output (B, h, T, d), weights (B, h, T, S))."""
    w = fill_weights(q, k, masked, fill)
    return w @ v, w


def additive_bias(keep: torch.Tensor, fill: float, dtype: torch.dtype) -> torch.Tensor:
    """An additive mask: 0 where kept, `fill` elsewhere, built in float32 and cast to `dtype` (a fill beyond
    the dtype's range becomes −inf in the cast, silently)."""
    return torch.where(keep, 0.0, fill).to(dtype)


def additive_weights(q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Softmax weights of the scores plus an additive mask, in the inputs' dtype."""
    return (_scores(q, k) + bias).softmax(-1)


def sdpa_weights(q: torch.Tensor, k: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
    """SDPA's attention weights (B, h, T, S), read back by attending over the identity matrix as values: row i
    of the output is then row i of the weights, computed by the fused kernel itself."""
    S = k.shape[-2]
    eye = torch.eye(S, dtype=q.dtype, device=q.device).expand(*k.shape[:-1], S)
    return F.scaled_dot_product_attention(q, k, eye, attn_mask=attn_mask)


class FillAttention(Attention):
    """The library's attention, explicit, with a finite `fill` for masked scores in place of −inf (the notes'
    −1e9, or the dtype's finite minimum). Multi-head only (as many K/V heads as query heads)."""

    def __init__(self, cfg: ModelConfig, fill: float, *, causal: bool | None = None):
        if cfg.kv_heads != cfg.n_heads:
            raise ValueError("FillAttention needs as many K/V heads as query heads")
        super().__init__(cfg.replace(attn_backend="explicit"), causal=causal)
        self.fill = fill

    def _explicit(self, q, k, v, mask):  # mask: (B|1, 1, T, S), True = may attend
        logits = (q @ k.transpose(-2, -1)) * self.scale
        if mask is not None:
            logits = logits.masked_fill(~mask, self.fill)
        return logits.softmax(-1) @ v


def with_fill(model: torch.nn.Module, fill: float) -> torch.nn.Module:
    """`model` (an LM or Encoder) with every block's attention replaced by a FillAttention holding the same
    weights: the same model, masked scores set to `fill`."""
    for block in model.blocks:
        w = block.attn.wq.weight
        new = FillAttention(model.cfg, fill, causal=block.attn.causal).to(device=w.device, dtype=w.dtype)
        new.load_state_dict(block.attn.state_dict())
        block.attn = new
    return model
