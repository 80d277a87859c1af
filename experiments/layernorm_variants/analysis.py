"""layernorm_variants: observation tables from its records, its own tables and its figures."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.curves import plot_curves
from tfclaims.evidence.declare import Readout
from tfclaims.evidence.plots import drawing

NAME = {"layer": "LayerNorm", "rms": "RMSNorm"}
NOTES = {"layer": "notes_layer", "rms": "notes_rms"}  # the notes' variant of each family (nn.norm_variants)
COL = {"layer": "LN", "rms": "RMS"}
PREC = {"float32": "fp32", "bfloat16": "bf16"}
# swap cell -> (trained with, evaluated with); evaluation names as in the run configs' `evals`
CELLS = {
    "t2n-same-eps": ("torch", "notes_same_eps"),
    "t2n-notes-eps": ("torch", "notes"),
    "n2t": ("notes", "torch"),
}
AS_TRAINED = "as trained"

# ---------------------------------------------------------------------------- readouts: the tables' columns
LOSS = Readout(
    "val_loss",
    "validation loss",
    "nats/char",
    definition="the trained weights on the fixed validation batches, every norm with one formula, the whole "
    "model in one precision",
    fmt="+.2e",
)
FORMULA_ERR = Readout(
    "formula_err",
    "largest relative departure of the measured output difference from its closed form",
    definition="over every width and input scale (absolute 1e-6 below a difference of 1e-3)",
)
UNIT_DIFF = Readout(
    "unit_diff",
    "relative output difference at unit scale",
    definition="LayerNorm: the closed form 1 − sqrt((d−1)/d) at the model width; RMSNorm: the largest median "
    "measured at any width",
)
TINY_DIFF = Readout(
    "tiny_diff",
    "relative output difference at the smallest input scale",
    definition="the median over tokens at the smallest σ, at the model width (else the smallest scale width)",
)
BELOW = Readout(
    "below",
    "trained probes at or below σ*",
    definition="the probes of trained weights (every norm × evaluation step after step 0 × run) whose 1% "
    "quantile of per-token input scale is at or below σ*, the closed-form scale under which the formulas "
    "differ by more than 1% at the model width",
)
BELOW_INIT = Readout(
    "below_init",
    "probes at initialisation at or below σ*",
    definition="the same count at step 0, before any update (the init's scale, not a trained model's)",
)
REF_OFF = Readout(
    "ref_off",
    "largest |final loss − the swap's fp32 as-trained evaluation|",
    definition="over every trained model of the family",
)


# ---------------------------------------------------------------------------- closed forms
def rel_diff(std: str, sigma: float, d: int, eps: float, notes_eps: float | None = None) -> float:
    """|y_notes / y_torch − 1| at per-token scale sigma: torch's layer at eps, the notes' at notes_eps
    (default the same eps)."""
    from tfclaims.nn.norm_variants import gain  # torch's: the closed forms take tensors too

    notes_eps = eps if notes_eps is None else notes_eps
    return abs(gain(NOTES[std], sigma, d, notes_eps) / gain(std, sigma, d, eps) - 1)


def sigma_star(
    std: str, d: int, eps: float, notes_eps: float | None = None, threshold: float = 0.01
) -> float:
    """Largest per-token scale at which the notes' variant differs by more than `threshold` (closed form, fine
    log grid); inf if it differs at every scale (small widths, LayerNorm's d/(d-1))."""
    s = np.logspace(-9, 3, 4801)
    bad = np.array([rel_diff(std, float(v), d, eps, notes_eps) for v in s]) > threshold
    if bad[-1]:
        return math.inf
    return float(s[bad].max()) if bad.any() else 0.0


def tiny_width(p: dict) -> int:
    """The width the smallest-scale difference is read at: the model width if the scale part has it."""
    return p["d_model"] if p["d_model"] in p["scale_widths"] else min(p["scale_widths"])


# ---------------------------------------------------------------------------- observation tables
def _own(c: dict) -> str:
    return "torch" if c["formula"] == "torch" else "notes"


def _losses(r: dict) -> dict:
    """dtype -> evaluation -> validation loss; a run that diverged has none (its seed drops out, noted)."""
    c = r["config"]
    return r["metrics"].get("swap") or {dt: dict.fromkeys(c["evals"]) for dt in c["dtypes"]}


def _below(g: pd.DataFrame) -> int | None:
    """Probes whose 1% quantile of input scale is at or below σ*."""
    return int((g["q01"] <= g["sigma*"]).sum()) if len(g) else None


def _forward(runs: list[dict], name: str, keys: tuple[str, ...]) -> pd.DataFrame:
    """A forward part's rows, one per width (and input scale) and norm family."""
    rows = part(runs, name)[0]["metrics"]["rows"]
    return pd.DataFrame([{**{k: r[k] for k in keys}, "family": std, **r[std]} for r in rows for std in NAME])


def _probes(trained: list[dict], stars: dict[str, float]) -> pd.DataFrame:
    """One row per trained run, evaluation step and norm: its input-scale quantiles beside σ*."""
    rows = [
        {"family": c["family"], "trained with": c["formula"], "seed": c["seed"], "step": step, "norm": norm}
        | q
        | {"sigma*": stars[c["family"]]}
        for r in trained
        for c in [r["config"]]
        for step, pr in zip(r["metrics"]["eval_steps"], r["metrics"].get("probes", []))
        for norm, q in pr.items()
    ]
    cols = ["family", "trained with", "seed", "step", "norm", "min", "q01", "median", "sigma*"]
    return pd.DataFrame(rows, columns=cols)


def _family_row(std: str, t: dict[str, pd.DataFrame], tiny: pd.DataFrame, with_swap: list, d_model: int):
    """The exact numbers the checks and forward sub-claims read for one norm family."""
    width, scale, probes = t["width"], t["scale"], t["probes"]
    g, small = probes[probes["family"] == std], tiny[tiny["family"] == std]
    later, init = g[g["step"] > 0], g[g["step"] == 0]  # probes of trained weights, and of the init
    own = [
        abs(r["metrics"]["final_val"] - r["metrics"]["swap"]["float32"][_own(r["config"])])
        for r in with_swap
        if r["config"]["family"] == std
    ]
    errs = [*width[width["family"] == std]["formula_err"], *scale[scale["family"] == std]["formula_err"]]
    measured = width[width["family"] == std]["median"].max()
    unit = 1 - math.sqrt((d_model - 1) / d_model) if std == "layer" else measured
    return {
        "family": std,
        "unit": 0,
        "formula_err": max(errs),
        "unit_diff": float(unit),
        "tiny_diff": float(small["median"].iloc[0]) if len(small) else None,
        "below": _below(later),
        "probes": len(later),
        "below_init": _below(init),
        "probes_init": len(init),
        "closest": float((later["q01"] / later["sigma*"]).min()) if len(later) else None,
        "ref_off": max(own) if own else None,
        "models": len(own),
    }


def _swap(runs: list[dict], guard) -> pd.DataFrame:
    """One row per trained model, precision and evaluation formula, with its loss and whether it learned."""
    rows = [
        {"part": c["part"], "family": c["family"], "trained": c["formula"], "dtype": dt, "unit": c["seed"]}
        | {"eval": AS_TRAINED if name == _own(c) else name, "val_loss": loss, "run_id": r.get("run_id")}
        | {"learned": guard.fn(r["metrics"])}
        for r in [*part(runs, "train"), *part(runs, "null")]
        for c in [r["config"]]
        for dt, losses in _losses(r).items()
        for name, loss in losses.items()
    ]
    cols = ["part", "family", "trained", "dtype", "unit", "eval", "val_loss", "run_id", "learned"]
    return pd.DataFrame(rows, columns=cols)


def observe(runs: list[dict], p: dict, guard, stars: dict[str, float]) -> dict[str, pd.DataFrame]:
    """family: one row per norm family with the exact numbers the checks and the forward sub-claims read;
    swap: one row per trained model, precision and evaluation formula (`eval` is 'as trained' for its own
    formula), the validation loss (missing where the run diverged) and whether the run learned; width,
    scale, probes: the forward parts and the norm-input probes, for the tables and figures. `stars`: σ* per
    family at the model width."""
    trained = part(runs, "train")
    t = {
        "width": _forward(runs, "width", ("d",)),
        "scale": _forward(runs, "scale", ("d", "sigma")),
        "probes": _probes(trained, stars),
    }
    with_swap = [r for r in [*trained, *part(runs, "null")] if "float32" in r["metrics"].get("swap", {})]
    scale = t["scale"]
    tiny = scale[(scale["d"] == tiny_width(p)) & (scale["sigma"] == scale["sigma"].min())]
    rows = [_family_row(std, t, tiny, with_swap, p["d_model"]) for std in NAME]
    return {"family": pd.DataFrame(rows), "swap": _swap(runs, guard), **t}


# ---------------------------------------------------------------------------- tables
def eval_label(std: str, name: str, eps: float, notes_eps: dict) -> str:
    """How an evaluation formula reads in tables and comparisons."""
    who = "torch's" if name == "torch" else "the notes'"
    e = eps if name != "notes" else notes_eps[std]
    return f"{who} {NAME[std]} (eps {e:g} {'inside' if name == 'torch' else 'outside'} the root)"


def write_tables(
    runs, t: dict, result, swap_subs: dict, p: dict, *, notes_eps: dict, stars: dict, out
) -> None:
    eps, d_model = p["eps"], p["d_model"]
    w = t["width"]
    wdf = pd.DataFrame({"width d": w[w["family"] == "layer"]["d"].to_numpy()})
    for std, col in COL.items():
        g = w[w["family"] == std]
        wdf[f"{col} median rel. diff"] = g["median"].to_numpy()
        if std == "layer":
            wdf["LN closed form 1−sqrt((d−1)/d)"] = 1 - np.sqrt((wdf["width d"] - 1) / wdf["width d"])
        wdf[f"{col} max |Δy|"] = g["max_abs"].to_numpy()
    for std, col in COL.items():
        wdf[f"{col} formula error"] = w[w["family"] == std]["formula_err"].to_numpy()
    out.table(
        "vs_width",
        wdf,
        f"Output difference, notes variant vs torch layer, unit-variance inputs (eps = "
        f"{eps:g}), per token ||Δy||/||y||",
        floatfmt=".3g",
    )
    sc = t["scale"]
    sdf = sc[sc["family"] == "layer"][["d", "sigma"]].rename(
        columns={"d": "width d", "sigma": "input scale σ"}
    )
    for std, col in COL.items():
        g = sc[sc["family"] == std]
        sdf[f"{col} rel. diff"] = g["median"].to_numpy()
        sdf[f"{col} out RMS torch"], sdf[f"{col} out RMS notes"] = (
            g["out_rms_torch"].to_numpy(),
            g["out_rms_notes"].to_numpy(),
        )
    for std, col in COL.items():
        sdf[f"{col} formula error"] = sc[sc["family"] == std]["formula_err"].to_numpy()
    out.table(
        "vs_scale",
        sdf.reset_index(drop=True),
        "Output difference and output RMS vs input scale σ (median over tokens)",
        floatfmt=".3g",
    )
    pdf = t["probes"]
    agg = dict(min_scale=("min", "min"), q01_lowest=("q01", "min"), median=("median", "median"))
    out.table(
        "norm_inputs",
        pdf.assign(when=np.where(pdf["step"] > 0, "trained", "init"))
        .groupby(["family", "trained with", "norm", "when"])
        .agg(**agg)
        .reset_index(),
        "Per-token scale σ of every norm's input at initialisation (step 0) and during training (every later "
        "evaluation; fixed validation batch; lowest over probes and seeds); σ* at d = "
        f"{d_model}: LN {stars['layer']:.3g}, RMS {stars['rms']:.3g}",
        floatfmt=".3g",
    )
    _swap_runs(runs, eps, notes_eps, out)
    _swap_summary(result, swap_subs, eps, notes_eps, out)


def _swap_summary(result, swap_subs: dict, eps: float, notes_eps: dict, out) -> None:
    """The checkpoint-swap comparisons, one row per family, precision and cell."""
    summ = []
    for (std, dt), sid in swap_subs.items():
        for c in result.of(sid):
            cell = c.id.split("/")[-1]
            trained, swapped = CELLS[cell]
            swap = f"{trained}-trained {NAME[std]} → {eval_label(std, swapped, eps, notes_eps)}"
            summ.append(
                {
                    "family": NAME[std],
                    "precision": PREC[dt],
                    "cell": cell,
                    "swap": swap,
                    "n": c.n,
                    "mean Δ": c.diff,
                    "CI low": c.ci_low,
                    "CI high": c.ci_high,
                    "p (Holm)": c.p,
                    "TOST p (Holm)": c.p_equiv,
                    "null pair's 95% bound (this cell)": c.noise,
                    "decision": c.decision,
                }
            )
    out.table(
        "swap",
        pd.DataFrame(summ),
        "Checkpoint swap: validation loss with the swapped formula − as trained, same weights (nats/char), "
        "mean over seeds with its interval at Holm's level; margin ±0.01; null pair's 95% bound (this cell): "
        "the largest |CI bound| of retraining at seeds + 1000 in the same cell, reported beside the effect",
        floatfmt=".3g",
    )


def _swap_runs(runs, eps, notes_eps, out) -> None:
    rows = []
    for r in [*part(runs, "train"), *part(runs, "null")]:
        c, m = r["config"], r["metrics"]
        base = {
            "part": c["part"],
            "family": NAME[c["family"]],
            "trained with": f"{c['formula']} (eps {c['eps']:g})",
            "seed": c["seed"],
            "final val": m["final_val"],
            "unigram": m["unigram_xent"],
        }
        own = _own(c)
        for dt, losses in m.get("swap", {}).items():
            fp32 = m["swap"].get("float32", {}).get(own, math.nan)
            for name, loss in losses.items():
                label = eval_label(c["family"], name, eps, notes_eps)
                rows.append(
                    {
                        **base,
                        "precision": PREC[dt],
                        "evaluated with": label,
                        "val loss": loss,
                        "Δ vs as trained": loss - losses[own],
                        "Δ vs fp32 as trained": loss - fp32,
                    }
                )
        if not m.get("swap"):
            rows.append(base)
    sdf = pd.DataFrame(rows)
    if len(sdf):
        keys = ["part", "family", "trained with", "precision", "evaluated with", "seed"]
        sdf = sdf.sort_values([k for k in keys if k in sdf])  # diverged runs have no swap columns
    out.table(
        "swap_runs",
        sdf,
        "Every trained model evaluated as trained and with the other formulas, per precision (nats/char): Δ "
        "vs as trained is the swap effect, Δ vs fp32 the cost of bf16",
        in_report=False,
    )


# ---------------------------------------------------------------------------- figures
@drawing
def plot_formulas(t: dict, p: dict, threshold: float, stars: dict, out) -> None:
    from tfclaims.nn.norm_variants import relative_difference
    from tfclaims.plotting import log_ticks, subplots

    eps, w, sc, pdf = p["eps"], t["width"], t["scale"], t["probes"]
    fig, (a, b) = subplots(2, width=4.8, height=3.7)
    d = np.logspace(math.log10(2), math.log10(w["d"].max()), 200)
    a.loglog(d, 1 - np.sqrt((d - 1) / d), "C0-", lw=1, label="LN closed form 1 − sqrt((d−1)/d)")
    for std, mk, lab in (
        ("layer", "C0o", "LN measured"),
        ("rms", "C1s", "RMS measured (eps placement only)"),
    ):
        g = w[w["family"] == std]
        a.loglog(g["d"], g["median"], mk, label=lab)
    a.axhline(threshold, color="k", ls=":", lw=0.8, label="1%")
    log_ticks(a, w["d"])
    a.set(
        xlabel="width d",
        ylabel="relative output difference ||Δy|| / ||y||",
        title="Notes' variant vs torch, unit-variance inputs",
    )
    a.legend(fontsize=7)
    s = np.logspace(-8, 2.5, 300)
    for i, dw in enumerate(sorted(sc["d"].unique())):
        ls, fill = ("-" if i == 0 else "--"), i == 0
        for std, c in (("layer", "C0"), ("rms", "C1")):
            g = sc[(sc["d"] == dw) & (sc["family"] == std)]
            b.loglog(
                s, [relative_difference(NOTES[std], std, float(v), dw, eps) for v in s], color=c, ls=ls, lw=1
            )
            b.loglog(
                g["sigma"],
                g["median"],
                marker="o" if std == "layer" else "s",
                lw=0,
                color=c,
                ms=3.5,
                mfc=c if fill else "none",
                label=f"{COL[std]}, d = {dw} ({'solid, filled' if fill else 'dashed, open'})",
            )
    if len(pdf):
        b.axvspan(
            pdf["q01"].min(),
            pdf["median"].max(),
            color="C2",
            alpha=0.15,
            label="norm inputs in training (1% q. to median)",
        )
    b.axhline(threshold, color="k", ls=":", lw=0.8)
    for x, txt in ((math.sqrt(eps), " √eps"), (eps, " eps")):
        b.axvline(x, color="gray", lw=0.8, ls="-.")
        b.text(x, 0.97, txt, fontsize=7, color="gray", transform=b.get_xaxis_transform(), va="top")
    b.set(
        xlabel="input scale σ (per-token std or RMS)",
        ylabel="relative output difference",
        title=f"vs input scale (eps = {eps:g}); lines: closed form",
    )
    b.legend(fontsize=6.5, loc="lower left")
    out.figure(
        "formulas",
        fig,
        "Left: relative output difference between the notes' variant and torch's layer vs width at "
        "unit-variance inputs (LayerNorm: the unbiased std; RMSNorm: eps placement only). Right: vs input "
        "scale at two widths, measured (markers) and closed form (lines; solid: first width, dashed: "
        f"second); shaded: the per-token scales of norm inputs seen in training. σ* at d = {p['d_model']}: "
        f"LN {stars['layer']:.2g}, RMS {stars['rms']:.2g}.",
    )


@drawing
def plot_swap(t: dict, result, swap_subs: dict, p: dict, *, margin: float, notes_eps: dict, out) -> None:
    from tfclaims.plotting import subplots

    fig, axes = subplots(len(NAME), width=4.6, height=3.9)
    colors, tiny = (
        {"float32": "C0", "bfloat16": "C3"},
        1e-6,
    )  # symlog's linear zone: effects span ~1e-6 to 1e-2
    sw = t["swap"][t["swap"]["part"] == "train"]
    for ax, std in zip(axes, NAME):
        seen, bounds = [], []
        for k, dt in enumerate(p["dtypes"]):
            off = (k - (len(p["dtypes"]) - 1) / 2) * 0.3
            for i, c in enumerate(result.of(swap_subs[std, dt])):
                if c.noise is not None:
                    bounds.append(c.noise)
                seen += _swap_column(ax, c, sw, std, dt, i + off, first=i == 0, color=colors[dt])
        for sgn in (1, -1):
            ax.axhline(
                sgn * margin, color="k", ls="--", lw=0.8, label=f"margin ±{margin:g}" if sgn > 0 else None
            )
        ax.axhline(0, color="k", lw=0.5)
        ax.set_yscale("symlog", linthresh=tiny)
        top = max([margin, *bounds, *map(abs, seen)])  # all in view
        ax.set_ylim(-3 * top, 3 * top)
        e, n = f"1e{round(math.log10(p['eps']))}", f"1e{round(math.log10(notes_eps[std]))}"
        ticks = [
            f"torch-trained →\nnotes (eps {e})",
            f"torch-trained →\nnotes (eps {n})",
            f"notes-trained →\ntorch (eps {e})",
        ]
        ax.set_xticks(range(len(CELLS)), ticks, fontsize=7)
        ax.set(
            xlabel="which swap (trained with → evaluated with)",
            ylabel="val loss swapped − as trained (nats/char)",
            title=f"Checkpoint swap, {NAME[std]} family",
        )
    axes[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    out.figure(
        "swap",
        fig,
        "The checkpoint swap: validation loss of the same trained weights with the other formula minus as "
        "trained, per seed (dots) and mean with its interval at Holm's level over seeds (bars), in float32 "
        "(blue) and with the whole model in bfloat16 (red). Shaded columns: the null pair's 95% bound (this "
        "cell) of the validation loss in each precision (largest |CI bound| of the torch-trained arm "
        f"retrained at seeds + 1000), what retraining alone changes; dashed: the pre-declared margin "
        f"±{margin:g} nats/char. Symmetric log axis, linear within ±{tiny:g}.",
    )


def _swap_column(ax, c, sw, std: str, dt: str, x: float, *, first: bool, color: str) -> list:
    """One swap comparison `c` at x: its null pair's 95% bound (this cell) as a band, each seed's difference,
    the mean with its interval; returns the seeds' differences. `first` labels the legend entries once per
    panel."""
    if c.noise is not None:  # the null pair's bound in this cell as a band behind each column
        ax.bar(
            x,
            2 * c.noise,
            bottom=-c.noise,
            width=0.26,
            color=color,
            alpha=0.12,
            lw=0,
            label=f"null pair's 95% bound (this cell), {PREC[dt]}" if first else None,
        )
    trained, swapped = CELLS[c.id.split("/")[-1]]
    g = sw[(sw["family"] == std) & (sw["dtype"] == dt) & (sw["trained"] == trained)]
    both = g.pivot(index="unit", columns="eval", values="val_loss")
    ys = (both[swapped] - both[AS_TRAINED]).dropna().tolist() if swapped in both else []
    ax.scatter(
        [x] * len(ys),
        ys,
        s=12,
        color=color,
        alpha=0.6,
        zorder=3,
        label=f"one seed, {PREC[dt]}" if first else None,
    )
    if c.diff is not None and c.ci_low is not None:
        ax.errorbar(
            x,
            c.diff,
            yerr=[[c.diff - c.ci_low], [c.ci_high - c.diff]],
            fmt="_",
            ms=14,
            color=color,
            capsize=4,
            zorder=4,
            label=f"mean and interval, {PREC[dt]}" if first else None,
        )
    return ys


@drawing
def plot_training(runs, out) -> None:
    from tfclaims.plotting import subplots

    train = part(runs, "train")
    fig, (a,) = subplots(1, width=5.2, height=3.7)
    groups, styles = {}, {}
    for std, c in (("layer", "C0"), ("rms", "C1")):
        for formula in ("torch", "notes"):
            lab = ("torch " if formula == "torch" else "the notes' ") + NAME[std]
            groups[lab] = [
                r for r in train if (r["config"]["family"], r["config"]["formula"]) == (std, formula)
            ]
            styles[lab] = {"color": c, "ls": "--" if formula == "notes" else "-"}
    plot_curves(a, groups, styles=styles)
    unigram = next((r["metrics"]["unigram_xent"] for r in train), None)
    if unigram is not None:
        a.axhline(unigram, color="gray", ls=":", lw=0.8, label="unigram level")
    a.set(xlabel="training step", ylabel="validation loss (nats/char)", title="Training with each formula")
    a.legend(fontsize=7)
    out.figure(
        "training",
        fig,
        "Validation loss during training with torch's LayerNorm/RMSNorm (eps 1e-5) and the notes' variants "
        "at their own eps in every norm (mean and 95% band over seeds); dotted: the unigram level.",
    )


# ---------------------------------------------------------------------------- headline
def headline(result, t: dict, swap_subs: dict, p: dict, margin: float, stars: dict) -> tuple[str, str]:
    """The key number and the summary sentence (after the counted sub-claims, which verdict_from states)."""
    d_model, fam = p["d_model"], t["family"].set_index("family")
    width_eff, dmin = 1 - math.sqrt((d_model - 1) / d_model), int(t["width"]["d"].min())

    def largest(std, dt):  # the swap cell with the largest |mean change|
        cs = [c for c in result.of(swap_subs[std, dt]) if c.diff is not None]
        return max(cs, key=lambda c: abs(c.diff)) if cs else None

    def swap_txt(std, dt):
        c = largest(std, dt)
        if c is None:
            return f"{PREC[dt]}: no finite swap"
        ci = f", [{c.ci_low:+.1e}, {c.ci_high:+.1e}]" if c.ci_low is not None else ""
        floor = f" beside its null pair's 95% bound ±{c.noise:.2g}" if c.noise is not None else ""
        return f"{PREC[dt]} {c.diff:+.1e} nats ({c.id.split('/')[-1]}{ci}: {c.decision}){floor}"

    def count(col: str, s: str) -> str:
        v = fam[col][s]
        return "—" if v is None or v != v else str(int(v))

    reach = ", ".join(
        f"{COL[s]} {count('below', s)} of {count('probes', s)} (lowest 1% quantile "
        f"{fam['closest'][s]:.2g} σ*; "
        f"at init {count('below_init', s)} of {count('probes_init', s)})"
        for s in NAME
        if fam["closest"][s] is not None and fam["closest"][s] == fam["closest"][s]  # some trained probe
    )
    swaps = "; ".join(f"{NAME[s]}: " + ", ".join(swap_txt(s, dt) for dt in p["dtypes"]) for s in NAME)
    key = ", ".join(
        f"{COL[s]} {PREC[dt]} {largest(s, dt).short('+.1e') if largest(s, dt) else '—'}"
        for s in NAME
        for dt in p["dtypes"]
    )
    summary = (
        "At unit scale the notes' LayerNorm output is smaller than torch's by 1 − sqrt((d−1)/d) "
        f"({width_eff:.2%} at d = {d_model}, {1 - math.sqrt((dmin - 1) / dmin):.0%} at d = {dmin}) and their "
        f"RMSNorm differs by ~eps/2; below σ* ≈ {stars['layer']:.2g} (LN) / {stars['rms']:.2g} (RMS) eps "
        "placement dominates; trained norm inputs (every norm, every evaluation after step 0) at or below "
        f"σ*: {reach or 'not probed'}. Swapping the formula under trained weights changes the validation "
        f"loss by at most (mean over seeds, worst cell): {swaps}; margin ±{margin:g} nats."
    )
    return f"Δy/y = {width_eff:.2%} at d={d_model}; swap Δloss {key} nats (margin ±{margin:g})", summary
