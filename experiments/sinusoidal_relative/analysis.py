"""sinusoidal_relative: observation tables from its records, its own tables and its figures."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.analysis.lengths import MISSING, increase, loss_at
from tfclaims.evidence.declare import Readout
from tfclaims.evidence.plots import drawing, sweep_caption
from tfclaims.evidence.stats import mean_ci
from tfclaims.evidence.tables import comparison_table, runs_table
from tfclaims.evidence.tuning import (
    SweepWords,
    curve_table,
    read_sweep,
    sweep_curves,
    sweep_table,
    write_sweep_tables,
)
from tfclaims.grids.sweep import final_and_init, scale_label

from .grid import ARMS, NULL_OFFSET, scales

RATIO = 2**-0.5  # ‖position‖/‖token‖ at init in both additive arms (Vaswani et al.'s parametrisation)
LABEL = {"sinusoidal": "sinusoidal", "learned": "learned", "rope": "RoPE", "none": "NoPE"}
COLOR = {"sinusoidal": "C0", "learned": "C3", "rope": "C2", "none": "C7"}
USE = ("share", "extra", "anchor", "nope-sinusoidal", "nope-rope", "moved")  # the use half's sub-claims


def at_kT(k: int) -> str:
    return "T" if k == 1 else f"{k}T"


# ---------------------------------------------------------------------------- per-run values (length part)


def shifted_loss(m: dict, k: int, T: int) -> float | None:
    """Loss of the windows' first T characters placed at k·T (k = 0: where they were trained)."""
    if k == 0:
        return loss_at(m, 1, T)
    at = (m.get("position_loss") or {}).get(f"at_{k * T}")
    return float(np.mean(at)) if at else None


def shift_change(m: dict, k: int, T: int) -> float | None:
    """Loss of the windows' first T characters placed at k·T, less the same characters placed at 0."""
    a, b = shifted_loss(m, k, T), loss_at(m, 1, T)
    return None if a is None or b is None else a - b


def res1(st: dict):
    r = st["shift_residual"]
    return r.get("1", r.get(1))


def length_measures(p: dict) -> dict:
    """Column -> fn(config, metrics): the length part's measures of one run."""
    T, ns = p["seq_len"], [n for n in sorted(p["mults"]) if n > 1]
    cols = {"loss1": lambda c, m: loss_at(m, 1, T)}
    cols |= {f"loss{n}x": lambda c, m, n=n: loss_at(m, n, T) for n in ns}
    cols |= {f"increase{n}x": lambda c, m, n=n: increase(m, n, T) for n in ns}
    cols |= {f"moved{at_kT(k)}": lambda c, m, k=k: shift_change(m, k, T) for k in p["shift_mults"]}
    cols |= {
        "share": lambda c, m: m.get("offset_share"),
        "share_init": lambda c, m: m.get("offset_share_init"),
    }
    return cols


def _guarded(t: pd.DataFrame, cols) -> pd.DataFrame:
    """Measures as floats, missing where the run did not learn (runs that did not learn are left out); an
    empty table gets the columns."""
    t = t.copy()
    if "learned" not in t:
        t["learned"] = pd.Series(dtype=bool)
    for c in cols:
        t[c] = (
            (t[c] if c in t else pd.Series(index=t.index, dtype=float))
            .astype(float)
            .where(t["learned"].astype(bool))
        )
    return t


# ---------------------------------------------------------------------------- per-run values (copy part)
def copy_acc(acc: list | None, lo: int, hi: int | None = None) -> float | None:
    """Mean per-position copy accuracy over positions lo .. hi − 1 (None where there are none)."""
    v = np.asarray(acc if acc is not None else [], float)[lo:hi]
    v = v[~np.isnan(v)]
    return float(v.mean()) if v.size else None


def copy_measures(p: dict) -> dict:
    """Column -> fn(config, metrics): the copy task's accuracy within T (positions k .. T − 1), beyond T
    (T .. end of the longer sequences) and their difference (the drop)."""

    def within(c, m):
        return copy_acc(m.get("acc_by_position"), c["k"], c["seq_len"])

    def beyond(c, m):
        return copy_acc(m.get("acc_by_position"), c["seq_len"])

    def drop(c, m):
        a, b = within(c, m), beyond(c, m)
        return None if a is None or b is None else a - b

    return {"acc_within": within, "acc_beyond": beyond, "copy_drop": drop}


# ---------------------------------------------------------------------------- observation tables
def _roles(selection, fresh):
    def role(c, m):
        return "selection" if c["seed"] in selection else "test" if c["seed"] in fresh else "null"

    return role


def _identity(runs: list[dict]) -> pd.DataFrame:
    """The shift identity's rows, its spreads also relative to d/2."""
    ident = pd.DataFrame(part(runs, "identity")[0]["metrics"]["rows"])
    ident["unit"] = 0
    ident["dot_spread_rel"] = ident["dot_spread"] / (ident["d"] / 2)
    ident["dot_closed_rel"] = ident["dot_closed_err"] / (ident["d"] / 2)
    return ident


