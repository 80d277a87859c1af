"""masking's runs: padding invariance (through attention alone and through a small model), the two mask
conventions, and the fill value against the dtype, each built from the profile; and the model the padding
part builds (torch-free, shared by the grid and the recipe)."""

from __future__ import annotations

from tfclaims.nn.config import ModelConfig

LEVELS = ("attention", "model")
# encoder: pads after the tokens, padding mask; decoder: the same plus the causal mask; decoder_left: pads
# before the tokens (batched generation), where the causal mask alone does not hide them
KINDS = ("encoder", "decoder", "decoder_left")
DTYPES = ("float32", "bfloat16", "float16")
# the fills: the notes' two (004, 001 <4.4>), the dtype's finite minimum (Hugging Face), −∞ (Vaswani et al.)
FILLS = ("-1e9", "-2^32+1", "finfo.min", "-inf")
NOTES_FILLS = FILLS[:2]
FILL_VALUES = {"-1e9": -1e9, "-2^32+1": -(2.0**32) + 1, "-inf": float("-inf")}  # finfo.min: per dtype


def model_config(p: dict, kind: str) -> ModelConfig:
    """The padding part's model: rotary positions, so that pads placed before the tokens shift no real token's
    relative offsets (a learned absolute table would move every position by the pad count)."""
    return ModelConfig(
        vocab_size=p["vocab"],
        d_model=p["d_model"],
        n_layers=p["n_layers"],
        n_heads=p["n_heads"],
        max_seq_len=max(p["lens"]) + max(p["pads"]),
        pos="rope",
        causal=kind != "encoder",
    )


def _batch(p: dict) -> dict:
    return {k: p[k] for k in ("vocab", "lens", "heads", "head_dim")}


def padding_grid(p: dict) -> list[dict]:
    out = []
    for level in LEVELS:
        model = {k: p[k] for k in ("d_model", "n_layers", "n_heads")} if level == "model" else {}
        for kind in KINDS:
            if level == "model":
                model_config(p, kind)  # validates sizes
            out += [
                {"level": level, "kind": kind, "pads": p["pads"], **_batch(p), **model, "seed": s}
                for s in p["seeds"]
            ]
    return out


def conventions_grid(p: dict) -> list[dict]:
    return [{"kind": kind, **_batch(p), "seed": s} for kind in KINDS[:2] for s in p["seeds"]]


def fill_grid(p: dict) -> list[dict]:
    keys = ("fill_n", "heads", "head_dim", "scales")
    return [{"dtype": dt, **{k: p[k] for k in keys}, "seed": s} for dt in p["dtypes"] for s in p["seeds"]]
