"""Run recipe of `label_smoothing` on the subword LM (`train.small_lm`'s subword profiles): train at one
smoothing ε, probe accuracy and calibration on held-out text during training, and score the final and the
early-stopped model before and after temperature scaling (fitted on a calibration split, `measure.calibration`).
"""

from __future__ import annotations

import copy
import math

import torch

from ..data.bpe import load_bpe_corpus
from ..data.corpus import eval_windows, random_windows
from ..measure.calibration import fit_temperature, reliability, scores, top1
from ..train.small_lm import train_small

ECE_BINS = 15  # equal-width confidence bins of the expected calibration error


@torch.no_grad()
def _logits(model, batches, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits (N, V) and targets (N,) of fixed (x, y) batches, on the CPU."""
    lg = [model(x.to(device)).float().cpu() for x, _ in batches]
    return torch.cat(lg).flatten(0, 1), torch.cat([y for _, y in batches]).flatten()


def _calibrated(model, sets: dict, device) -> dict:
    """Scores of a trained model: the temperature T* fitted on the calibration split, then on the test split
    at T = 1 and at T*, with their reliability diagrams, and the training subset at T = 1."""
    was = model.training
    model.eval()
    lg_cal, y_cal = _logits(model, sets["cal"], device)
    T = fit_temperature(lg_cal, y_cal)
    lg, y = _logits(model, sets["test"], device)
    out = {"temperature": T, "cal_nll": scores(lg_cal, y_cal)["nll"]}
    for tag, t in (("", 1.0), ("_ts", T)):
        out.update({f"test_{k}{tag}": v for k, v in scores(lg, y, t, ECE_BINS).items()})
        out[f"reliability{tag}"] = reliability(*top1(lg / t, y), ECE_BINS)
    lg, y = _logits(model, sets["train"], device)
    out.update({f"train_{k}": v for k, v in scores(lg, y, 1.0, ECE_BINS).items()})
    model.train(was)
    return out


def smoothing_sets(cfg: dict) -> dict:
    """Fixed evaluation batches: the training subset, and the validation works split in two halves, one to
    select (early stopping, the temperature) and one to test."""
    corpus = load_bpe_corpus(cfg["vocab"])
    half = corpus.val.numel() // 2
    n, b, t = cfg["eval_batches"], cfg["batch"], cfg["seq_len"]
    return {
        "train": eval_windows(corpus.train[: cfg["subset_tokens"]], n, b, t, seed=4321),
        "cal": eval_windows(corpus.val[:half], n, b, t, seed=1234),
        "test": eval_windows(corpus.val[half:], n, b, t, seed=1235),
    }


def smoothing_train(cfg: dict, ctx) -> dict:
    """One label_smoothing arm: the subword LM trained with smoothing ε on the first `subset_tokens` tokens
    of the training text for many epochs (over-fitting, over-confident). Every evaluation scores, unsmoothed,
    the three sets; at the end the last model and the early-stopped one (best calibration-split NLL) are
    scored before and after temperature scaling."""
    corpus = load_bpe_corpus(cfg["vocab"])
    data = corpus.train[: cfg["subset_tokens"]]
    sets = smoothing_sets(cfg)
    best = {"nll": math.inf, "state": None, "step": None}

    @torch.no_grad()
    def probe(step, model):
        was = model.training
        model.eval()
        out = {}
        for name, batches in sets.items():
            out.update({f"{name}_{k}": v for k, v in scores(*_logits(model, batches, ctx.device), 1.0, ECE_BINS).items()})  # fmt: skip
        if out["cal_nll"] < best["nll"]:
            best.update(nll=out["cal_nll"], state=copy.deepcopy(model.state_dict()), step=step)
        model.train(was)
        return out

    def sample(gen):
        return random_windows(data, cfg["batch"], cfg["seq_len"], gen)

    res, model = train_small(cfg, ctx, label_smoothing=cfg["eps"], on_eval=probe, sample=sample,
                             val_batches=sets["cal"], desc=f"ε={cfg['eps']} seed {cfg['seed']}")  # fmt: skip
    res["epochs"] = cfg["steps"] * cfg["batch"] * cfg["seq_len"] / data.numel()
    if res.get("diverged_at") is not None:
        return res
    res["final"] = _calibrated(model, sets, ctx.device)
    model.load_state_dict(best["state"])
    res["early"] = {**_calibrated(model, sets, ctx.device), "step": best["step"]}
    return res
