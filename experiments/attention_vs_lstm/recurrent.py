"""An LSTM language model beside the Transformer, at a matched parameter count: token embedding → one LSTM
layer (`torch.nn.LSTM`, sequential over positions) → linear read-out."""

from __future__ import annotations

import torch
from torch import nn


def lstm_params(d_in: int, h: int) -> int:
    """One LSTM layer: four gates, each W (h × d_in), U (h × h) and two biases (PyTorch keeps b_ih and
    b_hh)."""
    return 4 * (h * d_in + h * h + 2 * h)


def matched_hidden(d_in: int, target: int) -> int:
    """The hidden size whose LSTM layer (input d_in) comes closest to `target` parameters."""
    return min(range(1, 4 * d_in + 1), key=lambda h: abs(lstm_params(d_in, h) - target))


class RecurrentLM(nn.Module):
    """Logits (B, T, vocab) of idx (B, T): an LSTM reads the embeddings left to right; position t's output has
    seen tokens 0..t through a path of t − s recurrent steps from token s."""

    def __init__(self, vocab: int, d: int, hidden: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.lstm = nn.LSTM(d, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.tok(idx))
        return self.head(out)
