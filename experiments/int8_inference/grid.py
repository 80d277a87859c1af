"""int8_inference's runs: small character LMs of the shared recipe trained at each scale and seed, each then
read in float32 and in quantised copies on the same held-out windows (`quality`); and forward passes timed in
float32 and INT8 at the timed sizes, on one CPU thread (`timing`)."""

from __future__ import annotations

from tfclaims.grids.sweep import model_config_scales, scale_label
from tfclaims.nn.config import ConfigError
from tfclaims.train.profiles import run_fields

FP32, INT8, CHANNEL = (
    "fp32",
    "int8",
    "int8-channel",
)  # the quality part's copies beside the fake-quantised ones
AA = "fp32 (again)"  # the timing part's A/A pair: the float32 forward timed under a second name
CONTROL_BITS = 4  # the positive control: weights fake-quantised to 4 bits, one scale per tensor


def weight_variant(bits: int) -> str:
    """The name of a copy whose Linear weights are fake-quantised to `bits` (activations in float32)."""
    return f"w{bits}"


def variants(bits) -> list[str]:
    return [FP32, INT8, CHANNEL, *(weight_variant(b) for b in bits)]


def scales(p: dict) -> list[dict]:
    """The trained scales, [d_model, n_layers] each, with its peak learning rate: the profile's `lr` times the
    scale's factor in `lr_factors` (wider models take smaller rates)."""
    sc, f = model_config_scales(p), p["lr_factors"]
    if len(f) != len(sc) or not all(isinstance(x, float) and x > 0 for x in f):
        raise ConfigError(f"lr_factors: one positive factor per scale, got {f!r}")
    if CONTROL_BITS not in p["bits"] or not all(isinstance(b, int) and 2 <= b <= 8 for b in p["bits"]):
        raise ConfigError(f"bits: widths in 2..8 including the control's {CONTROL_BITS}, got {p['bits']!r}")
    return [{**s, "lr": p["lr"] * x} for s, x in zip(sc, f)]


def grid_quality(p: dict) -> list[dict]:
    """One training run per scale and seed; its recipe probes the trained model's copies."""
    extra = {"probe_batches": p["probe_batches"], "bits": p["bits"]}
    return [
        {"part": "quality", **run_fields(p), **s, **extra, "seed": seed}
        for s in scales(p)
        for seed in p["seeds"]
    ]


def timed_label(d: int, layers: int, batch: int) -> str:
    return f"{scale_label({'d_model': d, 'n_layers': layers})}-b{batch}"


def grid_timing(p: dict) -> list[dict]:
    """One run timing every size [d_model, n_layers, n_heads] at every batch, fp32 against INT8."""
    for s in p["timed"]:
        if not (len(s) == 3 and all(isinstance(x, int) and x > 0 for x in s) and s[0] % s[2] == 0):
            raise ConfigError(
                f"timed: each is [d_model, n_layers, n_heads] with n_heads dividing d_model, got {s!r}"
            )
    keys = ("threads", "repeats", "warmup", "min_sample")
    return [
        {
            "part": "timing",
            "sizes": p["timed"],
            "batches": p["batches_timing"],
            "seq_len": p["seq_timing"],
            **{k: p[k] for k in keys},
            "seed": 0,
        }
    ]