def _length(lruns: list[dict], p: dict, guard, labels: dict) -> pd.DataFrame:
    """One row per length run with its role and scale, each measure missing where the run did not learn."""
    cols = length_measures(p)
    table = runs_table(
        lruns,
        (guard,),
        **cols,
        role=_roles(set(p["selection_seeds"]), set(p["tuned_seeds"])),
        scale=lambda c, m: labels.get((c["d_model"], c["n_layers"])),
        final_val=lambda c, m: final_and_init(m)[0],
        init_loss=lambda c, m: m["val_loss"][0],
    )
    return _guarded(table, cols)


def _windows(sin: list[dict], ks, T: int, guard, labels: dict) -> pd.DataFrame:
    """The tuned sinusoidal runs' loss on their first T characters placed at k·T, one row per run and k."""
    placed = [
        {
            **r,
            "config": {
                **r["config"],
                "k": k,
                "scale": labels[(r["config"]["d_model"], r["config"]["n_layers"])],
            },
        }
        for r in sin
        for k in (0, *ks)
    ]
    return runs_table(placed, (guard,), window_loss=lambda c, m: shifted_loss(m, c["k"], T))


def _construction(lruns: list[dict], ks, T: int) -> pd.DataFrame:
    """RoPE's offset-only share and RoPE's and NoPE's loss change when the window moves."""
    rows = [
        {"pos": r["config"]["pos"], "unit": r["config"]["seed"], "measure": what, "value": v}
        for r in lruns
        for what, v in (
            ("share", r["metrics"].get("offset_share") if r["config"]["pos"] == "rope" else None),
            *(("moved", shift_change(r["metrics"], k, T)) for k in ks),
        )
        if r["config"]["pos"] in ("rope", "none") and v is not None
    ]
    return pd.DataFrame(rows, columns=["pos", "unit", "measure", "value"])


def _ratios(tuned_recs: list[dict]) -> pd.DataFrame:
    """Each additive arm's ‖position‖/‖token‖ at init less 1/√2."""
    rows = [
        {"pos": r["config"]["pos"], "unit": r["config"]["seed"]}
        | {"ratio_err": r["metrics"]["norm_ratio"]["init"] / RATIO - 1}
        for r in tuned_recs
        if r["config"]["pos"] in ("sinusoidal", "learned") and r["metrics"].get("norm_ratio")
    ]
    return pd.DataFrame(rows, columns=["pos", "unit", "ratio_err"])


def observe(
    runs: list[dict], p: dict, guard, copy_guard, thresholds: dict[str, float]
) -> dict[str, pd.DataFrame]:
    """identity: one row per (d, k) of the shift identity; length: one row per length run with its role
    (selection, test: the fresh seeds, null: the null pair) and scale, each measure missing where the run did
    not learn; tuned, choices, sensitivity: the length sweep read by `evidence.tuning` (each arm at its chosen
    rate on the fresh seeds); first: the sinusoidal null pair at the first scale; windows: the tuned
    sinusoidal runs' loss on their first T characters placed at k·T, one row per run and k; construction:
    RoPE's offset-only share and RoPE's and NoPE's loss change when the window moves; ratios: each additive
    arm's ‖position‖/‖token‖ at init less 1/√2; learned: the learned-table part, one row per run and table;
    copy, copy_choices: the copy task's sweep, each (arm, k) at its chosen rate on the fresh seeds;
    copy_windows: the tuned sinusoidal copy runs' accuracy on T-sequences placed at shift·T."""
    T, ks, sc = p["seq_len"], p["shift_mults"], scales(p)
    labels = {(s["d_model"], s["n_layers"]): scale_label(s) for s in sc}
    lruns = part(runs, "length")
    length = _length(lruns, p, guard, labels)
    by_scale = {scale_label(s): {"scale": scale_label(s)} for s in sc}
    swept = length[length.role.isin(["selection", "test"])] if len(length) else length
    choices, tuned, seeds = read_sweep(swept, {pos: {"pos": pos} for pos in ARMS}, by_scale)
    first = pd.concat(
        [tuned[tuned.scale == scale_label(sc[0])], length[length.role == "null"]] if len(length) else [tuned],
        ignore_index=True,
    )
    ids = set(tuned.run_id) if len(tuned) else set()
    tuned_recs = [r for r in lruns if r.get("run_id") in ids]
    sin = [r for r in tuned_recs if r["config"]["pos"] == "sinusoidal"]
    copy, copy_choices, copy_windows, copy_curves = _copy(runs, p, copy_guard)
    return {
        "identity": _identity(runs),
        "length": length,
        "tuned": tuned,
        "choices": choices,
        "sensitivity": seeds,
        "first": first,
        "windows": _guarded(_windows(sin, ks, T, guard, labels), ["window_loss"]),
        "construction": _construction(lruns, ks, T),
        "ratios": _ratios(tuned_recs),
        "learned": _learned(runs, guard, thresholds),
        "copy": copy,
        "copy_choices": copy_choices,
        "copy_curves": copy_curves,
        "copy_windows": copy_windows,
    }


