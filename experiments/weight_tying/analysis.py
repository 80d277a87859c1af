"""weight_tying: observation tables from its records (parameter counts, training runs), the steps-to-target
readout (interpolated between evaluations), its own tables and its figure."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.curves import plot_curves
from tfclaims.evidence.plots import drawing, sweep_caption
from tfclaims.evidence.stats import mean_ci
from tfclaims.evidence.tables import comparison_table, runs_table
from tfclaims.evidence.tuning import SweepWords, curve_table, read_sweep, write_sweep_tables
from tfclaims.grids.sweep import scale_label

from .grid import SWEPT, scales

LABELS = {"tied": "tied", "untied": "untied", "tied-wide": "tied, wider FFN (untied's parameter count)"}


def steps_to_target(m: dict, below: float) -> float | None:
    """The first step at which the validation loss reaches the unigram level less `below` nats, linearly
    interpolated between evaluations; None if it never does (or the run diverged)."""
    if m.get("diverged_at") is not None:
        return None
    target = m["unigram_xent"] - below
    s, v = m["eval_steps"], m["val_loss"]
    if v and v[0] is not None and v[0] <= target:
        return float(s[0])
    for i in range(1, len(v)):
        if v[i] is not None and v[i] <= target:
            v0 = v[i - 1]
            return float(s[i - 1] + (s[i] - s[i - 1]) * (v0 - target) / (v0 - v[i]))
    return None


def early_select(m: dict) -> float | None:
    """A small-data run's early-stopped loss on the selection half (what picks its step and its rate)."""
    return (m.get("early") or {}).get("select_loss")


def early_test(m: dict) -> float | None:
    """A small-data run's early-stopped loss on the test half (its score)."""
    return (m.get("early") or {}).get("test_loss")


def learned_loss(m: dict) -> float | None:
    """The loss the learned-at-all guard reads: a small-data run's early-stopped selection-half loss (its last
    step has over-fitted), a one-pass run's final validation loss."""
    return early_select(m) if "early" in m else m.get("final_val")


def _slug(model: str) -> str:
    return "subword-lm" if model.startswith("subword") else model


def observe(runs: list[dict], p: dict, readouts) -> dict[str, pd.DataFrame]:
    """runs: one row per training run with its readouts, parameters, unigram level, loss at init, regime
    (one-pass: the train and null parts; small-data: the small part), scale label and role (fixed: the
    fixed-rate design at the profile's size; selection; test: the sweep's fresh seeds; null: a regime's null
    pair); tuned, choices, sensitivity: each regime's sweep read by `evidence.tuning` (one pass chooses by
    final loss, small data by the early-stopped selection-half loss); first: the null pairs of the sweep
    (the untied arm's fresh seeds at the first scale and their reruns); counts: per model, untied − tied
    parameters less V·d (closed form); instantiated: per arm of this project's model, instantiated less
    closed-form parameters."""
    sel, fresh, sc = set(p["selection_seeds"]), set(p["tuned_seeds"]), scales(p)
    labels = {(s["d_model"], s["n_layers"]): scale_label(s) for s in sc}

    def role(c, m):
        if c.get("part") != "small" and (c["d_model"], c["n_layers"], c["lr"]) == (
            p["d_model"],
            p["n_layers"],
            p["lr"],
        ):
            return "fixed"
        return "selection" if c["seed"] in sel else "test" if c["seed"] in fresh else "null"

    trained = [r for name in ("train", "null", "small") for r in part(runs, name)]
    t = runs_table(
        trained,
        readouts,
        params=lambda c, m: m["n_params"],
        unigram=lambda c, m: m["unigram_xent"],
        init_loss=lambda c, m: m["val_loss"][0],
        role=role,
        select_loss=lambda c, m: early_select(m),
        regime=lambda c, m: "small-data" if c["part"] == "small" else "one-pass",
        scale=lambda c, m: labels.get((c["d_model"], c["n_layers"])),
        epochs=lambda c, m: m.get("epochs"),
        early_step=lambda c, m: (m.get("early") or {}).get("step"),
    )
    arms = {a: {"arm": a} for a in SWEPT}
    by = {scale_label(s): s for s in sc}
    choices, tuned, seeds = [], [], []
    for regime, loss in (("one-pass", "final_val"), ("small-data", "select_loss")):
        here = t[(t.regime == regime) & t.role.isin(["selection", "test"])]
        c, tu, se = read_sweep(here, arms, by, loss=loss)
        choices.append(c.assign(regime=regime))
        tuned.append(tu.assign(regime=regime))
        seeds.append(se.assign(regime=regime))
    choices, tuned = pd.concat(choices, ignore_index=True), pd.concat(tuned, ignore_index=True)
    first = pd.concat([tuned[tuned.scale == scale_label(sc[0])], t[t.role == "null"]], ignore_index=True)
    cdf = pd.DataFrame(part(runs, "counts")[0]["metrics"]["rows"])
    counts, inst = [], []
    for model, g in cdf.groupby("model", sort=False):
        arms_ = g.set_index("arm")
        saved = int(arms_.loc["untied", "closed_form"] - arms_.loc["tied", "closed_form"])
        vd = int(arms_.loc["tied", "V"] * arms_.loc["tied", "d"])
        counts.append({"model": _slug(model), "unit": 0, "excess": saved - vd})
        inst += [
            {
                "arm": a,
                "unit": 0,
                "instantiated_excess": int(arms_.loc[a, "instantiated"] - arms_.loc[a, "closed_form"]),
            }
            for a in arms_.index
            if not pd.isna(arms_.loc[a, "instantiated"])
        ]
    return {
        "runs": t,
        "tuned": tuned,
        "choices": choices,
        "sensitivity": pd.concat(seeds, ignore_index=True),
        "first": first,
        "counts": pd.DataFrame(counts),
        "instantiated": pd.DataFrame(inst),
        "count_rows": cdf,
    }


