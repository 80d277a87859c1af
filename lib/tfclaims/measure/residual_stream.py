"""What each block of a trained stack does to the residual stream, and what the stack loses without it.

`stream_states` reads the stream between blocks: x_0 (the embeddings) and x_l, the output of block l. From
them, per block: its update relative to the stream it received, ‖x_l − x_(l−1)‖ / ‖x_(l−1)‖ (Frobenius norms
over the tokens of a batch), and the cosine of x_(l−1) and x_l per token. `ablation_losses` evaluates the
model with each block deleted (the stream passes it unchanged) and with each pair of neighbouring blocks
swapped. These are the readings behind "Pre-LN adds width and removes depth" (Liu et al. 2020; Gromov et al.
2024).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn

from ..nn.models import LM


@torch.no_grad()
def stream_states(model: LM, idx: torch.Tensor) -> list[torch.Tensor]:
    """[x_0, x_1, …, x_L]: the stream entering block 1 (the embeddings) and leaving each block, (B, T, d)
    each, in float32; read with hooks during one ordinary forward pass."""
    states: list[torch.Tensor] = []
    blocks = model.stack.blocks
    hooks = [blocks[0].register_forward_pre_hook(lambda m, args: states.append(args[0].float()))]
    hooks += [b.register_forward_hook(lambda m, args, out: states.append(out.float())) for b in blocks]
    was_training = model.training
    try:
        model.eval()(idx)
    finally:
        model.train(was_training)
        for h in hooks:
            h.remove()
    return states


def relative_updates(states: Sequence[torch.Tensor]) -> list[float]:
    """Per block l = 1..L: ‖x_l − x_(l−1)‖ / ‖x_(l−1)‖ over all tokens of the batch."""
    return [float((b - a).norm() / a.norm()) for a, b in zip(states[:-1], states[1:])]


def consecutive_cosines(states: Sequence[torch.Tensor]) -> list[float]:
    """Per block l = 1..L: the mean over tokens of cos(x_(l−1), x_l), the stream before and after it."""
    return [float(torch.cosine_similarity(a, b, dim=-1).mean()) for a, b in zip(states[:-1], states[1:])]


@contextmanager
def layer_order(model: LM, order: Sequence[int]) -> Iterator[LM]:
    """The model with its blocks run in `order` (indices into the trained blocks; a missing index deletes that
    block, so the stream passes it unchanged). The blocks keep their weights; the original order comes back
    on exit."""
    kept = model.stack.blocks
    model.stack.blocks = nn.ModuleList([kept[i] for i in order])
    try:
        yield model
    finally:
        model.stack.blocks = kept


def ablation_losses(model: LM, loss: Callable[[LM], float]) -> dict:
    """loss(model) of the trained order (a held-out loss, say), and its increase with each block deleted (L
    values) and with each neighbouring pair (l, l+1) swapped (L − 1 values)."""
    L = len(model.stack.blocks)
    base = loss(model)
    deleted, swapped = [], []
    for skip in range(L):
        with layer_order(model, [i for i in range(L) if i != skip]):
            deleted.append(loss(model) - base)
    for l in range(L - 1):
        order = list(range(L))
        order[l], order[l + 1] = l + 1, l
        with layer_order(model, order):
            swapped.append(loss(model) - base)
    return {"loss": base, "deleted": deleted, "swapped": swapped}
