"""`dk_scaling`: dividing q·k by sqrt(d_k) keeps attention logits at unit variance and training healthy."""

from __future__ import annotations

from tfclaims.evidence import readouts as rd
from tfclaims.evidence.declare import (
    Better,
    Declaration,
    NullPair,
    Readout,
    SubClaim,
    Trend,
    arm,
    bound,
    cell,
    cells,
    check,
)
from tfclaims.evidence.evaluate import evaluate
from tfclaims.grids.sweep import profile_sweep
from tfclaims.harness.experiment import Experiment, Output, Part, recipes, verdict_from

from experiments.dk_scaling import analysis as view
from experiments.dk_scaling.grid import (
    NULL_OFFSET,
    SWEPT,
    grid_init,
    grid_logit,
    grid_mc,
    grid_null,
    grid_sweep,
    grid_train,
)

DK = recipes("experiments.dk_scaling.recipes")  # loaded (with torch) when a run starts

LAW_TOL = 0.10  # Monte Carlo Var(q.k)/d_k (and the scaled variance) must lie within 10% of 1
SAT_MAX_P = 0.9  # unscaled mean max probability at the largest d_k must exceed this
SAT_FLAT = 0.05  # scaled softmax: the slope of ln|J| per doubling of d_k inside ±this
ADD_RATIO = 4.0  # additive scores' variance: max/min across d below this
TRAIN_MARGIN = 0.02  # nats: TOST margin reported beside the training comparisons
TRAIN_SOURCE = "practical: ≈1% of a ~2 nats/char character LM's loss (Britz et al.'s BLEU does not convert)"
SAT_SOURCE = f"the claim's own 'flat' band for the scaled softmax (±{SAT_FLAT:g} ln‖J‖ per doubling)"
LEARN_MARGIN = 0.10  # nats below the unigram cross-entropy: the run learned
FINAL = rd.final_loss()
LEARNED = rd.learned(LEARN_MARGIN)


COLLAPSE = Readout(
    "max_prob_end",
    "layer 1's mean max attention probability at the end",
    better="higher",
    definition="on the fixed validation batch at the last evaluation (higher: nearer one-hot)",
)
GROWTH = Readout(
    "logit_growth",
    "growth of layer 1's logit variance",
    better="higher",
    definition="ln(logit variance at the end / at init) on the fixed validation batch",
)
NULL_NOTE = " The null pair (first width, d_k = null_dk, fixed rate) calibrates only the cell it was run in."


def _mc(column: str, label: str) -> Readout:
    return Readout(column, label, definition="from the seeded Monte Carlo")


LAW, LAW_SCALED = _mc("var_ratio", "Var(q·k)/d_k"), _mc("var_scaled", "Var(q·k/√d_k)")
LNJ_U, LNJ_S = (
    _mc("ln|J| unscaled", "ln‖J‖ (unscaled softmax)"),
    _mc("ln|J| scaled", "ln‖J‖ (scaled softmax)"),
)
MAXP = _mc("max p unscaled", "mean max probability (unscaled)")
ADD = _mc("additive_spread", "max/min Var(additive) over d")


def _score_subclaims(p: dict) -> tuple[SubClaim, ...]:
    """The scores from the Monte Carlo: Var(q·k) against d_k, softmax saturation, additive scores."""
    top = max(p["mc_dks"])
    return (
        check(
            "law",
            "Var(q·k) = d_k and Var(q·k/√d_k) = 1 for unit-variance components (Monte Carlo)",
            (LAW, LAW_SCALED),
            bound(1 - LAW_TOL, 1 + LAW_TOL),
            table="mc",
            cells=cells("dk{d_k}", d_k=p["mc_dks"]),
        ),
        SubClaim(
            "saturation",
            "Unscaled softmax's gradient (‖J‖) vanishes as d_k grows",
            Trend("log2 d_k", "down"),
            (LNJ_U,),
            table="jac",
            b=arm("unscaled softmax"),
            sesoi=SAT_FLAT,
            sesoi_source=SAT_SOURCE,
        ),
        SubClaim(
            "flat",
            f"Scaled softmax's ‖J‖ stays flat in d_k (within ±{SAT_FLAT} per doubling)",
            Trend("log2 d_k", lo=-SAT_FLAT, hi=SAT_FLAT),
            (LNJ_S,),
            table="jac",
            b=arm("scaled softmax"),
        ),
        SubClaim(
            "one-hot",
            f"Unscaled softmax is near one-hot at d_k = {top} (mean max p > {SAT_MAX_P})",
            bound(SAT_MAX_P, None),
            (MAXP,),
            table="mc",
            cells=(cell(f"dk{top}", d_k=top),),
        ),
        SubClaim(
            "additive",
            f"Additive scores do not grow with d (max/min variance below {ADD_RATIO:g})",
            bound(None, ADD_RATIO),
            (ADD,),
            table="summary",
        ),
    )


