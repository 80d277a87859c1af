"""no_position's readouts, observation tables, figures and summary.

The permutation part's rows are exact numbers (one per run, size, init, backend, arm and measure); the trained
part's runs are read per arm and scale by `evidence.tuning` (each arm at its chosen rate on the fresh seeds),
with every layer's position probe kept for the figure and the tables.
"""

from __future__ import annotations

import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.declare import Readout
from tfclaims.evidence.plots import drawing
from tfclaims.evidence.stats import mean_ci
from tfclaims.evidence.tuning import (
    SweepWords,
    model_sweep_runs,
    null_at_choice,
    sweep_curves,
    write_sweep_tables,
)
from tfclaims.grids.sweep import scale_label

from .grid import ARMS, control_scale, scales


def _probed(m: dict) -> bool:
    return m.get("diverged_at") is None and "probe" in m


ERROR = Readout(
    "error",
    "relative max change",
    better="lower",
    fmt=".3g",
    definition="max |f(permuted input) − permuted f(input)| ÷ max |f(input)| over the hidden states "
    "(B, T, d) (for the prefix measure: the last position's state, the earlier tokens permuted), float64",
)
PROBE = Readout(
    "probe_gain",
    "position probe gain, best layer",
    better="higher",
    fmt=".3f",
    definition="1 − MAE ÷ chance's MAE of least squares of a token's position on its hidden state, fitted on "
    "held-out windows and scored on others, at the layer whose gain on the fitting windows is highest",
    fn=lambda m: m["probe"]["gain"][m["probe"]["best"]] if _probed(m) else None,
)
PROBE_INPUT = Readout(
    "probe_input",
    "position probe gain, input embeddings",
    better="higher",
    fmt=".3f",
    definition="the same probe on what enters block 1 (token embeddings, plus the position encoding if any)",
    fn=lambda m: m["probe"]["gain"][0] if _probed(m) else None,
)


def labels(p: dict) -> dict[tuple[int, int], str]:
    """(d_model, n_layers) -> scale label, for the swept scales and the one-layer control."""
    return {(s["d_model"], s["n_layers"]): scale_label(s) for s in [*scales(p), control_scale(p)]}


def perm_rows(runs: list[dict]) -> pd.DataFrame:
    """One row per permutation run, size, init, backend, arm and measure; `depth` says one layer or more for
    the prefix measure ('any' for the whole permutation)."""
    rows = [
        {
            **row,
            "seed": r["config"]["seed"],
            "depth": "any" if row["measure"] == "perm" else "one" if row["n_layers"] == 1 else "deeper",
            "unit": f"{r['config']['seed']}-{row['d_model']}-{row['n_layers']}-"
            f"{row['init']}-{row['backend']}",
        }
        for r in part(runs, "perm")
        for row in r["metrics"]["rows"]
    ]
    return pd.DataFrame(rows)


def observe(runs: list[dict], p: dict, readouts, null_offset: int) -> dict[str, pd.DataFrame]:
    """perm: the exact rows; runs: one row per training run with its position encoding, role (selection,
    test, or null: seeds s + null_offset), scale label, readouts and loss at init; tuned, choices,
    sensitivity: each arm's sweep read by `evidence.tuning` (the control's one-layer pair as one more scale);
    first: the null pair (NoPE's fresh seeds at the first scale's choice and their reruns); layers: one row
    per tuned run and layer with the probe's gain and error; positions: one row per tuned run and position
    with the error of the probe at its chosen layer."""
    lab, recs = labels(p), part(runs, "sweep")
    arms = {k: {"pos": k} for k in ARMS}
    t, choices, tuned, seeds = model_sweep_runs(recs, readouts, arms, lab, p["selection_seeds"], null_offset)
    ids = set(tuned.run_id) if len(tuned) else set()
    probed = [(r["config"], r["metrics"]) for r in recs if r.get("run_id") in ids and _probed(r["metrics"])]
    layers = [
        {
            "pos": c["pos"],
            "scale": lab.get((c["d_model"], c["n_layers"])),
            "seed": c["seed"],
            "layer": i,
            "gain": m["probe"]["gain"][i],
            "mae": m["probe"]["mae"][i],
            "chance_mae": m["probe"]["chance_mae"],
            "chosen": i == m["probe"]["best"],
        }
        for c, m in probed
        for i in range(len(m["probe"]["gain"]))
    ]
    positions = [
        {
            "pos": c["pos"],
            "scale": lab.get((c["d_model"], c["n_layers"])),
            "seed": c["seed"],
            "position": t,
            "mae": v,
        }
        for c, m in probed
        for t, v in enumerate(m["probe"]["mae_by_position"])
    ]
    return {
        "perm": perm_rows(runs),
        "runs": t,
        "tuned": tuned,
        "choices": choices,
        "sensitivity": seeds,
        "first": null_at_choice(t, tuned, choices, "none", scale_label(scales(p)[0])),
        "layers": pd.DataFrame(
            layers, columns=["pos", "scale", "seed", "layer", "gain", "mae", "chance_mae", "chosen"]
        ),
        "positions": pd.DataFrame(positions, columns=["pos", "scale", "seed", "position", "mae"]),
    }


