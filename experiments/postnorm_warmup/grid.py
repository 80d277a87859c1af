"""postnorm_warmup's runs: the fixed-rate (depth, lr) cells, the learning-rate sweep per arm and width, C at
depth (Post-LN with warmup swept over a longer run, Pre-LN at C-fixed's rate), the init probes and the null
pair, each built from the profile and validated before any run."""

from __future__ import annotations

from dataclasses import replace

from tfclaims.evidence.tuning import Sweep
from tfclaims.grids.sweep import profile_sweep, sweep_grid
from tfclaims.nn.config import ConfigError, ModelConfig, TrainConfig

PLACEMENTS = ("post", "pre", "deepnorm")
NULL_OFFSET = 1000  # the null pair: the Pre-LN control rerun at seeds s + 1000
# The trained arms, (placement, warmed up): Post-LN with and without warmup (A), Pre-LN (B, C), DeepNorm (D)
ARMS = (("post", False), ("post", True), ("pre", False), ("deepnorm", False))
SWEPT = {"post": ARMS[0], "post-warmup": ARMS[1], "pre": ARMS[2]}  # the arms of the learning-rate sweep


def model_config(cfg: dict, placement: str, depth: int, init: str, vocab: int = 96) -> ModelConfig:
    """The stack of a run config (d_model, n_heads, seq_len, emb_scale) at one placement, depth and init."""
    return ModelConfig(
        vocab_size=vocab,
        d_model=cfg["d_model"],
        n_layers=depth,
        n_heads=cfg["n_heads"],
        max_seq_len=cfg["seq_len"],
        placement=placement,
        init=init,
        emb_scale=cfg["emb_scale"],
    )


def train_config(cfg: dict) -> TrainConfig:
    """AdamW with the run's betas and weight decay, linear warm-up over cfg['warmup'] steps then cosine
    decay."""
    return TrainConfig(
        steps=cfg["steps"],
        batch_size=cfg["batch"],
        seq_len=cfg["seq_len"],
        lr=cfg["lr"],
        warmup=cfg["warmup"],
        betas=tuple(cfg["betas"]),
        weight_decay=cfg["weight_decay"],
        eval_every=cfg["eval_every"],
        eval_batches=cfg["eval_batches"],
        seed=cfg["seed"],
    )


def _shared(p):
    return {k: p[k] for k in ("d_model", "n_heads", "seq_len", "emb_scale")}


def _train_fields(p):
    keys = "batch steps eval_every eval_batches betas weight_decay init tie grad_every".split()
    return {**_shared(p), **{k: p[k] for k in keys}}


def train_cells(p) -> list[tuple[int, float]]:
    """The (depth, peak lr) cells of the training grid, in order; validated (a cell is [depth, lr])."""
    cells = []
    for c in p["cells"]:
        ok = isinstance(c, (list, tuple)) and len(c) == 2 and int(c[0]) == c[0] and c[0] >= 1 and c[1] > 0
        if not ok:
            raise ConfigError(f"cells: each cell is [depth, peak lr] with depth ≥ 1 and lr > 0, got {c!r}")
        cells.append((int(c[0]), float(c[1])))
    if len(set(cells)) != len(cells) or not cells:
        raise ConfigError(f"cells: give distinct [depth, lr] cells, got {p['cells']!r}")
    return sorted(cells)


def grid_probe(p):
    for d in sorted({d for d, _ in train_cells(p)} | set(p["probe_depths"])):
        model_config(p, "post", d, p["init"])  # validates sizes before anything runs
    keys = ("init_seeds", "probe_batch", "eps")
    return [
        {"placement": pl, "depth": d, "init": i, **{k: p[k] for k in keys}, **_shared(p)}
        for i in p["probe_inits"]
        for d in p["probe_depths"]
        for pl in PLACEMENTS
    ]


def _run(p, placement, warm, depth, lr, seed, *, d_model=None):
    return {
        "placement": placement,
        "depth": depth,
        "lr": lr,
        "warmup": p["warmup"] if warm else 0,
        **_train_fields(p),
        **({} if d_model is None else {"d_model": d_model}),
        "seed": seed,
    }


