"""Calibration: the temperature fit recovers a known temperature and minimises the NLL; the scores agree with
PyTorch's cross-entropy and with an ECE computed here from its definition; padding targets are dropped."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from experiments.label_smoothing.calibration import (
    T_BOUNDS,
    ece,
    fit_temperature,
    nll_at,
    reliability,
    scaled_nll,
    scores,
    top1,
)


def sampled(n: int, c: int, t0: float, seed: int = 0, scale: float = 3.0):
    """Random logits z (n, c) and labels drawn from softmax(z / t0): t0 is the temperature that calibrates
    z."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, c, generator=g) * scale
    y = torch.multinomial((z / t0).softmax(-1), 1, generator=g).squeeze(1)
    return z, y


def numpy_ece(logits: np.ndarray, targets: np.ndarray, temperature: float, n_bins: int = 15) -> float:
    """ECE from its definition, in float64: equal-width bins of the top-1 probability."""
    z = logits.astype(np.float64) / temperature
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    conf, pred = p.max(1), p.argmax(1)
    correct = (pred == targets).astype(np.float64)
    bins = np.minimum((conf * n_bins).astype(int), n_bins - 1)
    total = 0.0
    for b in range(n_bins):
        inside = bins == b
        if inside.any():
            total += inside.mean() * abs(correct[inside].mean() - conf[inside].mean())
    return total


# ------------------------------------------------------------------ temperature
@pytest.mark.parametrize("t0", [0.5, 2.0])
def test_fit_temperature_recovers_a_known_temperature(t0):
    z, y = sampled(20_000, 50, t0)
    t = fit_temperature(z, y)
    assert abs(t - t0) / t0 < 0.1


@pytest.mark.parametrize("t0", [0.5, 2.0])
def test_fitted_temperature_minimises_the_nll(t0):
    z, y = sampled(20_000, 50, t0, seed=1)
    t = fit_temperature(z, y)
    at = nll_at(z, y, t)
    assert at <= nll_at(z, y, t * 1.1) and at <= nll_at(z, y, t / 1.1)
    assert at <= nll_at(z, y, 1.0)  # the fit never does worse than leaving the logits alone
    assert at < nll_at(z, y, 1.0) - 1e-3  # and here, with t0 far from 1, clearly better


@pytest.mark.parametrize("t0", [0.5, 2.0])
def test_scaled_nll_agrees_with_the_full_fit_within_its_tolerance(t0):
    z, y = sampled(20_000, 50, t0, seed=2)
    t_full = fit_temperature(z, y)
    t, at = scaled_nll(z, y)
    assert abs(t - t_full) / t_full < 0.02
    assert at == pytest.approx(nll_at(z, y, t))  # the NLL it returns is the NLL at the T it returns
    assert at - nll_at(z, y, t_full) < 1e-4  # and the flat minimum makes the coarse T cost almost nothing


def test_fit_temperature_is_near_one_for_calibrated_logits():
    z, y = sampled(20_000, 50, 1.0, seed=2)
    assert fit_temperature(z, y) == pytest.approx(1.0, rel=0.1)


def test_fit_temperature_drops_negative_targets_and_accepts_any_leading_shape():
    z, y = sampled(4_000, 20, 2.0, seed=3)
    t = fit_temperature(z, y)
    # padding rows with confident, wrong-looking logits: if they counted, the fit would move
    pad_z = torch.zeros(1_000, 20)
    pad_z[:, 0] = 50.0
    z_pad = torch.cat([z, pad_z])
    y_pad = torch.cat([y, torch.full((1_000,), -1)])
    assert fit_temperature(z_pad, y_pad) == pytest.approx(t, rel=1e-6)
    assert fit_temperature(z.reshape(40, 100, 20), y.reshape(40, 100)) == pytest.approx(t, rel=1e-6)


@pytest.mark.parametrize("margin, bound", [(0.1, 0), (-1.0, 1)])
def test_fit_temperature_stops_at_its_bounds(margin, bound):
    """Always right (the target's logit highest): the NLL falls as T → 0, so the fit ends at the lower bound.
    Always wrong (the target's logit lowest): uniform is best, T → ∞, and the fit ends at the upper bound."""
    y = torch.arange(500) % 5
    z = torch.zeros(500, 5)
    z[torch.arange(500), y] = margin
    t = fit_temperature(z, y)
    assert T_BOUNDS[0] <= t <= T_BOUNDS[1]
    assert t == pytest.approx(T_BOUNDS[bound], rel=1e-3)


def test_nll_at_matches_cross_entropy():
    z, y = sampled(1_000, 30, 1.5, seed=4)
    for t in (0.3, 1.0, 4.0):
        assert nll_at(z, y, t) == pytest.approx(float(F.cross_entropy(z / t, y)), rel=1e-6)
    assert nll_at(z, y) == pytest.approx(float(F.cross_entropy(z, y)), rel=1e-6)


# ------------------------------------------------------------------ scores
@pytest.fixture
def padded():
    """Logits (N, C) and targets with about a fifth of them padding (-1)."""
    z, y = sampled(5_000, 40, 1.7, seed=5)
    g = torch.Generator().manual_seed(6)
    y = torch.where(torch.rand(y.shape, generator=g) < 0.2, torch.full_like(y, -1), y)
    return z, y


