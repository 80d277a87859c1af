"""dk_scaling: observation tables from its records, its own tables and its figures."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.curves import curve, plot_curves
from tfclaims.evidence.plots import arm_bands, drawing, lr_sweep, sweep_caption
from tfclaims.evidence.stats import mean_ci
from tfclaims.evidence.tables import COMPARISON_COLUMNS, comparison_table, runs_table
from tfclaims.evidence.tuning import (
    SweepWords,
    curve_table,
    fixed_rate,
    read_sweep,
    width_scales,
    write_sweep_tables,
)

TRAIN_COLUMNS = tuple(c for c in COMPARISON_COLUMNS if c != "metric")  # one metric: no column for it
TRAINED = ("train", "logit", "null")
PROBES = ("logit_var_init", "logit_var_final", "max_prob_final", "wq_grad_init", "wq_grad_final")


def observe(runs: list[dict], p: dict, readouts) -> dict[str, pd.DataFrame]:
    """mc: one row per d_k of the Monte Carlo; jac: one row per query and d_k (ln of the softmax Jacobian's
    norm; one unit, so a trend over them is least squares); summary: the additive scores' spread; runs: one
    row per training run, with its initial logit standard deviation s, log2 d_k and log2 s for the trends."""
    mc = part(runs, "monte_carlo")[0]["metrics"]["rows"]
    rows = [
        {
            "d_k": r["dk"],
            "unit": 0,
            "var_ratio": r["var_dot"] / r["dk"],
            "var_scaled": r["var_scaled"],
            "Var(q·k)": r["var_dot"],
            "Var(q·k)/d_k": r["var_dot"] / r["dk"],
            "Var(q·k/sqrt d_k)": r["var_scaled"],
            "Var(additive)": r["var_additive"],
            "max p unscaled": r["unscaled"]["max_prob"],
            "max p scaled": r["scaled"]["max_prob"],
            "entropy unscaled": r["unscaled"]["entropy"],
            "entropy scaled": r["scaled"]["entropy"],
            "|J| unscaled": r["unscaled"]["jacobian_norm"],
            "|J| scaled": r["scaled"]["jacobian_norm"],
        }
        for r in mc
    ]
    jac = [
        {
            "unit": 0,
            "log2 d_k": float(np.log2(r["dk"])),
            "ln|J| unscaled": float(np.log(max(ju, 1e-30))),
            "ln|J| scaled": float(np.log(max(js, 1e-30))),
        }
        for r in mc
        for ju, js in zip(r["jac_unscaled"], r["jac_scaled"])
    ]
    var_add = [r["var_additive"] for r in mc]

    def logit_std(c, m):  # the initial logits' standard deviation: s for scaled q/k of std sqrt(s)
        return round(c["qk_std"] ** 2 * (1.0 if c["scaled"] else float(np.sqrt(c["dk"]))), 9)

    def growth(c, m):  # ln of the first layer's logit variance at the end over at init
        v0, v1 = probe_at(m, 0, "logit_var"), probe_at(m, -1, "logit_var")
        return float(np.log(v1 / v0)) if v0 and v1 and np.isfinite(v1) else None

    t = runs_table(
        fixed_runs(runs, p),
        readouts,
        logit_std=logit_std,
        logit_growth=growth,
        max_prob_end=lambda c, m: probe_at(m, -1, "max_prob"),
    )
    t["log2 d_k"], t["log2 s"] = np.log2(t["dk"]), np.log2(t["logit_std"])
    return {
        "mc": pd.DataFrame(rows),
        "jac": pd.DataFrame(jac),
        "summary": pd.DataFrame([{"unit": 0, "additive_spread": max(var_add) / min(var_add)}]),
        "runs": t,
        **sweep_tables(runs, p, readouts),
    }


def fixed_runs(runs: list[dict], p: dict) -> list[dict]:
    """The fixed-rate runs (every d_k and logit scale at `lr` and `d_model`, and the null pair): the
    learning-rate sweep's other runs are read by `sweep_tables` only."""
    return fixed_rate([r for n in TRAINED for r in part(runs, n)], p)


