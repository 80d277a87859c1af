"""ALBERT's cross-layer sharing (Lan et al. 2020): one block's weights at every depth of a stack."""

from __future__ import annotations

from torch import nn


def share_blocks(model: nn.Module) -> nn.Module:
    """Make every block of `model.stack` its first block (ALBERT's all-shared setting), in place; returns the
    model. The shared block still runs once per depth: the blocks' parameters shrink L-fold, their compute
    does not. `parameters()` yields the shared block once, so optimisers and counts see it once."""
    first = model.stack.blocks[0]
    model.stack.blocks = nn.ModuleList([first] * len(model.stack.blocks))
    return model
