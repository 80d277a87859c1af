"""The small LM's recipes as data: its sizes per profile, and the fields a training run's config carries.

Torch-free: grids are built from these before anything runs (`tfclaims plan` builds them without torch).
`train.small_lm` trains what they describe."""

from __future__ import annotations

from ..data.vocab import DEFAULT_VOCAB
from ..nn.config import ModelConfig, TrainConfig

TRAIN_PROFILES: dict[str, dict] = {
    "quick": {"d_model": 32, "n_layers": 1, "n_heads": 2, "seq_len": 32, "batch": 8, "steps": 12, "lr": 3e-3,
              "eval_every": 6, "eval_batches": 2, "seeds": [0, 1]},
    "default": {"d_model": 64, "n_layers": 2, "n_heads": 4, "seq_len": 64, "batch": 32, "steps": 180,
                "lr": 3e-3, "eval_every": 45, "eval_batches": 4, "seeds": [0, 1, 2]},
    "full": {"d_model": 256, "n_layers": 4, "n_heads": 8, "seq_len": 128, "batch": 64, "steps": 3000,
             "lr": 1e-3, "eval_every": 250, "eval_batches": 16, "seeds": [0, 1, 2, 3, 4]},
}  # fmt: skip
TRAIN_KEYS = (
    "d_model",
    "n_layers",
    "n_heads",
    "seq_len",
    "batch",
    "steps",
    "lr",
    "eval_every",
    "eval_batches",
)

SUBWORD_PROFILES: dict[str, dict] = {
    "quick": {"vocab": DEFAULT_VOCAB, "d_model": 32, "n_layers": 1, "n_heads": 2, "seq_len": 32, "batch": 8,
              "steps": 12, "lr": 3e-3, "eval_every": 6, "eval_batches": 2, "seeds": [0, 1]},
    "default": {"vocab": DEFAULT_VOCAB, "d_model": 128, "n_layers": 4, "n_heads": 4, "seq_len": 128,
                "batch": 32, "steps": 600, "lr": 2e-3, "eval_every": 50, "eval_batches": 8,
                "seeds": list(range(8))},
    "full": {"vocab": DEFAULT_VOCAB, "d_model": 384, "n_layers": 6, "n_heads": 6, "seq_len": 256,
             "batch": 64, "steps": 5000, "lr": 1e-3, "eval_every": 250, "eval_batches": 32,
             "seeds": list(range(8))},
}  # fmt: skip
SUBWORD_KEYS = ("vocab", *TRAIN_KEYS)


# What a claim with its own model scales and learning-rate sweep replaces of the recipe's sizes: a profile
# keeps no parameter that nothing reads (`harness.overrides`), so that `--set` of it is refused.
SCALED = ("d_model", "n_layers", "lr")


def train_profile(name: str, omit: tuple[str, ...] = (), **extra) -> dict:
    """A profile dict: the recipe's sizes for `name` but those in `omit`, plus a claim's own parameters."""
    unknown = set(omit) - set(TRAIN_KEYS)
    if unknown:
        raise KeyError(f"train_profile: omit names no recipe size: {sorted(unknown)}")
    return {**{k: v for k, v in TRAIN_PROFILES[name].items() if k not in omit}, **extra}


def run_fields(p: dict) -> dict:
    """The recipe's fields of a profile, to put in every training run's config (those it omits, the claim
    sets itself)."""
    return {k: p[k] for k in TRAIN_KEYS if k in p}


def subword_profile(name: str, **extra) -> dict:
    """A profile dict: the subword recipe's sizes for `name` plus a claim's own parameters."""
    return {**SUBWORD_PROFILES[name], **extra}


def subword_fields(p: dict) -> dict:
    """The recipe's fields of a profile, to put in every training run's config."""
    return {k: p[k] for k in SUBWORD_KEYS}


def model_config(cfg: dict, vocab_size: int, **overrides) -> ModelConfig:
    base = {
        "vocab_size": vocab_size,
        "d_model": cfg["d_model"],
        "n_layers": cfg["n_layers"],
        "n_heads": cfg["n_heads"],
        "max_seq_len": cfg["seq_len"],
    }
    return ModelConfig(**{**base, **overrides})


def train_config(cfg: dict) -> TrainConfig:
    """AdamW with 10% linear warm-up then cosine decay; seeded by the run's seed (data order)."""
    return TrainConfig(
        steps=cfg["steps"],
        batch_size=cfg["batch"],
        seq_len=cfg["seq_len"],
        lr=cfg["lr"],
        warmup=cfg["steps"] // 10,
        eval_every=cfg["eval_every"],
        eval_batches=cfg["eval_batches"],
        seed=cfg.get("seed", 0),
    )


def model_kw(cfg: dict) -> dict:
    """ModelConfig overrides of a run that compares norm placements: its placement, and an untied output head
    for every placement (tied to the embedding with no final norm, a Post-LN stack starts out predicting the
    current token and trains worse for it: see postnorm_warmup), so the head is not what the arms differ
    in."""
    return {"placement": cfg["placement"], "tie_weights": False}