def _loss_subclaims(p: dict, scaled, unscaled, dks, train: dict) -> tuple[SubClaim, ...]:
    """Unscaled against scaled training: at one fixed rate, at each arm's best rate, and with qk-norm."""
    sdk = p["sweep_dk"]
    tuned = {k: arm(f"{k}, at its best rate", arm=k) for k in SWEPT}
    sweep = dict(
        table="tuned",
        readouts=(FINAL,),
        guard=LEARNED,
        noise="null",
        sesoi=TRAIN_MARGIN,
        sesoi_source=TRAIN_SOURCE,
        cells=cells("{scale}", scale=[f"d{d}" for d, _ in p["scales"]]),
        note=profile_sweep(p).rule() + NULL_NOTE,
    )
    return (
        SubClaim(
            "training",
            f"Unscaled training is worse at one fixed rate ({p['lr']:g}; unit-variance "
            "q, k; final validation loss)",
            Better("a"),
            a=scaled,
            b=unscaled,
            cells=dks,
            counts=False,
            sesoi=TRAIN_MARGIN,
            sesoi_source=TRAIN_SOURCE,
            **train,
        ),
        SubClaim(
            "tuned",
            f"Unscaled training is worse at each arm's own best rate (d_k = {sdk})",
            Better("a"),
            a=tuned["scaled"],
            b=tuned["unscaled"],
            control="training",
            **sweep,
        ),
        SubClaim(
            "qk-norm",
            "qk-layernorm rescues unscaled attention (each at its best rate)",
            Better("b"),
            a=tuned["unscaled"],
            b=tuned["unscaled, qk-norm"],
            counts=False,
            **sweep,
        ),
    )


def _logit_subclaims(p: dict, train: dict) -> tuple[SubClaim, ...]:
    """Large initial logits alone (scaled attention at d_k = ref_dk): the loss at s > 1 and its trend in s."""
    ref = p["ref_dk"]
    by_s = (cell("s1", dk=ref, scaled=True, logit_std=1.0, part="train"),) + tuple(
        cell(f"s{s:g}", dk=ref, scaled=True, logit_std=s, part="logit") for s in p["logit_stds"]
    )
    return (
        SubClaim(
            "logit",
            f"Large initial logits alone slow training (d_k = {ref}, scaled; s > 1 vs 1)",
            Better("a"),
            a=arm("initial logit std 1", logit_std=1.0, part="train"),
            b=arm("initial logit std s", part="logit"),
            cells=by_s[1:],
            counts=False,
            sesoi=TRAIN_MARGIN,
            sesoi_source=TRAIN_SOURCE,
            **train,
        ),
        SubClaim(
            "logit-trend",
            f"Final loss rises with log2 s (d_k = {ref}, scaled)",
            Trend("log2 s", "up"),
            b=arm(f"scaled, d_k = {ref}"),
            cells=by_s,
            counts=False,
            **{**train, "noise": None},
        ),
    )