def sweep_tables(runs: list[dict], p: dict, readouts) -> dict[str, pd.DataFrame]:
    """sweep: every run at d_k = sweep_dk with unit-variance q, k (arm, role, loss at init); tuned, choices,
    sensitivity: read by `evidence.tuning`."""
    sel = set(p["selection_seeds"])
    recs = [
        r
        for r in part(runs, "train") + part(runs, "qknorm")
        if r["config"]["dk"] == p["sweep_dk"] and r["config"]["qk_std"] == 1.0
    ]
    arm = {("train", True): "scaled", ("train", False): "unscaled", ("qknorm", False): "unscaled, qk-norm"}
    t = runs_table(
        recs,
        readouts,
        arm=lambda c, m: arm[c["part"], c["scaled"]],
        init_loss=lambda c, m: m["val_loss"][0],
        role=lambda c, m: "selection" if c["seed"] in sel else "test",
        unigram=lambda c, m: m["unigram_xent"],
        n_params=lambda c, m: m["n_params"],
    )
    scales = {f"d{d}": {"d_model": d} for d, _ in p["scales"]}
    choices, tuned, seeds = read_sweep(t, {k: {"arm": k} for k in arm.values()}, scales)
    return {"sweep": t, "tuned": tuned, "choices": choices, "sensitivity": seeds}


def dk_steps(t: dict) -> pd.DataFrame:
    """How the fixed-rate effect (unscaled − scaled final loss, per seed) changes between neighbouring d_k:
    the change and its 95% interval over seeds, paired (is a non-monotone step more than noise?)."""
    runs = t["runs"][t["runs"].part == "train"]
    gap = runs.pivot_table(index=["dk", "unit"], columns="scaled", values="final_val").dropna()
    if not {False, True} <= set(gap.columns):
        return pd.DataFrame(columns=["from d_k", "to d_k", "change", "ci_low", "ci_high", "seeds"])
    per = (gap[False] - gap[True]).unstack("dk")
    rows = []
    for lo, hi in zip(per.columns[:-1], per.columns[1:]):
        ci = mean_ci((per[hi] - per[lo]).dropna().to_numpy())
        rows.append(
            {
                "from d_k": lo,
                "to d_k": hi,
                "change": ci.mean,
                "ci_low": ci.lo,
                "ci_high": ci.hi,
                "seeds": ci.n,
            }
        )
    return pd.DataFrame(rows)


def dk_steps_text(t: dict) -> str:
    steps = dk_steps(t)
    if steps.empty:
        return "No d_k step to compare."
    parts = [
        f"{int(r['from d_k'])}→{int(r['to d_k'])}: {r.change:+.3f} [{r.ci_low:+.3f}, {r.ci_high:+.3f}]"
        for _, r in steps.iterrows()
    ]
    runs = t["runs"][t["runs"].part == "train"]
    arms = runs.groupby(["dk", "scaled"]).final_val.mean().unstack("scaled")  # a diverged run reads NaN
    means = ", ".join(f"{dk}: {r[True]:.3f} / {r[False]:.3f}" for dk, r in arms.iterrows())
    return (
        "The effect need not grow at every step of d_k: its change between neighbouring d_k (unscaled − "
        "scaled, paired by seed, 95% interval) is " + "; ".join(parts) + ". Both arms move with d_k (the "
        "attention width h·d_k grows at fixed d_model and one rate; mean final loss scaled / unscaled per "
        f"d_k: {means}), so the gap is a difference of two moving curves: a step whose interval excludes 0 "
        "is real at this rate, and the declared trend (harm) reads all d_k at once."
    )


def write_sweep(t: dict, p: dict, out) -> None:
    words = SweepWords(per=f"width (at d_k = {p['sweep_dk']})")
    write_sweep_tables(out, t["choices"], width_scales(curve_table(t["sweep"], ["arm", "d_model"])), words)


@drawing
def plot_sweep(t: dict, p: dict, labels: dict, out) -> None:
    """The loss-against-learning-rate curves: one panel per width, scaled, unscaled and unscaled with
    qk-layernorm, each arm's chosen rate on the fresh seeds marked."""
    from tfclaims.plotting import subplots

    curves = curve_table(t["sweep"], ["arm", "d_model"])
    fig, axes = subplots(len(p["scales"]), width=4.6, height=3.6)
    for ax, (d, h) in zip(axes, p["scales"]):
        tuned = t["tuned"][t["tuned"].scale == f"d{d}"] if len(t["tuned"]) else t["tuned"]
        lr_sweep(ax, curves[curves.d_model == d], tuned, labels, unigram=t["sweep"].unigram.iloc[0])
        n = t["sweep"][t["sweep"].d_model == d].n_params.iloc[0] if "n_params" in t["sweep"] else None
        ax.set_title(
            f"d_model = {d}, {h} heads of d_k = {p['sweep_dk']}" + (f" ({n / 1e6:.2f}M)" if n else "")
        )
    axes[0].legend(fontsize=6)
    out.figure(
        "lr-sweep",
        fig,
        sweep_caption(
            p,
            f"Final validation loss against peak learning rate at d_k = {p['sweep_dk']} with "
            "unit-variance q, k",
            per="width",
            each="arm",
            note=": the tuned comparison",
        ),
    )


