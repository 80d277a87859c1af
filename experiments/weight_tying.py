"""`weight_tying`: sharing the input embedding with the output projection saves V·d parameters and speeds convergence."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tfclaims import evidence as ev
from tfclaims.comparison import plot_curves
from tfclaims.experiment import Experiment, Output, Part, SubVerdict, Verdict
from tfclaims.lm_recipes import tying_counts, tying_train
from tfclaims.small_lm import run_fields, train_profile
from tfclaims.tables import comparison_table

COUNT_PRESETS = ("gpt2-small", "gpt2-medium", "gpt2-xl", "bert-base", "llama-7b")
MARGIN = 0.02  # nats: |tied − untied| inside this is "no difference" (TOST), for the AUC and the final loss
LEARN_MARGIN = 0.10  # nats below the unigram cross-entropy: the run learned
NULL_OFFSET = 1000


def auc(m: dict) -> float | None:
    """Mean validation loss over the evaluations after step 0: lower = converged faster (area under the curve)."""
    v = m["val_loss"][1:]
    return None if m.get("diverged_at") is not None or not v or None in v else float(np.mean(v))


def final(m: dict) -> float | None:
    return m.get("final_val")


def did_learn(m: dict) -> bool:
    return ev.learned(m.get("final_val"), m["unigram_xent"], LEARN_MARGIN)


def grid_counts(p):
    return [{**run_fields(p), "presets": list(COUNT_PRESETS)}]


def grid_train(p):
    return [{"tie": t, **run_fields(p), "seed": s} for t in (True, False) for s in p["seeds"]]


def grid_null(p):
    """The null pair: the untied arm (the baseline) rerun at seeds s + NULL_OFFSET."""
    return [{"tie": False, **run_fields(p), "seed": s + NULL_OFFSET} for s in p["seeds"]]


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
        "(1) Parameter counts tied vs untied, closed form (`tfclaims.counting`) against the instantiated character LM, and "
        "the share V·d represents for published configurations. (2) Training: the character LM (Shakespeare, vocabulary "
        "of characters) tied and untied on the same seeds (same init seed and data order), same init scale for the "
        "separate head; convergence speed measured as the mean validation loss over the evaluations after step 0 (area "
        "under the curve, AUC), and the final loss. A null pair (the untied arm rerun at seeds s + "
        f"{NULL_OFFSET}) gives the noise floor of both measures."
    )
    rule = (
        "Parameters (exact checks): supported if untied − tied equals V·d exactly for every configuration, in closed "
        "form, and the instantiated character LM matches its closed form; else refuted. Convergence: the AUC, tied vs "
        f"untied, paired by seed (paired t-test; TOST against ±{MARGIN} nats); a run learned if its final validation "
        f"loss is at least {LEARN_MARGIN} nats below the unigram cross-entropy, and if neither arm learned in any seed "
        "the comparison is excluded. Sub-verdict by the evidence ladder: supported if tied is significantly lower, "
        "refuted if untied is significantly lower, otherwise inconclusive (no positive control, so equivalence within "
        "the margin does not refute). Final validation loss: the same test, reported as its own sub-verdict. Overall: "
        "parameters and convergence combined: both supported → supported; one supported, the other refuted → mixed; "
        "both refuted → refuted; otherwise inconclusive."
    )
    profiles = {
        "quick": train_profile("quick"),
        "default": train_profile("default", seeds=[0, 1, 2, 3, 4]),
        "full": train_profile("full"),
    }
    parts = (
        Part("counts", grid_counts, tying_counts),
        Part("train", grid_train, tying_train),
        Part("null", grid_null, tying_train),
    )

    # ---------------------------------------------------------------- analysis
    def analyse(self, runs, p, out: Output):
        cdf = pd.DataFrame(self.runs_of(runs, "counts")[0]["metrics"]["rows"])
        rows, checks = [], []
        for model, g in cdf.groupby("model", sort=False):
            t, u = g[g["tie"]].iloc[0], g[~g["tie"]].iloc[0]
            saved, vd = int(u["closed_form"] - t["closed_form"]), int(t["V"] * t["d"])
            slug = "char-lm" if model.startswith("char LM") else model
            checks.append(
                ev.exact_check(
                    f"params:{slug}",
                    saved == vd,
                    sub_claim="parameters",
                    metric="untied − tied parameters",
                    observed=saved,
                    expected=vd,
                    note="closed form",
                )  # fmt: skip
            )
            if not pd.isna(t["instantiated"]):
                inst = int(u["instantiated"] - t["instantiated"])
                ok = (
                    inst == saved
                    and t["instantiated"] == t["closed_form"]
                    and u["instantiated"] == u["closed_form"]
                )
                checks.append(
                    ev.exact_check(
                        f"params:{slug}-instantiated",
                        bool(ok),
                        sub_claim="parameters",
                        metric="untied − tied parameters, instantiated",
                        observed=inst,
                        expected=saved,
                        note="instantiated model against its closed form",
                    )  # fmt: skip
                )
            rows.append(
                {
                    "model": model,
                    "V": int(t["V"]),
                    "d": int(t["d"]),
                    "tied params": int(t["closed_form"]),
                    "untied params": int(u["closed_form"]),
                    "saved": saved,
                    "V·d": vd,
                    "saved / untied": saved / u["closed_form"],
                    "instantiated agrees": "—"
                    if pd.isna(t["instantiated"])
                    else str(checks[-1].decision == "equivalent"),
                }  # fmt: skip
            )
        pdf = pd.DataFrame(rows)
        out.table(
            "parameters", pdf, "Parameters tied vs untied (closed form; the character LM also instantiated)"
        )
        count_ok = all(c.decision == "equivalent" for c in checks)

        train, null = self.runs_of(runs, "train"), self.runs_of(runs, "null")

        def tied(c):
            return c["tie"]

        def untied(c):
            return not c["tie"]

        learned = dict(
            learned_a=ev.seed_values(train, untied, did_learn),
            learned_b=ev.seed_values(train, tied, did_learn),
        )
        common = dict(better="lower", arm_a="untied", arm_b="tied", margin=MARGIN, **learned)
        conv = ev.paired("auc:tied-vs-untied", ev.seed_values(train, untied, auc), ev.seed_values(train, tied, auc),
                         metric="val loss AUC", sub_claim="convergence", **common)  # fmt: skip
        fin = ev.paired("final:tied-vs-untied", ev.seed_values(train, untied, final), ev.seed_values(train, tied, final),
                        metric="final val loss", sub_claim="final loss", **common)  # fmt: skip
        floors = [
            ev.noise_floor(
                f"null:{name}",
                ev.seed_values(train, untied, fn),
                ev.seed_values(null, untied, fn),
                seed_offset=NULL_OFFSET,
                metric=metric,
                arm="untied",
                margin=MARGIN,
            )  # fmt: skip
            for name, fn, metric in (("auc", auc, "val loss AUC"), ("final", final, "final val loss"))
        ]
        conv, fin = ev.with_noise([conv, fin], floors)
        out.table(
            "training",
            comparison_table([conv, fin, *floors]),
            f"Validation loss (nats/char), tied (b) − untied (a), paired by seed ({len(p['seeds'])} seeds); the null "
            "pairs last",
        )

        self.plot_training(train, pdf, p, out)

        conv_l = ev.ladder([conv], "b_better", positive_control=False)
        fin_l = ev.ladder([fin], "b_better", positive_control=False)
        count_v = "supported" if count_ok else "refuted"
        verdict = ev.combine([count_v, conv_l.verdict])
        own = pdf.iloc[0]
        g2 = pdf.set_index("model").loc["gpt2-small"] if "gpt2-small" in set(pdf["model"]) else None
        subs = [
            SubVerdict(
                "Tying removes exactly V·d parameters",
                count_v,
                f"{own['model']}: {own['saved']:,} of {own['untied params']:,} ({own['saved / untied']:.1%})"
                + (
                    f"; GPT-2 small: {g2['saved']:,} ({g2['saved / untied']:.0%} of the untied model)"
                    if g2 is not None
                    else ""
                ),
                [c.id for c in checks],
            ),
            SubVerdict(
                "Faster convergence (AUC of validation loss)", conv_l.verdict, conv.text(" nats"), [conv.id]
            ),
            SubVerdict("Lower final validation loss (reported)", fin_l.verdict, fin.text(" nats"), [fin.id]),
        ]
        g2_txt = f"{g2['saved / untied']:.0%} of an untied GPT-2 small. " if g2 is not None else ""
        dtxt = "—" if conv.diff is None else f"{conv.diff:+.3f}"
        return Verdict(
            verdict=verdict,
            summary=(
                f"Tying removes V·d parameters exactly: {own['saved / untied']:.1%} of this character model (V = {own['V']}), "
                + g2_txt
                + f"Convergence (mean validation loss over training), {conv.text(' nats')}; final: {fin.text(' nats')}."
            ),
            key_number=f"saves {own['saved / untied']:.1%} here"
            + (f" (GPT-2 small: {g2['saved / untied']:.0%})" if g2 is not None else "")
            + f"; AUC tied − untied {dtxt} nats ({conv.decision})",
            evidence={
                "counts_ok": count_ok,
                "margin": MARGIN,
                "learn_margin": LEARN_MARGIN,
                "convergence": conv_l.verdict,
                "final": fin_l.verdict,
            },  # fmt: skip
            sub_verdicts=subs,
            comparisons=[*checks, conv, fin],
            noise_floor=floors,
            caveats=[
                f"A character vocabulary (V = {own['V']}) makes the embedding a small part of the model; the anchors used word vocabularies (10k–50k), where the embedding dominates and tying acts as a strong regulariser.",
                f"Short training ({p['steps']} steps, d = {p['d_model']}); the anchors' gains are in final perplexity after many epochs, with dropout.",
                "The parameter counts are exact checks (no noise floor); the null pair is the training noise floor.",
            ],
        )

    def plot_training(self, train, pdf, p, out):
        from tfclaims.plotting import subplots

        fig, (a, b) = subplots(2, width=4.6, height=3.6)
        plot_curves(
            a,
            {
                "tied": [r for r in train if r["config"]["tie"]],
                "untied": [r for r in train if not r["config"]["tie"]],
            },
        )
        a.set_xlabel("training step")
        a.set_ylabel("validation loss (nats/char)")
        a.set_title("Validation loss, tied vs untied")
        a.legend()
        x = np.arange(len(pdf))
        b.bar(x, pdf["saved / untied"] * 100, color="C2")
        b.set_xticks(
            x,
            [m.replace("char LM (this project), ", "char LM\n") for m in pdf["model"]],
            rotation=30,
            ha="right",
            fontsize=7.5,
        )
        b.set_ylabel("parameters saved by tying (% of untied)")
        b.set_title("V·d as a share of the model")
        for i, v in enumerate(pdf["saved / untied"]):
            b.annotate(f"{v:.1%}", (i, v * 100), ha="center", va="bottom", fontsize=7)
        out.figure(
            "tying",
            fig,
            f"Left: validation loss during training, tied vs untied (mean and 95% band over {len(p['seeds'])} seeds). Right: the parameters tying saves (V·d) as a share of the untied model, for this character model and published configurations.",
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(WeightTying)