def _copy(runs, p: dict, guard) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    recs, cols = part(runs, "copy"), copy_measures(p)
    t = runs_table(
        recs,
        (guard,),
        **cols,
        role=_roles(set(p["copy_selection_seeds"]), set(p["tuned_seeds"])),
        final_val=lambda c, m: final_and_init(m)[0],
        init_loss=lambda c, m: m["val_loss"][0],
    )
    if not len(t):
        empty = pd.DataFrame(columns=["pos", "k", "unit", "learned", *cols])
        windows = pd.DataFrame(columns=["pos", "k", "shift", "unit", "learned", "copy_window_acc"])
        return empty, pd.DataFrame(), windows, pd.DataFrame()
    arms = {f"{pos}-k{k}": {"pos": pos, "k": k} for pos in ARMS for k in p["copy_ks"]}
    choices, tuned, _ = read_sweep(t[t.role.isin(["selection", "test"])], arms, {"": {}})
    ids = set(tuned.run_id) if len(tuned) else set()
    rows = []
    for r in recs:
        c, m = r["config"], r["metrics"]
        if r.get("run_id") not in ids or c["pos"] != "sinusoidal" or "acc_at_0" not in m:
            continue
        base = {"pos": c["pos"], "k": c["k"], "unit": c["seed"], "learned": guard.fn(m)}
        rows.append({**base, "shift": 0, "copy_window_acc": copy_acc(m["acc_at_0"], c["k"])})
        rows += [
            {**base, "shift": int(s), "copy_window_acc": copy_acc(a, c["k"])}
            for s, a in m["acc_moved"].items()
        ]
    windows = pd.DataFrame(rows, columns=["pos", "k", "shift", "unit", "learned", "copy_window_acc"])
    curves = sweep_table(t[t.role.isin(["selection", "test"])], arms, {"": {}})
    return _guarded(tuned, list(cols)), choices, _guarded(windows, ["copy_window_acc"]), curves


def _learned(runs, guard, thresholds) -> pd.DataFrame:
    rows = []
    for r in part(runs, "learned"):
        c, m = r["config"], r["metrics"]
        null = c["seed"] >= NULL_OFFSET
        base = {
            "part": "null" if null else "learned",
            "unit": c["seed"],
            "run_id": r.get("run_id"),
            "learned": guard.fn(m),
        }
        r2 = m["final_table"]["toeplitz_r2"]
        prev = m["probes"][-2]["toeplitz_r2"] if len(m["probes"]) > 1 else None
        rows.append({**base, "table": "trained", "r2": r2, "res1": res1(m["final_table"]), "r2_prev": prev})
        if not null:
            rows.append({**base, "table": "previous", "r2": prev})
            rows.append({**base, "table": "threshold", **thresholds})
    cols = ["part", "unit", "run_id", "learned", "table", "r2", "res1", "r2_prev"]
    return _guarded(pd.DataFrame(rows, columns=cols), ["r2", "res1", "r2_prev"])


# ---------------------------------------------------------------------------- tables
def write_tables(runs, t: dict, result, p: dict, out) -> pd.DataFrame:
    """The claim's own tables; returns the length part's per-(scale, arm) means (for the summary)."""
    cols = {
        "d": "d_model",
        "k": "offset k",
        "err32": "max|M_k PE(p) − PE(p+k)| f32",
        "err64": "same, f64",
        "orth_err": "max|M_kᵀM_k − I|",
        "compose_err": "max|M_k M_1 − M_(k+1)|",
        "dot_mean": "PE(p)·PE(p+k)",
        "dot_closed": "Σ cos(kω_i)",
        "dot_spread_rel": "dot_spread/(d/2)",
        "dot_closed_rel": "dot_closed_err/(d/2)",
    }
    out.table(
        "identity",
        t["identity"].rename(columns=cols)[list(cols.values())],
        f"The shift identity over all {p['max_len']} positions (sinusoidal_table, float32 entries)",
        floatfmt=".3g",
    )
    _learned_table(learned_runs(runs), p, out)
    write_sweep_tables(
        out,
        pd.concat([t["choices"].assign(task="language model"), t["copy_choices"].assign(task="copy")]),
        pd.concat(
            [
                sweep_curves(t["length"], "pos").assign(task="language model"),
                t["copy_curves"].assign(task="copy"),
            ],
            ignore_index=True,
        ),
        SweepWords(per="task and scale (the copy task: per distance k, in the arm's name)"),
    )
    tab = _length_table(t["tuned"], p, out)
    _copy_table(t["copy"], p, out)
    use = [c for c in result.comparisons if c.sub_claim.split(" ")[0] in USE]
    out.table(
        "use_differences",
        comparison_table(use + [f for f in result.floors if not f.id.startswith("learned")]),
        "The use half: paired comparisons over seeds (b − a; Holm within each sub-claim), each arm at its "
        "own best rate, and the null pair (sinusoidal at seeds + 1000)",
    )
    return tab


def learned_runs(runs) -> list[dict]:
    """The learned-table part's runs on the fresh seeds (not their null-pair reruns)."""
    return [r for r in part(runs, "learned") if r["config"]["seed"] < NULL_OFFSET]