def parameter_table(cdf: pd.DataFrame) -> pd.DataFrame:
    """Per model: V, d, the parameters of each arm (closed form), what tying saves and V·d."""
    rows = []
    for model, g in cdf.groupby("model", sort=False):
        arms = g.set_index("arm")
        t, u = arms.loc["tied"], arms.loc["untied"]
        saved = int(u["closed_form"] - t["closed_form"])
        wide = (
            f"{int(arms.loc['tied-wide', 'closed_form']):,} ({int(arms.loc['tied-wide', 'd_ff'])})"
            if "tied-wide" in arms.index
            else "—"
        )
        rows.append(
            {
                "model": model,
                "V": int(t["V"]),
                "d": int(t["d"]),
                "tied params": int(t["closed_form"]),
                "untied params": int(u["closed_form"]),
                "saved": saved,
                "V·d": int(t["V"] * t["d"]),
                "saved / untied": saved / u["closed_form"],
                "tied-wide params (d_ff)": wide,
            }
        )
    return pd.DataFrame(rows)


def write_tables(t: dict, result, pdf: pd.DataFrame, p: dict, below: float, out) -> None:
    out.table(
        "parameters",
        pdf,
        "Parameters tied vs untied (closed form; this project's subword LM also instantiated)",
    )
    tuned = [c for s in ("final", "convergence", "small-data", "range") for c in result.of(s)]
    out.table(
        "tuned",
        comparison_table([*tuned, *(f for f in result.floors if f.sub_claim != "null")]),
        "Tied (b) − untied (a), each at its own best rate on the fresh seeds, per regime and scale: final "
        f"validation loss and steps to a validation loss of unigram − {below} nats in one pass over the "
        "text; early-stopped test loss after many epochs of a small subset with dropout; learning-rate "
        "sensitivity (selection seeds, first scale). The null pairs of each regime last",
    )
    fixed = [c for s in ("convergence-fixed", "final-fixed", "equal-params") for c in result.of(s)]
    out.table(
        "training",
        comparison_table([*fixed, *(f for f in result.floors if f.sub_claim == "null")]),
        f"At one rate ({p['lr']:g}, d = {p['d_model']}, {p['n_layers']} layers): steps to target (log-rank; "
        "restricted mean steps) and final validation loss (nats/token, paired by seed), each arm (b) − "
        f"untied (a), {len(p['seeds'])} seeds; the null pair last",
    )
    curves = curve_table(t["runs"][t["runs"].regime == "one-pass"], ["scale", "arm"])
    small = curve_table(t["runs"][t["runs"].regime == "small-data"], ["scale", "arm"], loss="select_loss")
    words = SweepWords(
        per="regime and scale",
        reads="final validation loss (one pass) or early-stopped selection-half loss (small data), "
        "nats/token",
    )
    curves = pd.concat(
        [curves.assign(regime="one-pass"), small.assign(regime="small-data")], ignore_index=True
    )
    write_sweep_tables(out, t["choices"], curves, words)
    cols = {"regime": "regime", "scale": "scale", "role": "role", "arm": "arm", "lr": "lr", "unit": "seed",
            "params": "params", "steps_to_target": "steps to target", "final_val": "final val loss",
            "select_loss": "early-stopped selection loss", "early_test": "early-stopped test loss",
            "unigram": "unigram", "learned": "learned"}  # fmt: skip
    out.table(
        "runs",
        t["runs"][list(cols)].rename(columns=cols),
        "Every training run: steps to target, final loss and (small data) the early-stopped losses",
        in_report=False,
    )


