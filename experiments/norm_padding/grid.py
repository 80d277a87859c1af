"""norm_padding's runs: the settings (causal LM or masked LM, on padded lines or fixed windows), the declared
arms of each (placement, batch, norm), the fixed-rate runs, the null pairs, the learning-rate sweep per arm
and width, and the BatchNorm-statistics MLP, each built from the profile and validated before any run."""

from __future__ import annotations

from tfclaims.grids.sweep import profile_sweep, sweep_grid
from tfclaims.nn.config import ConfigError, ModelConfig

NORMS = ("layer", "batch", "batch_masked", "batch_causal", "power")
ATTN = ("causal", "bidirectional")
LM_KEYS = ("d_model", "n_layers", "n_heads", "steps", "lr", "warmup", "min_len", "max_len", "seq_len",
           "n_val_lines", "eval_batch", "stat_every", "threads", "mask_rate")  # fmt: skip
INV_KEYS = ("inv_T0", "inv_K", "inv_neighbours", "inv_draws", "pad_fracs")
NULL_OFFSET = 1000  # the null pairs: the LN arm rerun at seeds s + NULL_OFFSET
PLACEMENTS = ("pre", "post")
# setting -> (data, attention): the causal LM or the masked LM (BERT-style), on padded lines or fixed windows
SETTINGS = {
    "lines": ("lines", "causal"),
    "windows": ("windows", "causal"),
    "enc-lines": ("lines", "bidirectional"),
    "enc-windows": ("windows", "bidirectional"),
}
PART = {"lines": "lines", "windows": "windows", "enc-lines": "encoder", "enc-windows": "encoder"}


def arms(p: dict, key: str, norms) -> list[tuple[str, int, str]]:
    """A profile's declared arms, [placement, batch, norm] each, validated."""
    out = []
    for a in p[key]:
        if not (
            isinstance(a, (list, tuple))
            and len(a) == 3
            and a[0] in PLACEMENTS
            and isinstance(a[1], int)
            and not isinstance(a[1], bool)
            and a[1] >= 1
        ):
            raise ConfigError(f"{key}: each arm is [placement (pre or post), batch ≥ 1, norm], got {a!r}")
        if a[2] not in norms:
            raise ConfigError(f"{key}: unknown norm {a[2]!r}; choose from {norms}")
        out.append((a[0], a[1], a[2]))
    if len(set(out)) != len(out):
        raise ConfigError(f"{key}: an arm is declared twice")
    return out


def enc_arms(p: dict, norms) -> list[tuple[str, str, int, str]]:
    """The masked LM's declared arms, [setting ('enc-lines' or 'enc-windows'), placement, batch, norm]."""
    out = []
    for a in p["enc_arms"]:
        if not (isinstance(a, (list, tuple)) and len(a) == 4 and a[0] in ("enc-lines", "enc-windows")):
            raise ConfigError(
                f"enc_arms: each arm is [enc-lines or enc-windows, placement, batch, norm], got {a!r}"
            )
        out += [(a[0], *x) for x in arms({"enc_arms": [a[1:]]}, "enc_arms", norms)]
    if len(set(out)) != len(out):
        raise ConfigError("enc_arms: an arm is declared twice")
    return out


def norms_at(p: dict, setting: str, norms) -> set[tuple[str, str, int]]:
    """(norm, placement, batch) of every fixed-rate arm declared in a setting."""
    if setting not in SETTINGS:
        raise ConfigError(f"unknown setting {setting!r}; choose from {list(SETTINGS)}")
    if setting.startswith("enc-"):
        return {(n, pl, b) for st, pl, b, n in enc_arms(p, norms) if st == setting}
    return {(n, pl, b) for pl, b, n in arms(p, "line_arms" if setting == "lines" else "window_arms", norms)}


def swept_arms(p: dict, norms) -> dict[str, tuple[str, str, int, str]]:
    """The learning-rate sweep's arms by name, each a declared fixed-rate arm [setting, placement, batch,
    norm] (so that a chosen rate equal to the profile's reuses its runs)."""
    out = {}
    for a in p["sweep_arms"]:
        ok = isinstance(a, (list, tuple)) and len(a) == 4 and a[0] in SETTINGS
        if not ok or (a[3], a[1], a[2]) not in norms_at(p, a[0], norms):
            raise ConfigError(f"sweep_arms: {a!r} is not a declared [setting, placement, batch, norm] arm")
        out[swept_name(*a)] = (a[0], a[1], a[2], a[3])
    bad = set(p["scale_settings"]) - {a[0] for a in out.values()}
    if bad:
        raise ConfigError(f"scale_settings: {sorted(bad)} have no swept arm")
    return out


def swept_name(setting: str, pl: str, b: int, norm: str) -> str:
    return f"{setting}-{pl}-B{b}-{norm}"