class DkScaling(Experiment):
    claim_id = "dk_scaling"
    title = "Scaling q·k by 1/sqrt(d_k) keeps logits at unit variance"
    headline = "tuned"  # the answers table's number
    order = 2
    profiles = {
        "quick": {
            "mc_dks": [8, 64], "mc_samples": 2000, "dks": [8, 32], "d_model": 32, "n_layers": 1, "n_heads": 2,
            "steps": 12, "batch": 8, "seq_len": 32, "lr": 3e-3, "eval_every": 6, "eval_batches": 2,
            "ref_dk": 8, "logit_stds": [4.0], "null_dk": 32, "seeds": [0, 1], "sweep_dk": 8,
            "scales": [[32, 2], [64, 2]], "rates": [1.5e-3, 3e-3], "selection_seeds": [10],
            "rate_factors": [0.5, 1.0], "rate_extend": 1,
        },
        "default": {
            "mc_dks": [16, 32, 64, 128, 256, 512, 1024], "mc_samples": 20000, "dks": [16, 64, 256, 1024],
            "d_model": 64, "n_layers": 2, "n_heads": 2, "steps": 400, "batch": 32, "seq_len": 64, "lr": 3e-3,
            "eval_every": 50, "eval_batches": 4, "ref_dk": 64, "logit_stds": [4.0, 8.0, 16.0, 32.0],
            "null_dk": 256, "seeds": [0, 1, 2, 3, 4], "sweep_dk": 64, "scales": [[64, 2], [136, 4]],
            "rates": [7.5e-4, 1.5e-3, 3e-3, 6e-3, 1.2e-2, 2.4e-2], "selection_seeds": [100, 101, 102],
            "rate_factors": [0.25, 0.5, 1.0], "rate_extend": 2,
        },
        "full": {
            "mc_dks": [16, 32, 64, 128, 256, 512, 1024, 2048], "mc_samples": 100000,
            "dks": [16, 64, 256, 1024], "d_model": 256, "n_layers": 4, "n_heads": 4, "steps": 3000,
            "batch": 64, "seq_len": 128, "lr": 1e-3, "eval_every": 250, "eval_batches": 16, "ref_dk": 64,
            "logit_stds": [4.0, 8.0, 16.0, 32.0], "null_dk": 256, "seeds": [0, 1, 2, 3, 4], "sweep_dk": 64,
            "scales": [[256, 4], [512, 8]], "rates": [1.25e-4, 2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3],
            "selection_seeds": [100, 101, 102], "rate_factors": [0.25, 0.5, 1.0], "rate_extend": 2,
        },
    }  # fmt: skip
    parts = (
        Part("monte_carlo", grid_mc, DK.dk_monte_carlo),
        Part("init", grid_init, DK.dk_init_probe),
        Part("train", grid_train, DK.dk_train),
        Part("logit", grid_logit, DK.dk_train),
        Part("null", grid_null, DK.dk_train),
        Part("qknorm", lambda p: [], DK.dk_train_qknorm),  # runs only in the sweep
        Part("sweep", grid_sweep, DK.dk_train, staged=True),
    )

    def declare(self, p: dict) -> Declaration:
        dks = cells("dk{dk}", dk=p["dks"])
        train = dict(table="runs", readouts=(FINAL,), guard=LEARNED, noise="null")
        scaled, unscaled = (
            arm("scaled", scaled=True, part="train"),
            arm("unscaled", scaled=False, part="train"),
        )
        return Declaration(
            (
                *_score_subclaims(p),
                *_loss_subclaims(p, scaled, unscaled, dks, train),
                SubClaim(
                    "collapse",
                    "Unscaled attention ends more collapsed (layer 1's mean max probability at "
                    "the end, fixed rate)",
                    Better("b"),
                    (COLLAPSE,),
                    a=scaled,
                    b=unscaled,
                    cells=dks,
                    counts=False,
                    table="runs",
                ),
                SubClaim(
                    "logit-growth",
                    "Unscaled logits grow more during training (layer 1, ln of the end/init "
                    "logit variance, fixed rate)",
                    Better("b"),
                    (GROWTH,),
                    a=scaled,
                    b=unscaled,
                    cells=dks,
                    counts=False,
                    table="runs",
                ),
                SubClaim(
                    "harm",
                    "The harm grows with d_k (per-seed slope of unscaled − scaled in log2 d_k)",
                    Trend("log2 d_k", "up"),
                    a=scaled,
                    b=unscaled,
                    cells=dks,
                    counts=False,
                    **{**train, "noise": None},
                ),
                *_logit_subclaims(p, train),
            ),
            nulls=(
                NullPair(
                    "null",
                    arm(f"scaled d_k={p['null_dk']}", part="train", dk=p["null_dk"], scaled=True),
                    arm("rerun", part="null"),
                    (FINAL,),
                    seed_offset=NULL_OFFSET,
                ),
            ),
        )

    def analyse(self, runs, p, out: Output):
        t, decl = view.observe(runs, p, (FINAL, LEARNED)), self.declare(p)
        result = evaluate(decl, t)
        view.write_tables(runs, t, result, p, out)
        view.write_sweep(t, p, out)
        view.plot_sweep(t, p, {k: k for k in SWEPT}, out)
        view.plot_mc(t["mc"], out)
        view.plot_training(view.fixed_runs(runs, p), t, decl.sub("logit-trend"), p, out)
        mc, top = t["mc"], max(p["dks"])
        at_max, harm = result.get(f"training/dk{top}"), result.get("harm")
        tuned = ", ".join(
            f"{c.id.split('/')[-1]} {c.short('+.3f')} ({c.decision})" for c in result.of("tuned")
        )
        key = (
            f"Var(q·k)/d_k = {mc['Var(q·k)/d_k'].mean():.3f}; unit-variance q, k: unscaled − scaled val "
            f"loss, each at its best rate (d_k = {p['sweep_dk']}): {tuned or '—'} nats; at lr {p['lr']:g}, "
            f"d_k = {top}: {at_max.short('+.3f')} ({at_max.decision}), trend {harm.short('+.3f')} per "
            f"doubling"
        )
        return verdict_from(
            result,
            key_number=key,
            summary=(
                f"The variance law holds as stated (Var(q·k)/d_k within {LAW_TOL:.0%} of 1 up to d_k = "
                f"{mc['d_k'].max()}). With unit-variance q and k in a trained LM, unscaled − scaled final "
                f"validation loss: "
                + "; ".join(
                    f"{c.id.split('/')[-1]}: {c.short('+.3f')} ({c.decision})" for c in result.of("training")
                )
                + "."
            ),
            evidence={
                "law_tolerance": LAW_TOL,
                "train_margin": TRAIN_MARGIN,
                "learn_margin": LEARN_MARGIN,
                "lr_choices": t["choices"].to_dict("records"),
            },
            caveats=self.caveats(
                p,
                dk_steps=view.dk_steps_text(t),
                n_factors=len(p["rate_factors"]),
                n_rates=len(p["rates"]),
                n_selection=len(p["selection_seeds"]),
            ),
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(DkScaling)