def fixed_records(runs: list[dict], p: dict) -> list[dict]:
    """The fixed-rate design's training records (the profile's size and rate, one pass)."""
    at = (p["d_model"], p["n_layers"], p["lr"])
    return [
        r
        for r in part(runs, "train")
        if (r["config"]["d_model"], r["config"]["n_layers"], r["config"]["lr"]) == at
    ]


@drawing
def plot_training(train, pdf: pd.DataFrame, floor: float | None, p: dict, below: float, out) -> None:
    """The fixed-rate design's figure: curves per arm, per-seed differences, the parameters saved."""
    from tfclaims.plotting import subplots

    fig, (a, b, c) = subplots(3, width=4.4, height=3.6)
    plot_curves(a, {LABELS[k]: [r for r in train if r["config"]["arm"] == k] for k in LABELS})
    U = train[0]["metrics"]["unigram_xent"]
    a.axhline(U, color="0.5", lw=0.8, ls=":", label="unigram level")
    a.axhline(U - below, color="k", lw=0.8, ls="--", label="target loss")
    a.set_ylim(None, U + 0.5)  # the first evaluations (about ln V) would squash the curves that matter
    a.set(
        xlabel="training step",
        ylabel="validation loss (nats/token)",
        title=f"Validation loss by arm (one rate, {p['lr']:g})",
    )
    a.legend(fontsize=7)
    by = {(r["config"]["arm"], r["config"]["seed"]): r["metrics"].get("final_val") for r in train}
    if floor is not None:
        b.axhspan(-floor, floor, color="0.85", label="null pair's 95% bound (this cell)")
    colours = {"tied": "C0", "tied-wide": "C2"}  # as in the left panel (untied is C1)
    for i, arm in enumerate(("tied", "tied-wide")):
        d = [
            by[(arm, s)] - by[("untied", s)]
            for s in p["seeds"]
            if by.get((arm, s)) is not None and by.get(("untied", s)) is not None
        ]
        x = np.full(len(d), i) + np.linspace(-0.15, 0.15, len(d))
        b.scatter(x, d, s=18, color=colours[arm], label=LABELS[arm])
        if d:
            ci = mean_ci(d)
            b.errorbar(i + 0.3, ci.mean, yerr=ci.half_width, fmt="D", color="k", capsize=3)
    b.axhline(0, color="k", lw=0.6)
    b.set_xticks([0, 1], ["tied − untied", "tied wide − untied"])
    b.set_xlim(-0.5, 1.6)
    b.set(ylabel="Δ final validation loss (nats/token)", title="Per seed, paired (mean, 95% CI)")
    b.legend(fontsize=7, loc="best")
    x = np.arange(len(pdf))
    c.bar(x, pdf["saved / untied"] * 100, color="C2")
    names = [m.replace("subword LM (this project), ", "subword LM\n") for m in pdf["model"]]
    c.set_xticks(x, names, rotation=30, ha="right", fontsize=7.5)
    c.set(ylabel="parameters saved by tying (% of untied)", title="V·d as a share of the model")
    for i, v in enumerate(pdf["saved / untied"]):
        c.annotate(f"{v:.1%}", (i, v * 100), ha="center", va="bottom", fontsize=7)
    out.figure(
        "tying",
        fig,
        f"The fixed-rate design (d = {p['d_model']}, {p['n_layers']} layers, both arms at {p['lr']:g}). "
        f"Left: validation loss during training per arm (mean and 95% band over {len(p['seeds'])} seeds), "
        "with the unigram level and the target of 'steps to target'. Middle: final validation loss of each "
        "arm minus untied, per seed, with the null pair's 95% bound (this cell) as a band. Right: the "
        "parameters tying saves (V·d) as a share of the untied model, for this subword model and published "
        "configurations.",
    )