def probe_at(m: dict, i: int, key: str):
    """A training probe's value at the i-th evaluation (first layer's logit variance, W_q gradient norms)."""
    try:
        return ((m.get("probes") or [])[i] or {}).get(key)
    except IndexError:
        return None


def _probes(r: dict) -> dict:
    m = r["metrics"]
    values = (
        probe_at(m, 0, "logit_var"),
        probe_at(m, -1, "logit_var"),
        probe_at(m, -1, "max_prob"),
        (probe_at(m, 0, "wq_grad") or [None])[0],
        (probe_at(m, -1, "wq_grad") or [None])[0],
    )
    return dict(zip(PROBES, values))


def write_tables(runs, t: dict, result, p: dict, out) -> None:
    mc = t["mc"].drop(columns=["unit", "var_ratio", "var_scaled"])
    out.table("monte_carlo", mc, "Monte Carlo, i.i.d. N(0,1) components (softmax over 64 keys)")
    keys = {
        "var_q": "Var(q_i)",
        "var_k": "Var(k_i)",
        "var_dot": "Var(q·k)",
        "law_prediction": "law d_k·Var(q)·Var(k)",
    }
    idf = pd.DataFrame(
        [
            {
                "init": r["config"]["init"],
                "d_k": r["config"]["dk"],
                **{v: r["metrics"][k] for k, v in keys.items()},
                "max p unscaled": r["metrics"]["unscaled"]["max_prob"],
                "max p scaled": r["metrics"]["scaled"]["max_prob"],
            }
            for r in part(runs, "init")
        ]
    ).sort_values(["init", "d_k"])
    out.table(
        "as_initialised",
        idf,
        f"As initialised: first-layer q, k of the LM on real text (d_model = {p['d_model']})",
    )
    by_id = {r["run_id"]: r for r in runs}
    cols = ["part", "dk", "scaled", "qk_std", "unit", "final_val", "learned"]
    tdf = t["runs"][cols].rename(columns={"dk": "d_k", "unit": "seed"})
    tdf = pd.concat(
        [tdf.reset_index(drop=True), pd.DataFrame([_probes(by_id[i]) for i in t["runs"]["run_id"]])], axis=1
    )
    out.table("training_runs", tdf, "Training runs (null-pair seeds ≥ 1000)", in_report=False)
    shown = [*result.of("training"), *result.of("harm"), *result.of("logit"), *result.of("logit-trend")]
    out.table(
        "training",
        comparison_table([*shown, *result.floors], TRAIN_COLUMNS),
        "Final validation loss (nats/char): unscaled (b) − scaled (a) per d_k with unit-variance q, k (Holm "
        "across d_k); the trend of that gap in log2 d_k; each initial logit std s against 1 at d_k = "
        f"{p['ref_dk']} (Holm) and the trend in log2 s; the null pair last",
    )
    cols = [*PROBES, "final_val"]
    g = tdf[tdf["part"] != "null"].groupby(["part", "d_k", "qk_std", "scaled"])[cols].median().reset_index()
    s = np.where(g["scaled"], g["qk_std"] ** 2, g["qk_std"] ** 2 * np.sqrt(g["d_k"]))
    g.insert(4, "initial logit std", s)
    out.table(
        "gradients",
        g,
        "First layer at init and at the end (median over seeds): logit variance, and ‖∂L/∂W_q‖ on a fixed "
        "batch",
    )


