"""Dropout added to a built model, where GPT-2 and nanoGPT place it: on the token embeddings and on each
sublayer's output before it joins the residual stream.

It is added with forward hooks rather than built into `Block`, so that a model without it is the very module
every other claim trains (its code, and so its run records' keys, unchanged). The hooks read the module's
`training` flag: `model.eval()` turns dropout off.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn


def add_dropout(model: nn.Module, p: float) -> list:
    """Dropout with probability p on the token embedding's output and on every block's attention and FFN
    output (before the residual add). Returns the hook handles; p = 0 adds none."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout must lie in [0, 1), got {p!r}")
    if p == 0.0:
        return []

    def drop(module, args, out):
        return F.dropout(out, p, module.training)

    stack = model.stack
    targets = [stack.tok, *(m for b in stack.blocks for m in (b.attn, b.ffn))]
    return [m.register_forward_hook(drop) for m in targets]
