"""Run recipe of `length_extrapolation`: train the small character LM at T with one kind of position
information, then read its next-character loss per position on windows of max(mults)·T characters, with the
evaluation code shared with `sinusoidal_relative` (`measure.lengths`: `position_losses`, its evaluation
windows and its parametrisation `match_norms`).

Sinusoidal and rotary models hold no trainable position parameters, so they are built with room for the
longest window; an ALiBi model is built without position encoding and its attention is swapped for
`alibi.ALiBiAttention` (beside it). A learned table has T rows: the recipe records that a longer window does
not run, and (on the runs marked `extend`) builds the same model with a table of max(mults)·T rows, rows T..
copied from rows 0..T−1 in turn or drawn at random as at initialisation, reads both, trains each briefly at 2T
and reads them again.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils import parametrize

from tfclaims.data.corpus import eval_windows, load_corpus
from tfclaims.measure.lengths import EVAL_SEED, match_norms, position_losses
from tfclaims.nn.models import LM
from tfclaims.train.loop import train_lm
from tfclaims.train.profiles import train_config
from tfclaims.train.small_lm import train_small

from .alibi import use_alibi
from .grid import library_pos

TABLES = ("copy", "random")  # how a learned table is extended past T
RANDOM_SEED = 7919  # the random rows' generator: the run's seed + RANDOM_SEED (its own, not the data order's)


def stored_table(model) -> torch.Tensor:
    """The learned position table as stored (T, d): the parametrised original where `match_norms` scales
    it."""
    pos = model.stack.pos
    return pos.parametrizations.weight.original if parametrize.is_parametrized(pos) else pos.weight


@torch.no_grad()
def extended_lm(model: LM, n: int, how: str, gen: torch.Generator) -> LM:
    """A copy of the learned-position LM `model` whose table has n rows: rows 0..T−1 its own, rows T..n−1
    copied from row p mod T ('copy') or drawn as `match_norms` draws a new table, N(0, 1/(2d)) ('random');
    every other weight as trained."""
    if how not in TABLES:
        raise ValueError(f"how must be one of {TABLES}, got {how!r}")
    ext = LM(model.cfg.replace(max_seq_len=n)).to(stored_table(model).device)
    match_norms(ext)
    old, new = stored_table(model), stored_table(ext)
    T, d = old.shape
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("stack.pos.")}
    missing, unexpected = ext.load_state_dict(state, strict=False)
    if unexpected or any(not k.startswith("stack.pos.") for k in missing):
        raise RuntimeError(f"extended_lm: weights not carried over: {missing} {unexpected}")
    if how == "copy":
        new.copy_(old[torch.arange(n, device=old.device) % T])
    else:
        new[T:] = torch.randn(n - T, d, generator=gen, dtype=torch.float64).mul((2 * d) ** -0.5).to(new)
        new[:T] = old
    return ext


def longest_window(model, x: torch.Tensor, lengths) -> int:
    """The longest of `lengths` (positions) for which the model runs on the first that many characters of
    x."""
    ok = 0
    with torch.no_grad():
        for n in sorted(lengths):
            try:
                model(x[:, :n])
            except (ValueError, IndexError):
                break
            ok = n
    return ok


def _read(model, windows, device, T: int) -> list[float]:
    return position_losses(model, windows, device, T)["at_0"]


def extend_and_train(model: LM, cfg: dict, windows, ctx, before: list[float]) -> dict:
    """For each way of extending the table: the per-position loss of the extended model as built, the largest
    change of its loss at positions below T (which see rows 0..T−1 only, so none is expected), how far its
    rows beyond T are from row p mod T, and, after `ft_steps` steps at 2T and ft_factor × the run's peak rate
    (the recipe's schedule, the run's data seed), its per-position loss and training record. `before`: the
    trained model's per-position loss on the same windows (T positions)."""
    T, n = cfg["seq_len"], max(cfg["mults"]) * cfg["seq_len"]
    corpus = load_corpus()
    tune = train_config(
        {
            **cfg,
            "seq_len": 2 * T,
            "steps": cfg["ft_steps"],
            "eval_every": cfg["ft_steps"],
            "lr": cfg["lr"] * cfg["ft_factor"],
        }
    )
    out = {}
    for how in TABLES:
        gen = torch.Generator().manual_seed(cfg["seed"] + RANDOM_SEED)
        ext = extended_lm(model, n, how, gen)
        built = _read(ext, windows, ctx.device, T)
        rows = stored_table(ext).detach()
        tile = rows[T:] - rows[torch.arange(T, n, device=rows.device) % T]
        rec = train_lm(
            ext, tune, corpus, ctx.device, progress=ctx.progress, desc=f"extend {how} seed {cfg['seed']}"
        )
        after = _read(ext, windows, ctx.device, T) if rec["diverged_at"] is None else None
        out[how] = {
            "position_loss": {"at_0": built},
            "kept_change": float((torch.tensor(built[:T]) - torch.tensor(before)).abs().max()),
            "tile_error": float(tile.abs().max()),
            "trained": {
                "position_loss": None if after is None else {"at_0": after},
                "final_val": rec["final_val"],
                "diverged_at": rec["diverged_at"],
                "seconds": rec["seconds"],
            },
        }
    return out


def extrapolation_run(cfg: dict, ctx) -> dict:
    """One arm: train at T = cfg['seq_len'] with cfg['pos'] (norms matched as in `sinusoidal_relative`), then
    its per-position validation loss on fixed windows of max(mults)·T characters (a learned table: as far as
    its rows go, with the longest window it can run and, where cfg['extend'], its extensions)."""
    T, pos = cfg["seq_len"], cfg["pos"]
    n = max(cfg["mults"]) * T
    windows = eval_windows(load_corpus().val, cfg["len_eval_batches"], cfg["batch"], n, seed=EVAL_SEED)

    def prepare(model: nn.Module) -> None:
        match_norms(model)
        if pos == "alibi":
            use_alibi(model)

    kw = {"pos": library_pos(pos), "max_seq_len": T if pos == "learned" else n, "emb_scale": True}
    res, model = train_small(cfg, ctx, model_kw=kw, prepare=prepare, desc=f"{pos} seed {cfg['seed']}")
    if res["diverged_at"] is not None:
        return res
    res["position_loss"] = {"at_0": _read(model, windows, ctx.device, T)}
    x = windows[0][0][:1].to(ctx.device)
    res["longest_window"] = longest_window(model, x, [T, T + 1, *(m * T for m in cfg["mults"])])
    if pos == "learned" and cfg["extend"]:
        res["extended"] = extend_and_train(model, cfg, windows, ctx, res["position_loss"]["at_0"])
    return res
