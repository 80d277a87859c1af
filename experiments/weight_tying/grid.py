"""weight_tying's runs: the parameter counts, the fixed-rate arms and their null pair (one pass over the text
at the profile's rate), and the learning-rate sweep of the tied and untied arms in two regimes (one pass over
the text; many epochs of a small subset with dropout) at two scales, with a null pair per regime at the first
scale, each built from the profile and validated before any run."""

from __future__ import annotations

from functools import cache

from tfclaims.grids.sweep import final_and_init, model_scales, null_reruns, profile_sweep, sweep_grid
from tfclaims.measure.counting import model_params
from tfclaims.nn.config import ConfigError
from tfclaims.train.profiles import model_config, subword_fields

COUNT_PRESETS = ("gpt2-small", "gpt2-medium", "gpt2-xl", "bert-base", "llama-7b")
NULL_OFFSET = 1000  # a null pair: the untied arm rerun at seeds s + NULL_OFFSET
SWEPT = ("tied", "untied")
# regime -> the part whose recipe trains it: one pass over the text, or many epochs of a subset with dropout
REGIMES = {"one-pass": "train", "small-data": "small"}
SMALL_KEYS = ("subset_tokens", "dropout")


@cache
def vocab_size(vocab: int) -> int:
    """The trained tokenizer's vocabulary: the tokenizer `data.bpe.load_bpe_corpus` trains, trained here
    without torch (a few seconds, once per process, not per grid call)."""
    from tfclaims.data.files import VAL_WORKS, corpus_files
    from tfclaims.data.vocab import MAX_VOCAB, MIN_VOCAB, _tokenizer, train_tokenizer

    if not isinstance(vocab, int) or not MIN_VOCAB <= vocab <= MAX_VOCAB:
        raise ConfigError(f"BPE vocabulary must be an integer in [{MIN_VOCAB}, {MAX_VOCAB}], got {vocab!r}")
    texts = {p.name: p.read_text(encoding="utf-8", errors="replace") for p in corpus_files()}
    train = [t for name, t in texts.items() if name not in VAL_WORKS]
    return _tokenizer(train_tokenizer(train, vocab)).get_vocab_size()


def matched_d_ff(cfg: dict, vocab_size: int) -> int:
    """The FFN width at which the tied model has the untied model's parameter count (closest integer)."""
    target = model_params(model_config(cfg, vocab_size, tie_weights=False))
    base = model_config(cfg, vocab_size, tie_weights=True)
    lo, hi = base.ff, 64 * base.ff
    while hi - lo > 1:  # parameters grow linearly in d_ff: bisect
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if model_params(base.replace(d_ff=mid)) <= target else (lo, mid)
    return min((lo, hi), key=lambda f: abs(model_params(base.replace(d_ff=f)) - target))


def scales(p: dict) -> list[dict]:
    """The sweep's scales, [d_model, n_layers] each, validated: distinct, none the fixed design's size."""
    out = model_scales(p)
    if any(s["d_model"] % p["n_heads"] for s in out) or [p["d_model"], p["n_layers"]] in p["scales"]:
        raise ConfigError(
            f"scales: each d_model divisible by n_heads = {p['n_heads']}, none the fixed design's "
            f"[{p['d_model']}, {p['n_layers']}], got {p['scales']!r}"
        )
    return out


def grid_counts(p):
    return [
        {
            **subword_fields(p),
            "presets": list(COUNT_PRESETS),
            "d_ff_wide": matched_d_ff(p, vocab_size(p["vocab"])),
        }
    ]


def grid_train(p):
    """The fixed-rate design: each arm at the profile's size and rate on the seeds."""
    wide = matched_d_ff(p, vocab_size(p["vocab"]))
    return [
        {"arm": a, **subword_fields(p), **({"d_ff_wide": wide} if a == "tied-wide" else {}), "seed": s}
        for a in ("tied", "untied", "tied-wide")
        for s in p["seeds"]
    ]


def grid_null(p):
    """The fixed design's null pair: the untied arm (the baseline) rerun at seeds s + NULL_OFFSET."""
    return [{"arm": "untied", **subword_fields(p), "seed": s + NULL_OFFSET} for s in p["seeds"]]


def regime_fields(p: dict, regime: str) -> dict:
    """A regime's own config fields: none in one pass, the subset and the dropout in the small-data one."""
    if regime == "one-pass":
        return {}
    if not (0 < p["subset_tokens"] and 0 <= p["dropout"] < 1):
        raise ConfigError("subset_tokens must be positive and dropout in [0, 1)")
    return {k: p[k] for k in SMALL_KEYS}


def early_and_init(m: dict) -> tuple[float | None, float]:
    """A small-data run's (early-stopped selection-half loss, None if it diverged; that half's loss at init):
    what its sweep chooses by (the last step has over-fitted)."""
    early = None if m.get("diverged_at") is not None else (m.get("early") or {}).get("select_loss")
    return early, m["val_loss"][0]


def tuned_run(p: dict, regime: str, arm: str, scale: dict, lr: float, seed: int) -> dict:
    """One run of the sweep: its part (the regime's recipe), the recipe's fields at the scale and rate."""
    return {
        "part": REGIMES[regime],
        "arm": arm,
        **subword_fields(p),
        **scale,
        "lr": lr,
        **regime_fields(p, regime),
        "seed": seed,
    }


def _sweep(p: dict, regime: str, done) -> list[dict]:
    """One regime's sweep (`grids.sweep`), then its null pair: the untied arm at the first scale, at its
    chosen rate, rerun at the fresh seeds + NULL_OFFSET (null-pair runs of the one-pass regime are the null
    part's)."""
    sweep, sc = profile_sweep(p, fresh="tuned_seeds"), scales(p)

    def make(arm, scale, lr, seed):
        return tuned_run(p, regime, arm["arm"], scale, lr, seed)

    read = final_and_init if regime == "one-pass" else early_and_init
    out = sweep_grid(sweep, {a: {"arm": a} for a in SWEPT}, sc, make, done, read=read)
    null_part = "null" if regime == "one-pass" else REGIMES[regime]
    return out + [
        {**c, "part": null_part} for c in null_reruns(out, sweep, sc[0], {"arm": "untied"}, NULL_OFFSET)
    ]


def grid_sweep(p, done):
    """The one-pass regime's sweep (its runs are the train part's) and its null pair."""
    return _sweep(p, "one-pass", done)


def grid_small(p, done):
    """The small-data regime's sweep (the small part's recipe) and its null pair."""
    return _sweep(p, "small-data", done)
