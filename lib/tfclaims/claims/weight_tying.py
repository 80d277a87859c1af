"""Run recipes of `weight_tying` on the subword LM (`train.small_lm`'s subword profiles): the parameter
counts of each arm, and training one arm (tied, untied, or tied with the FFN widened to the untied count).

Every recipe is `recipe(cfg, ctx) -> metrics`, with `cfg` a run config (the subword recipe's fields, the
claim's switches, a seed) and `ctx` the run context. Training goes through `train_small`, so the arms and
the null pair are trained alike.
"""

from __future__ import annotations

from ..data.bpe import load_bpe_corpus
from ..measure.counting import model_params
from ..nn.config import PRESETS
from ..nn.models import LM, n_params
from ..train.small_lm import model_config, train_small

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
    res, _ = train_small(cfg, ctx, model_kw=tying_model_kw(cfg), desc=f"{cfg['arm']} seed {cfg['seed']}")
    return res
