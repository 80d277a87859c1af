"""`weight_tying`: sharing the input embedding with the output projection saves V·d parameters and speeds
convergence."""

from __future__ import annotations

from functools import cache, partial

from tfclaims.analysis import weight_tying as view
from tfclaims.claims.weight_tying import matched_d_ff, tying_counts, tying_train
from tfclaims.evidence import readouts as rd
from tfclaims.evidence.decisions import noise_bound
from tfclaims.evidence.declare import (
    Better,
    Declaration,
    NullPair,
    Readout,
    SubClaim,
    arm,
    cell,
    check,
    equal,
)
from tfclaims.evidence.evaluate import evaluate
from tfclaims.harness.experiment import Experiment, Output, Part, verdict_from
from tfclaims.train.small_lm import subword_fields, subword_profile

COUNT_PRESETS = ("gpt2-small", "gpt2-medium", "gpt2-xl", "bert-base", "llama-7b")
MARGIN = 0.02  # nats: |Δ final loss| inside this is "no difference" (TOST, reported)
TARGET_BELOW_UNIGRAM = 1.0  # nats: "steps to target" counts steps to the unigram level less this
LEARN_MARGIN = 0.10  # nats below the unigram cross-entropy: the run learned
NULL_OFFSET = 1000

LEARNED, FINAL = rd.learned(LEARN_MARGIN), rd.final_loss("nats/token")
EXCESS = Readout(
    "excess", "untied − tied parameters − V·d", definition="closed form (tfclaims.measure.counting)"
)
INSTANTIATED = Readout(
    "instantiated_excess",
    "instantiated − closed-form parameters",
    definition="each arm of this project's LM, built",
)
UNTIED, TIED = arm("untied", arm="untied", part="train"), arm("tied", arm="tied", part="train")
WIDE = arm("tied, wider FFN", arm="tied-wide", part="train")


def steps_readout(p: dict) -> Readout:
    """Steps to the target loss (log-rank: a run that never reaches it is censored at the run's length)."""
    return Readout(
        "steps_to_target",
        "steps to the target loss",
        "steps",
        "lower",
        "logrank",
        horizon=p["steps"],
        fmt="+.1f",
        definition="the first step at which the validation loss reaches the unigram level less "
        f"{TARGET_BELOW_UNIGRAM} nats, interpolated linearly between evaluations (a diverged run: never)",
        fn=partial(view.steps_to_target, below=TARGET_BELOW_UNIGRAM),
    )


@cache
def vocab_size(vocab: int) -> int:
    """The trained tokenizer's vocabulary (loads the tokenised corpus once per process, not per grid call)."""
    from tfclaims.data.bpe import load_bpe_corpus

    return load_bpe_corpus(vocab).vocab_size


def grid_counts(p):
    return [
        {
            **subword_fields(p),
            "presets": list(COUNT_PRESETS),
            "d_ff_wide": matched_d_ff(p, vocab_size(p["vocab"])),
        }
    ]


def grid_train(p):
    wide = matched_d_ff(p, vocab_size(p["vocab"]))
    return [
        {"arm": a, **subword_fields(p), **({"d_ff_wide": wide} if a == "tied-wide" else {}), "seed": s}
        for a in ("tied", "untied", "tied-wide")
        for s in p["seeds"]
    ]


def grid_null(p):
    """The null pair: the untied arm (the baseline) rerun at seeds s + NULL_OFFSET."""
    return [{"arm": "untied", **subword_fields(p), "seed": s + NULL_OFFSET} for s in p["seeds"]]


