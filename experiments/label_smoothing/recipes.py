"""Run recipes of `label_smoothing` on the subword LM (`train.small_lm`'s subword profiles): train at one
smoothing ε, probe accuracy and calibration on held-out text during training, and score the final and the
early-stopped model before and after temperature scaling (fitted on a calibration split,
`measure.calibration`). `smoothing_train` is the fixed design (heavy over-fitting of a tiny subset);
`smoothing_train_tuned` the tuned one (a larger subset with dropout, early-stopped on the temperature-scaled
calibration loss, scored on every token of the test half).
"""

from __future__ import annotations

import copy
import math
from functools import partial

import torch

from tfclaims.data.bpe import load_bpe_corpus
from tfclaims.data.corpus import eval_windows, random_windows
from tfclaims.nn.dropout import add_dropout
from tfclaims.train.small_lm import train_small

from .calibration import ece, fit_temperature, nll_at, reliability, scaled_nll, scores, top1
from .grid import ECE_BINS

SCORE_BATCH = 32  # windows per forward pass when scoring every token of the test half


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
            out.update(
                {
                    f"{name}_{k}": v
                    for k, v in scores(*_logits(model, batches, ctx.device), 1.0, ECE_BINS).items()
                }
            )
        if out["cal_nll"] < best["nll"]:
            best.update(nll=out["cal_nll"], state=copy.deepcopy(model.state_dict()), step=step)
        model.train(was)
        return out

    def sample(gen):
        return random_windows(data, cfg["batch"], cfg["seq_len"], gen)

    res, model = train_small(
        cfg,
        ctx,
        label_smoothing=cfg["eps"],
        on_eval=probe,
        sample=sample,
        val_batches=sets["cal"],
        desc=f"ε={cfg['eps']} seed {cfg['seed']}",
    )
    res["epochs"] = cfg["steps"] * cfg["batch"] * cfg["seq_len"] / data.numel()
    if res.get("diverged_at") is not None:
        return res
    res["final"] = _calibrated(model, sets, ctx.device)
    model.load_state_dict(best["state"])
    res["early"] = {**_calibrated(model, sets, ctx.device), "step": best["step"]}
    return res


def tiled_windows(data: torch.Tensor, seq_len: int, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every token of `data` once as a target: non-overlapping windows x, y (≤ batch, seq_len), in order."""
    n = (data.numel() - 1) // seq_len
    x = data[: n * seq_len].long().view(n, seq_len)
    y = data[1 : n * seq_len + 1].long().view(n, seq_len)
    return [(x[i : i + batch], y[i : i + batch]) for i in range(0, n, batch)]


@torch.no_grad()
def _stream_scores(model, batches, device, temperature: float) -> dict:
    """Scores at T = 1 and at `temperature` (suffix _ts) of many batches without holding their logits:
    per token only the confidence and correctness are kept (N,), for ECE and the reliability diagram."""
    temps = {"": 1.0, "_ts": temperature}
    nll, conf, hit = dict.fromkeys(temps, 0.0), {tag: [] for tag in temps}, []
    for x, y in batches:
        lg, y = model(x.to(device)).float().cpu().flatten(0, 1), y.flatten()  # (B·T, V), (B·T,)
        top = lg.argmax(-1)
        hit.append((top == y).float())  # the argmax does not depend on T
        for tag, t in temps.items():
            logp = torch.log_softmax(lg / t, dim=-1)
            nll[tag] += float(-logp.gather(1, y[:, None]).sum())
            conf[tag].append(logp.gather(1, top[:, None]).squeeze(1).exp())  # the top-1 probability
    ok = torch.cat(hit)
    out = {"test_tokens": ok.numel(), "test_acc": float(ok.mean())}
    for tag in temps:
        c = torch.cat(conf[tag])
        out.update(
            {
                f"test_nll{tag}": nll[tag] / ok.numel(),
                f"test_ece{tag}": ece(c, ok, ECE_BINS),
                f"test_conf{tag}": float(c.mean()),
                f"reliability{tag}": reliability(c, ok, ECE_BINS),
            }
        )
    return out


def _tuned_scores(model, probe: dict, test: list, device) -> dict:
    """A model's scores for the tuned design: the temperature fitted on the calibration probe, the
    calibration loss there at T = 1 and T*, every test token at T = 1 and T*, the training subset at T = 1."""
    was = model.training
    model.eval()
    lg, y = _logits(model, probe["cal"], device)
    T = fit_temperature(lg, y)
    out = {"temperature": T, "cal_nll": scores(lg, y)["nll"], "cal_nll_ts": scores(lg, y, T)["nll"]}
    out.update(_stream_scores(model, test, device, T))
    lg, y = _logits(model, probe["train"], device)
    out.update({f"train_{k}": v for k, v in scores(lg, y, 1.0, ECE_BINS).items()})
    model.train(was)
    return out


def smoothing_train_tuned(cfg: dict, ctx) -> dict:
    """One label_smoothing arm of the tuned design: the subword LM trained with smoothing ε and dropout
    `dropout` on the first `subset_tokens` tokens of the training text for several epochs. Each evaluation
    fits a temperature on the calibration probe (the first half of the validation works) and keeps the model
    whose temperature-scaled calibration loss is lowest (an ε > 0 model's loss at T = 1 carries the
    smoothing's own offset, so T = 1 would stop it unfairly); the last and that early-stopped model are scored
    on every token of the second half (the test) at T = 1 and at T*."""
    corpus = load_bpe_corpus(cfg["vocab"])
    data, half = corpus.train[: cfg["subset_tokens"]], corpus.val.numel() // 2
    n, b, t = cfg["eval_batches"], cfg["batch"], cfg["seq_len"]
    probe = {
        "cal": eval_windows(corpus.val[:half], n, b, t, seed=1234),
        "train": eval_windows(data, n, b, t, seed=4321),
    }
    test = tiled_windows(corpus.val[half:], t, SCORE_BATCH)
    best = {"nll": math.inf, "state": None, "step": None}

    @torch.no_grad()
    def on_eval(step, model):
        was = model.training
        model.eval()
        lg, y = _logits(model, probe["cal"], ctx.device)
        T, nll = scaled_nll(lg, y)
        out = {"cal_nll_ts": nll, "cal_acc": float((lg.argmax(-1) == y).float().mean()), "temperature": T}
        out["train_nll"] = nll_at(*_logits(model, probe["train"], ctx.device))
        if out["cal_nll_ts"] < best["nll"]:
            best.update(nll=out["cal_nll_ts"], state=copy.deepcopy(model.state_dict()), step=step)
        model.train(was)
        return out

    res, model = train_small(
        cfg,
        ctx,
        label_smoothing=cfg["eps"],
        prepare=partial(add_dropout, p=cfg["dropout"]),
        on_eval=on_eval,
        sample=lambda gen: random_windows(data, b, t, gen),
        val_batches=probe["cal"],
        desc=f"ε={cfg['eps']} seed {cfg['seed']}",
    )
    res["epochs"] = cfg["steps"] * b * t / data.numel()
    if res.get("diverged_at") is not None:
        return res
    res["final"] = _tuned_scores(model, probe, test, ctx.device)
    model.load_state_dict(best["state"])
    res["early"] = {**_tuned_scores(model, probe, test, ctx.device), "step": best["step"]}
    return res
