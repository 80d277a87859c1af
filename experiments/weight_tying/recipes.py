"""Run recipes of `weight_tying` on the subword LM (`train.small_lm`'s subword profiles): the parameter
counts of each arm; training one arm (tied, untied, or tied with the FFN widened to the untied count) in one
pass over the text; and training one arm in the small-data regime (many epochs of a subset, with dropout,
early-stopped on one half of the validation text and scored on the other).

Every recipe is `recipe(cfg, ctx) -> metrics`, with `cfg` a run config (the subword recipe's fields, the
claim's switches, a seed) and `ctx` the run context. Training goes through `train_small`, so the arms and
the null pairs are trained alike.
"""

from __future__ import annotations

from functools import partial

from tfclaims.data.bpe import load_bpe_corpus
from tfclaims.data.corpus import eval_windows, random_windows
from tfclaims.measure.counting import model_params
from tfclaims.nn.config import PRESETS
from tfclaims.nn.dropout import add_dropout
from tfclaims.nn.models import LM, n_params
from tfclaims.train.loop import evaluate
from tfclaims.train.profiles import model_config
from tfclaims.train.small_lm import train_small

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


def tying_counts(cfg: dict, ctx) -> dict:
    """Parameters of each arm (closed form and instantiated) for the subword LM, tied vs untied closed form
    for published configurations, and the tokenizer's vocabulary and compression."""
    corpus = load_bpe_corpus(cfg["vocab"])
    rows = []
    for arm in TYING_ARMS:
        mc = model_config(cfg, corpus.vocab_size, **tying_model_kw({**cfg, "arm": arm}))
        rows.append(
            {
                "model": f"subword LM (this project), d = {mc.d_model}",
                "arm": arm,
                "V": mc.vocab_size,
                "d": mc.d_model,
                "d_ff": mc.ff,
                "closed_form": model_params(mc),
                "instantiated": n_params(LM(mc)),
            }
        )
    for name in cfg["presets"]:
        for arm in ("tied", "untied"):
            mc = PRESETS[name].replace(tie_weights=arm == "tied")
            rows.append(
                {
                    "model": name,
                    "arm": arm,
                    "V": mc.vocab_size,
                    "d": mc.d_model,
                    "d_ff": mc.ff,
                    "closed_form": model_params(mc),
                    "instantiated": None,
                }
            )
    return {"rows": rows, "tokenizer": corpus.describe()}


def tying_train(cfg: dict, ctx) -> dict:
    """One weight_tying arm of the subword LM: tied, untied, or tied with a wider FFN (parameter-matched)."""
    res, _ = train_small(cfg, ctx, model_kw=tying_model_kw(cfg), desc=f"{cfg['arm']} seed {cfg['seed']}")
    return res


def tying_train_small(cfg: dict, ctx) -> dict:
    """One weight_tying arm in the small-data regime of Press & Wolf: the first `subset_tokens` tokens of the
    training text for many epochs, dropout `dropout` on the embeddings and on each sublayer's output. The
    validation works are split in two halves: the first picks the early-stopping step (the lowest loss over
    the evaluations), the second scores it (`early`), so the step is not chosen on the text that scores it."""
    corpus = load_bpe_corpus(cfg["vocab"])
    data = corpus.train[: cfg["subset_tokens"]]
    half = corpus.val.numel() // 2
    n, b, t = cfg["eval_batches"], cfg["batch"], cfg["seq_len"]
    select = eval_windows(corpus.val[:half], n, b, t, seed=1234)
    test = eval_windows(corpus.val[half:], n, b, t, seed=1235)
    res, _ = train_small(
        cfg,
        ctx,
        model_kw=tying_model_kw(cfg),
        prepare=partial(add_dropout, p=cfg["dropout"]),
        on_eval=lambda step, model: {"test_loss": evaluate(model, test, ctx.device)},
        sample=lambda gen: random_windows(data, b, t, gen),
        val_batches=select,
        desc=f"{cfg['arm']} small-data seed {cfg['seed']}",
    )
    res["epochs"] = cfg["steps"] * b * t / data.numel()
    if res.get("diverged_at") is None:
        i = min(range(len(res["val_loss"])), key=res["val_loss"].__getitem__)
        res["early"] = {
            "step": res["eval_steps"][i],
            "select_loss": res["val_loss"][i],
            "test_loss": res["probes"][i]["test_loss"],
        }
    return res
