"""How a trained LM's loss depends on position: per-position loss on fixed evaluation windows, from position 0
or with the windows placed further along, and the parametrisation that gives every kind of position
information the same scale at init (Vaswani et al.'s). Shared by the claims on position encodings
(sinusoidal_relative, length_extrapolation, no_position)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

EVAL_SEED = 4321  # the evaluation windows: the same text for every run and arm


class _Times(nn.Module):
    """A parametrisation: the stored tensor times a constant."""

    def __init__(self, c: float):
        super().__init__()
        self.c = c

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return w * self.c


def match_norms(model) -> None:
    """Vaswani et al.'s parametrisation in every arm (the model must scale token embeddings by √d): token
    rows drawn N(0, 1/d), so that as added (×√d) their entries have unit variance; learned position rows
    stored as θ ~ N(0, 1/(2d)) and used as √d·θ. At init ‖position row‖/‖token row‖ is then 1/√2 in both
    additive arms, the ratio of the sinusoidal table (‖PE(p)‖ = √(d/2)) to such tokens, and both tables move
    alike under Adam (the √d factor on each)."""
    st, d = model.stack, model.cfg.d_model
    if not model.cfg.emb_scale:
        raise ValueError("match_norms needs token embeddings scaled by √d (emb_scale)")
    nn.init.normal_(st.tok.weight, 0.0, d**-0.5)
    if st.pos is not None:
        parametrize.register_parametrization(st.pos, "weight", _Times(math.sqrt(d)))
        nn.init.normal_(st.pos.parametrizations.weight.original, 0.0, (2 * d) ** -0.5)


@torch.no_grad()
def position_losses(model, windows, device, T: int, starts=(0,)) -> dict:
    """Mean next-character loss at each position, averaged over the evaluation windows (B, T_eval) each:
    'at_0' for the windows from position 0 (as far as the model has positions: learned stops at T), and for
    each start s > 0, 'at_s' for the windows' first T characters placed at positions s .. s + T − 1."""
    was = model.training
    model.eval()
    sums: dict[int, torch.Tensor] = {}
    for x, y in windows:
        x, y = x.to(device), y.to(device)
        for s in starts:
            n = min(x.shape[1], model.cfg.max_seq_len) if s == 0 else T
            logits = model(x[:, :n], start=s)  # (B, n, V)
            nll = F.cross_entropy(logits.flatten(0, 1).float(), y[:, :n].flatten(), reduction="none")
            sums[s] = sums.get(s, 0) + nll.view(-1, n).mean(0).double().cpu()  # (n,)
    model.train(was)
    return {f"at_{s}": (v / len(windows)).tolist() for s, v in sums.items()}