class WeightTying(Experiment):
    claim_id = "weight_tying"
    title = "Tying input and output embeddings cuts parameters and speeds convergence"
    order = 15
    profiles = {
        "quick": subword_profile("quick"),
        "default": subword_profile("default", d_model=96, n_layers=3, n_heads=4, seq_len=64, batch=16,
                                   steps=600, lr=3e-3, eval_every=25, eval_batches=8),
        "full": subword_profile("full"),
    }  # fmt: skip
    parts = (
        Part("counts", grid_counts, tying_counts),
        Part("train", grid_train, tying_train),
        Part("null", grid_null, tying_train),
    )

    def declare(self, p: dict) -> Declaration:
        steps, models = steps_readout(p), ("subword-lm", *COUNT_PRESETS)
        tr = dict(guard=LEARNED, noise="null")
        return Declaration((
            check("params", "Tying removes exactly V·d parameters (closed form, every configuration)", EXCESS,
                  equal(0), table="counts", cells=tuple(cell(m, model=m) for m in models)),
            check("instantiated", "Each instantiated arm has its closed-form parameter count", INSTANTIATED,
                  equal(0), table="instantiated"),
            SubClaim("convergence", "Faster convergence (steps to the target loss)", Better("b"), (steps,),
                     a=UNTIED, b=TIED, **tr),
            SubClaim("final", "Lower final validation loss", Better("b"), (FINAL,), a=UNTIED, b=TIED,
                     margin=MARGIN, **tr),
            SubClaim("equal-params", "At equal parameter count: tied with a wider FFN against untied",
                     Better("b"), (steps, FINAL), a=UNTIED, b=WIDE, margin=MARGIN, counts=False, **tr,
                     note=f"The ±{MARGIN:g}-nat TOST is the final loss's; the log-rank test has no margin."),
        ), nulls=(
            NullPair("null", UNTIED, arm("rerun", part="null"), (steps, FINAL), seed_offset=NULL_OFFSET),
        ))  # fmt: skip

    def analyse(self, runs, p, out: Output):
        decl = self.declare(p)
        t = view.observe(runs, (LEARNED, FINAL, steps_readout(p)))
        result = evaluate(decl, t)
        pdf = view.parameter_table(t["count_rows"])
        tok = self.runs_of(runs, "counts")[0]["metrics"]["tokenizer"]
        view.write_tables(t, result, pdf, p, TARGET_BELOW_UNIGRAM, out)
        floor = next((noise_bound(f) for f in result.floors if f.metric == FINAL.label), None)
        view.plot_training(self.runs_of(runs, "train"), pdf, floor, p, TARGET_BELOW_UNIGRAM, out)
        conv, fin = result.get("convergence"), result.get("final")
        own = pdf[pdf["model"].str.startswith("subword")].iloc[0]
        g2 = pdf.set_index("model").loc["gpt2-small"] if "gpt2-small" in set(pdf["model"]) else None
        g2_txt = (
            "" if g2 is None else f"; GPT-2 small: {g2['saved']:,} ({g2['saved / untied']:.0%} of untied)"
        )
        at_equal = ", ".join(
            f"{c.metric} {c.short('+.3g')} ({c.decision})" for c in result.of("equal-params")
        )
        return verdict_from(
            result,
            key_number=f"tied − untied: steps to target {conv.short('+.0f')} ({conv.decision}), final loss "
            f"{fin.short()} nats ({fin.decision}); tying saves {own['saved / untied']:.1%} of the parameters",
            summary=(
                f"Tying removes V·d parameters exactly (checked): {own['saved / untied']:.1%} of this "
                f"subword model (V = {own['V']}, d = {own['d']}){g2_txt}. Steps to the target loss, "
                f"{conv.text(' steps', '+.1f')}; final validation loss, {fin.text(' nats')}. At equal "
                f"parameters (reported): {at_equal}."
            ),
            evidence={
                "margin": MARGIN,
                "learn_margin": LEARN_MARGIN,
                "tokenizer": tok,
                "target_below_unigram": TARGET_BELOW_UNIGRAM,
            },
            caveats=[
                f"Byte-level BPE trained on the training works: V = {tok['vocab_size']}, "
                f"{tok['chars_per_token']:.2f} characters per token on the validation works. GPT-2 uses V = "
                "50257 and d = 768; here V·d is a similar share of the model, but the model is 10^2–10^3 "
                "times smaller.",
                f"{p['steps']} steps of {p['batch']} × {p['seq_len']} tokens (about "
                f"{p['steps'] * p['batch'] * p['seq_len'] / 1e6:.2f}M tokens, under one epoch), d = "
                f"{p['d_model']}, {p['n_layers']} layers, no dropout; the anchors' gains are in final "
                "perplexity after many epochs of small corpora, where tying also acts as a regulariser.",
                "The untied head starts at the embedding's init scale (normal, std 0.02), so the arms "
                "differ only in sharing; the parameter-matched arm spends the V·d extra parameters in the "
                "FFN instead.",
                "Steps to target are compared by a log-rank test (unpaired; a run that never reaches the "
                "target is censored): the difference is of restricted mean steps.",
            ],
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(WeightTying)