def grid_train(p):
    """The fixed-rate cells: every arm at depths up to the sweep's, C's two arms deeper (Liu et al.'s)."""
    deep = {("pre", False), ("post", True)}
    train = [
        _run(p, pl, warm, d, lr, s)
        for d, lr in train_cells(p)
        for pl, warm in ARMS
        if d <= p["sweep_depth"] or (pl, warm) in deep
        for s in p["seeds"]
    ]
    train_config(train[0])  # validates the training settings too
    return train


def grid_sweep(p, done):
    """Per swept arm and scale (d_model), the learning-rate sweep on selection seeds, then the chosen rate on
    the fresh seeds (`grids.sweep`); its runs are the training part's, so a chosen rate that is a
    fixed-rate cell reuses that cell's runs."""
    if p["scales"][0] != p["d_model"] or len(set(p["scales"])) != len(p["scales"]):
        raise ConfigError(
            f"scales: distinct widths starting with d_model = {p['d_model']}, got {p['scales']}"
        )
    if p["sweep_depth"] not in {d for d, _ in train_cells(p)}:
        raise ConfigError(f"sweep_depth = {p['sweep_depth']} must be one of the cells' depths")
    sweep = profile_sweep(p)

    def make(arm, scale, lr, seed):
        pl, warm = SWEPT[arm["arm"]]
        return {"part": "train", **_run(p, pl, warm, p["sweep_depth"], lr, seed, d_model=scale["d_model"])}

    arms = {k: {"arm": k} for k in SWEPT}
    return sweep_grid(sweep, arms, [{"d_model": d} for d in p["scales"]], make, done)


def deep_sweep(p) -> Sweep:
    """C's sweep: Post-LN with warmup at the deep cell over `deep_rates`, on the same seeds as the main
    sweep."""
    return replace(profile_sweep(p), rates=tuple(p["deep_rates"]))


def deep_warmup(p) -> int:
    """C's warmup at depth: the same share of its longer run as the main design's."""
    return round(p["warmup"] * p["deep_steps"] / p["steps"])


def grid_deep(p, done):
    """C at depth, tuned and longer (`deep_steps`, warmup the same share of them): Post-LN with warmup swept
    on the selection seeds, its choice on the fresh seeds; Pre-LN at C's fixed rate on the fresh seeds, the
    positive control that the depth trains at all. Only the arm said to fail is tuned, so tuning can only
    help it: a failure at its best rate is a failure, a success refutes "fails" whatever Pre-LN's rate."""
    if p["deep_depth"] not in {d for d, _ in train_cells(p)} or p["deep_steps"] < p["steps"]:
        raise ConfigError(
            f"deep_depth = {p['deep_depth']} must be a cell's depth and deep_steps = {p['deep_steps']} at "
            f"least steps = {p['steps']}"
        )
    longer = {"steps": p["deep_steps"], "warmup": deep_warmup(p)}

    def make(arm, scale, lr, seed):
        pl, warm = arm["arm"]
        run = _run(p, pl, warm, p["deep_depth"], lr, seed)
        return {"part": "train", **run, **longer, "warmup": longer["warmup"] if warm else 0}

    control = [make({"arm": ("pre", False)}, {}, p["deep_control_lr"], s) for s in p["seeds"]]
    return sweep_grid(deep_sweep(p), {"post-warmup": {"arm": ("post", True)}}, [{}], make, done) + control


def grid_null(p):
    """The null pair: the Pre-LN control (no warmup) of one cell rerun at seeds s + NULL_OFFSET."""
    if (p["null_depth"], p["null_lr"]) not in train_cells(p):
        raise ConfigError(
            f"null_depth={p['null_depth']}, null_lr={p['null_lr']}: the null pair's cell must be one of the "
            "training grid's (depth, lr) cells (set them with --set null_depth=... --set null_lr=...)"
        )
    c = {"placement": "pre", "depth": p["null_depth"], "lr": p["null_lr"], "warmup": 0, **_train_fields(p)}
    return [{**c, "seed": s + NULL_OFFSET} for s in p["seeds"]]