def perm_summary(perm: pd.DataFrame) -> pd.DataFrame:
    """Per model, position encoding, measure and depth: the smallest and largest change over every size,
    init, backend and seed."""
    if perm.empty:
        return perm
    g = perm.groupby(["model", "pos", "measure", "depth"]).error
    return g.agg(rows="size", smallest="min", largest="max").reset_index()


def layer_summary(layers: pd.DataFrame) -> pd.DataFrame:
    """Per scale, arm and layer: the probe's mean gain and error over the fresh seeds with the gain's 95% CI,
    and how often the layer was the one chosen."""
    rows = []
    for (scale, pos, layer), g in layers.groupby(["scale", "pos", "layer"], sort=False):
        ci = mean_ci(g.gain.to_numpy())
        rows.append(
            {
                "scale": scale,
                "pos": pos,
                "layer": layer,
                "seeds": ci.n,
                "gain": ci.mean,
                "gain_lo": ci.lo,
                "gain_hi": ci.hi,
                "mae (positions)": g.mae.mean(),
                "chance mae": g.chance_mae.mean(),
                "chosen": int(g.chosen.sum()),
            }
        )
    return pd.DataFrame(rows)


def write_tables(t: dict, out) -> pd.DataFrame:
    out.table(
        "permutation",
        perm_summary(t["perm"]),
        "Permutation test, float64: the smallest and largest "
        "relative change per model, position encoding and measure",
    )
    write_sweep_tables(out, t["choices"], sweep_curves(t["runs"], "pos"), SweepWords())
    layers = layer_summary(t["layers"])
    out.table(
        "probe",
        layers,
        "Position probe per layer (0: input embeddings), each arm at its chosen rate: "
        "mean gain over the fresh seeds with its 95% CI, mean absolute error in positions",
    )
    out.table("runs", t["runs"], "Every training run with its readouts", in_report=False)
    out.table("perm_rows", t["perm"], "Every permutation measurement", in_report=False)
    return layers


# ------------------------------------------------------------------ figures
@drawing
def plot_permutation(perm: pd.DataFrame, tol: float, sees: float, out) -> None:
    """Every permutation measurement on a log axis, one row per (model, position encoding, measure, depth),
    with the tolerance below which a model counts as blind to order and the level above which it sees it."""
    import numpy as np

    from tfclaims.plotting import subplots

    if perm.empty:
        return
    groups = list(perm.groupby(["model", "pos", "measure", "depth"]))
    fig, axes = subplots(1, width=7.2, height=0.42 * len(groups) + 1.4)
    ax = axes[0]
    for i, ((_, pos, _, _), g) in enumerate(groups):
        y = i + np.linspace(-0.2, 0.2, len(g))
        ax.scatter(g.error.clip(lower=1e-18), y, s=8, alpha=0.6, color="C0" if pos == "none" else "C1")
    names = [
        f"{m}, {'no positions' if pos == 'none' else pos}, {meas}"
        + ("" if meas == "perm" else " (one layer)" if d == "one" else " (2+ layers)")
        for (m, pos, meas, d), _ in groups
    ]
    ax.set_yticks(range(len(groups)), names, fontsize=7)
    ax.axvline(tol, color="k", ls="--", lw=0.8, label=f"tolerance {tol:g}: order-blind below")
    ax.axvline(sees, color="C3", ls=":", lw=0.8, label=f"{sees:g}: sees order above")
    ax.set(
        xscale="log",
        xlabel="relative change of the hidden states (float64; floored at 1e-18)",
        title="Permute the input tokens: do the outputs just follow?",
    )
    ax.legend(fontsize=7, loc="center")  # between the two clusters, where no point falls
    out.figure(
        "permutation",
        fig,
        "Untrained models in float64, every size, init, attention backend and seed: the relative change of "
        "the hidden states when the input is permuted and the outputs are permuted back ('perm'), and, for "
        "causal decoders, of the last position's state when the tokens before it are permuted ('prefix'). "
        "Blue: no position information; orange: with positions.",
    )


