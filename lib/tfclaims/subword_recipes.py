"""Run recipes of the claims that act through the vocabulary, on the subword LM (`subword_lm`):
`weight_tying` and `label_smoothing`.

Every recipe is `recipe(cfg, ctx) -> metrics`, with `cfg` a run config (the subword recipe's fields, the
claim's switches, a seed) and `ctx` the run context. Training goes through `subword_lm.train_subword`, so
the arms of one claim, and its null pair, are trained alike.
"""

from __future__ import annotations

import copy
import math

import torch

from .bpe import load_bpe_corpus
from .calibration import fit_temperature, reliability, scores, top1
from .config import PRESETS
from .counting import model_params
from .data import eval_windows, random_windows
from .models import LM, n_params
from .small_lm import model_config
from .subword_lm import train_subword

ECE_BINS = 15  # equal-width confidence bins of the expected calibration error

# ------------------------------------------------------------------ weight_tying
TYING_ARMS = ("tied", "untied", "tied-wide")  # tied-wide: tied, FFN widened to the untied parameter count


def tying_model_kw(cfg: dict) -> dict:
    """ModelConfig overrides of a weight_tying arm."""
    arm = cfg["arm"]
    if arm not in TYING_ARMS:
        raise ValueError(f"arm must be one of {TYING_ARMS}, got {arm!r}")
    kw = {"tie_weights": arm != "untied"}
    if arm == "tied-wide":
        kw["d_ff"] = cfg["d_ff_wide"]
    return kw


def matched_d_ff(cfg: dict, vocab_size: int) -> int:
    """The FFN width at which the tied model has the untied model's parameter count (closest integer)."""
    target = model_params(model_config(cfg, vocab_size, tie_weights=False))
    base = model_config(cfg, vocab_size, tie_weights=True)
    lo, hi = base.ff, 64 * base.ff
    while hi - lo > 1:  # parameters grow linearly in d_ff: bisect
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if model_params(base.replace(d_ff=mid)) <= target else (lo, mid)
    return min((lo, hi), key=lambda f: abs(model_params(base.replace(d_ff=f)) - target))


def tying_counts(cfg: dict, ctx) -> dict:
    """Parameters of each arm (closed form and instantiated) for the subword LM, tied vs untied closed form for
    published configurations, and the tokenizer's vocabulary and compression."""
    corpus = load_bpe_corpus(cfg["vocab"])
    rows = []
    for arm in TYING_ARMS:
        mc = model_config(cfg, corpus.vocab_size, **tying_model_kw({**cfg, "arm": arm}))
        rows.append({"model": f"subword LM (this project), d = {mc.d_model}", "arm": arm, "V": mc.vocab_size,
                     "d": mc.d_model, "d_ff": mc.ff, "closed_form": model_params(mc),
                     "instantiated": n_params(LM(mc))})  # fmt: skip
    for name in cfg["presets"]:
        for arm in ("tied", "untied"):
            mc = PRESETS[name].replace(tie_weights=arm == "tied")
            rows.append({"model": name, "arm": arm, "V": mc.vocab_size, "d": mc.d_model, "d_ff": mc.ff,
                         "closed_form": model_params(mc), "instantiated": None})  # fmt: skip
    return {"rows": rows, "tokenizer": corpus.describe()}


def tying_train(cfg: dict, ctx) -> dict:
    """One weight_tying arm of the subword LM: tied, untied, or tied with a wider FFN (parameter-matched)."""
    res, _ = train_subword(cfg, ctx, model_kw=tying_model_kw(cfg), desc=f"{cfg['arm']} seed {cfg['seed']}")
    return res


# ------------------------------------------------------------------ label_smoothing
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

    res, model = train_subword(cfg, ctx, label_smoothing=cfg["eps"], on_eval=probe, sample=sample,
                               val_batches=sets["cal"], desc=f"ε={cfg['eps']} seed {cfg['seed']}")  # fmt: skip
    res["epochs"] = cfg["steps"] * cfg["batch"] * cfg["seq_len"] / data.numel()
    if res.get("diverged_at") is not None:
        return res
    res["final"] = _calibrated(model, sets, ctx.device)
    model.load_state_dict(best["state"])
    res["early"] = {**_calibrated(model, sets, ctx.device), "step": best["step"]}
    return res
