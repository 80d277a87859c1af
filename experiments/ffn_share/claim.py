"""`ffn_share`: the FFN holds about two thirds of a Transformer block's parameters (the notes: 66% or
more)."""

from __future__ import annotations

import numpy as np

from tfclaims.evidence.declare import Declaration, SubClaim, bound, cell, check, equal
from tfclaims.evidence.evaluate import evaluate
from tfclaims.harness.experiment import Experiment, Output, Part, verdict_from
from tfclaims.measure.counting import active_ffn_params, attention_params, embedding_params, ffn_params
from tfclaims.nn.config import ConfigError, ModelConfig

from experiments.ffn_share import analysis as view
from experiments.ffn_share import grid as fs

# Pre-registered, fixed before the run.
TOL = 0.02  # "about 2/3": |FFN / (attention + FFN) − 2/3| ≤ 0.02
AT_LEAST = 0.66  # "66% or more": FFN / (attention + FFN) ≥ 0.66, read literally
CONTEXTS = [512 * 2**k for k in range(9)]  # 512 … 131072 tokens


def _textbook(c: ModelConfig) -> bool:
    """Dense multi-head attention as wide as the model (h·dk = d) and the textbook FFN width: d_ff = 4d, or a
    gated (three-matrix) FFN with d_ff within 3% of 8d/3."""
    if c.n_experts or c.kv_heads != c.n_heads or c.n_heads * c.dk != c.d_model:
        return False
    if c.ffn == "swiglu":
        return abs(c.ff / (8 * c.d_model / 3) - 1) < 0.03
    return c.ff == 4 * c.d_model


def preset_grid(p: dict) -> list[dict]:
    for name in p["presets"]:
        if name not in fs.CATALOGUE:
            raise ConfigError(f"unknown preset {name!r}; known: {', '.join(fs.CATALOGUE)}")
    return [{"preset": name} for name in p["presets"]]


def flop_grid(p: dict) -> list[dict]:
    return [{**c, "contexts": list(p["contexts"])} for c in preset_grid(p)]


def count_preset(cfg: dict, ctx) -> dict:
    """Closed-form counts of one published configuration beside the counts of its instantiated modules."""
    import torch  # the modules are built (on the meta device): torch loads when this part runs
    from torch import nn

    from tfclaims.nn.models import n_params

    from experiments.ffn_share import recipes as fs  # the catalogue's counts beside `build`

    a = fs.CATALOGUE[cfg["preset"]]
    c = a.config
    attn, ffn, block = attention_params(c), ffn_params(c), fs.block_params(a)
    with torch.device("meta"):
        model = fs.build(a)
        blk = model.blocks[0]
        counted = {
            "attention": n_params(blk.attn),
            "ffn": n_params(blk.ffn),
            "block": n_params(blk),
            "model": n_params(model),
        }
        closed = {"attention": attn, "ffn": ffn, "block": block, "model": fs.built_params(a)}
        # the original Transformer's layers, against torch's own
        if a.encoder_decoder and c.bias and c.ffn == "relu":
            counted["torch_encoder_layer"] = n_params(nn.TransformerEncoderLayer(c.d_model, c.n_heads, c.ff))
            counted["torch_decoder_layer"] = n_params(nn.TransformerDecoderLayer(c.d_model, c.n_heads, c.ff))
            closed |= {"torch_encoder_layer": block, "torch_decoder_layer": fs.decoder_block_params(a)}
    return {
        "d_model": c.d_model,
        "n_heads": c.n_heads,
        "n_kv_heads": c.kv_heads,
        "attn_width": c.n_heads * c.dk,
        "d_ff": c.ff,
        "ffn_kind": a.ffn_kind,
        "gated": c.ffn == "swiglu",  # three matrices (SwiGLU, GeGLU, gated-gelu)
        "n_experts": c.n_experts,
        "layout": a.layout,
        "encoder_decoder": a.encoder_decoder,
        "attention": attn,
        "ffn": ffn,
        "ffn_active": active_ffn_params(c),
        "block": block,
        # a decoder block of an encoder–decoder: self- and cross-attention beside the same FFN
        "decoder_attention": 2 * attn if a.encoder_decoder else None,
        "decoder_block": fs.decoder_block_params(a) or None,
        "embeddings": embedding_params(c) + fs.head_params(a),
        "total": fs.model_params(a),
        "ffn_total": fs.ffn_total(a),
        "standard_width": _textbook(c),
        "closed": closed,
        "counted": counted,
        "counts_match": all(closed[k] == counted[k] for k in counted),
        "mismatches": {k: [closed[k], counted[k]] for k in counted if closed[k] != counted[k]},
    }


