"""`weight_tying`: sharing the input embedding with the output projection saves V·d parameters and speeds convergence."""

from __future__ import annotations

from functools import cache

import numpy as np
import pandas as pd

from tfclaims.claims.weight_tying import matched_d_ff, tying_counts, tying_train
from tfclaims.evidence import decisions as ev
from tfclaims.evidence.curves import plot_curves
from tfclaims.evidence.stats import mean_ci
from tfclaims.evidence.tables import comparison_table
from tfclaims.harness.experiment import Experiment, Output, Part, SubVerdict, Verdict
from tfclaims.train.small_lm import subword_fields, subword_profile

COUNT_PRESETS = ("gpt2-small", "gpt2-medium", "gpt2-xl", "bert-base", "llama-7b")
MARGIN = 0.02  # nats: |Δ final loss| inside this is "no difference" (TOST)
STEP_MARGIN = 0.05  # fraction of the training steps: |Δ steps to target| inside this is "no difference"
TARGET_BELOW_UNIGRAM = (
    1.0  # nats: the target validation loss of "steps to target" is the unigram level less this
)
LEARN_MARGIN = 0.10  # nats below the unigram cross-entropy: the run learned
NULL_OFFSET = 1000
LABELS = {"tied": "tied", "untied": "untied", "tied-wide": "tied, wider FFN (untied's parameter count)"}


def final(m: dict) -> float | None:
    return m.get("final_val")


def did_learn(m: dict) -> bool:
    return ev.learned(m.get("final_val"), m["unigram_xent"], LEARN_MARGIN)