@drawing
def plot_sweeps(t: dict, p: dict, out) -> None:
    """Loss against peak learning rate per regime (rows) and scale (columns), both arms, each arm's chosen
    rate on the fresh seeds marked."""
    from tfclaims.evidence.plots import lr_sweep
    from tfclaims.plotting import subplots

    sc = scales(p)
    fig, axes = subplots(len(sc), 2, width=4.6, height=3.6)
    runs, labels = t["runs"], {"untied": "untied", "tied": "tied"}
    for r, (regime, loss, what) in enumerate(
        (
            ("one-pass", "final_val", "final validation loss"),
            ("small-data", "select_loss", "early-stopped selection-half loss"),
        )
    ):
        curves = curve_table(runs[runs.regime == regime], ["scale", "arm"], loss=loss)
        for c, s in enumerate(sc):
            ax, label = axes[r * len(sc) + c], scale_label(s)
            tuned = t["tuned"][(t["tuned"].regime == regime) & (t["tuned"].scale == label)]
            lr_sweep(
                ax, curves[curves.scale == label], tuned, labels, loss=loss
            )  # far above: no unigram line
            params = runs[(runs.scale == label) & (runs.arm == "untied")].params
            size = f", {params.iloc[0] / 1e6:.2f}M untied" if len(params) else ""
            ax.set_title(f"{regime}: d = {s['d_model']}, L = {s['n_layers']}{size}", fontsize=9)
            ax.set_ylabel(f"{what} (nats/token)")
    axes[0].legend(fontsize=6)
    out.figure(
        "lr-sweep",
        fig,
        sweep_caption(
            p,
            f"Loss against peak learning rate, {p['steps']} steps",
            per=f"regime (top: one pass over the text, final validation loss; bottom: {p['subset_tokens']:,} "
            f"tokens for many epochs with dropout {p['dropout']:g}, early-stopped loss on the selection "
            "half) and scale (columns)",
            each="arm",
            fresh="tuned_seeds",
            note=" (top: final loss; bottom: the selection-half loss)",
        ),
    )


def epochs(t: dict) -> float | None:
    """Epochs of the small-data subset one run sees."""
    small = t["runs"][t["runs"].regime == "small-data"]
    return None if small.empty else float(small.epochs.iloc[0])


def summary(result, own, pdf: pd.DataFrame) -> tuple[str, str]:
    """The key number and the summary: tied − untied at each arm's best rate, per regime and scale."""
    key = (
        f"tied − untied, each at its best rate: one pass, final loss {result.per_cell('final')}; small "
        f"data, early-stopped loss {result.per_cell('small-data')}; tying saves {own['saved / untied']:.1%} "
        "of the parameters"
    )
    g2 = pdf.set_index("model").loc["gpt2-small"] if "gpt2-small" in set(pdf["model"]) else None
    g2_txt = "" if g2 is None else f"; GPT-2 small: {g2['saved']:,} ({g2['saved / untied']:.0%} of untied)"
    fixed = ", ".join(f"{c.metric} {c.short('+.3g')} ({c.decision})" for c in result.of("final-fixed"))
    text = (
        f"Tying removes V·d parameters exactly (checked): {own['saved / untied']:.1%} of this subword model "
        f"(V = {own['V']}, d = {own['d']}){g2_txt}. Each arm at its own best learning rate, tied − untied: "
        f"in one pass over the text, final validation loss {result.per_cell('final')} and steps to the "
        f"target {result.per_cell('convergence', '+.0f')}; after many epochs of a small subset with dropout, "
        f"early-stopped test loss {result.per_cell('small-data')}. At one shared rate (reported): {fixed}."
    )
    return key, text


def overfitting(t: dict, p: dict) -> str:
    """How far the small-data regime over-fitted: where its fresh runs' early-stopping steps fell."""
    small = t["runs"][(t["runs"].regime == "small-data") & (t["runs"].role == "test")].early_step.dropna()
    if small.empty:
        return "The small-data regime has no fresh runs yet."
    last = int((small == p["steps"]).sum())
    return (
        "Small data over-fitted little: the early-stopping step of its fresh runs has median "
        f"{small.median():.0f} of {p['steps']}, and {last} of {len(small)} stopped at the last evaluation. "
        "Tying's regularisation, the anchors' mechanism in this regime, had little over-fitting to act on; a "
        "smaller subset or longer training would reach it."
    )


def caveat_facts(p: dict, tok: dict, t: dict) -> dict:
    return {
        "overfitting": overfitting(t, p),
        "scale_list": ", ".join(f"d = {s['d_model']}, {s['n_layers']} layers" for s in scales(p)),
        "tok": tok,
        "tokens_m": p["steps"] * p["batch"] * p["seq_len"] / 1e6,
    }