def final_and_init(m: dict) -> tuple[float | None, float]:
    """A run's (eval-mode validation loss, None if it diverged; loss at init): what the sweep chooses by."""
    return (m.get("eval_mixed") if m.get("diverged_at") is None else None), m["init_loss"]


def lm_config(cfg: dict, vocab: int) -> ModelConfig:
    """The causal LM's `ModelConfig` as `claims.norm_padding.build_lm` makes it for a norm of `ModelConfig`'s
    (LayerNorm, BatchNorm): what validates a profile's sizes without building the model."""
    return ModelConfig(
        vocab_size=vocab,
        d_model=cfg["d_model"],
        n_layers=cfg["n_layers"],
        n_heads=cfg["n_heads"],
        placement=cfg["placement"],
        norm=cfg["norm"],
        causal=True,
        max_seq_len=max(cfg["max_len"] - 1, cfg["seq_len"]),
    )


def _lm_common(p):
    return {**{k: p[k] for k in LM_KEYS}, **{k: p[k] for k in INV_KEYS}}


def _arms(p, key) -> list[tuple[str, int, str]]:
    """A profile's declared arms, [placement, batch, norm] each, validated."""
    return arms(p, key, NORMS)


def _run(p, setting: str, pl: str, b: int, norm: str, seed: int, **over) -> dict:
    """One run's config: a setting ('lines', 'windows', 'enc-lines', 'enc-windows': causal LM or masked LM, on
    padded lines or fixed windows), placement, batch, norm and seed; `over` replaces profile values (lr,
    d_model)."""
    data, attn = SETTINGS[setting]
    common = _lm_common(p) if data == "lines" else {k: p[k] for k in LM_KEYS}
    return {
        "data": data,
        "attn": attn,
        "norm": norm,
        "batch": b,
        "placement": pl,
        **common,
        **over,
        "seed": seed,
    }


def grid_lines(p):
    arms = _arms(p, "line_arms")
    for pl in {a[0] for a in arms}:
        lm_config({**_lm_common(p), "norm": "layer", "placement": pl}, 96)  # validates sizes
    fr = p["pad_fracs"]
    if not 0 < min(fr) or max(fr) >= 1 or p["inv_T0"] / (1 - max(fr)) > p["max_len"] - 1:
        raise ConfigError(
            "pad_fracs must lie in (0, 1) and inv_T0 / (1 - max(pad_fracs)) fit in max_len - 1 positions"
        )
    return [_run(p, "lines", pl, b, n, s) for pl, b, n in arms for s in p["seeds"]]


def grid_windows(p):
    """The same LM on fixed-length contiguous windows: no padding at all."""
    return [_run(p, "windows", pl, b, n, s) for pl, b, n in _arms(p, "window_arms") for s in p["seeds"]]


def grid_encoder(p):
    """The masked LM (bidirectional: train-mode BatchNorm leaks nothing) on lines or windows."""
    return [_run(p, st, pl, b, n, s) for st, pl, b, n in enc_arms(p, NORMS) for s in p["seeds"]]


def grid_null(p):
    """The null pairs: each declared (setting, placement, batch) cell's LN arm rerun at s + NULL_OFFSET."""
    out = []
    for st, pl, b in p["null_cells"]:
        if ("layer", pl, b) not in norms_at(p, st, NORMS):
            raise ConfigError(f"null_cells: {[st, pl, b]} has no LN arm")
        out += [_run(p, st, pl, b, "layer", s + NULL_OFFSET) for s in p["seeds"]]
    return out


def grid_sweep(p, done):
    """Per swept arm, the learning-rate sweep on selection seeds, then its chosen rate on the fresh seeds
    (`grids.sweep`); the settings in `scale_settings` sweep again at each later width. The runs are their
    setting's part's, so a chosen rate equal to the profile's reuses the fixed-rate runs."""
    sweep, swept = profile_sweep(p), swept_arms(p, NORMS)
    if p["scales"][0] != p["d_model"] or len(set(p["scales"])) != len(p["scales"]):
        raise ConfigError(
            f"scales: distinct widths starting with d_model = {p['d_model']}, got {p['scales']}"
        )

    def make(arm, scale, lr, seed):
        st, pl, b, n = arm["arm"]
        return {"part": PART[st], **_run(p, st, pl, b, n, seed, lr=lr, d_model=scale["d_model"])}

    out = []
    for wide in (False, True):
        arms = {k: {"arm": a} for k, a in swept.items() if (a[0] in p["scale_settings"]) == wide}
        scales = [{"d_model": d} for d in (p["scales"] if wide else p["scales"][:1])]
        out += sweep_grid(sweep, arms, scales, make, done, read=final_and_init)
    return out


def grid_mlp(p):
    keys = ("steps", "lr", "warmup", "stat_every", "threads")
    mlp = {"batch": p["mlp_batch"], "width": p["mlp_width"], "d_in": p["mlp_in"]}
    return [{**mlp, **{k: p[k] for k in keys}, "seed": s} for s in p["seeds"]]
