"""length_extrapolation: observation tables from its records, its own tables and its figures.

Loss at n× is the window mean of the per-position validation loss over the first n·T positions of the same
fixed windows (`sinusoidal_relative`'s `loss_at`), so every length reads the same text; its increase is that
less the mean over the first T."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.analysis.lengths import MISSING, increase, increase_readout, loss_at
from tfclaims.evidence.declare import Readout
from tfclaims.evidence.plots import drawing
from tfclaims.evidence.stats import mean_ci
from tfclaims.evidence.tables import comparison_table, runs_table
from tfclaims.evidence.tuning import SweepWords, read_sweep, sweep_curves, write_sweep_tables
from tfclaims.grids.sweep import final_and_init, scale_label

from .grid import ARMS, NULL_OFFSET, scales

LABEL = {"sinusoidal": "sinusoidal", "rope": "RoPE", "alibi": "ALiBi", "learned": "learned"}
COLOR = {"sinusoidal": "C0", "rope": "C1", "alibi": "C2", "learned": "C3"}  # as the sweep figure draws them
TABLES = {"copy": "rows copied", "random": "rows drawn at random"}
STAGES = {"built": "as extended", "trained": "trained at 2T"}

LOSS2 = Readout(
    "loss2x",
    "window-mean loss over 2T",
    "nats/char",
    definition="mean next-character loss over the first 2T positions of fixed validation windows" + MISSING,
)
GAP = Readout(
    "gap2",
    "loss over 2T, extended − unextended over T",
    "nats/char",
    definition="the extended model's window-mean loss over 2T less the same trained model's over T "
    "before it was extended" + MISSING,
)
LONGEST = Readout(
    "longest",
    "longest window that runs ÷ T",
    better="higher",
    definition="the longest of T, T + 1, 2T, 4T, 8T characters the trained model runs on, over "
    "T; every run that did not diverge",
)
KEPT = Readout(
    "kept_change",
    "largest change of the loss at positions below T",
    "nats/char",
    definition="the extended model as built against the trained one, per position below T",
)
TILE = Readout(
    "tile_error", "largest |row p − row (p mod T)| beyond T", definition="the stored table, as built"
)


def longer(p: dict) -> list[int]:
    return [n for n in sorted(p["mults"]) if n > 1]


def increases(p: dict) -> tuple[Readout, ...]:
    return tuple(increase_readout(n) for n in longer(p))


def _losses(m: dict, p: dict, learned: bool = True) -> dict:
    """loss1, loss<n>x and increase<n>x of one record holding position losses (None where missing or the run
    did not learn)."""
    T = p["seq_len"]
    out = {"loss1": loss_at(m, 1, T)}
    out |= {f"loss{n}x": loss_at(m, n, T) for n in longer(p)}
    out |= {f"increase{n}x": increase(m, n, T) for n in longer(p)}
    return {k: (v if learned else None) for k, v in out.items()}


def _role(sel):
    return lambda c, m: "null" if c["seed"] >= NULL_OFFSET else "selection" if c["seed"] in sel else "test"


# ---------------------------------------------------------------------------- observation tables
def observe(runs: list[dict], p: dict, guard) -> dict[str, pd.DataFrame]:
    """runs: one row per training run (role selection, test or null; its scale; losses at each length, missing
    where the run did not learn); choices, tuned, sensitivity: the sweep read by `evidence.tuning` (each arm
    at its chosen rate on the fresh seeds); first: the first scale's tuned runs and the null pairs' reruns at
    their arm's chosen rate; stops: every run that did not diverge, with the longest window it runs on;
    extension (ext_first: its first scale): one row per extended learned run, table and stage."""
    sc, T = scales(p), p["seq_len"]
    labels = {(s["d_model"], s["n_layers"]): scale_label(s) for s in sc}

    def scale(c, m):
        return labels.get((c["d_model"], c["n_layers"]))

    recs = part(runs, "sweep")
    t = runs_table(
        recs,
        (guard,),
        role=_role(set(p["selection_seeds"])),
        scale=scale,
        init_loss=lambda c, m: m["val_loss"][0],
        unigram=lambda c, m: m["unigram_xent"],
        final_val=lambda c, m: final_and_init(m)[0],
        longest=lambda c, m: m["longest_window"] / T if "longest_window" in m else None,
    )
    if len(t):
        losses = pd.DataFrame(
            [_losses(r["metrics"], p, bool(ok)) for r, ok in zip(recs, t.learned)], index=t.index
        )
        t = t.join(losses)
    swept = t[t.role.isin(["selection", "test"])] if len(t) else t
    by_scale = {v: {"d_model": k[0], "n_layers": k[1]} for k, v in labels.items()}
    choices, tuned, seeds = read_sweep(swept, {pos: {"pos": pos} for pos in ARMS}, by_scale)
    first_label = scale_label(sc[0])
    chosen = (
        {r.arm: r.chosen_lr for r in choices.itertuples() if r.scale == first_label} if len(choices) else {}
    )
    null = t[(t.role == "null") & (t.scale == first_label)] if len(t) else t
    null = null[[chosen.get(pos) == lr for pos, lr in zip(null.pos, null.lr)]] if len(null) else null
    first = pd.concat([tuned[tuned.scale == first_label] if len(tuned) else tuned, null], ignore_index=True)
    ext = _extension(recs, p, guard, scale)
    ext_first = ext[ext.scale == first_label] if len(ext) else ext
    stops = t[t.longest.notna()] if len(t) else t.assign(longest=[])
    return {
        "runs": t,
        "choices": choices,
        "tuned": tuned,
        "sensitivity": seeds,
        "first": first,
        "stops": stops,
        "extension": ext,
        "ext_first": ext_first,
    }


EXT_COLUMNS = ["scale", "unit", "role", "lr", "run_id", "learned", "table", "stage", "loss1", "gap2",
               "kept_change", "tile_error"]  # fmt: skip


def _extension(recs, p: dict, guard, scale) -> pd.DataFrame:
    rows = []
    for r in recs:
        c, m = r["config"], r["metrics"]
        if "extended" not in m:
            continue
        ok = bool(guard.fn(m))
        role = "null" if c["seed"] >= NULL_OFFSET else "test"
        base = {
            "scale": scale(c, m),
            "unit": c["seed"],
            "role": role,
            "lr": c["lr"],
            "run_id": r.get("run_id"),
            "learned": ok,
        }
        before = loss_at(m, 1, p["seq_len"])
        for how, e in m["extended"].items():
            for stage, rec in (("built", e), ("trained", e["trained"])):
                v = _losses(rec, p, ok)  # a trained extension that diverged has no position losses
                built = stage == "built"
                rows.append(
                    {
                        **base,
                        "table": how,
                        "stage": stage,
                        **v,
                        "gap2": None if v["loss2x"] is None else v["loss2x"] - before,
                        "kept_change": e["kept_change"] if built else None,
                        "tile_error": e["tile_error"] if built and how == "copy" else None,
                    }
                )
    cols = EXT_COLUMNS + [f"loss{n}x" for n in longer(p)] + [f"increase{n}x" for n in longer(p)]
    return pd.DataFrame(rows, columns=cols)


# ---------------------------------------------------------------------------- tables
def _cell(ci) -> str:
    if not ci.n:
        return "—"
    mean = round(ci.mean, 3) + 0.0  # never "-0.000"
    return f"{mean:.3f}" if ci.n < 2 else f"{mean:.3f} ± {ci.half_width:.3f}"


def length_table(tuned: pd.DataFrame, p: dict) -> pd.DataFrame:
    """Per scale and arm at its chosen rate: how many learned, the window-mean loss at each length and its
    increase over 1×, mean ± 95% CI over the fresh seeds that learned (n/a: a learned table stops at T)."""
    rows = []
    for (sc, pos), g in tuned.groupby(["scale", "pos"], sort=False) if len(tuned) else ():
        row = {
            "scale": sc,
            "arm": LABEL[pos],
            "rate": g.lr.iloc[0],
            "learned": f"{int(g.learned.sum())}/{len(g)}",
        }
        for n in sorted(p["mults"]):
            col = "loss1" if n == 1 else f"loss{n}x"
            row[f"loss {n}×"] = (
                "n/a" if pos == "learned" and n > 1 else _cell(mean_ci(g[col].dropna().tolist()))
            )
        for n in longer(p):
            col = f"increase{n}x"
            row[f"increase {n}×"] = "n/a" if pos == "learned" else _cell(mean_ci(g[col].dropna().tolist()))
        rows.append(row)
    return pd.DataFrame(rows)


def extension_table(ext: pd.DataFrame, tuned: pd.DataFrame, p: dict) -> pd.DataFrame:
    """Per scale, table and stage (fresh seeds): the window-mean loss at each length and the 2T gap, beside
    the unextended learned model at 1×."""
    rows = []
    for sc in dict.fromkeys(ext.scale) if len(ext) else ():
        base = tuned[(tuned.scale == sc) & (tuned.pos == "learned")]
        rows.append(
            {"scale": sc, "table": "not extended (T rows)", "loss 1×": _cell(mean_ci(base.loss1.dropna()))}
        )
        for (how, stage), g in ext[(ext.scale == sc) & (ext.role == "test")].groupby(
            ["table", "stage"], sort=False
        ):
            row = {"scale": sc, "table": f"{TABLES[how]}, {STAGES[stage]}"}
            for n in sorted(p["mults"]):
                row[f"loss {n}×"] = _cell(mean_ci(g["loss1" if n == 1 else f"loss{n}x"].dropna()))
            row["2T − unextended 1×"] = _cell(mean_ci(g.gap2.dropna()))
            rows.append(row)
    return pd.DataFrame(rows)


def write_tables(t: dict, result, p: dict, out) -> None:
    n, T = max(p["mults"]), p["seq_len"]
    runs = t["runs"]
    write_sweep_tables(out, t["choices"], sweep_curves(runs, "pos"), SweepWords())
    if len(runs) and runs.role.isin(["selection", "test"]).any():
        out.table("runs", runs, "Every training run with its losses at each length", in_report=False)
    out.table(
        "length",
        length_table(t["tuned"], p),
        f"Trained at T = {T} characters, each arm at its own "
        f"best rate, evaluated on {n}T-character windows: window-mean validation loss at each length "
        "(nats/char) and its increase over 1×, mean ± 95% CI over the fresh seeds that "
        "learned",
    )
    out.table(
        "extension",
        extension_table(t["extension"], t["tuned"], p),
        f"The learned table extended to "
        f"{n}T rows (copied from rows 0..T − 1 in turn, or drawn at random), as extended and after "
        f"{p['ft_steps']} steps at 2T: window-mean loss (nats/char) and the loss over 2T less the "
        "unextended model's over T, mean ± 95% CI over the fresh seeds",
    )
    out.table(
        "differences",
        comparison_table(result.comparisons + result.floors),
        "Every comparison (b − a; "
        "Holm within each sub-claim) and the null pairs (the sinusoidal and the learned arm at seeds + "
        f"{NULL_OFFSET})",
    )


def headline(t: dict, p: dict) -> str:
    """The loss increase from T to max(mults)·T of each arm that has one, per scale (fresh seeds' means)."""
    n, tuned = max(p["mults"]), t["tuned"]
    parts = []
    for sc in dict.fromkeys(tuned.scale) if len(tuned) else ():
        g = tuned[tuned.scale == sc]
        vals = [(LABEL[pos], g[g.pos == pos][f"increase{n}x"].dropna()) for pos in ARMS if pos != "learned"]
        txt = ", ".join(
            f"{name} {round(v.mean(), 3) + 0.0:+.3f}" for name, v in vals if len(v)
        )  # no "-0.000"
        if txt:
            parts.append(f"{sc}: {txt}")
    what = "; ".join(parts) or ("no run learned" if len(tuned) else "not run")
    return f"loss increase 1× → {n}× (nats/char): {what}"


def at_twice(t: dict, p: dict) -> str:
    """Beside Press et al.'s anchor (ALiBi trained at L read at 2L): each arm's window-mean loss over T and 2T
    at the first scale, and the learned table's over 2T once extended and trained (fresh seeds' means)."""
    tuned, ext = t["tuned"], t["ext_first"]
    if not len(tuned):
        return "At the first scale: not run."
    first = tuned[tuned.scale == tuned.scale.iloc[0]]
    parts = []
    for pos in ARMS:
        g = first[first.pos == pos]
        one, two = g.loss1.dropna(), g.loss2x.dropna() if pos != "learned" else pd.Series(dtype=float)
        if len(one):
            parts.append(f"{LABEL[pos]} {one.mean():.3f}" + (f" → {two.mean():.3f}" if len(two) else ""))
    for how, label in TABLES.items():
        g = ext[(ext.role == "test") & (ext.table == how) & (ext.stage == "trained")] if len(ext) else ext
        if len(g) and g.loss2x.notna().any():
            parts.append(f"learned, {label} and trained at 2T: {g.loss2x.dropna().mean():.3f} over 2T")
    what = "; ".join(parts) or "no run learned"
    return f"Loss over T → 2T windows (nats/char, {first.scale.iloc[0]}, trained at T): {what}."


# ---------------------------------------------------------------------------- figures
def _position_curves(recs, ids, key=lambda m: m) -> np.ndarray:
    ys = [key(r["metrics"])["position_loss"]["at_0"] for r in recs if r.get("run_id") in ids]
    n = min((len(y) for y in ys), default=0)
    return np.array([y[:n] for y in ys], float)


def _smoothed_band(ax, ys: np.ndarray, w: int, **kw) -> None:
    """Mean over runs (95% CI band) of per-position losses, each smoothed by a running mean over w
    positions."""
    from tfclaims.plotting import band

    if not len(ys) or ys.shape[1] < w:
        return
    sm = np.array([np.convolve(y, np.ones(w) / w, "valid") for y in ys])
    cis = [mean_ci(sm[:, j]) for j in range(sm.shape[1])]
    x = np.arange(sm.shape[1]) + (w - 1) / 2
    band(ax, x, [c.mean for c in cis], [c.lo for c in cis], [c.hi for c in cis], marker=None, **kw)


@drawing
def plot_length(runs, t: dict, p: dict, out) -> None:
    """Per scale: the window-mean loss against the evaluation length, and the loss per position, each arm at
    its chosen rate (fresh seeds that learned)."""
    from tfclaims.plotting import band, log_ticks, subplots

    T, mults, tuned, sc = p["seq_len"], sorted(p["mults"]), t["tuned"], [scale_label(s) for s in scales(p)]
    recs = part(runs, "sweep")
    fig, axes = subplots(2, len(sc), width=4.6, height=3.6)
    for row, label in enumerate(sc):
        a, b = axes[2 * row], axes[2 * row + 1]
        for pos in ARMS:
            g = tuned[(tuned.scale == label) & (tuned.pos == pos)] if len(tuned) else tuned
            cis = {n: mean_ci(g["loss1" if n == 1 else f"loss{n}x"].dropna()) for n in mults}
            cis = {n: ci for n, ci in cis.items() if ci.n}
            if cis:
                xs = [n * T for n in cis]
                band(
                    a,
                    xs,
                    [c.mean for c in cis.values()],
                    [c.lo for c in cis.values()],
                    [c.hi for c in cis.values()],
                    label=LABEL[pos],
                    color=COLOR[pos],
                )
            ok = set(g.run_id[g.learned.astype(bool)]) if len(g) else set()
            _smoothed_band(b, _position_curves(recs, ok), max(1, T // 8), label=LABEL[pos], color=COLOR[pos])
        log_ticks(a, [n * T for n in mults])
        a.set(
            xlabel="evaluation window (characters)",
            ylabel="window-mean validation loss (nats/char)",
            title=f"{label}: loss against window length",
        )
        b.axvline(T, color="k", lw=0.8, ls=":", label="training length T")
        b.set(
            xlabel="position (characters)",
            ylabel="validation loss (nats/char)",
            title=f"{label}: loss per position",
        )
        for ax in (a, b):
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
    out.figure(
        "length",
        fig,
        f"Left: validation loss averaged over windows of T to {max(mults)}T "
        f"characters (T = {T}), each arm at its chosen rate; mean and 95% CI over the fresh seeds "
        "that learned (a learned table stops at T). Right: the loss at each position (running mean "
        f"over {max(1, T // 8)} positions), the dotted line at T.",
    )


@drawing
def plot_extension(runs, t: dict, p: dict, out) -> None:
    """The learned table's extensions, first scale: loss per position as extended and after training at 2T."""
    from tfclaims.plotting import subplots

    ext, T = t["ext_first"], p["seq_len"]
    if not len(ext):
        return
    ok = set(ext.run_id[(ext.role == "test") & ext.learned.astype(bool)])
    recs = [r for r in part(runs, "sweep") if r.get("run_id") in ok]
    fig, axes = subplots(2, width=4.8, height=3.6)
    w = max(1, T // 8)
    for ax, stage in zip(axes, STAGES):
        for i, how in enumerate(TABLES):

            def pick(m, how=how, stage=stage):  # a trained extension that diverged has no losses
                e = m["extended"][how]
                return e if stage == "built" else e["trained"]

            ys = _position_curves([r for r in recs if pick(r["metrics"])["position_loss"]], ok, pick)
            _smoothed_band(ax, ys, w, label=TABLES[how], color=f"C{4 + i}")
        _smoothed_band(ax, _position_curves(recs, ok), w, label="not extended", color=COLOR["learned"])
        for x in (T, 2 * T):
            ax.axvline(x, color="k", lw=0.8, ls=":")
        ax.set(
            xlabel="position (characters)",
            ylabel="validation loss (nats/char)",
            title=f"Learned table extended, {STAGES[stage]}",
        )
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    out.figure(
        "extension",
        fig,
        f"The learned table (T = {T} rows) extended to {max(p['mults'])}T rows: "
        "rows T.. copied from rows 0..T − 1 in turn, or drawn at random as at initialisation; left as "
        f"extended, right after {p['ft_steps']} steps at 2T. Loss per position (running mean over "
        f"{w}), mean and 95% CI over the fresh seeds; dotted lines at T and 2T.",
    )


def plot_all(runs, t: dict, p: dict, out) -> None:
    from tfclaims.evidence.plots import model_sweep_figure

    if not len(t["tuned"]):
        return
    plot_length(runs, t, p, out)
    plot_extension(runs, t, p, out)
    model_sweep_figure(
        out,
        t,
        p,
        scales(p),
        [scale_label(s) for s in scales(p)],
        LABEL,
        arm_column="pos",
        per="scale",
        each="arm",
    )