@drawing
def plot_mc(mdf: pd.DataFrame, out) -> None:
    from tfclaims.plotting import log_ticks, subplots

    fig, (a, b, c) = subplots(3, width=4.0, height=3.4)
    a.semilogy(mdf["d_k"], mdf["Var(q·k)"], "o-", label="unscaled q·k")
    a.semilogy(mdf["d_k"], mdf["Var(q·k/sqrt d_k)"], "s-", label="scaled q·k / sqrt(d_k)")
    a.semilogy(mdf["d_k"], mdf["Var(additive)"], "^-", label="additive v·tanh(Wq+Uk)")
    a.semilogy(mdf["d_k"], mdf["d_k"], "k--", lw=0.8, label="law: d_k")
    for ax in (a, b, c):
        log_ticks(ax, mdf["d_k"])
    a.set(xlabel="head size d_k", ylabel="variance of the score", title="Score variance (i.i.d. N(0,1))")
    a.legend(fontsize=7)
    b.plot(mdf["d_k"], mdf["max p unscaled"], "o-", label="unscaled")
    b.plot(mdf["d_k"], mdf["max p scaled"], "s-", label="scaled")
    b.set(xlabel="head size d_k", ylabel="mean max softmax probability", title="Saturation over 64 keys")
    b.set_ylim(0, 1.02)
    b.legend()
    c.semilogy(mdf["d_k"], mdf["|J| unscaled"], "o-", label="unscaled")
    c.semilogy(mdf["d_k"], mdf["|J| scaled"], "s-", label="scaled")
    c.set(
        xlabel="head size d_k",
        ylabel="‖softmax Jacobian‖_F (mean over queries)",
        title="Gradient through softmax",
    )
    c.legend()
    out.figure(
        "monte-carlo",
        fig,
        "Idealised case, i.i.d. unit-variance q and k: score variance vs d_k (left), mean max softmax "
        "probability (middle) and the norm of the softmax Jacobian (right), unscaled vs scaled.",
    )


def _first_layer(key):
    """A probe value of the first layer at every evaluation (wq_grad holds one per layer)."""

    def value(m):
        vals = [(pr or {}).get(key) for pr in m.get("probes", [])]
        return [np.nan if v is None else v[0] if isinstance(v, list) else v for v in vals]

    return value


@drawing
def plot_training(runs, t: dict, logit_trend, p: dict, out) -> None:
    """Validation loss and first-layer probes over training for every d_k, scaled and unscaled; right, the
    initial logit scale varied alone (the cells of the declared logit-trend sub-claim)."""
    from tfclaims.plotting import subplots

    train = part(runs, "train")
    fig, axes = subplots(4, width=4.2, height=3.3)
    ax_loss, ax_var, ax_grad, ax_logit = axes
    for n, dk in enumerate(p["dks"]):
        for scaled, ls in ((True, "-"), (False, "--")):
            rs = [r for r in train if r["config"]["dk"] == dk and r["config"]["scaled"] == scaled]
            lab = f"d_k={dk} {'scaled' if scaled else 'unscaled'}"
            plot_curves(ax_loss, {lab: rs}, styles={lab: {"ls": ls, "color": f"C{n}"}})
            for ax, key in ((ax_var, "logit_var"), (ax_grad, "wq_grad")):
                steps, mean, _, _ = curve(rs, value=_first_layer(key))
                if len(steps):
                    ax.semilogy(steps, mean, ls=ls, marker="o", ms=3, color=f"C{n}", label=lab)
    arm_bands(ax_logit, runs, t["runs"], logit_trend)
    ref = p["ref_dk"]
    ax_loss.set(
        xlabel="training step", ylabel="validation loss (nats/char)", title="d_k varied, unit-variance q, k"
    )
    ax_var.set(xlabel="training step", ylabel="variance of layer-1 logits", title="Attention logit variance")
    ax_grad.set(xlabel="training step", ylabel="‖∂L/∂W_q‖, layer 1", title="Query-projection gradient")
    ax_logit.set(
        xlabel="training step",
        ylabel="validation loss (nats/char)",
        title=f"Logit scale alone (d_k = {ref}, scaled)",
    )
    for ax in axes:
        ax.legend(fontsize=6)
    out.figure(
        "training",
        fig,
        "Training with and without the 1/sqrt(d_k) factor, q and k with unit-variance components at init: "
        f"validation loss (mean and 95% band over {len(p['seeds'])} seeds; solid scaled, dashed unscaled), "
        "the first layer's attention-logit variance and ‖∂L/∂W_q‖ on a fixed batch (seed means), and, right, "
        f"the initial logit scale s varied alone at d_k = {ref} (cells s1, s4, …).",
    )
