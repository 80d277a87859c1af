"""How much absolute position a representation carries, read by a linear probe (Haviv et al. 2022 probe
language models without position encodings this way).

A probe is least squares of a token's position t (0 .. T − 1 in its window) on the token's hidden state and a
constant, fitted on one set of windows and scored on another; its score is the mean absolute error in
positions against that of the constant that fits best on the fit windows (their mean position), read as the
share of chance's error the probe removes: gain = 1 − MAE_probe / MAE_chance (0: chance, 1: exact).
Permutation equivariance (`permutation_error`) asks the same question of a model's outputs, exactly.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def positions_of(states: torch.Tensor) -> torch.Tensor:
    """The position of every token of states (B, T, d), flattened as `states.reshape(-1, d)` is: (B·T,)."""
    B, T, _ = states.shape
    return torch.arange(T, dtype=torch.float64).repeat(B)


def _design(x: torch.Tensor) -> torch.Tensor:
    """(n, d) features with a constant column, in float64 on the CPU: (n, d + 1)."""
    x = x.detach().double().cpu()
    return torch.cat([x, torch.ones(x.shape[0], 1, dtype=torch.float64)], dim=1)


def position_probe(fit: torch.Tensor, score: torch.Tensor) -> dict:
    """Fit the probe on `fit` (B, T, d) hidden states, score it on `score` (B', T, d): the mean absolute
    errors (positions) of the probe and of chance on both, the gain on the scoring windows, and the probe's
    error there at each position."""
    xf, xs = _design(fit.reshape(-1, fit.shape[-1])), _design(score.reshape(-1, score.shape[-1]))
    tf, ts = positions_of(fit), positions_of(score)
    # gelsd: a minimum-norm solution where the features are rank-deficient
    beta = torch.linalg.lstsq(xf, tf.unsqueeze(1), driver="gelsd").solution.squeeze(1)  # (d + 1,)
    mean = tf.mean()
    err = (xs @ beta - ts).abs()  # (B'·T,)
    fit_mae, score_mae = float((xf @ beta - tf).abs().mean()), float(err.mean())
    chance = float((ts - mean).abs().mean())
    return {
        "mae": score_mae,
        "chance_mae": chance,
        "gain": 1.0 - score_mae / chance,
        "fit_mae": fit_mae,
        "fit_chance_mae": float((tf - mean).abs().mean()),
        "mae_by_position": err.reshape(-1, score.shape[1]).mean(0).tolist(),  # (T,): per position t
    }


def fit_gain(probe: dict) -> float:
    """The probe's gain on its own fitting windows (what picks a layer without reading the scoring ones)."""
    return 1.0 - probe["fit_mae"] / probe["fit_chance_mae"]


@torch.no_grad()
def permutation_error(
    f: Callable[[torch.Tensor], torch.Tensor], idx: torch.Tensor, perm: torch.Tensor
) -> float:
    """How far f is from permutation-equivariant on idx (B, T) under perm (a permutation of 0 .. T − 1):
    max |f(idx[:, perm]) − f(idx)[:, perm]| / max |f(idx)|, f mapping (B, T) to (B, T, ...). 0 for an
    equivariant f (up to rounding)."""
    out = f(idx)
    moved = f(idx[:, perm])
    return float((moved - out[:, perm]).abs().max() / out.abs().max())


@torch.no_grad()
def prefix_change(f: Callable[[torch.Tensor], torch.Tensor], idx: torch.Tensor, perm: torch.Tensor) -> float:
    """How far f's output at the last position moves when the tokens before it are permuted by perm (a
    permutation of 0 .. T − 2): max |Δ f(idx)[:, −1]| / max |f(idx)[:, −1]|. 0 where the last output depends
    on the earlier tokens as a set."""
    moved = torch.cat([idx[:, :-1][:, perm], idx[:, -1:]], dim=1)
    a, b = f(idx)[:, -1], f(moved)[:, -1]
    return float((b - a).abs().max() / a.abs().max())