def _copy_table(copy: pd.DataFrame, p: dict, out) -> None:
    """Per (k, arm): how many learned, accuracy within and beyond T and the drop, mean ± 95% CI."""
    rows = []
    for k in p["copy_ks"]:
        for pos in ARMS:
            g = copy[(copy.pos == pos) & (copy.k == k)] if len(copy) else copy
            if not len(g):
                continue
            row = {
                "k": k,
                "arm": LABEL[pos],
                "rate": g.lr.iloc[0],
                "learned": f"{int(g.learned.sum())}/{len(g)}",
            }
            for col, name in (("acc_within", "within T"), ("acc_beyond", "beyond T"), ("copy_drop", "drop")):
                ci = mean_ci(g[col].dropna().tolist())
                row[name] = (
                    "n/a" if pos == "learned" and col != "acc_within" else _cell(ci.mean, ci.half_width)
                )
            rows.append(row)
    out.table(
        "copy",
        pd.DataFrame(rows),
        f"The copy task (output the token k back; {p['copy_symbols']} symbols, trained at T = "
        f"{p['copy_len']}): copy accuracy within T (positions k .. T − 1), beyond T (T .. 4T − 1) and the "
        "drop, each arm at its own best rate, mean ± 95% CI over the fresh seeds that learned; n/a: learned "
        "embeddings have no rows beyond T",
    )


def learned_summary(learned_runs) -> pd.DataFrame:
    rows = []
    for r in learned_runs:
        m = r["metrics"]
        for when, st in (
            ("init", m["probes"][0]),
            ("trained", m["final_table"]),
            ("sinusoidal (same T, d)", m["sinusoidal_table"]),
        ):
            rows.append(
                {"table": when, "offset R²": st["toeplitz_r2"]}
                | {f"shift residual k={k}": v for k, v in st["shift_residual"].items()}
            )
    if not rows:
        return pd.DataFrame(columns=["table"])
    return pd.DataFrame(rows).groupby("table", sort=False).mean().reset_index()


def _learned_table(learned_runs, p, out) -> None:
    if learned_runs:
        out.table(
            "learned",
            learned_summary(learned_runs),
            f"Relative structure of position tables (T = {p['pe_len']} positions, d = "
            f"{learned_runs[0]['config']['d_model']}; mean over {len(learned_runs)} seeds)",
            floatfmt=".3g",
        )


def _cell(v: float, hw: float) -> str:
    if math.isnan(v):
        return "—"
    return f"{v:.3f}" if math.isnan(hw) or hw == 0 else f"{v:.3f} ± {hw:.3f}"


def _length_table(tuned: pd.DataFrame, p, out) -> pd.DataFrame:
    """Per scale and arm at its chosen rate: learned count, loss at each length, the increases, the moved
    windows, the offset-only share."""
    T, mults, ks = p["seq_len"], sorted(p["mults"]), p["shift_mults"]
    if not len(tuned):
        return pd.DataFrame()
    src = {f"loss {n}×": f"loss{n}x" if n > 1 else "loss1" for n in mults}
    src |= {f"increase {n}×": f"increase{n}x" for n in mults if n > 1}
    src |= {f"moved to {at_kT(k)}": f"moved{at_kT(k)}" for k in ks}
    src |= {"share (init)": "share_init", "share": "share"}
    beyond = {
        c for c in src if c.startswith(("increase", "moved")) or (c.startswith("loss") and c != "loss 1×")
    }
    keep = ["scale", "pos", "lr", "unit", "learned", *src.values()]
    out.table(
        "length_runs",
        tuned[[c for c in keep if c in tuned]],
        "Length part, each arm at its chosen rate, per fresh run (nats/char; shares in [0, 1])",
        in_report=False,
    )
    rows, shown = [], []
    for scale, g in tuned.groupby("scale", sort=False):
        for pos in ARMS:
            arm = g[g["pos"] == pos]
            if not len(arm):
                continue
            row = {
                "scale": scale,
                "arm": pos,
                "lr": arm.lr.iloc[0],
                "learned": f"{int(arm['learned'].sum())}/{len(arm)}",
            }
            shown.append({"scale": scale, "arm": LABEL[pos], "rate": row["lr"], "learned": row["learned"]})
            for name, col in src.items():
                ci = mean_ci(arm[col].dropna().tolist())
                row[name], row[name + " ±"] = ci.mean, ci.half_width
                shown[-1][name] = (
                    "n/a" if pos == "learned" and name in beyond else _cell(ci.mean, ci.half_width)
                )
            rows.append(row)
    out.table(
        "length",
        pd.DataFrame(shown),
        f"Trained at T = {T} characters, each arm at its own best rate, evaluated on {max(mults)}T-character "
        "windows: window-mean validation loss at each length (nats/char), its increase over 1×, the change "
        "when the first T characters are moved to start at kT, and the offset-only share of the first "
        "layer's position-only logits (at initialisation and trained); mean ± 95% CI over the fresh seeds "
        "that learned. n/a: learned embeddings have no rows beyond T.",
    )
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------- figures
@drawing
def plot_identity(ident: pd.DataFrame, metrics: dict, tol: float, out) -> None:
    from tfclaims.plotting import subplots

    fig, (a, b) = subplots(2, width=4.6, height=3.6)
    for d, g in ident.groupby("d"):
        a.loglog(g["k"], g["err32"].clip(lower=1e-17), "o-", label=f"float32, d={d}")
        a.loglog(g["k"], g["err64"].clip(lower=1e-17), "s--", label=f"float64, d={d}")
    a.axhline(tol, color="k", ls=":", lw=0.8, label=f"tolerance {tol:g}")
    a.set(
        xlabel="offset k",
        ylabel="max over p of |M_k PE(p) − PE(p+k)|",
        title="Shift identity over all positions",
    )
    a.legend(fontsize=7)
    ks = metrics["curve_ks"]
    for start, ys in metrics["curves"].items():
        b.plot(ks, ys, lw=1.2, label=f"p = {start}")
    d = metrics["curve_d"]
    w = np.exp(-math.log(10000.0) * np.arange(0, d, 2) / d)  # ω_i, as in sinusoidal_table
    b.plot(ks, np.cos(np.outer(ks, w)).sum(-1), "k:", lw=1.5, label="Σ cos(kω_i)")
    b.set(
        xlabel="offset k",
        ylabel="PE(p)·PE(p+k)",
        title=f"Dot product vs offset, d = {metrics['curve_d']} (curves overlap)",
    )
    b.legend(fontsize=7)
    out.figure(
        "identity",
        fig,
        "Left: the largest error of PE(p+k) = M_k·PE(p) over every position, per offset, in float32 and "
        "float64 arithmetic (the table's entries are float32). Right: PE(p)·PE(p+k) against k from several "
        "starting positions p, which coincide with the closed form Σ_i cos(kω_i).",
    )