@drawing
def plot_probe(layers: pd.DataFrame, p: dict, margin: float, out) -> None:
    """Probe gain against layer per scale (columns), one line per arm at its chosen rate: mean over the fresh
    seeds with the 95% CI band; chance at 0 and the declared margin dashed."""
    from matplotlib.ticker import MaxNLocator

    from tfclaims.plotting import band, subplots

    order = list(labels(p).values())
    fig, axes = subplots(len(order), width=3.9, height=3.2)
    summ = layer_summary(layers) if len(layers) else layers
    for ax, scale in zip(axes, order):
        here = summ[summ.scale == scale] if len(summ) else summ
        for i, (k, name) in enumerate(ARMS.items()):
            s = here[here.pos == k] if len(here) else here
            if len(s):
                band(ax, s.layer, s.gain, s.gain_lo, s.gain_hi, label=name, color=f"C{i}")
        ax.axhline(0, color="k", lw=0.6, ls=":", label="chance")
        ax.axhline(margin, color="grey", lw=0.8, ls="--", label=f"margin {margin:g}")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        title = scale + (" (the one-layer control)" if scale == order[-1] else "")
        ax.set(
            xlabel="layer (0: input embeddings, l: block l's output)",
            ylabel="probe gain (1 − MAE ÷ chance)",
            title=title,
        )
    axes[0].legend(fontsize=7)
    out.figure(
        "probe",
        fig,
        "A linear probe of each token's absolute position (0 .. T − 1) on each layer's hidden state, fitted "
        f"on {p['probe_batches']} held-out batches and scored on {p['probe_batches']} others, each arm at "
        f"its chosen learning rate: mean over the {len(p['seeds'])} fresh seeds and 95% CI. Gain 0 is chance "
        "(predicting the mean position), 1 exact. The last panel is the one-layer positive control.",
    )


@drawing
def plot_positions(positions: pd.DataFrame, p: dict, out) -> None:
    """The probe's error at its chosen layer against the position it predicts, per scale (columns), one line
    per arm: mean over the fresh seeds with the 95% CI band; chance's error |t − mean| dotted."""
    import numpy as np

    from tfclaims.plotting import band, subplots

    order = list(labels(p).values())
    fig, axes = subplots(len(order), width=3.9, height=3.2)
    T = p["seq_len"]
    for ax, scale in zip(axes, order):
        here = positions[positions.scale == scale]
        for i, (k, name) in enumerate(ARMS.items()):
            g = here[here.pos == k]
            if g.empty:
                continue
            cis = [mean_ci(g[g.position == t].mae.to_numpy()) for t in range(T)]
            band(
                ax,
                range(T),
                [c.mean for c in cis],
                [c.lo for c in cis],
                [c.hi for c in cis],
                label=name,
                color=f"C{i}",
                marker="",
            )
        t = np.arange(T)
        ax.plot(t, np.abs(t - (T - 1) / 2), color="k", lw=0.6, ls=":", label="chance")
        title = scale + (" (the one-layer control)" if scale == order[-1] else "")
        ax.set(
            xlabel="position t in the window", ylabel="probe's mean absolute error (positions)", title=title
        )
    axes[0].legend(fontsize=7)
    out.figure(
        "probe-positions",
        fig,
        "Where the probe errs: its mean absolute error (in positions) at each position of the scoring "
        "windows, at each arm's chosen layer, each arm at its chosen learning rate (mean over the fresh "
        "seeds and 95% CI); dotted: chance's error, predicting the mean position.",
    )


def plot_sweep(t: dict, p: dict, out) -> None:
    """Final loss against peak learning rate per scale (the control last), each arm's choice on the seeds."""
    from tfclaims.evidence.plots import model_sweep_figure

    sc = [*scales(p), control_scale(p)]
    model_sweep_figure(
        out,
        t,
        p,
        sc,
        [scale_label(s) for s in sc],
        ARMS,
        arm_column="pos",
        per="model (the last: the one-layer control)",
        each="arm",
        note=": the runs every comparison reads",
    )


def headline(result, layers: pd.DataFrame, t: dict) -> tuple[str, str]:
    """The key number and the summary sentence."""
    perm = t["perm"]

    def worst(model: str) -> str:
        g = (
            perm[(perm.model == model) & (perm.pos == "none") & (perm.measure == "perm")]
            if len(perm)
            else perm
        )
        return f"{g.error.max():.2g}" if len(g) else "—"

    q, pr = result.per_cell("quality"), result.per_cell("probe")
    c = next((f"{x.short()} ({x.decision})" for x in result.of("control")), "not run")
    key = f"NoPE − sinusoidal held-out loss {q}; NoPE's probe gain {pr}"
    best = layers[layers.chosen & (layers.pos == "none")] if len(layers) else layers
    summary = (
        f"Untrained, an encoder without positions is permutation-equivariant to {worst('encoder')} (float64) "
        f"and a causal decoder without positions is not (changes up to {worst('decoder')}). Trained, NoPE − "
        f"sinusoidal held-out loss, each at its best rate: {q}; the one-layer control (order-blind over its "
        f"prefix): {c}. A linear probe recovers absolute position from NoPE's hidden states with gain {pr} "
        "(0: chance)" + (f", at layer {int(best.layer.mode().iloc[0])} most often." if len(best) else ".")
    )
    return key, summary
