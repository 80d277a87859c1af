"""Calibration of next-token predictions: top-1 confidence against accuracy.

ECE (expected calibration error, Guo et al. 2017): bin predictions by their top-1 probability into
equal-width bins; ECE = sum_b (n_b / n) |accuracy_b - mean confidence_b|. 0 is perfectly calibrated;
confidence above accuracy is over-confidence, below it under-confidence.
"""

from __future__ import annotations

import torch


def top1(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Confidence (top-1 probability) and correctness per prediction, flattened; targets < 0 are dropped."""
    logits, targets = logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)
    keep = targets >= 0
    conf, pred = logits[keep].float().softmax(-1).max(-1)
    return conf, (pred == targets[keep]).float()


def reliability(conf: torch.Tensor, correct: torch.Tensor, n_bins: int = 15) -> dict:
    """Per equal-width bin of confidence: count, mean confidence, accuracy (NaN where empty)."""
    b = (conf * n_bins).long().clamp_(0, n_bins - 1)
    count = torch.bincount(b, minlength=n_bins).double()
    zeros = torch.zeros(n_bins, dtype=torch.float64, device=conf.device)
    s_conf = zeros.clone().index_add_(0, b, conf.double())
    s_acc = zeros.index_add_(0, b, correct.double())
    nan = torch.full_like(count, float("nan"))
    return {
        "count": count.tolist(),
        "confidence": torch.where(count > 0, s_conf / count.clamp_min(1), nan).tolist(),
        "accuracy": torch.where(count > 0, s_acc / count.clamp_min(1), nan).tolist(),
    }


def ece(conf: torch.Tensor, correct: torch.Tensor, n_bins: int = 15) -> float:
    r = reliability(conf, correct, n_bins)
    n = sum(r["count"])
    return sum(c / n * abs(a - f) for c, a, f in zip(r["count"], r["accuracy"], r["confidence"]) if c > 0)


# ------------------------------------------------------------------ temperature scaling (Guo et al. 2017)
T_BOUNDS = (0.05, 20.0)  # the searched temperatures; a fit at a bound is reported as such


def nll_at(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> float:
    """Mean negative log-likelihood (nats) of `targets` under softmax(logits / T); logits (N, V), targets
    (N,)."""
    return float(torch.nn.functional.cross_entropy(logits.float() / temperature, targets))


def fit_temperature(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """The one scalar T > 0 minimising the NLL of softmax(logits / T) (bounded search on log T: the NLL is
    convex in 1/T, so the minimum is unique). Fit on held-out data, apply to other held-out data."""
    import math

    from scipy.optimize import minimize_scalar

    logits, targets = logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1)
    keep = targets >= 0
    logits, targets = logits[keep], targets[keep]
    lo, hi = (math.log(b) for b in T_BOUNDS)
    res = minimize_scalar(
        lambda lt: nll_at(logits, targets, math.exp(lt)),
        bounds=(lo, hi),
        method="bounded",
        options={"xatol": 1e-4},
    )
    return float(math.exp(res.x))


def scaled_nll(logits: torch.Tensor, targets: torch.Tensor, rtol: float = 0.01) -> tuple[float, float]:
    """(T*, the NLL at T*) of logits (N, V) to a relative tolerance `rtol` on T: what early stopping on the
    temperature-scaled loss needs at every evaluation. At the minimum the NLL is flat in T, so a 1% error in T
    moves it by about 1e-5 nats, at a third of `fit_temperature`'s passes over the logits."""
    import math

    from scipy.optimize import minimize_scalar

    lo, hi = (math.log(b) for b in T_BOUNDS)
    res = minimize_scalar(
        lambda lt: nll_at(logits, targets, math.exp(lt)),
        bounds=(lo, hi),
        method="bounded",
        options={"xatol": rtol},
    )
    return float(math.exp(res.x)), float(res.fun)


def scores(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0, n_bins: int = 15) -> dict:
    """NLL, top-1 accuracy, ECE and mean confidence of logits (..., V) at temperature T; targets < 0 dropped.
    Accuracy does not depend on T (the argmax is unchanged); NLL, ECE and confidence do."""
    logits, targets = logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1)
    keep = targets >= 0
    logits, targets = logits[keep] / temperature, targets[keep]
    conf, correct = top1(logits, targets)
    return {
        "nll": nll_at(logits, targets),
        "acc": float(correct.mean()),
        "ece": ece(conf, correct, n_bins),
        "conf": float(conf.mean()),
    }
