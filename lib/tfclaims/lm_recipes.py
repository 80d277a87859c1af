"""Run recipes of the claims that train two arms of the small character LM against each other (and the
probes and counts that go with them): `weight_tying`, `label_smoothing` (`dk_scaling` has `dk_recipes`).

Every recipe is `recipe(cfg, ctx) -> metrics`, with `cfg` a run config (the small-LM recipe's fields, the
claim's switches, a seed) and `ctx` the run context. Training goes through `small_lm.train_small`, so the
arms of one claim, and its null pair, are trained alike.
"""

from __future__ import annotations

from .calibration import calibration_probe
from .config import PRESETS
from .counting import model_params
from .data import eval_windows, load_corpus, random_windows
from .models import LM, n_params
from .small_lm import model_config, train_small

ECE_BINS = 15  # equal-width confidence bins of the expected calibration error


# ------------------------------------------------------------------ weight_tying
def tying_counts(cfg: dict, ctx) -> dict:
    """Parameters tied vs untied: closed form and instantiated for the character LM, closed form for presets."""
    corpus = load_corpus()
    rows = []
    for tie in (True, False):
        mc = model_config(cfg, corpus.vocab_size, tie_weights=tie)
        rows.append(
            {
                "model": f"char LM (this project), d = {mc.d_model}",
                "tie": tie,
                "V": mc.vocab_size,
                "d": mc.d_model,
                "closed_form": model_params(mc),
                "instantiated": n_params(LM(mc)),
            }
        )
    for name in cfg["presets"]:
        for tie in (True, False):
            mc = PRESETS[name].replace(tie_weights=tie)
            rows.append(
                {
                    "model": name,
                    "tie": tie,
                    "V": mc.vocab_size,
                    "d": mc.d_model,
                    "closed_form": model_params(mc),
                    "instantiated": None,
                }
            )
    return {"rows": rows}


def tying_train(cfg: dict, ctx) -> dict:
    """One weight_tying arm: the small LM with the output projection tied to the embedding or not."""
    res, _ = train_small(
        cfg,
        ctx,
        model_kw={"tie_weights": cfg["tie"]},
        desc=f"{'tied' if cfg['tie'] else 'untied'} seed {cfg['seed']}",
    )
    return res


# ------------------------------------------------------------------ label_smoothing
def smoothing_train(cfg: dict, ctx) -> dict:
    """One label_smoothing arm: the small LM trained with smoothing ε on the whole training text ('full') or
    on its first `subset_chars` characters ('subset'); every evaluation measures, unsmoothed, the training
    and validation loss, top-1 accuracy, ECE and mean confidence, and the last the reliability diagram."""
    corpus = load_corpus()
    data = corpus.train if cfg["regime"] == "full" else corpus.train[: cfg["subset_chars"]]
    train_eval = eval_windows(data, cfg["eval_batches"], cfg["batch"], cfg["seq_len"], seed=4321)
    val_eval = eval_windows(corpus.val, cfg["eval_batches"], cfg["batch"], cfg["seq_len"])
    probe, last = calibration_probe({"train": train_eval, "val": val_eval}, ctx.device, ECE_BINS)

    def sample(gen):
        return random_windows(data, cfg["batch"], cfg["seq_len"], gen)

    res, _ = train_small(
        cfg,
        ctx,
        label_smoothing=cfg["eps"],
        on_eval=probe,
        sample=sample,
        val_batches=val_eval,
        desc=f"{cfg['regime']} ε={cfg['eps']} seed {cfg['seed']}",
    )
    res["reliability"] = last["val"]
    res["final"] = res["probes"][-1]
    return res
