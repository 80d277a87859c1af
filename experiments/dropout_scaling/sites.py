"""Where `dropout_scaling` drops, and the probe's view of each dropout site (torch; loaded when a run starts).

Two placements, each a config's `site`:
- "residual" (GPT-2's): the embedding (token + position, as the first block receives it) and every
  sublayer's output before the residual add. In a Pre-LN stack every LayerNorm downstream rescales what these
  sites feed, so a uniform factor on all of them cancels in the loss.
- "attention" (the notes' code): the attention weights of every block, after the softmax and before they mix
  the values. Nothing renormalises them: weights that sum to 1 − p on average in training sum to 1 at
  inference unless the kept ones were scaled by 1/(1−p).

The dropout is added to a built model (hooks, and a per-instance attention kernel), so the shared model code,
and every other claim's run records, stay as they are.
"""

from __future__ import annotations

import types
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

SITES = ("residual", "attention")


def _dropped_scores(attn, q, k, v, mask, *, p: float):
    """Attention with dropout on its weights: softmax(q kᵀ · scale) (B, h, T, S), inverted dropout p in train
    mode, then @ v -> (B, h, T, dk). Multi-head only (one K/V head per query head)."""
    logits = (q @ k.transpose(-2, -1)) * attn.scale  # (B, h, T, S)
    if mask is not None:  # (B|1, 1, T, S), True where a key is visible
        logits = logits.masked_fill(~mask, float("-inf"))
    return F.dropout(logits.softmax(dim=-1), p, attn.training) @ v


def add_site_dropout(model: nn.Module, p: float, site: str) -> list:
    """Inverted dropout with probability p at `site` (module docstring). Returns the hook handles (the
    attention kernel is replaced on each block's attention, not hooked)."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout must lie in [0, 1), got {p!r}")
    if site not in SITES:
        raise ValueError(f"site must be one of {SITES}, got {site!r}")
    stack = model.stack
    if site == "attention":
        for b in stack.blocks:
            if b.attn.kv != b.attn.h:
                raise ValueError("attention-weight dropout here is for multi-head attention (kv = h)")
            b.attn.backend = "explicit"  # the kernel that materialises the weights
            b.attn._explicit = types.MethodType(partial(_dropped_scores, p=p), b.attn)
        return []

    def drop_input(module, args, kwargs):
        return (F.dropout(args[0], p, module.training), *args[1:]), kwargs

    def drop_output(module, args, out):
        return F.dropout(out, p, module.training)

    first = stack.blocks[0].register_forward_pre_hook(drop_input, with_kwargs=True)
    rest = [m.register_forward_hook(drop_output) for b in stack.blocks for m in (b.attn, b.ffn)]
    return [first, *rest]


class Sites:
    """The value at each dropout site as the network receives it, after the dropout (hooks registered after
    `add_site_dropout`'s): `out[i]` for site i; with `scale` set, that value is multiplied by it (the
    inference of a model trained without the 1/(1−p) scaling). Residual: the first block's input, then each
    block's attention and FFN output. Attention: each block's mixed values (the input of its output
    projection, linear in the weights, so scaling it is scaling the weights)."""

    def __init__(self, model: nn.Module, site: str):
        blocks = model.stack.blocks
        if site == "attention":
            points = [(b.attn.wo, "in") for b in blocks]
        else:
            points = [(blocks[0], "in"), *((m, "out") for b in blocks for m in (b.attn, b.ffn))]
        self.out: list[torch.Tensor | None] = [None] * len(points)
        self.scale: float | None = None
        self.handles = [
            m.register_forward_pre_hook(partial(self._pre, i), with_kwargs=True)
            if kind == "in"
            else m.register_forward_hook(partial(self._post, i))
            for i, (m, kind) in enumerate(points)
        ]

    def _seen(self, i: int, x: torch.Tensor) -> torch.Tensor:
        x = x if self.scale is None else x * self.scale
        self.out[i] = x.float()
        return x

    def _pre(self, i, module, args, kwargs):
        return (self._seen(i, args[0]), *args[1:]), kwargs

    def _post(self, i, module, args, out):
        return self._seen(i, out)

    def __len__(self) -> int:
        return len(self.out)

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