def steps_to_target(m: dict) -> float | None:
    """The first step at which the validation loss reaches the target, linearly interpolated between
    evaluations; None if it never does (or the run diverged)."""
    if m.get("diverged_at") is not None:
        return None
    target = m["unigram_xent"] - TARGET_BELOW_UNIGRAM
    s, v = m["eval_steps"], m["val_loss"]
    if v and v[0] is not None and v[0] <= target:
        return float(s[0])
    for i in range(1, len(v)):
        if v[i] is not None and v[i] <= target:
            v0 = v[i - 1]
            return float(s[i - 1] + (s[i] - s[i - 1]) * (v0 - target) / (v0 - v[i]))
    return None


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
    statement = (
        "Using one matrix for the token embedding and (transposed) for the output projection before the softmax removes "
        "V·d parameters and makes a language model converge faster."
    )
    notes_say = "embedding and pre-softmax projection share weights: fewer parameters, faster convergence"
    anchors = [
        "Press & Wolf 2017 and Inan et al. 2017: tying lowers perplexity of LSTM language models and can halve the size of translation models without loss.",
        "PyTorch's word_language_model example (2-layer LSTM, Penn Treebank, 40 epochs): test perplexity 80.97 untied vs 75.96 tied at 650 units, 77.42 vs 72.30 at 1500 units.",
        "GPT-2 small: the 50257 × 768 token embedding (38.6M) is 31% of its 124.4M parameters; an untied head would add as many again. Vaswani et al. 2017 share it between both embeddings and the pre-softmax layer.",
    ]
    anchor_number = "PTB LSTM: 80.97 → 75.96 test perplexity with tying"
    method = (
        "(1) Parameter counts of each arm, closed form (`tfclaims.measure.counting`) against the instantiated model, and the "
        "share V·d represents for published configurations. (2) Training: a subword LM (byte-level BPE with a 4096-token "
        "vocabulary trained on the training works, `tfclaims.data.bpe`) in three arms on the same seeds (same data order): "
        "tied; untied (the head a separate matrix with the same init scale); and a parameter-matched control, tied with "
        "its FFN widened until it has the untied model's parameter count (an untied model cut to the tied count would "
        "lose its whole FFN at this vocabulary). Convergence speed is the number of steps until the validation loss "
        f"first reaches the unigram level less {TARGET_BELOW_UNIGRAM} nats (interpolated between evaluations); the "
        "final validation loss is the other measure. A null pair (the untied arm rerun at seeds s + "
        f"{NULL_OFFSET}) gives the noise floor of both."
    )
    rule = (
        "Parameters (exact checks): supported if untied − tied equals V·d exactly for every configuration, in closed "
        "form, and each instantiated arm matches its closed form; else refuted. Convergence: steps to the target, tied "
        f"(b) vs untied (a), paired by seed (paired t-test; TOST against ±{STEP_MARGIN:.0%} of the training steps); a "
        f"run learned if its final validation loss is at least {LEARN_MARGIN} nats below the unigram cross-entropy, and "
        "if neither arm learned in any seed the comparison is excluded. Sub-verdict by the evidence ladder: supported "
        "if tied reaches the target significantly sooner, refuted if untied does, otherwise inconclusive (no positive "
        "control, so equivalence within the margin does not refute). Final validation loss: the same test against "
        f"±{MARGIN} nats, its own sub-verdict. Equal parameters (reported): the parameter-matched tied arm against "
        "untied, same tests. Overall: parameters and convergence combined: both supported → supported; one supported, "
        "the other refuted → mixed; both refuted → refuted; otherwise inconclusive."
    )
    profiles = {
        "quick": subword_profile("quick"),
        "default": subword_profile("default", d_model=96, n_layers=3, n_heads=4, seq_len=64, batch=16, steps=600,
                                   lr=3e-3, eval_every=25, eval_batches=8),
        "full": subword_profile("full"),
    }  # fmt: skip
    parts = (
        Part("counts", grid_counts, tying_counts),
        Part("train", grid_train, tying_train),
        Part("null", grid_null, tying_train),
    )

    # ---------------------------------------------------------------- analysis
    def analyse(self, runs, p, out: Output):
        counts = self.runs_of(runs, "counts")[0]["metrics"]
        tok = counts["tokenizer"]
        pdf, checks = self.parameter_table(pd.DataFrame(counts["rows"]), out)
        count_ok = all(c.decision == "equivalent" for c in checks)

        train, null = self.runs_of(runs, "train"), self.runs_of(runs, "null")

        def arm(name):
            return lambda c: c["arm"] == name

        def values(fn, name, runs_=train):
            return ev.seed_values(runs_, arm(name), fn)

        learned = {a: ev.seed_values(train, arm(a), did_learn) for a in LABELS}
        step_margin = STEP_MARGIN * p["steps"]

        def compare(id_, b, metric, fn, margin, sub):
            return ev.paired(f"{id_}:{b}-vs-untied", values(fn, "untied"), values(fn, b), metric=metric,
                             sub_claim=sub, better="lower", arm_a="untied", arm_b=b, margin=margin,
                             learned_a=learned["untied"], learned_b=learned[b])  # fmt: skip

        conv = compare("steps", "tied", "steps to target", steps_to_target, step_margin, "convergence")
        fin = compare("final", "tied", "final val loss", final, MARGIN, "final loss")
        conv_w = compare(
            "steps", "tied-wide", "steps to target", steps_to_target, step_margin, "equal parameters"
        )
        fin_w = compare("final", "tied-wide", "final val loss", final, MARGIN, "equal parameters")
        floors = [
            ev.noise_floor(
                f"null:{name}",
                values(fn, "untied"),
                values(fn, "untied", null),
                seed_offset=NULL_OFFSET,
                metric=metric,
                arm="untied",
                margin=margin,
            )  # fmt: skip
            for name, fn, metric, margin in (
                ("steps", steps_to_target, "steps to target", step_margin),
                ("final", final, "final val loss", MARGIN),
            )  # fmt: skip
        ]
        conv, fin, conv_w, fin_w = ev.with_noise([conv, fin, conv_w, fin_w], floors)
        fin_w, conv_w = ev.holm([fin_w, conv_w])  # one sub-verdict, two measures
        out.table(
            "training",
            comparison_table([conv, fin, conv_w, fin_w, *floors]),
            f"Steps to a validation loss of unigram − {TARGET_BELOW_UNIGRAM} nats, and final validation loss "
            f"(nats/token), each arm (b) − untied (a), paired by seed ({len(p['seeds'])} seeds); the null pairs last",
        )
        out.table("runs", self.run_table(train + null), "Every training run: steps to target and final loss",
                  in_report=False)  # fmt: skip
        self.plot_training(train, null, pdf, floors, p, out)

        conv_l = ev.ladder([conv], "b_better", positive_control=False)
        fin_l = ev.ladder([fin], "b_better", positive_control=False)
        eq_l = ev.ladder([conv_w, fin_w], "b_better", positive_control=False)
        count_v = "supported" if count_ok else "refuted"
        verdict = ev.combine([count_v, conv_l.verdict])
        own = pdf[pdf["model"].str.startswith("subword")].iloc[0]
        g2 = pdf.set_index("model").loc["gpt2-small"] if "gpt2-small" in set(pdf["model"]) else None
        g2_txt = (
            f"; GPT-2 small: {g2['saved']:,} ({g2['saved / untied']:.0%} of the untied model)"
            if g2 is not None
            else ""
        )
        subs = [
            SubVerdict("Tying removes exactly V·d parameters", count_v,
                       f"{own['model']}: {own['saved']:,} of {own['untied params']:,} ({own['saved / untied']:.1%}){g2_txt}",
                       [c.id for c in checks]),  # fmt: skip
            SubVerdict("Faster convergence (steps to the target loss)", conv_l.verdict, conv.text(" steps", "+.1f"), [conv.id]),
            SubVerdict("Lower final validation loss", fin_l.verdict, fin.text(" nats"), [fin.id]),
            SubVerdict("At equal parameter count: tied with a wider FFN vs untied (reported)", eq_l.verdict,
                       f"steps {conv_w.text('', '+.1f')}; final {fin_w.text(' nats')}", [conv_w.id, fin_w.id]),
        ]  # fmt: skip
        dsteps = "—" if conv.diff is None else f"{conv.diff:+.0f}"
        return Verdict(
            verdict=verdict,
            summary=(
                f"Tying removes V·d parameters exactly: {own['saved / untied']:.1%} of this subword model (V = {own['V']}, "
                f"d = {own['d']}){g2_txt}. Steps to the target loss, {conv.text(' steps', '+.1f')}; final validation loss, "
                f"{fin.text(' nats')}. At equal parameters, final {fin_w.text(' nats')}."
            ),
            key_number=f"saves {own['saved / untied']:.1%} here; steps to target tied − untied {dsteps} ({conv.decision}); "
            f"final {fin.short()} nats ({fin.decision})",
            evidence={
                "counts_ok": count_ok,
                "margin": MARGIN,
                "step_margin": step_margin,
                "learn_margin": LEARN_MARGIN,
                "target_below_unigram": TARGET_BELOW_UNIGRAM,
                "tokenizer": tok,
                "convergence": conv_l.verdict,
                "final": fin_l.verdict,
                "equal_parameters": eq_l.verdict,
            },  # fmt: skip
            sub_verdicts=subs,
            comparisons=[*checks, conv, fin, conv_w, fin_w],
            noise_floor=floors,
            caveats=[
                f"Byte-level BPE trained on the training works: V = {tok['vocab_size']}, {tok['chars_per_token']:.2f} characters per token on the validation works. GPT-2 uses V = 50257 and d = 768; here V·d is a similar share of the model, but the model is 10^2–10^3 times smaller.",
                f"{p['steps']} steps of {p['batch']} × {p['seq_len']} tokens (about {p['steps'] * p['batch'] * p['seq_len'] / 1e6:.2f}M tokens, under one epoch), d = {p['d_model']}, {p['n_layers']} layers, no dropout; the anchors' gains are in final perplexity after many epochs of small corpora, where tying also acts as a regulariser.",
                "The untied head starts at the embedding's init scale (normal, std 0.02), so the arms differ only in sharing; the parameter-matched arm spends the V·d extra parameters in the FFN instead.",
            ],
        )

    def parameter_table(self, cdf: pd.DataFrame, out: Output):
        rows, checks = [], []
        for model, g in cdf.groupby("model", sort=False):
            arms = g.set_index("arm")
            t, u = arms.loc["tied"], arms.loc["untied"]
            saved, vd = int(u["closed_form"] - t["closed_form"]), int(t["V"] * t["d"])
            slug = "subword-lm" if model.startswith("subword") else model
            checks.append(ev.exact_check(f"params:{slug}", saved == vd, sub_claim="parameters", metric="untied − tied parameters",
                                         observed=saved, expected=vd, note="closed form"))  # fmt: skip
            if not pd.isna(t["instantiated"]):
                ok = all(arms.loc[a, "instantiated"] == arms.loc[a, "closed_form"] for a in arms.index)
                checks.append(ev.exact_check(f"params:{slug}-instantiated", bool(ok), sub_claim="parameters",
                                             metric="instantiated − closed-form parameters, every arm",
                                             observed=int(sum(arms["instantiated"] - arms["closed_form"])), expected=0,
                                             note="each instantiated arm against its closed form"))  # fmt: skip
            rows.append({"model": model, "V": int(t["V"]), "d": int(t["d"]), "tied params": int(t["closed_form"]),
                         "untied params": int(u["closed_form"]), "saved": saved, "V·d": vd,
                         "saved / untied": saved / u["closed_form"],
                         "tied-wide params (d_ff)": f"{int(arms.loc['tied-wide', 'closed_form']):,} ({int(arms.loc['tied-wide', 'd_ff'])})"
                         if "tied-wide" in arms.index else "—"})  # fmt: skip
        pdf = pd.DataFrame(rows)
        out.table(
            "parameters",
            pdf,
            "Parameters tied vs untied (closed form; this project's subword LM also instantiated)",
        )
        return pdf, checks

    @staticmethod
    def run_table(runs) -> pd.DataFrame:
        return pd.DataFrame(
            [{"arm": r["config"]["arm"], "seed": r["config"]["seed"], "params": r["metrics"]["n_params"],
              "steps to target": steps_to_target(r["metrics"]), "final val loss": final(r["metrics"]),
              "unigram": r["metrics"]["unigram_xent"], "learned": did_learn(r["metrics"])} for r in runs]
        )  # fmt: skip

    def plot_training(self, train, null, pdf, floors, p, out):
        from tfclaims.plotting import subplots

        fig, (a, b, c) = subplots(3, width=4.4, height=3.6)
        plot_curves(a, {LABELS[k]: [r for r in train if r["config"]["arm"] == k] for k in LABELS})
        U = train[0]["metrics"]["unigram_xent"]
        a.axhline(U, color="0.5", lw=0.8, ls=":", label="unigram level")
        a.axhline(U - TARGET_BELOW_UNIGRAM, color="k", lw=0.8, ls="--", label="target loss")
        a.set_ylim(None, U + 0.5)  # the first evaluations (about ln V) would squash the curves that matter
        a.set_xlabel("training step")
        a.set_ylabel("validation loss (nats/token)")
        a.set_title("Validation loss by arm")
        a.legend(fontsize=7)
        by = {(r["config"]["arm"], r["config"]["seed"]): final(r["metrics"]) for r in train}
        floor = ev.noise_bound(floors[1])
        if floor is not None:
            b.axhspan(-floor, floor, color="0.85", label="noise floor (null pair, 95% CI)")
        colours = {"tied": "C0", "tied-wide": "C2"}  # as in the left panel (untied is C1)
        for i, arm in enumerate(("tied", "tied-wide")):
            d = [
                by[(arm, s)] - by[("untied", s)]
                for s in p["seeds"]
                if by.get((arm, s)) is not None and by.get(("untied", s)) is not None
            ]
            b.scatter(
                np.full(len(d), i) + np.linspace(-0.15, 0.15, len(d)),
                d,
                s=18,
                color=colours[arm],
                label=LABELS[arm],
            )
            if d:
                ci = mean_ci(d)
                b.errorbar(i + 0.3, ci.mean, yerr=ci.half_width, fmt="D", color="k", capsize=3)
        b.axhline(0, color="k", lw=0.6)
        b.set_xticks([0, 1], ["tied − untied", "tied wide − untied"])
        b.set_xlim(-0.5, 1.6)
        b.set_ylabel("Δ final validation loss (nats/token)")
        b.set_title("Per seed, paired (mean, 95% CI)")
        b.legend(fontsize=7, loc="best")
        x = np.arange(len(pdf))
        c.bar(x, pdf["saved / untied"] * 100, color="C2")
        c.set_xticks(x, [m.replace("subword LM (this project), ", "subword LM\n") for m in pdf["model"]], rotation=30,
                     ha="right", fontsize=7.5)  # fmt: skip
        c.set_ylabel("parameters saved by tying (% of untied)")
        c.set_title("V·d as a share of the model")
        for i, v in enumerate(pdf["saved / untied"]):
            c.annotate(f"{v:.1%}", (i, v * 100), ha="center", va="bottom", fontsize=7)
        out.figure(
            "tying",
            fig,
            f"Left: validation loss during training per arm (mean and 95% band over {len(p['seeds'])} seeds), with the "
            "unigram level and the target of 'steps to target'. Middle: final validation loss of each arm minus untied, "
            "per seed, with the null pair's 95% CI as the noise floor. Right: the parameters tying saves (V·d) as a "
            "share of the untied model, for this subword model and published configurations.",
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(WeightTying)