@drawing
def plot_learned(learned_runs, p, out) -> None:
    from tfclaims.plotting import subplots

    m = learned_runs[0]["metrics"]
    fig, (a, b, c) = subplots(3, width=3.9, height=3.5)
    T = len(m["norms"])
    for ax, key, title in (
        (a, "gram_sinusoidal", "sinusoidal"),
        (b, "gram_learned", "learned, after training"),
    ):
        im = ax.imshow(np.array(m[key]), cmap="RdBu_r", vmin=-1, vmax=1, extent=[0, T, T, 0])
        ax.set(xlabel="position q", ylabel="position p", title=f"cos(PE(p), PE(q)): {title}")
        ax.grid(False)
    fig.colorbar(im, ax=b, fraction=0.046)
    for i, r in enumerate(learned_runs):
        mm = r["metrics"]
        c.plot(
            mm["eval_steps"],
            [pr["toeplitz_r2"] for pr in mm["probes"]],
            "o-",
            ms=3,
            color="C0",
            label="offset R²" if i == 0 else None,
        )
        c.plot(
            mm["eval_steps"],
            [res1(pr) for pr in mm["probes"]],
            "s--",
            ms=3,
            color="C1",
            label="k=1 shift residual" if i == 0 else None,
        )
    c.axhline(1, color="C0", lw=0.6, ls=":")
    c.axhline(0, color="C1", lw=0.6, ls=":")
    c.set(
        xlabel="training step",
        ylabel="measure (sinusoidal: R² = 1, residual = 0)",
        title=f"Learned table during training ({len(learned_runs)} seeds)",
    )
    c.legend(fontsize=7)
    out.figure(
        "learned",
        fig,
        "Cosine similarity between position encodings: sinusoidal (left) and learned absolute embeddings "
        f"after training (middle, seed {learned_runs[0]['config']['seed']}; {T} positions, d = "
        f"{learned_runs[0]['config']['d_model']}). Right: during training, the share of the learned Gram "
        "matrix's variance explained "
        "by the offset alone, and the residual of the best linear map PE(p) → PE(p+1); convergence is "
        "judged on the last two probes.",
    )


