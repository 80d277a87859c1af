"""`parallel_decoding`'s models and runs as data (torch-free: the grids validate them before anything runs).

Two kinds of run: `exact` (one per position encoding, length and seed: the logits and the gradient of one
teacher-forced pass against step-by-step decoding, in every dtype, against float64) and `timing` (one run:
every length's training step and generation timed in the same interleaved rounds)."""

from __future__ import annotations

from tfclaims.nn.config import ModelConfig

DTYPES = ("float64", "float32", "bfloat16")
STEP_PATHS = ("prefix", "cached")  # step-by-step decoding: growing prefixes without a cache, or one KV cache
TRAIN_PATHS = ("onepass", *STEP_PATHS)  # how a training step's gradient is obtained (timed)
GEN_PATHS = ("forward", "generate")  # one teacher-forced forward of n tokens; greedy generation of n tokens


def model_config(
    d_model: int, n_heads: int, n_layers: int, max_len: int, pos: str = "learned"
) -> ModelConfig:
    return ModelConfig(
        vocab_size=96, d_model=d_model, n_heads=n_heads, n_layers=n_layers, max_seq_len=max_len, pos=pos
    )


def exact_grid(p: dict) -> list[dict]:
    keys = ("d_model", "n_heads", "n_layers")
    for pos in p["positions"]:
        model_config(
            *(p[k] for k in keys), max(p["exact_ns"]) + 1, pos
        )  # validates sizes before anything runs
    return [
        {"pos": pos, "n": n, "seed": s, "threads": p["threads"], **{k: p[k] for k in keys}}
        for pos in p["positions"]
        for n in p["exact_ns"]
        for s in p["seeds"]
    ]


def timing_config(cfg: dict) -> ModelConfig:
    """The timed model: the sizes named `timing_*`, positions up to the longest length plus its target."""
    d, heads, layers = cfg["timing_model"]
    return model_config(d, heads, layers, max(cfg["ns"]) + 1)


def timing_grid(p: dict) -> list[dict]:
    timing_config(p)  # validates sizes before anything runs
    # one run: every length and path is timed in the same rounds (time_interleaved), so a change in background
    # load lands on all of them alike instead of bending the fitted growth
    return [{k: p[k] for k in ("timing_model", "ns", "warmup", "repeats", "threads")} | {"seed": 0}]
