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


def calibration_probe(sets: dict, device, n_bins: int = 15):
    """An on_eval probe for `train_lm`: on each named set of fixed (x, y) batches, the unsmoothed loss
    (`<name>_nll`), top-1 accuracy, ECE and mean confidence. Returns (probe, last): `last[name]` holds the
    reliability diagram of the latest evaluation."""
    from .models import lm_loss

    last: dict = {}

    @torch.no_grad()
    def probe(step, model):
        was = model.training
        model.eval()
        out = {}
        for name, batches in sets.items():
            logits = [model(x.to(device)) for x, _ in batches]
            ys = [y.to(device) for _, y in batches]
            conf, correct = top1(torch.cat(logits), torch.cat(ys))
            out[f"{name}_nll"] = sum(float(lm_loss(lg, y)) for lg, y in zip(logits, ys)) / len(ys)
            out[f"{name}_acc"] = float(correct.mean())
            out[f"{name}_ece"] = ece(conf, correct, n_bins)
            out[f"{name}_conf"] = float(conf.mean())
            last[name] = reliability(conf, correct, n_bins)
        model.train(was)
        return out

    return probe, last