@drawing
def plot_length(runs, length: pd.DataFrame, p, out) -> None:
    from tfclaims.plotting import band, log_ticks, subplots

    T, mults = p["seq_len"], sorted(p["mults"])
    mine = length
    fig, (a, b, c) = subplots(3, width=4.5, height=3.7)
    for pos in ARMS:
        arm = mine[mine["pos"] == pos]
        cis = {n: mean_ci(arm["loss1" if n == 1 else f"loss{n}x"].dropna().tolist()) for n in mults}
        cis = {n: ci for n, ci in cis.items() if ci.n}
        xs, ms = [n * T for n in cis], [ci.mean for ci in cis.values()]
        if len(xs) > 1:
            lo, hi = [ci.lo for ci in cis.values()], [ci.hi for ci in cis.values()]
            band(a, xs, ms, lo, hi, label=LABEL[pos], color=COLOR[pos])
        elif xs:
            ci = next(iter(cis.values()))
            a.errorbar(
                xs,
                ms,
                yerr=[[ci.mean - ci.lo], [ci.hi - ci.mean]],
                fmt="s",
                color=COLOR[pos],
                capsize=3,
                label=f"{LABEL[pos]} (no rows beyond T)",
            )
        ok = set(arm["run_id"][arm["learned"].astype(bool)])
        curves = [
            r["metrics"]["position_loss"]["at_0"]
            for r in runs
            if r.get("run_id") in ok and "position_loss" in r["metrics"]
        ]
        if curves:
            w = max(1, T // 8)  # moving average over T/8 positions: per-position losses are noisy
            sm = np.array([np.convolve(y, np.ones(w) / w, mode="valid") for y in curves])
            pc = [mean_ci(sm[:, j]) for j in range(sm.shape[1])]
            x = np.arange(sm.shape[1]) + (w - 1) / 2
            band(
                b,
                x,
                [q.mean for q in pc],
                [q.lo for q in pc],
                [q.hi for q in pc],
                label=LABEL[pos],
                color=COLOR[pos],
                marker=None,
            )
    log_ticks(a, [n * T for n in mults])
    a.set(
        xlabel=f"evaluation window (characters; trained at T = {T})",
        ylabel="validation loss, window mean (nats/char)",
        title="Loss vs evaluation length",
    )
    b.axvline(T, color="k", lw=0.8, ls=":")
    b.text(T, b.get_ylim()[1], " training length", fontsize=7, va="top")
    b.set(
        xlabel="position in the window (characters)",
        title="Loss by position",
        ylabel=f"loss at that position (nats/char, {max(1, T // 8)}-position mean)",
    )
    for ax in (a, b):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    _plot_shares(c, mine)
    out.figure(
        "length",
        fig,
        f"At {mine.scale.iloc[0]}, each arm at its own best rate. Left: window-mean validation loss at 1×, "
        f"2× and 4× the training length T = {T} (the same text at each length: prefixes of "
        f"{max(mults)}T-character windows), mean and 95% band over the seeds that learned; learned "
        "embeddings have no rows beyond T. Middle: loss at each position of the window (moving average), the "
        "dotted line at T. Right: share of the variance of the first layer's position-only attention logits "
        "(causal cells, pooled over heads) explained by the offset i − j alone, at initialisation (hollow) "
        "and after training (filled), seeds as dots with mean and 95% CI; RoPE's is 1 by construction.",
    )


def _plot_shares(c, mine: pd.DataFrame) -> None:
    shown = [pos for pos in ARMS if pos != "none"]
    rng = np.random.default_rng(0)
    for i, pos in enumerate(shown):
        for col, dx, mfc in (("share_init", -0.18, "none"), ("share", 0.18, COLOR[pos])):
            v = mine[mine["pos"] == pos][col].dropna().tolist()
            if not v:
                continue
            ci = mean_ci(v)
            c.scatter(
                i + dx + rng.uniform(-0.05, 0.05, len(v)),
                v,
                s=12,
                color=COLOR[pos],
                alpha=0.5,
                facecolors=mfc,
            )
            label = ("at initialisation" if col == "share_init" else "trained") if i == 0 else None
            c.errorbar(
                i + dx,
                ci.mean,
                yerr=[[ci.mean - ci.lo], [ci.hi - ci.mean]],
                fmt="o",
                ms=7,
                mfc=mfc,
                color=COLOR[pos],
                capsize=3,
                label=label,
            )
    c.set_xticks(
        range(len(shown)),
        [LABEL[s] + (" (1 by construction)" if s == "rope" else "") for s in shown],
        fontsize=8,
    )
    c.set_ylim(-0.05, 1.08)
    c.set(ylabel="offset-only share of the variance (R²)", title="First-layer position-only logits")
    c.text(0.02, 0.97, "NoPE: no position logits", transform=c.transAxes, fontsize=7, va="top")
    if c.get_legend_handles_labels()[0]:
        c.legend(fontsize=7, loc="center right")


@drawing
def plot_logits(runs, p, out) -> None:
    from tfclaims.plotting import subplots

    have = {}
    for pos in ("sinusoidal", "learned"):
        rs = [r for r in runs if r["config"]["pos"] == pos and "position_logits" in r["metrics"]]
        if rs:
            have[pos] = min(rs, key=lambda r: r["config"]["seed"])
    if not have:
        return
    fig, axes = subplots(len(have) + 1, width=3.9, height=3.6)
    T = p["seq_len"]
    for ax, (pos, r) in zip(axes, have.items()):
        L = np.array(r["metrics"]["position_logits"], float)  # (T, T), causal cells j ≤ i
        L = np.where(np.tril(np.ones_like(L, bool)), L, np.nan)
        lim = float(np.nanmax(np.abs(L))) or 1.0
        im = ax.imshow(L, cmap="RdBu_r", vmin=-lim, vmax=lim, extent=[0, T, T, 0])
        ax.grid(False)
        m, seed = r["metrics"], r["config"]["seed"]
        title = f"{LABEL[pos]} (seed {seed}, head {m['logits_head']}): share {m['offset_share']:.2f}"
        ax.set(xlabel="key position j", ylabel="query position i", title=title)
        fig.colorbar(im, ax=ax, fraction=0.046, label="position-only logit")
        off = np.array([np.nanmean(np.diagonal(L, -k)) for k in range(T)])
        axes[-1].plot(range(T), off / (np.abs(off).max() or 1), color=COLOR[pos], label=LABEL[pos])
    axes[-1].set(
        xlabel="offset i − j (characters)",
        ylabel="mean logit on the diagonal (÷ max |·|)",
        title="The offset-only part",
    )
    if axes[-1].get_legend_handles_labels()[0]:
        axes[-1].legend(fontsize=7)
    out.figure(
        "position_logits",
        fig,
        "The first layer's position-only attention logits (W_q p̃_i)·(W_k p̃_j)/√d_k over the training "
        "window, for the head whose logits vary most, sinusoidal and learned positions (first seed); the "
        "upper triangle is masked (causal). Right: the mean of each diagonal, the function of i − j alone "
        "that the offset-only share measures against. Each panel has its own colour scale: the norm's "
        "per-token 1/σ is left out, so magnitudes do not compare across arms (the share is scale-free).",
    )


# ---------------------------------------------------------------------------- readouts: the tables' columns
FIXED = "measured on the library's sinusoidal_table over every position"
ERR32 = Readout("err32", "max |M_k·PE(p) − PE(p+k)| in float32", definition=FIXED)
ERR64 = Readout("err64", "max |M_k·PE(p) − PE(p+k)| in float64", definition=FIXED)
ORTH = Readout("orth_err", "max |M_kᵀM_k − I|", definition=FIXED)
COMPOSE = Readout("compose_err", "max |M_k·M_1 − M_(k+1)|", definition=FIXED)
SPREAD = Readout("dot_spread_rel", "spread over p of PE(p)·PE(p+k), ÷ d/2", definition=FIXED)
CLOSED = Readout("dot_closed_rel", "largest |PE(p)·PE(p+k) − Σ cos(k·ω_i)|, ÷ d/2", definition=FIXED)
CONSTRUCTED = Readout(
    "value",
    "construction measure",
    definition="RoPE's offset-only share (1 by construction); RoPE's and NoPE's loss change when a T-window "
    "moves to start at k·T (0 by construction); every run with the value",
)
LOSS1 = Readout(
    "loss1",
    "validation loss at 1×",
    "nats/char",
    definition="window mean over the first T positions of fixed validation windows" + MISSING,
)
SHARE = Readout(
    "share",
    "offset-only share of first-layer position logits",
    better="higher",
    definition="the share of their variance over causal cells explained by the offset i − j" + MISSING,
)
WINDOW = Readout(
    "window_loss",
    "loss on the first T characters",
    "nats/char",
    definition="the windows' first T characters placed at absolute position k·T (k = 0: where they were "
    "trained)" + MISSING,
)
R2 = Readout(
    "r2",
    "offset R² of the table",
    better="higher",
    definition="the share of the variance of PE(p)·PE(q) explained by q − p (1 for sinusoids)" + MISSING,
)
RES1 = Readout(
    "res1",
    "k=1 shift residual of the table",
    definition="relative residual of the best linear map PE(p) → PE(p+1) (0 for sinusoids)" + MISSING,
)


RATIO_ERR = Readout(
    "ratio_err",
    "‖position‖/‖token‖ at init ÷ (1/√2) − 1",
    definition="mean position-row norm over the first T positions over the mean token-row norm as added "
    "(×√d), at step 0, relative to Vaswani et al.'s 1/√2 (the rows are random draws: about 1% apart "
    "at d = 64)",
)
COPY_DROP = Readout(
    "copy_drop",
    "copy accuracy within T − beyond T",
    definition="the share of targets predicted over positions k .. T − 1, less over T .. 4T − 1 of longer "
    "random sequences" + MISSING,
)
COPY_WINDOW = Readout(
    "copy_window_acc",
    "copy accuracy on a T-sequence",
    better="higher",
    definition="over positions k .. T − 1 of random sequences placed at absolute position shift·T (0: where "
    "they were trained)" + MISSING,
)


def moved_readout(k: int) -> Readout:
    what = "the first T characters' loss placed at k·T less that at 0" + MISSING
    return Readout(
        f"moved{at_kT(k)}", f"loss change, window moved to {at_kT(k)}", "nats/char", definition=what
    )


# ---------------------------------------------------------------------------- headline
def plot_all(runs, t: dict, p: dict, tol: float, out) -> None:
    plot_identity(t["identity"], part(runs, "identity")[0]["metrics"], tol, out)
    if learned_runs(runs):
        plot_learned(learned_runs(runs), p, out)
    tuned = t["tuned"]
    if len(tuned):
        first = tuned[tuned.scale == scale_label(scales(p)[0])]
        ids = set(first.run_id)
        recs = [r for r in part(runs, "length") if r.get("run_id") in ids]
        plot_length(recs, first, p, out)
        plot_logits(recs, p, out)
        plot_sweep(t, p, out)
    if len(t["copy"]):
        plot_copy(runs, t["copy"], p, out)


@drawing
def plot_sweep(t: dict, p: dict, out) -> None:
    """Final loss against peak rate per scale for the four arms, each at its chosen rate on the fresh
    seeds."""
    from tfclaims.evidence.plots import lr_sweeps
    from tfclaims.plotting import subplots

    sc, length = scales(p), t["length"]
    fig, axes = subplots(len(sc), width=4.6, height=3.6)
    curves = curve_table(length[length.role.isin(["selection", "test"])], ["scale", "pos"]).rename(
        columns={"pos": "arm"}
    )
    lr_sweeps(axes, curves, t["tuned"], [scale_label(s) for s in sc], LABEL)
    for ax, s in zip(axes, sc):
        ax.set(title=f"d = {s['d_model']}, L = {s['n_layers']}", ylabel="final validation loss (nats/char)")
    axes[0].legend(fontsize=6)
    out.figure(
        "lr-sweep",
        fig,
        sweep_caption(
            p,
            f"Final validation loss against peak learning rate, {p['len_steps']} steps at T = {p['seq_len']}",
            per="scale",
            each="arm",
            fresh="tuned_seeds",
        ),
    )


@drawing
def plot_copy(runs, copy: pd.DataFrame, p: dict, out) -> None:
    """Copy accuracy by position per k, each arm at its chosen rate (fresh seeds that learned)."""
    from tfclaims.plotting import band, subplots

    ks, T = p["copy_ks"], p["copy_len"]
    fig, axes = subplots(len(ks), width=4.0, height=3.5)
    ok = set(copy.run_id[copy.learned.astype(bool)])
    for ax, k in zip(axes, ks):
        for pos in ARMS:
            ys = [
                r["metrics"]["acc_by_position"]
                for r in part(runs, "copy")
                if r.get("run_id") in ok and r["config"]["pos"] == pos and r["config"]["k"] == k
            ]
            if not ys:
                continue
            w = max(1, T // 16)  # a moving average over T/16 positions
            sm = np.array(
                [np.convolve(np.nan_to_num(np.asarray(y, float)[k:]), np.ones(w) / w, "valid") for y in ys]
            )
            cis = [mean_ci(sm[:, j]) for j in range(sm.shape[1])]
            x = np.arange(sm.shape[1]) + k + (w - 1) / 2
            band(
                ax,
                x,
                [c.mean for c in cis],
                [c.lo for c in cis],
                [c.hi for c in cis],
                label=LABEL[pos],
                color=COLOR[pos],
                marker=None,
            )
        ax.axvline(T, color="k", lw=0.8, ls=":")
        ax.set(
            xlabel="position (tokens)",
            ylabel="copy accuracy (fraction)",
            title=f"Copy the token {k} back",
            ylim=(-0.03, 1.03),
        )
    if axes[0].get_legend_handles_labels()[0]:
        axes[0].legend(fontsize=7)
    out.figure(
        "copy",
        fig,
        f"The copy task: accuracy at each position of random {max(p['mults'])}T-token sequences "
        f"({p['copy_symbols']} symbols; chance {1 / p['copy_symbols']:.2f}), trained at T = {T} (dotted "
        "line), each arm at its own best rate; mean and 95% band over the fresh seeds that learned "
        f"({max(1, T // 16)}-position moving average). Learned embeddings stop at T.",
    )


def headline(result, t: dict, tab: pd.DataFrame, p: dict) -> tuple[str, str]:
    """The key number and the summary (after the counted sub-claims' verdicts, which verdict_from states)."""
    first = scale_label(scales(p)[0])
    m = {r["arm"]: r for r in tab.to_dict("records") if r["scale"] == first} if len(tab) else {}

    def num(pos, col, fmt=".2f"):
        v = m.get(pos, {}).get(col)
        return "—" if v is None or v != v else format(v, fmt)

    T, n2, k1 = p["seq_len"], min(n for n in p["mults"] if n > 1), at_kT(p["shift_mults"][0])
    lt = t["learned"]
    tl = lt[(lt["table"] == "trained") & (lt["part"] == "learned")]
    r2, res = tl["r2"].mean(), tl["res1"].mean()
    ident = t["identity"]
    err, spread = max(ident["err32"].max(), ident["err64"].max()), ident["dot_spread_rel"].max()
    v, inc = result.verdicts(), f"increase {n2}×"
    table = "no finite value (no run learned)" if r2 != r2 else f"offset R² {r2:.2f}, k=1 residual {res:.2f}"
    share = f"{num('sinusoidal', 'share')} (sinusoidal) vs {num('learned', 'share')} (learned)"
    rise = f"{num('sinusoidal', inc, '+.2f')} (sinusoidal) vs {num('rope', inc, '+.2f')} (RoPE)"
    copy = result.per_cell("copy-relative")
    key = (
        f"copy k back, sinusoidal − RoPE accuracy drop beyond T: {copy}; loss rise 1×→{n2}× at {first} {rise}"
    )
    summary = (
        f"Checks: M_k reproduces PE(p+k) from PE(p) at every position to {err:.1g} (float32 table entries), "
        f"and PE(p)·PE(p+k) is the same for every p up to {spread:.1g}·d/2. Every arm at its own best rate "
        f"({len(p['tuned_seeds'])} fresh seeds, norms matched), trained at T = {T}: at {first} the first "
        f"layer's position-only logits are offset-only by a share of {share}; from 1× to {n2}× the loss "
        f"rises by {rise}, NoPE {num('none', inc, '+.2f')} nats/char (extra, per scale: "
        f"{result.per_cell('extra')}). Copying the token k back, sinusoidal's accuracy drop beyond T less "
        f"RoPE's: {copy}. Reported beside the verdict: a window moved to start at {k1} changes the "
        f"sinusoidal model's loss by {num('sinusoidal', f'moved to {k1}', '+.2f')} (moved: {v['moved']}); at "
        f"1×, sinusoidal {num('sinusoidal', 'loss 1×', '.3f')} vs learned {num('learned', 'loss 1×', '.3f')} "
        f"nats/char (anchor: {v['anchor']}); the trained learned table: {table} (learned: {v['learned']})."
    )
    return f"{key}; learned table: {table}", summary