@pytest.mark.parametrize("t", [0.5, 1.0, 1.7, 3.0])
def test_scores_agree_with_cross_entropy_and_a_hand_computed_ece(padded, t):
    z, y = padded
    s = scores(z, y, t)
    assert s["nll"] == pytest.approx(float(F.cross_entropy(z / t, y, ignore_index=-1)), rel=1e-5)
    keep = (y >= 0).numpy()
    zn, yn = z.numpy()[keep], y.numpy()[keep]
    assert s["acc"] == pytest.approx(float((zn.argmax(1) == yn).mean()), abs=1e-6)
    assert s["ece"] == pytest.approx(numpy_ece(zn, yn, t), abs=1e-5)
    p = np.exp(zn / t - (zn / t).max(1, keepdims=True))
    assert s["conf"] == pytest.approx(float((p.max(1) / p.sum(1)).mean()), rel=1e-5)


def test_scores_with_other_bin_counts_match_the_definition(padded):
    z, y = padded
    keep = (y >= 0).numpy()
    for n_bins in (5, 10, 30):
        assert scores(z, y, 1.0, n_bins)["ece"] == pytest.approx(
            numpy_ece(z.numpy()[keep], y.numpy()[keep], 1.0, n_bins), abs=1e-5
        )


def test_accuracy_does_not_depend_on_temperature_and_the_rest_does(padded):
    z, y = padded
    by_t = {t: scores(z, y, t) for t in (0.25, 1.0, 4.0)}
    assert len({s["acc"] for s in by_t.values()}) == 1
    # sharper at low T, flatter at high T
    assert by_t[0.25]["conf"] > by_t[1.0]["conf"] > by_t[4.0]["conf"]
    assert len({round(s["nll"], 6) for s in by_t.values()}) == 3
    assert len({round(s["ece"], 6) for s in by_t.values()}) == 3


def test_scores_drop_negative_targets(padded):
    z, y = padded
    keep = y >= 0
    assert 0.1 < 1 - keep.float().mean() < 0.3  # the fixture does pad
    assert scores(z, y, 1.3) == scores(z[keep], y[keep], 1.3)
    # the padded rows' logits do not matter
    z2 = z.clone()
    z2[~keep] = torch.randn(int((~keep).sum()), z.shape[1]) * 100
    assert scores(z2, y, 1.3) == scores(z, y, 1.3)


def test_scores_flatten_leading_dimensions(padded):
    z, y = padded
    assert scores(z.reshape(50, 100, -1), y.reshape(50, 100), 0.8) == pytest.approx(scores(z, y, 0.8))


def test_temperature_scaling_lowers_test_ece_of_an_overconfident_model():
    """Logits that are twice as sharp as the labels warrant: fitting T on one half fixes the other half."""
    z, y = sampled(20_000, 50, 2.0, seed=7)
    t = fit_temperature(z[:10_000], y[:10_000])
    before, after = scores(z[10_000:], y[10_000:]), scores(z[10_000:], y[10_000:], t)
    assert before["conf"] > before["acc"] + 0.05  # over-confident
    assert after["ece"] < before["ece"] / 3 and after["nll"] < before["nll"]
    assert after["acc"] == before["acc"]


# ------------------------------------------------------------------ ECE and reliability
def test_ece_zero_when_confidence_matches_accuracy_in_every_bin():
    conf = torch.tensor([0.75] * 8 + [0.5] * 4)  # exact in float32
    correct = torch.tensor([1.0] * 6 + [0.0] * 2 + [1.0, 0.0, 1.0, 0.0])
    assert ece(conf, correct) == 0.0


def test_ece_by_hand():
    # bin of 0.95 (n = 2, both right): |1 − 0.95|; bin of 0.55 (n = 2, none right): |0 − 0.55|
    conf = torch.tensor([0.95, 0.95, 0.55, 0.55])
    correct = torch.tensor([1.0, 1.0, 0.0, 0.0])
    assert ece(conf, correct) == pytest.approx(0.5 * 0.05 + 0.5 * 0.55)


def test_reliability_bins():
    conf = torch.tensor([0.0, 0.05, 0.5, 0.99, 1.0])
    correct = torch.tensor([0.0, 1.0, 1.0, 0.0, 1.0])
    r = reliability(conf, correct, n_bins=10)
    assert r["count"] == [2, 0, 0, 0, 0, 1, 0, 0, 0, 2]  # a confidence of exactly 1 falls in the last bin
    assert r["confidence"][0] == pytest.approx(0.025) and r["accuracy"][0] == pytest.approx(0.5)
    assert r["confidence"][9] == pytest.approx(0.995) and r["accuracy"][9] == pytest.approx(0.5)
    assert all(np.isnan(r["accuracy"][i]) and np.isnan(r["confidence"][i]) for i in (1, 2, 3, 4, 6, 7, 8))


def test_top1_drops_negative_targets():
    z = torch.tensor([[2.0, 0.0], [0.0, 2.0], [5.0, 0.0]])
    conf, correct = top1(z, torch.tensor([0, 0, -1]))
    assert conf.shape == (2,) and correct.tolist() == [1.0, 0.0]
    assert conf[0] == pytest.approx(float(torch.tensor([2.0, 0.0]).softmax(0)[0]))
