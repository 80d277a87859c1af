"""`ffn_share`: the FFN holds about two thirds of a Transformer block's parameters (the notes: 66% or more)."""

from __future__ import annotations

import textwrap
from dataclasses import replace

import numpy as np
import pandas as pd
import torch
from torch import nn

from tfclaims.claims import ffn_share as fs
from tfclaims.evidence.decisions import combine, exact_check
from tfclaims.harness.experiment import Experiment, Output, Part, SubVerdict, Verdict
from tfclaims.measure.counting import active_ffn_params, attention_params, embedding_params, ffn_params
from tfclaims.nn.config import ConfigError, ModelConfig
from tfclaims.nn.models import n_params

# Pre-registered, fixed before the run.
TOL = 0.02  # "about 2/3": |FFN / (attention + FFN) − 2/3| ≤ 0.02
AT_LEAST = 0.66  # "66% or more": FFN / (attention + FFN) ≥ 0.66, read literally
SUB_COUNTS = "Counts: closed form = instantiated modules"
SUB_TEXTBOOK = "≈2/3 for textbook dense blocks"
SUB_AT_LEAST = "≥66% in every block (the notes' wording)"
SUB_BEYOND = "≈2/3 beyond textbook blocks (GQA, MQA, MoE, other widths; outside the claim)"
CONTEXTS = [512 * 2**k for k in range(9)]  # 512 … 131072 tokens
# Configurations drawn in the FLOP figure (the table has them all): one line per distinct design.
FLOP_FIGURE = (
    "gpt2-small", "gpt2-xl", "t5-v1.1-base", "llama-7b", "llama2-70b", "mixtral-8x7b", "llama3-8b",
    "mistral-7b", "gemma-7b", "falcon-7b",
)  # fmt: skip


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
    """Per-token forward FLOPs of one block at each context: FFN, attention projections, scores (see ffn_flops)."""
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


def count_check(model: str, m: dict):
    """One exact check per configuration: every closed-form count equals its instantiated count."""
    closed, counted = m["closed"], m["counted"]
    items = ", ".join(
        f"{k} {closed[k]:,}" + ("" if closed[k] == counted[k] else f" ≠ {counted[k]:,}") for k in counted
    )
    return exact_check(
        f"count:{model}", bool(m["counts_match"]), sub_claim=SUB_COUNTS,
        metric="block parameters (instantiated vs closed form; every count in the note)",
        observed=counted["block"], expected=closed["block"],
        note=("closed form = instantiated: " if m["counts_match"] else "") + items,
    )  # fmt: skip


def share_check(model: str, share: float, sub_claim: str):
    """The FFN share of attention + FFN against 2/3, within the declared tolerance."""
    ok = abs(share - 2 / 3) <= TOL
    c = exact_check(
        f"share:{model}", ok, sub_claim=sub_claim, metric="FFN / (attention + FFN)",
        observed=share, expected=2 / 3, note=f"{share:.4f} vs 2/3 ± {TOL:g}",
    )  # fmt: skip
    return replace(c, margin=TOL)


def floor_check(block: str, share: float, why: str = ""):
    """The notes' wording read literally: FFN / (attention + FFN) ≥ 0.66."""
    ok = share >= AT_LEAST
    return exact_check(
        f"atleast66:{block}", ok, sub_claim=SUB_AT_LEAST, metric="FFN / (attention + FFN)",
        observed=share, expected=AT_LEAST,
        note=f"{share:.4f} {'≥' if ok else '<'} {AT_LEAST:g}" + (f" ({why})" if why and not ok else ""),
    )  # fmt: skip


def universal(checks) -> str:
    """A statement meant for every block: all pass → supported, none → refuted, some → mixed (named)."""
    passed = [c.decision == "equivalent" for c in checks]
    if not passed:
        return "inconclusive"
    return "supported" if all(passed) else ("refuted" if not any(passed) else "mixed")


def why_below(row: dict) -> str:
    """Why a block's FFN holds less than 66%: the structure that moves the share, from its counts."""
    if row["kind"] == "decoder block":
        return "cross-attention doubles the attention to 8d², as large as an 8d² FFN"
    r, mats = row["d_ff/d"], 3 if row["gated"] else 2
    if mats * r < 8:
        return f"narrow FFN: {mats} matrices × d_ff/d {r:.2f} = {mats * r:.2f} d² < 8d²"
    return "attention wider than 4d²"