def flop_curve(cfg: dict, ctx) -> dict:
    """Per-token forward FLOPs of one block at each context: FFN, attention projections, scores (see
    ffn_flops)."""
    a = fs.CATALOGUE[cfg["preset"]]
    c = a.config
    rows = [fs.token_flops(c, n, causal=c.causal, window=a.window) for n in cfg["contexts"]]
    # a dense log-spaced grid for the figure's curves: 16 steps between neighbouring contexts
    ns = np.geomspace(cfg["contexts"][0], cfg["contexts"][-1], 16 * len(cfg["contexts"]) - 15)
    curve = [fs.token_flops(c, float(n), causal=c.causal, window=a.window)["ffn_share"] for n in ns]
    return {
        "causal": c.causal,
        "window": a.window,
        "ffn": rows[0]["ffn"],
        "projections": rows[0]["projections"],
        "score_per_key": fs.score_flops_per_key(c),
        "contexts": list(cfg["contexts"]),
        "scores": [r["scores"] for r in rows],
        "ffn_share": [r["ffn_share"] for r in rows],
        "curve_n": [float(n) for n in ns],
        "curve_ffn_share": curve,
        "crossover": fs.crossover(c, causal=c.causal, window=a.window),  # the model's own masking
        "crossover_all_keys": fs.crossover(c, causal=False, window=a.window),  # every query charged all keys
    }


def _blocks(names) -> tuple:
    return tuple(cell(n, block=n) for n in names)


class FFNShare(Experiment):
    claim_id = "ffn_share"
    title = "The FFN holds about 2/3 of a block's parameters"
    headline = "textbook"  # the answers table's number
    order = 4
    profiles = {
        "quick": {
            "presets": [
                "gpt2-small",
                "bert-base",
                "transformer-base",
                "llama-7b",
                "llama3-8b",
                "falcon-7b",
                "t5-v1.1-base",
            ],
            "contexts": CONTEXTS[::2],
        },
        "default": {"presets": list(fs.CATALOGUE), "contexts": CONTEXTS},
        "full": {"presets": list(fs.CATALOGUE), "contexts": CONTEXTS},
    }
    parts = (Part("counts", preset_grid, count_preset), Part("flops", flop_grid, flop_curve))

    def declare(self, p: dict) -> Declaration:
        names = p["presets"]
        book = [n for n in names if _textbook(fs.CATALOGUE[n].config)]
        blocks = [b for n in names for b in (n, f"{n}-decoder")[: 1 + fs.CATALOGUE[n].encoder_decoder]]
        other = [n for n in names if n not in book]
        third = bound(2 / 3 - TOL, 2 / 3 + TOL)
        return Declaration(
            (
                check(
                    "counts",
                    "Counts: closed form = instantiated modules",
                    view.COUNT_ERROR,
                    equal(0),
                    table="counts",
                    cells=tuple(cell(n, model=n) for n in names),
                ),
                SubClaim(
                    "textbook",
                    "≈2/3 for textbook dense blocks",
                    third,
                    (view.SHARE,),
                    table="blocks",
                    cells=_blocks(book),
                    where="all",
                    note="Textbook (classified from each configuration before counting): multi-head "
                    "attention of width d and d_ff = 4d, or a three-matrix gated FFN with d_ff within 3% of "
                    "8d/3.",
                ),
                SubClaim(
                    "at-least-66",
                    "≥66% in every block (the notes' wording)",
                    bound(AT_LEAST, None),
                    (view.SHARE,),
                    table="blocks",
                    cells=_blocks(blocks),
                    where="all",
                    note="An encoder–decoder's decoder block (self- and cross-attention beside one FFN) is "
                    "a block too.",
                ),
                SubClaim(
                    "beyond",
                    "≈2/3 beyond textbook blocks (GQA, MQA, MoE, other widths; outside the claim)",
                    third,
                    (view.SHARE,),
                    table="blocks",
                    cells=_blocks(other),
                    where="all",
                    counts=False,
                    note="Whole-model shares and the FLOP crossovers are reported in tables, not judged.",
                ),
            )
        )

    def analyse(self, runs, p, out: Output):
        decl = self.declare(p)
        t = view.observe(runs, AT_LEAST)
        result = evaluate(decl, t)
        flops = {r["config"]["preset"]: r["metrics"] for r in self.runs_of(runs, "flops")}
        view.write_tables(t, flops, out)
        view.plot_shares(t["blocks"].to_dict("records"), t["shares"], TOL, AT_LEAST, out)
        view.plot_curve(t["shares"], out)
        if flops:
            view.plot_flops(flops, out)
        xo = {name: m["crossover"] for name, m in flops.items()}
        return verdict_from(
            result,
            key_number=view.key_number(t, result, decl, AT_LEAST),
            summary=view.summary(t, result, decl, xo, TOL, AT_LEAST),
            evidence={"tolerance": TOL, "at_least": AT_LEAST, **view.evidence(t, result, decl, xo)},
            caveats=self.caveats(p),
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(FFNShare)
