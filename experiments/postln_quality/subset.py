"""A fixed, small share of the training text, to be read for several epochs (repeated data).

The subset is `n_chars` characters taken as equal blocks spread evenly over the whole training text (every
work contributes, so the subset is drawn from the same mixture as the full text), the same for every run and
seed. Training windows are drawn inside one block, never across the seam between two blocks.
"""

from __future__ import annotations

import torch

from tfclaims.data.files import CorpusError


def fixed_subset(data: torch.Tensor, n_chars: int, block: int) -> torch.Tensor:
    """(n_chars // block, block) tokens: blocks of `block` characters starting at evenly spaced offsets of
    `data` (N,); n_chars must be a positive multiple of block, at most N."""
    n, rem = divmod(n_chars, block)
    if n < 1 or rem or n_chars > data.numel():
        raise CorpusError(
            f"subset: {n_chars} chars must be a positive multiple of block = {block}, at most {data.numel()}"
        )
    # (n,) block i starts at ⌊i (N − block) / (n − 1)⌋: the first at 0, the last ending at the text's end
    starts = torch.arange(n) * (data.numel() - block) // max(n - 1, 1)
    return data[starts[:, None] + torch.arange(block)]


def block_windows(
    blocks: torch.Tensor, batch: int, seq_len: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows inside the blocks (n, block): inputs x and next-token targets y, both (batch, seq_len)
    int64; a window never crosses from one block into the next."""
    n, block = blocks.shape
    if seq_len + 1 > block:
        raise CorpusError(f"subset: block = {block} is shorter than a window of {seq_len + 1} tokens")
    rows = torch.randint(0, n, (batch,), generator=gen)
    starts = torch.randint(0, block - seq_len, (batch,), generator=gen)  # last start: block − seq_len − 1
    w = blocks[rows[:, None], starts[:, None] + torch.arange(seq_len + 1)].long()
    return w[:, :-1], w[:, 1:]


def epochs(steps: int, batch: int, seq_len: int, n_chars: int) -> float:
    """How many times a run reads the subset over: predicted tokens / subset size."""
    return steps * batch * seq_len / n_chars