class FFNShare(Experiment):
    claim_id = "ffn_share"
    title = "The FFN holds about 2/3 of a block's parameters"
    order = 4
    statement = (
        "In a Transformer block the feed-forward network owns about two thirds of the parameters, or more: with "
        "d_ff = 4d its two matrices hold 8d² against attention's 4d² (GPT-2: ≈66.6%)."
    )
    notes_say = "FFN ≥ 66% of attention + FFN parameters; GPT-2 ≈ 66.6%"
    anchors = [
        "Kaplan et al. 2020: N ≈ 12·n_layer·d² (attention 4d², FFN 8d² with d_ff = 4d).",
        "GPT-2 small has 124,439,808 parameters; one block 7,087,872, of which the FFN is 4,722,432 (66.6%); the FFN is 45.5% of the whole model with embeddings.",
        "LLaMA's SwiGLU uses three matrices with d_ff ≈ 8d/3, keeping ≈2/3; LLaMA-2-70B (GQA, 8 K/V heads, d_ff = 28672) has ≈82% of a block in the FFN.",
        "Published totals the closed forms reproduce: Llama-3-8B 8,030,261,248; Mistral-7B 7,241,732,096; Gemma-7B 8,537,680,896; Falcon-7B 6,921,720,704; T5 v1.1 base 247,577,856.",
    ]
    anchor_number = "GPT-2 small block: 66.6%; with embeddings 45.5%"
    method = (
        "Two parts. `counts`: for each published configuration (GPT-2, BERT, the original Transformer, LLaMA, "
        "LLaMA-2-70B, Mixtral, and Llama-3-8B, Mistral-7B, Gemma-7B, Falcon-7B, T5 v1.1 base and a generic parallel "
        "block; widths from each model's config.json, listed in `tfclaims.claims.ffn_share`), closed-form counts beside "
        "the library's modules instantiated on the meta device: attention, FFN, block and whole model (a parallel block "
        "is built from the library's attention, FFN and norm with one norm feeding both; an encoder–decoder's encoder "
        "stack is built, its decoder block is counted in closed form and checked against torch's "
        "`TransformerDecoderLayer` for the original Transformer). The test suite also checks the counts against Hugging "
        "Face `transformers` models built from configs (GPT-2, BERT, LLaMA, Mixtral, Llama-3, Mistral, Gemma, Falcon, "
        "T5, GPT-J). A gated GELU FFN (Gemma's GeGLU, T5's gated-gelu) has SwiGLU's three matrices and is counted as "
        "such. Shares are FFN / (attention + FFN) per block (norms excluded, as in the notes' count of the MLP and "
        "attention modules); encoder–decoders are rows of their encoder block, and their decoder blocks (with "
        "cross-attention) are judged beside them for the 66% wording. `flops`: forward FLOPs per token of one block "
        "(matmuls, a multiply-add = 2) for the FFN against attention (W_q, W_k, W_v, W_o plus QK^T and AV over the keys "
        "a query sees: the causal mean (n + 1)/2 for decoders, capped by Mistral's 4096-token window; all n keys for "
        "encoders) at contexts 512 to 131,072, and the context where attention overtakes the FFN (also with every "
        "query charged all n keys)."
    )
    rule = (
        "Exact checks, no statistics (the counts are deterministic). Counts: every closed-form count must equal the "
        "instantiated count exactly, for every configuration; if any differs the verdict is inconclusive. 'About 2/3': "
        f"a block agrees when |FFN / (attention + FFN) − 2/3| ≤ {TOL:g}; it is judged on textbook dense blocks (multi-head "
        "attention of width d, d_ff = 4d, or a three-matrix gated FFN with d_ff within 3% of 8d/3): supported if every "
        "one agrees, refuted if none does, mixed (naming them) otherwise, inconclusive without one. '66% or more': "
        f"FFN / (attention + FFN) ≥ {AT_LEAST:g} in every block of the catalogue, decoder blocks of encoder–decoders "
        "included: supported if all, refuted if none, mixed (naming them, with the reason) otherwise. Verdict: the two "
        "together (evidence.combine: both supported → supported, both refuted → refuted, a supported beside a refuted "
        "or any mixed → mixed, otherwise inconclusive). "
        "GQA, MQA, MoE and other-width blocks against 2/3 are their own sub-verdict, outside the claim's scope and "
        "not in the verdict; whole-model shares and the FLOP crossovers are reported, not judged."
    )
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

    # ------------------------------------------------------------------ analysis
    def analyse(self, runs, p, out: Output):
        metrics = {r["config"]["preset"]: r["metrics"] for r in self.runs_of(runs, "counts")}
        df = self.share_table(metrics)
        out.table(
            "shares", df, "Parameter counts and FFN shares (closed form = instantiated)", floatfmt=".4g"
        )
        blocks = self.block_rows(metrics)
        flops = {r["config"]["preset"]: r["metrics"] for r in self.runs_of(runs, "flops")}
        fdf = self.flop_table(flops)
        if len(fdf):
            out.table(
                "flop-share",
                fdf,
                "FFN share of a block's forward FLOPs per token against context, and the context where "
                "attention overtakes the FFN",
                floatfmt=".4g",
            )
        self.plot_shares(blocks, df, out)
        self.plot_curve(df, out)
        if flops:
            self.plot_flops(flops, out)

        counts = [count_check(name, metrics[name]) for name in df["model"]]
        std, other = df[df["textbook width"]], df[~df["textbook width"]]
        textbook = [share_check(m, s, SUB_TEXTBOOK) for m, s in zip(std["model"], std["FFN / (attn+FFN)"])]
        beyond = [share_check(m, s, SUB_BEYOND) for m, s in zip(other["model"], other["FFN / (attn+FFN)"])]
        floor = [floor_check(b["block"], b["share"], why_below(b)) for b in blocks]
        all_match = all(c.decision == "equivalent" for c in counts)
        v_textbook, v_floor, v_beyond = universal(textbook), universal(floor), universal(beyond)
        verdict = combine([v_textbook, v_floor]) if all_match else "inconclusive"

        def shares(cs, outside="outside"):
            return ", ".join(
                f"{c.id.split(':', 1)[1]} {c.mean_b:.1%}"
                + ("" if c.decision == "equivalent" else f" ({outside})")
                for c in cs
            )

        below = [(b, c) for b, c in zip(blocks, floor) if c.decision != "equivalent"]
        floor_detail = (
            f"{sum(c.decision == 'equivalent' for c in floor)}/{len(floor)} blocks ≥ {AT_LEAST:.0%} "
            f"(lowest that passes: {min((c.mean_b for c in floor if c.decision == 'equivalent'), default=float('nan')):.2%})"
        )
        if below:
            floor_detail += "; below: " + "; ".join(
                f"{b['block']} {c.mean_b:.1%} ({b['why']})" for b, c in below
            )
        bad_counts = [c.id for c in counts if c.decision != "equivalent"]
        subs = [
            SubVerdict(
                SUB_COUNTS,
                "supported" if all_match else "refuted",
                f"{len(counts) - len(bad_counts)}/{len(counts)} configurations match exactly"
                + (f"; mismatched: {', '.join(bad_counts)}" if bad_counts else ""),
                [c.id for c in counts],
            ),
            SubVerdict(
                SUB_TEXTBOOK,
                v_textbook,
                (shares(textbook) or "no textbook configuration measured") + f" (2/3 ± {TOL:g})",
                [c.id for c in textbook],
            ),
            SubVerdict(SUB_AT_LEAST, v_floor, floor_detail, [c.id for c in floor]),
            SubVerdict(SUB_BEYOND, v_beyond, shares(beyond) or "none measured", [c.id for c in beyond]),
        ]

        xo = {name: m["crossover"] for name, m in flops.items()}
        beyond_rng = (
            f"{other['FFN / (attn+FFN)'].min():.1%}–{other['FFN / (attn+FFN)'].max():.1%}"
            if len(other)
            else "—"
        )
        key = (
            f"textbook blocks {std['FFN / (attn+FFN)'].min():.1%}–{std['FFN / (attn+FFN)'].max():.1%}"
            if len(std)
            else "no textbook config"
        )
        key += f"; GQA/MQA/MoE/wide blocks {beyond_rng}"
        if below:
            key += (
                f"; below 66%: {len(below)} cross-attention decoder blocks"
                if all(b["kind"] == "decoder block" for b, _ in below)
                else f"; below 66%: {', '.join(b['block'] for b, _ in below)}"
            )
        if "gpt2-small" in set(df["model"]):
            g = df.set_index("model").loc["gpt2-small"]
            key += f"; GPT-2 small {g['FFN / (attn+FFN)']:.1%} of a block, {g['FFN / whole model']:.1%} with embeddings"

        summary = (
            (
                f"Textbook dense blocks hold {std['FFN / (attn+FFN)'].min():.1%}–{std['FFN / (attn+FFN)'].max():.1%} of "
                f"their attention+FFN parameters in the FFN ({sum(c.decision == 'equivalent' for c in textbook)}/"
                f"{len(textbook)} within 2/3 ± {TOL:g}); "
                if len(std)
                else "No textbook dense block was measured; "
            )
            + f"GQA, MQA, MoE and wider gated FFNs move modern blocks to {beyond_rng}, so '66% or more' holds in "
            f"{sum(c.decision == 'equivalent' for c in floor)}/{len(floor)} blocks"
            + (
                " but not in "
                + ", ".join(f"{b['block']} ({c.mean_b:.1%})" for b, c in below)
                + ": "
                + "; ".join(sorted({b["why"] for b, _ in below}))
                if below
                else ""
            )
            + f". {len(counts) - len(bad_counts)}/{len(counts)} configurations' closed forms equal the instantiated "
            "modules. Per token, attention FLOPs overtake the FFN's at "
            + self.crossover_text(xo)
            + "; parameters are not compute."
        )
        return Verdict(
            verdict=verdict,
            summary=summary,
            key_number=key,
            evidence={
                "tolerance": TOL,
                "at_least": AT_LEAST,
                "textbook_shares": dict(zip(std["model"], std["FFN / (attn+FFN)"].round(5))),
                "block_shares": {b["block"]: round(b["share"], 5) for b in blocks},
                "below_at_least": [b["block"] for b, _ in below],
                "all_counts_match": all_match,
                "flop_crossover_context": {k: None if v is None else round(v, 1) for k, v in xo.items()},
            },
            sub_verdicts=subs,
            caveats=[
                "A counting claim: every decision is an exact check of deterministic numbers, so there are no seeds, no statistical test and no noise floor (a null pair would be identical by construction).",
                "Norm parameters are excluded from the share (as in the notes' count of the MLP and attention modules); the table also gives FFN / block with norms. A parallel block has the same attention and FFN matrices as a sequential one and one norm fewer, so its share is unchanged.",
                "Biased textbook blocks sit a hair under 2/3 ((8d² + 5d) / (12d² + 9d)), so a floor of exactly 2/3 would fail GPT-2; the notes' 66% does not.",
                "Encoder–decoders (the original Transformer, T5 v1.1) are rows of their encoder block; their decoder blocks, with cross-attention, are judged for the 66% wording. The original Transformer's whole-model count assumes one shared 37k-token embedding; T5 v1.1's output head is untied and each stack's first block holds a 32-bucket relative-position bias (counted in the total, not in a block).",
                "Gemma-7B's and T5's gated GELU FFNs are counted as SwiGLU (the same three d × d_ff matrices); Gemma's attention is 4096 wide against d = 3072, which is why it lies under the gated MHA curve.",
                "Mixtral's share counts all 8 experts; per token only the top-2 are active (column 'active FFN'), and its FLOPs count the active ones.",
                "FLOPs are per token and per block, matmuls only; contexts beyond a model's trained length (GPT-2's 1,024, BERT's 512) are the arithmetic of its widths, not a model that runs there. Mistral-7B-v0.1's 4096-token window caps the keys a query sees, so its attention never overtakes its FFN.",
            ],
            comparisons=[*counts, *textbook, *floor, *beyond],
        )

    @staticmethod
    def share_table(metrics: dict) -> pd.DataFrame:
        rows = []
        for name, m in metrics.items():
            rows.append(
                {
                    "model": name,
                    "d_model": m["d_model"],
                    "heads (q/kv)": f"{m['n_heads']}/{m['n_kv_heads']}",
                    "attn width/d": m["attn_width"] / m["d_model"],
                    "d_ff/d": m["d_ff"] / m["d_model"],
                    "FFN": m["ffn_kind"] + (f" ×{m['n_experts']} experts" if m["n_experts"] else ""),
                    "block layout": m["layout"] + (" (encoder block)" if m["encoder_decoder"] else ""),
                    "attention params": m["attention"],
                    "FFN params": m["ffn"],
                    "block params": m["block"],
                    "FFN / (attn+FFN)": m["ffn"] / (m["ffn"] + m["attention"]),
                    "FFN / block": m["ffn"] / m["block"],
                    "active FFN / (attn+active FFN)": m["ffn_active"] / (m["ffn_active"] + m["attention"]),
                    "decoder block FFN / (attn+FFN)": (
                        m["ffn"] / (m["ffn"] + m["decoder_attention"]) if m["encoder_decoder"] else None
                    ),
                    "FFN / whole model": m["ffn_total"] / m["total"],
                    "total params": m["total"],
                    "textbook width": m["standard_width"],
                    "counts match": m["counts_match"],
                }
            )
        return pd.DataFrame(rows)

    @staticmethod
    def block_rows(metrics: dict) -> list[dict]:
        """Every block kind of the catalogue: each configuration's block, and an encoder–decoder's decoder block."""
        out = []
        for name, m in metrics.items():
            base = {"d_ff/d": m["d_ff"] / m["d_model"], "gated": m["gated"]}
            kind = "textbook" if m["standard_width"] else "other"
            share = m["ffn"] / (m["ffn"] + m["attention"])
            active = m["ffn_active"] / (m["ffn_active"] + m["attention"])
            out.append({**base, "block": name, "model": name, "kind": kind, "share": share, "active": active})
            if m["encoder_decoder"]:
                s = m["ffn"] / (m["ffn"] + m["decoder_attention"])
                out.append(
                    {**base, "block": f"{name}/decoder", "model": name, "kind": "decoder block", "share": s,
                     "active": s}
                )  # fmt: skip
        for b in out:
            b["why"] = why_below(b) if b["share"] < AT_LEAST else ""
        return out

    @staticmethod
    def flop_table(flops: dict) -> pd.DataFrame:
        rows = []
        for name, m in flops.items():
            row = {
                "model": name,
                "keys per query": (
                    ("causal mean" if m["causal"] else "all n (encoder)")
                    + (f", window {m['window']:,}" if m["window"] else "")
                ),
                "FFN MFLOP/token": m["ffn"] / 1e6,
                "attn proj MFLOP/token": m["projections"] / 1e6,
            }
            for n, s in zip(m["contexts"], m["ffn_share"]):
                row[f"FFN % @{_ctx(n)}"] = 100 * s
            row["crossover n"] = _xo_int(m["crossover"])
            row["crossover n (all keys)"] = _xo_int(m["crossover_all_keys"])
            rows.append(row)
        df = pd.DataFrame(rows)
        for col in ("crossover n", "crossover n (all keys)"):  # whole tokens, '—' where there is none
            if col in df:
                df[col] = pd.Series([r[col] for r in rows], dtype=object)
        return df

    @staticmethod
    def crossover_text(xo: dict) -> str:
        pick = [n for n in ("gpt2-small", "llama3-8b", "gemma-7b", "falcon-7b", "mixtral-8x7b") if n in xo]
        parts = [f"n ≈ {_ctx_exact(xo[n])} ({n})" for n in pick if xo[n] is not None]
        never = [n for n, v in xo.items() if v is None]
        s = ", ".join(parts) if parts else "—"
        if never:
            s += f", and never for {', '.join(never)} (sliding window)"
        return s

    # ------------------------------------------------------------------ figures
    def plot_shares(self, blocks: list[dict], df: pd.DataFrame, out: Output):
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch

        from tfclaims.plotting import plt

        n = len(blocks)
        fig, axd = plt.subplot_mosaic(
            [["block", "whole"], ["key", "key"]],
            figsize=(9.8, 0.25 * n + 2.2),
            gridspec_kw={"width_ratios": [1.25, 1], "height_ratios": [0.25 * n + 0.9, 0.7]},
        )
        ax, axm, key = axd["block"], axd["whole"], axd["key"]
        y = np.arange(n)[::-1]  # first row at the top
        colours = {"textbook": "C0", "other": "C1", "decoder block": "C3"}
        shares = np.array([b["share"] for b in blocks]) * 100
        ax.barh(y, shares, 0.7, color=[colours[b["kind"]] for b in blocks])
        band_top = 100 * (2 / 3 + TOL)
        for yi, b, s in zip(y, blocks, shares):  # value labels clear of the band
            ax.text(
                (band_top if band_top - 100 * 2 * TOL - 1 <= s <= band_top else s) + 0.8,
                yi,
                f"{s:.1f}",
                va="center",
                fontsize=7,
            )
            if abs(b["active"] - b["share"]) > 1e-9:  # MoE: the experts a token uses
                ax.plot(b["active"] * 100, yi, "kD", ms=4)
        ax.axvspan(100 * (2 / 3 - TOL), 100 * (2 / 3 + TOL), color="0.6", alpha=0.3, lw=0, zorder=0)
        ax.axvline(100 * AT_LEAST, color="k", ls="--", lw=1)
        ax.set_yticks(y, [b["block"].replace("/decoder", " (decoder block)") for b in blocks], fontsize=8)
        ax.set_ylim(-0.6, n - 0.4)
        ax.set_xlim(0, 112)
        ax.set_xlabel("FFN / (attention + FFN) in one block (%)")
        ax.set_title("Block: FFN share of attention + FFN")

        whole = df.set_index("model")["FFN / whole model"] * 100
        rows = [(yi, whole[b["model"]]) for yi, b in zip(y, blocks) if b["kind"] != "decoder block"]
        axm.barh([r[0] for r in rows], [r[1] for r in rows], 0.7, color="C2")
        for yi, v in rows:
            axm.text(v + 0.8, yi, f"{v:.1f}", va="center", fontsize=7)
        axm.set_ylim(-0.6, n - 0.4)
        axm.set_yticks(y, [""] * n)
        axm.set_xlim(0, 112)
        axm.set_xlabel("FFN / all parameters, embeddings included (%)")
        axm.set_title("Whole model: FFN share")

        handles = [
            Patch(color="C0", label="textbook dense block (MHA, d_ff = 4d or gated 8d/3)"),
            Patch(color="C1", label="GQA / MQA / MoE, or other FFN or attention width"),
            Patch(color="C3", label="decoder block with cross-attention (encoder–decoder)"),
            Patch(color="C2", label="whole model, embeddings and output head included"),
            Patch(color="0.6", alpha=0.45, label=f"2/3 ± {TOL:g} (the 'about 2/3' band)"),
            Line2D([], [], color="k", ls="--", lw=1, label=f"{AT_LEAST:.0%} (the notes' floor)"),
            Line2D([], [], color="k", marker="D", ls="", ms=4, label="MoE: active experts only"),
        ]
        key.axis("off")  # a row of its own for the legend: never over a bar
        key.legend(handles=handles, loc="center", ncol=2, fontsize=8)
        out.figure(
            "shares",
            fig,
            "FFN share of each block's attention+FFN parameters (left; decoder blocks of encoder–decoders as their own "
            "rows; diamond: Mixtral's two active experts) and of the whole model with embeddings (right). Grey band: "
            "2/3 ± 0.02; dashed: 66%.",
        )

    def plot_curve(self, df: pd.DataFrame, out: Output):
        from tfclaims.plotting import subplots

        fig, (ax,) = subplots(width=9.6, height=4.2)
        r = np.linspace(1, 8.5, 300)  # d_ff / d
        for mats, attn, label in [
            (2, 4, "2 matrices, MHA"),
            (3, 4, "3 matrices (gated), MHA"),
            (3, 2 + 2 / 4, "3 matrices, GQA h/kv = 4"),
            (3, 2 + 2 / 8, "3 matrices, GQA h/kv = 8"),
            (2, 2 + 2 / 71, "2 matrices, MQA (71 heads)"),
        ]:  # attention in units of d²: q and o (2), k and v shrunk by h/kv
            ax.plot(r, 100 * mats * r / (mats * r + attn), label=label, lw=1.4)
        ax.axhline(200 / 3, color="k", ls="--", lw=1, label="2/3")
        ax.scatter(
            df["d_ff/d"], df["FFN / (attn+FFN)"] * 100, color="k", zorder=3, s=16, label="configurations"
        )
        # configurations within a small distance share one letter; the key beside the axes names them all
        groups: list[list] = []
        for x, yv, name in zip(df["d_ff/d"], df["FFN / (attn+FFN)"] * 100, df["model"]):
            g = next((g for g in groups if abs(g[0] - x) < 0.15 and abs(g[1] - yv) < 0.8), None)
            if g is None:
                groups.append([x, yv, [name]])
            else:
                g[2].append(name)
        lines = []
        share = dict(zip(df["model"], df["FFN / (attn+FFN)"] * 100))
        groups.sort(key=lambda g: (g[0], g[1]))
        for i, (x, yv, names) in enumerate(groups):
            letter = chr(ord("A") + i)
            lo, hi = min(share[n] for n in names), max(share[n] for n in names)
            pct = f"{lo:.1f}%" if f"{lo:.1f}" == f"{hi:.1f}" else f"{lo:.1f}–{hi:.1f}%"
            # a group just above another at the same width takes its letter on the left
            left = any(abs(g[0] - x) < 0.15 and 0 < yv - g[1] < 3 for g in groups)
            ax.annotate(
                letter, (x, yv), xytext=(-6 if left else 6, 6 if abs(yv - 200 / 3) < 1 else 0),
                textcoords="offset points", fontsize=8,
                fontweight="bold", ha="right" if left else "left", va="center",
            )  # fmt: skip
            lines.append(textwrap.fill(f"{letter}: {', '.join(names)} ({pct})", 46, subsequent_indent="   "))
        ax.text(
            1.03, 1.0, "\n".join(lines), transform=ax.transAxes, va="top", ha="left", fontsize=7.2,
            family="monospace",
        )  # fmt: skip
        ax.set_xlim(0.8, 8.7)
        ax.set_ylim(30, 100)
        ax.set_xlabel("FFN width d_ff / d_model (ratio)")
        ax.set_ylabel("FFN / (attention + FFN) (%)")
        ax.set_title("FFN share vs FFN width and K/V sharing (curves: closed form, biases and norms ignored)")
        ax.legend(fontsize=7.5, loc="lower right")
        out.figure(
            "share-vs-width",
            fig,
            "Closed-form FFN share against d_ff/d for two- and three-matrix FFNs with multi-head, grouped-query and "
            "multi-query attention; dashed: 2/3; dots: the configurations counted, lettered (nearby ones share a "
            "letter; the key lists them). Gemma-7B's attention is 4/3·d wide, so it lies under the gated MHA curve.",
        )

    def plot_flops(self, flops: dict, out: Output):
        from tfclaims.plotting import subplots

        fig, (ax,) = subplots(width=8.6, height=4.2)
        names = [n for n in FLOP_FIGURE if n in flops] or list(flops)
        styles = ["-", "--", "-.", ":"]
        for i, name in enumerate(names):
            m = flops[name]
            label = (
                name
                + (" (encoder: all keys)" if not m["causal"] else "")
                + (f" (window {m['window']})" if m["window"] else "")
            )
            (line,) = ax.plot(
                m["curve_n"],
                np.array(m["curve_ffn_share"]) * 100,
                lw=1.5,
                ls=styles[i // 10 % 4],
                label=label,
            )
            ax.plot(m["contexts"], np.array(m["ffn_share"]) * 100, "o", ms=3, color=line.get_color())
            x = m["crossover"]
            if x is not None and m["contexts"][0] <= x <= m["contexts"][-1]:
                ax.plot(x, 50, marker="X", ms=8, color=line.get_color(), mec="k", mew=0.5, zorder=4)
        ax.axhline(50, color="k", ls="--", lw=1, label="50%: attention = FFN (X: each crossover)")
        ctx = flops[names[0]]["contexts"]
        ax.set_xscale("log", base=2)
        ax.set_xticks(ctx, [_ctx(n) for n in ctx])
        ax.minorticks_off()
        ax.set_ylim(0, 100)
        ax.set_xlabel("context length n (tokens, log scale)")
        ax.set_ylabel("FFN / (attention + FFN) forward FLOPs per token (%)")
        ax.set_title("FFN share of a block's compute per token as the context grows")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7.5)
        out.figure(
            "flop-share-vs-context",
            fig,
            "Forward FLOPs per token of one block (matmuls; a multiply-add = 2): FFN against attention projections plus "
            "QK^T and AV over the keys a query sees (decoders: the causal mean (n + 1)/2, capped by Mistral's 4096-token "
            "window; the T5 encoder: all n). Below 50% attention costs more than the FFN; X marks the crossover.",
        )


def _ctx(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def _ctx_exact(x: float) -> str:
    return f"{x / 1000:.1f}k" if x >= 1000 else f"{x:.0f}"


def _xo_int(x: float | None):
    """A crossover as a whole number of tokens (the first context at or past it); None when there is none."""
    return None if x is None else int(np.ceil(x))


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(FFNShare)
