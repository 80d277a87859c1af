"""postnorm_warmup: observation tables from its records (training runs; the init-time mechanism numbers), its
own tables (cells, gradient and amplification fits, identity share, gradient signature, Post-LN against
Pre-LN where both train) and its figures."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.declare import Better, CellRule, Declaration, Readout, SubClaim
from tfclaims.evidence.evaluate import evaluate
from tfclaims.evidence.plots import drawing, lr_sweep, sweep_caption
from tfclaims.evidence.stats import loglog_fit, mean_ci
from tfclaims.evidence.tables import comparison_table, runs_table
from tfclaims.evidence.tuning import (
    SweepWords,
    capped,
    curve_table,
    read_sweep,
    sensitivity,
    width_scales,
    write_sweep_tables,
)

from .grid import deep_warmup

PLACEMENTS = ("post", "pre", "deepnorm")
COLORS = {"post": "C3", "pre": "C0", "deepnorm": "C2"}
SIGNATURE_STEP = 30  # a failing deep Post-LN run: its first block's gradient has collapsed by this step
SHARE_FLOOR = 0.05  # identity-share fits use sublayers whose share is above this (well above the noise floor)
CMP_COLUMNS = ("id", "sub_claim", "metric", "arm_a", "arm_b", "test", "n", "mean_a", "mean_b", "diff",
               "ci_low", "ci_high", "p", "p_equiv", "mde", "noise", "learned_a", "learned_b",
               "decision")  # fmt: skip


# How the mechanism table's columns are read (the mechanism sub-claims' readouts)
INIT = "Xavier init, mean over init seeds, one fixed validation batch: "
THEOREM1 = Readout(
    "theorem1",
    "Theorem 1 number",
    definition=INIT + "the log-log exponent in L of the last layer's W² gradient norm (exponent cells) and "
    "the last/first-layer W² gradient ratio at the deepest probe depth (last-first cells)",
)
AMP = Readout(
    "amp_slope",
    "amplification slope",
    definition=INIT + "the log-log slope in depth N of the relative squared change of the final hidden state "
    "under N(0, ε²) noise on every block weight matrix",
)
SLOPE = Readout(
    "slope",
    "per-seed amplification slope",
    better="higher",
    definition="that slope fitted per init seed (Xavier), paired across placements by seed",
)
SHARE = Readout(
    "share_q",
    "identity-share factor q",
    definition=INIT + "q of share ∝ q^n over the leading sublayers whose share of the input embedding "
    f"exceeds {SHARE_FLOOR}, at the deepest probe depth",
)


# The rows of the mechanism table, by quantity
MECHANISM = ("post-exponent", "pre-exponent", "post-last-first", "pre-last-first", "post-amp-slope",
             "pre-amp-slope", "post-share-q")  # fmt: skip


def all_learned(*rows: pd.DataFrame) -> bool:
    """Every seed of every given arm (rows of an observation table) learned, and each arm has a row."""
    return all(len(r) and bool(r["learned"].all()) for r in rows)


def arm_name(pl: str, w: int) -> str:
    return f"{pl}, {'no warmup' if w == 0 else f'warmup {w}'}"


def in_arm(pl, w, d, lr):
    """A filter on run configs: one arm (placement, warmup steps) of one (depth, lr) cell."""
    return lambda c: c["placement"] == pl and c["warmup"] == w and c["depth"] == d and c["lr"] == lr


def _group(records, key) -> dict:
    out: dict = {}
    for r in records:
        out.setdefault(key(r["config"]), []).append(r)
    return dict(sorted(out.items()))


# ---------------------------------------------------------------- observation tables
def observe(runs: list[dict], p: dict, readouts, swept: dict) -> dict[str, pd.DataFrame]:
    """runs: one row per training (and null-pair) run with its readouts, divergence step, seconds, a display
    score (ln V where it diverged), its seeds' role (selection or test), its loss at init and its swept arm;
    fixed: the fixed-rate cells' rows; tuned, choices, sensitivity: the learning-rate sweep of the `swept`
    arms (name -> fields) read by `evidence.tuning`; mechanism: one row per number a mechanism sub-claim
    bounds (Xavier init); amp_seeds: the log-log slope of the output change in depth per placement, init and
    init seed; and the probes' own tables (grad_init, grad_fits, amplification, amplification_fits,
    identity_share)."""

    def score(c, m):
        ok = m.get("diverged_at") is None and m.get("final_val") is not None
        return m["final_val"] if ok else math.log(m["vocab"])

    trained = [r for name in ("train", "null") for r in part(runs, name)]
    sel = set(p["selection_seeds"])
    t = runs_table(
        trained,
        readouts,
        diverged_at=lambda c, m: m["diverged_at"],
        seconds=lambda c, m: m["seconds"],
        score=score,
        role=lambda c, m: "selection" if c["seed"] in sel else "test",
        init_loss=lambda c, m: m["val_loss"][0],
        unigram=lambda c, m: m["unigram_xent"],
    )
    name = {(f["placement"], f["warmup"]): k for k, f in swept.items()}
    main = (t.depth == p["sweep_depth"]) & (t.steps == p["steps"])  # the sweep's runs, beside C's deep ones
    t["arm"] = [name.get((pl, w)) if m else None for pl, w, m in zip(t.placement, t.warmup, main)]
    sweep = t[(t.part == "train") & main]
    choices, tuned, _ = read_sweep(sweep, swept, {f"d{d}": {"d_model": d} for d in p["scales"]})
    deep_choice, deep, deep_sweep = observe_deep(t, p)
    probes = part(runs, "probe")
    grads, grad_fits = describe_grads(probes)
    amp, amp_fits = describe_amplification(probes)
    ident = describe_identity(probes)
    fixed = t[
        (t.part == "train") & (t.role == "test") & (t.d_model == p["d_model"]) & (t.steps == p["steps"])
    ]
    cells = {(int(d), float(lr)) for d, lr in p["cells"]}
    fixed = fixed[[(d, lr) in cells for d, lr in zip(fixed.depth, fixed.lr)]]
    return {
        "runs": t,
        "fixed": fixed,
        "tuned": tuned,
        "deep": deep,
        "deep_sweep": deep_sweep,
        "choices": pd.concat([choices, deep_choice], ignore_index=True),
        "sensitivity": fixed_range_sensitivity(sweep[sweep.arm.notna()], p),
        "mechanism": mechanism(grads, grad_fits, amp_fits, ident),
        "amp_seeds": seed_slopes(probes),
        "grad_init": grads,
        "grad_fits": grad_fits,
        "amplification": amp,
        "amplification_fits": amp_fits,
        "identity_share": ident,
    }


def deep_label(p: dict) -> str:
    return f"L{p['deep_depth']}, {p['deep_steps']} steps"


def observe_deep(t: pd.DataFrame, p: dict) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """C at depth: Post-LN with warmup's sweep read like the others (its choice; its fresh seeds at the chosen
    rate as arm 'post-warmup', its sweep rows marked with that arm in `t`), Pre-LN's fresh seeds at its fixed
    rate as arm 'pre-control', and the sweep's selection rows."""
    warm = deep_warmup(p)
    here = (t.part == "train") & (t.depth == p["deep_depth"]) & (t.steps == p["deep_steps"])
    swept = here & (t.placement == "post") & (t.warmup == warm)
    t.loc[swept, "arm"] = "post-warmup"
    df, label = t[here], deep_label(p)
    choice, tuned, _ = read_sweep(df, {"post-warmup": {"placement": "post", "warmup": warm}}, {label: {}})
    pre = df[(df.placement == "pre") & (df.role == "test") & (df.lr == p["deep_control_lr"])]
    tuned = pd.concat([tuned, pre.assign(arm="pre-control", scale=label)], ignore_index=True)
    return choice, tuned, t[swept & (t.role == "selection")]


def fixed_range_sensitivity(sweep: pd.DataFrame, p: dict) -> pd.DataFrame:
    """Each selection seed's learning-rate sensitivity per arm at the first width, over the profile's `rates`
    only (the fixed range every arm swept there, as Wortsman et al.), so that an arm whose sweep was widened
    is not compared over more rates than another."""
    first = sweep[(sweep.d_model == p["d_model"]) & (sweep.role == "selection") & sweep.lr.isin(p["rates"])]
    rows = []
    for (name, u), g in first.groupby(["arm", "unit"]):
        if set(g.lr) == set(p["rates"]):
            curve = np.array([[capped(v, i)] for v, i in zip(g.final_val, g.init_loss)])
            row = {"arm": name, "scale": f"d{p['d_model']}", "unit": u, "sensitivity": sensitivity(curve)}
            rows.append(row)
    return pd.DataFrame(rows, columns=["arm", "scale", "unit", "sensitivity"])


def mechanism(grads, grad_fits, amp_fits, ident) -> pd.DataFrame:
    """Xavier init: (F) the last layer's W² gradient exponent in L and the last/first-layer ratio at the
    deepest probe depth, (G) the output change's log-log slope in depth, (H) Post-LN's identity-share
    factor q."""
    fit = grad_fits[grad_fits.init == "xavier"].set_index("placement")
    g = grads[grads.init == "xavier"]
    deep = g[g.depth == g.depth.max()].set_index("placement")
    amp = amp_fits[amp_fits.init == "xavier"].set_index("placement")
    q = ident[ident.init == "xavier"].set_index("placement").loc["post", "factor q per sublayer"]
    rows = [{"quantity": f"{pl}-exponent", "theorem1": fit.loc[pl, "exponent"]} for pl in ("post", "pre")]
    rows += [
        {"quantity": f"{pl}-last-first", "theorem1": deep.loc[pl, "last/first"]} for pl in ("post", "pre")
    ]
    rows += [{"quantity": f"{pl}-amp-slope", "amp_slope": amp.loc[pl, "slope"]} for pl in ("post", "pre")]
    rows.append({"quantity": "post-share-q", "share_q": q})
    return pd.DataFrame([{**r, "unit": 0} for r in rows])


def seed_slopes(probes) -> pd.DataFrame:
    """The log-log slope of the output change in depth per placement, init and init seed (init seeds are
    shared across depths and placements, so the slopes pair by seed)."""
    rows = []
    for (pl, init), rs in _group(probes, lambda c: (c["placement"], c["init"])).items():
        rs = sorted(rs, key=lambda r: r["config"]["depth"])
        depths = [r["config"]["depth"] for r in rs]
        amp = np.array([r["metrics"]["amplification"] for r in rs], float)  # (depths, seeds)
        if len(depths) >= 2:
            rows += [
                {"placement": pl, "init": init, "unit": s, "slope": loglog_fit(depths, amp[:, s]).slope}
                for s in range(amp.shape[1])
            ]
    return pd.DataFrame(rows, columns=["placement", "init", "unit", "slope"])


def generalisation(t: dict, decl: Declaration, margin: float) -> list:
    """(E) reported, never decided: warmed-up Post-LN − Pre-LN (no warmup) final loss (C-fixed's arms) in
    every cell where both learned in every seed, paired, Holm among them, beside the null pair's bound."""
    a, c = decl.sub("A-fixed"), decl.sub("C-fixed")
    final = next(r for r in a.readouts if r.column == "final_val")
    both = CellRule("the rule 'every seed of both arms learned'", all_learned)
    e = SubClaim(
        "E",
        "Post-LN generalises better where it trains",
        Better("b"),
        (final,),
        a=c.a,
        b=c.b,
        cells=a.cells,
        keep_if=both,
        sesoi=margin,
        noise="null",
    )
    return evaluate(Declaration((e,), decl.nulls), t).of("E")


# ---------------------------------------------------------------- tables
def describe_cells(df: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (pl, w, d, lr), g in df.groupby(["placement", "warmup", "depth", "lr"]):
        ci = mean_ci(g["final_val"].dropna())
        n, k = len(g), int(g["learned"].sum())
        esc = [e for e in g["escape"] if e is not None and e == e]
        rows.append(
            {
                "placement": pl,
                "warmup": w,
                "depth": d,
                "lr": lr,
                "final val": ci.mean,
                "±": ci.half_width,
                "learned": f"{k}/{n}",
                "n_learned": k,
                "diverged": f"{int(g['diverged_at'].notna().sum())}/{n}",
                "escaped": f"{len(esc)}/{n}",
                "median escape step": float(np.median(esc)) if esc else None,
                "score": float(g["score"].mean()),
                "seconds": float(g["seconds"].mean()),
            }
        )
    return pd.DataFrame(rows)


def depth_fits(df, y: str, name: str) -> pd.DataFrame:
    """Log-log slope of column y in depth, with its 95% CI, per (init, placement)."""
    fits = []
    for (init, pl), g in df.groupby(["init", "placement"]):
        f = loglog_fit(g["depth"], g[y])
        fits.append(
            {"placement": pl, "init": init, name: f.slope, "lo": f.slope_lo, "hi": f.slope_hi, "R²": f.r2}
        )
    return pd.DataFrame(fits)


def describe_grads(probes):
    rows = []
    for r in probes:
        c, m = r["config"], r["metrics"]
        w2 = np.array(m["w2_grad"])  # (seeds, L)
        blk = np.array(m["block_grad"])
        last = mean_ci(w2[:, -1])
        prof = w2.mean(0)
        L = c["depth"]
        exp = loglog_fit(np.arange(1, L + 1), prof).slope if L >= 3 else math.nan
        rows.append(
            {
                "placement": c["placement"],
                "init": c["init"],
                "depth": L,
                "last W² grad": last.mean,
                "±": last.half_width,
                "first W² grad": float(prof[0]),
                "last/first": float(prof[-1] / prof[0]),
                "exponent in l": exp,
                "last/first (block)": float(blk.mean(0)[-1] / blk.mean(0)[0]),
            }
        )
    df = pd.DataFrame(rows).sort_values(["init", "placement", "depth"])
    return df, depth_fits(df, "last W² grad", "exponent")


def describe_amplification(probes):
    rows = []
    for r in probes:
        c = r["config"]
        ci = mean_ci(r["metrics"]["amplification"])
        rows.append(
            {
                "placement": c["placement"],
                "init": c["init"],
                "depth": c["depth"],
                "output change": ci.mean,
                "±": ci.half_width,
            }
        )
    df = pd.DataFrame(rows).sort_values(["init", "placement", "depth"])
    return df, depth_fits(df, "output change", "slope")


def share_factor(share) -> float:
    """q in share ≈ q^n (through the origin in log space: share is 1 at n = 0), over sublayers above the
    floor."""
    s = np.asarray(share, float)
    n = np.arange(1, len(s) + 1)
    keep = s > SHARE_FLOOR
    if keep.sum() == 0:
        return math.nan
    # keep the leading run only: the share can recross the floor by noise further down
    stop = int(np.argmin(keep)) if not keep.all() else len(s)
    n, s = n[:stop], s[:stop]
    if len(n) == 0:
        return math.nan
    return float(math.exp(np.sum(n * np.log(s)) / np.sum(n * n)))


def describe_identity(probes) -> pd.DataFrame:
    rows = []
    for init in sorted({r["config"]["init"] for r in probes}):
        deepest = max(r["config"]["depth"] for r in probes if r["config"]["init"] == init)
        for r in probes:
            c, m = r["config"], r["metrics"]
            if c["init"] != init or c["depth"] != deepest:
                continue
            share = np.mean(m["share"], 0)
            n = np.arange(1, len(share) + 1)
            rows.append(
                {
                    "placement": c["placement"],
                    "init": init,
                    "depth": deepest,
                    "sublayers": len(share),
                    "factor q per sublayer": share_factor(share),
                    "power a (share ∝ n^a)": loglog_fit(n, np.clip(share, 1e-6, None)).slope,
                    "share after 2 sublayers": float(share[1]),
                    "share at the end": float(share[-1]),
                    "predicted (independent) at the end": float(np.mean(m["predicted"], 0)[-1]),
                    "median branch/stream energy r": float(np.median(np.mean(m["ratio"], 0))),
                    "mean cos(F, stream)": float(np.mean(m["branch_cos"])),
                }
            )
    return pd.DataFrame(rows)


def describe_signature(train) -> pd.DataFrame:
    """Per arm and cell, learned vs not: median over seeds of the first and last block's gradient norm at
    step 0 and at SIGNATURE_STEP (the logged step nearest to it), and their ratio first/last at that step."""
    rows = []
    for (d, lr, pl, w), rs in _group(
        train, lambda c: (c["depth"], c["lr"], c["placement"], c["warmup"])
    ).items():
        for learned in (True, False):
            g = [r["metrics"] for r in rs if r["learned"] == learned]
            if not g:
                continue
            steps = g[0]["grad_steps"]
            k = int(np.argmin([abs(s - SIGNATURE_STEP) for s in steps])) if steps else None
            at = [m["grad_norms"][k] for m in g if k is not None and len(m["grad_norms"]) > k]
            first, last = [x[0] for x in at], [x[-1] for x in at]
            there = steps[k] + 1 if k is not None else "?"
            rows.append(
                {
                    "depth": d,
                    "lr": lr,
                    "arm": arm_name(pl, w),
                    "learned": learned,
                    "runs": len(g),
                    "first block, step 0": float(np.median([m["grad_norms"][0][0] for m in g])),
                    "last block, step 0": float(np.median([m["grad_norms"][0][-1] for m in g])),
                    f"first block, step {there}": float(np.median(first)) if first else None,
                    f"last block, step {there}": float(np.median(last)) if last else None,
                    "first/last there": float(np.median(np.array(first) / np.array(last))) if first else None,
                }
            )
    return pd.DataFrame(rows)


def signature_text(sig: pd.DataFrame, deep: int) -> str:
    """One sentence: the first/last-layer gradient ratio early in training at the deepest depth, by arm and
    outcome."""
    g = sig[sig.depth == deep]
    parts = [
        f"{r.arm} ({'learned' if r.learned else 'not learned'}, {r.runs} runs) {r['first/last there']:.2g}"
        for _, r in g.iterrows()
        if r["first/last there"] is not None
    ]
    return f"first/last-layer gradient norm near step {SIGNATURE_STEP}: " + "; ".join(parts) if parts else ""


def learned_runs(runs: list[dict], t: dict) -> list[dict]:
    """The training records, each with its `learned` readout (from the observation table) beside it."""
    learned = dict(zip(t["fixed"]["run_id"], t["fixed"]["learned"]))
    return [
        {**r, "learned": bool(learned[r["run_id"]])} for r in part(runs, "train") if r["run_id"] in learned
    ]


def write_tables(
    t: dict, result, gen: list, sig: pd.DataFrame, p: dict, unigram: float, *, margin, out
) -> None:
    """The training tables, E's table and the probes' tables (the runner writes every comparison)."""
    runs = t["fixed"]
    cols = ["placement", "warmup", "depth", "lr", "unit", "final_val", "learned", "escape", "diverged_at"]
    cols += ["score", "seconds"]
    out.table(
        "training_runs",
        runs[cols].rename(columns={"unit": "seed", "escape": "escape step"}),
        "Training runs",
        in_report=False,
    )
    cells = describe_cells(runs)
    threshold = unigram - margin
    out.table(
        "training",
        cells,
        "Final validation loss (nats/char), mean ± 95% CI over seeds that did not diverge; learned = final "
        f"loss ≤ U − {margin} = {threshold:.3f}; escape = first step the trailing mean training loss is "
        "below that",
    )
    if gen:
        out.table(
            "post_vs_pre",
            comparison_table(gen, CMP_COLUMNS),
            "Reported, not decided (E): warmed-up Post-LN − Pre-LN (no warmup) final loss where both "
            "learned in every seed",
        )
    out.table(
        "grad_init",
        t["grad_init"],
        "Gradient norms at init (mean over init seeds): last layer's W² and the per-layer profile",
    )
    out.table(
        "grad_fits",
        t["grad_fits"],
        "Log-log exponent of the last layer's W² gradient norm in depth L (95% CI)",
    )
    out.table(
        "amplification",
        t["amplification"],
        f"Relative squared output change under N(0, {p['eps']:g}²) weight noise, mean ± 95% CI over init "
        "seeds",
        floatfmt=".3g",
    )
    out.table(
        "amplification_fits",
        t["amplification_fits"],
        "Log-log slope of the output change in depth N (95% CI)",
    )
    out.table(
        "identity_share",
        t["identity_share"],
        "Identity path at init, deepest probe depth: fitted share factor per sublayer, share at the end, "
        "branch statistics",
    )
    out.table(
        "grad_signature",
        sig,
        "Gradient signature through training: per-layer gradient norm of the first and last block at step 0 "
        f"and step {SIGNATURE_STEP} (median over seeds), split by whether the run learned",
    )


# ---------------------------------------------------------------- figures
def _cell_row(cells, pl, w, d, lr):
    """The summary row of one arm in one cell, or None where the grid has no such arm."""
    g = cells[(cells.placement == pl) & (cells.warmup == w) & (cells.depth == d) & (cells.lr == lr)]
    return g.iloc[0] if len(g) else None


@drawing
def plot_grid(cells, arms, p, threshold, margin, out):
    from tfclaims.plotting import subplots

    W, depths, lrs = p["warmup"], sorted(cells.depth.unique()), sorted(cells.lr.unique())
    fig, axes = subplots(len(arms), width=3.3, height=2.5 + 0.25 * len(depths))
    lo, hi = float(cells.score.min()), float(max(cells.score.max(), threshold + 0.2))
    for ax, (pl, warm) in zip(axes, arms):
        w = W if warm else 0
        M = np.full((len(depths), len(lrs)), np.nan)
        for a, d in enumerate(depths):
            for b, lr in enumerate(lrs):
                c = _cell_row(cells, pl, w, d, lr)
                if c is None:
                    continue
                M[a, b] = c["score"]
                ax.text(
                    b,
                    a,
                    f"{c['score']:.2f}\n✓ {c['learned']}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if c["score"] < (lo + hi) / 2 else "black",
                    fontweight="bold" if c["n_learned"] == 0 else None,
                )
        im = ax.imshow(
            np.ma.masked_invalid(M), cmap="viridis_r", vmin=lo, vmax=hi, aspect="auto", origin="lower"
        )
        ax.set_xticks(range(len(lrs)), [f"{lr:g}" for lr in lrs])
        ax.set_yticks(range(len(depths)), [str(d) for d in depths])
        ax.set(xlabel="peak learning rate", ylabel="depth (layers)", title=arm_name(pl, w))
        ax.grid(False)
    fig.colorbar(im, ax=axes[-1], label="final val loss (nats/char)")
    out.figure(
        "outcome-grid",
        fig,
        f"Final validation loss (mean over {len(p['seeds'])} seeds; for display a diverged run counts as ln "
        "V) over depth × peak learning rate, one panel per trained arm (blank: not in the grid). '✓ k/n': k "
        f"of n seeds learned (final loss ≤ {threshold:.2f} nats = unigram level − {margin}); bold: no seed "
        "learned.",
    )


def _band(ax, x, rows, ls, color, label, *, marker=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # all-NaN columns after divergence
        ax.plot(x, np.nanmean(rows, 0), ls=ls, color=color, label=label, marker=marker, ms=3)
        ax.fill_between(x, np.nanmin(rows, 0), np.nanmax(rows, 0), color=color, alpha=0.15, linewidth=0)


@drawing
def plot_curves(train, result, sc, final, arms, p, *, threshold, margin, out):
    """Training and validation loss for the Post-LN cell where warmup lowers the final loss most (among the
    cells sub-claim A counts) and for the deepest cell."""
    from tfclaims.plotting import subplots

    counted = set(result.sub(sc.id).comparisons)
    fin = [
        (c.diff, (cell.fields["depth"], cell.fields["lr"]))
        for cell in sc.cells
        if (c := result.at(sc.id, cell, final)) is not None
        and c.id in counted
        and c.diff is not None
        and not c.excluded
    ]
    configs = [max((r["config"]["depth"], r["config"]["lr"]) for r in train)]  # the deepest (highest lr)
    if fin:
        configs.insert(0, min(fin)[1])  # warmup − none: most negative = warmup helps most
    configs = list(dict.fromkeys(configs))
    W, n, k = (
        p["warmup"],
        p["steps"],
        max(1, min(10, p["steps"] // 4)),
    )  # moving average over (up to) 10 steps
    fig, axes = subplots(len(configs), 2, width=4.8, height=3.4)
    for col, (d, lr) in enumerate(configs):
        ax_t, ax_v = axes[col], axes[len(configs) + col]
        for pl, warm in arms:
            w, ls = (W, "-") if warm else (0, "--")
            rs = [r for r in train if in_arm(pl, w, d, lr)(r["config"])]
            if not rs:
                continue  # an arm the cell does not run (C's cells run two)
            T = np.full((len(rs), n), np.nan)
            for i, r in enumerate(rs):
                tl = [np.nan if v is None else v for v in r["metrics"]["train_loss"]]
                T[i, : len(tl)] = tl
            sm = np.array([np.convolve(row, np.ones(k) / k, mode="valid") for row in T]).reshape(len(rs), -1)
            steps = rs[0]["metrics"]["eval_steps"] if rs else []
            V = np.full((len(rs), len(steps)), np.nan)
            for i, r in enumerate(rs):
                vl = [np.nan if v is None else v for v in r["metrics"]["val_loss"]]
                V[i, : len(vl)] = vl[: len(steps)]
            _band(ax_t, np.arange(k - 1, n), sm, ls, COLORS[pl], arm_name(pl, w))
            _band(ax_v, steps, V, ls, COLORS[pl], arm_name(pl, w), marker="o")
            for r in rs:
                if r["metrics"]["diverged_at"] is not None:
                    ax_t.axvline(r["metrics"]["diverged_at"], color=COLORS[pl], ls=":", lw=0.8)
        for ax, what in ((ax_t, "training loss (moving mean)"), (ax_v, "validation loss")):
            ax.set(
                xlabel="training step",
                ylabel=f"{what}, nats/char",
                title=f"L = {d}, lr = {lr:g}: {what.split(' (')[0]}",
            )
            ax.axhline(
                threshold,
                color="k",
                lw=0.6,
                label=f"learned below this (U − {margin})" if ax is ax_v else None,
            )
        ax_t.legend(fontsize=7)
    out.figure(
        "loss-curves",
        fig,
        f"Loss curves, mean and seed range (min–max over {len(p['seeds'])} seeds) for the Post-LN cell "
        f"where warmup lowers the final loss most (left: L = {configs[0][0]}, lr = {configs[0][1]:g}) and "
        f"the deepest cell (right). Dashed: no warmup; solid: warmup {W} steps; dotted verticals: "
        "divergence.",
    )


@drawing
def plot_signature(train, arms, deep, p, out):
    from tfclaims.plotting import subplots

    deep_lr = max(lr for d, lr in {(r["config"]["depth"], r["config"]["lr"]) for r in train} if d == deep)
    fig, axes = subplots(len(arms), width=3.6, height=3.2)
    for ax, (pl, warm) in zip(axes, arms):
        w = p["warmup"] if warm else 0
        for r in (r for r in train if in_arm(pl, w, deep, deep_lr)(r["config"])):
            G = np.array(r["metrics"]["grad_norms"])  # (logged steps, layers)
            x = np.array(r["metrics"]["grad_steps"]) + 1
            ls = "-" if r["learned"] else ":"
            ax.semilogy(x, np.clip(G[:, 0], 1e-12, None), color="C0", ls=ls, lw=0.9)
            ax.semilogy(x, np.clip(G[:, -1], 1e-12, None), color="C3", ls=ls, lw=0.9)
        ax.plot([], [], color="C0", label="first block")
        ax.plot([], [], color="C3", label="last block")
        ax.plot([], [], color="k", ls=":", label="run did not learn")
        ax.set(
            xlabel="training step",
            ylabel="‖∂loss/∂θ_block‖ (L2)",
            title=f"{arm_name(pl, w)}\nL = {deep}, lr = {deep_lr:g}",
        )
        ax.legend(fontsize=6.5)
    out.figure(
        "grad-signature",
        fig,
        f"Per-block gradient norm through training at the deepest depth (L = {deep}, lr = {deep_lr:g}), "
        f"first block (blue) and last block (red), one line per seed ({len(p['seeds'])} seeds); dotted: "
        "runs that did not learn. The signature of a failing deep Post-LN run: the first block's gradient "
        "collapses early while the last block's stays up.",
    )


@drawing
def plot_grads(probes, grad_fits, out):
    from matplotlib import colormaps

    from tfclaims.plotting import subplots

    xs = [r for r in probes if r["config"]["init"] == "xavier"]
    depths = sorted({r["config"]["depth"] for r in xs if r["config"]["depth"] >= 4})
    fig, axes = subplots(4, width=3.9, height=3.3)
    for ax, pl in zip(axes[:3], PLACEMENTS):
        for k, d in enumerate(depths):
            r = next(r for r in xs if r["config"]["placement"] == pl and r["config"]["depth"] == d)
            ax.semilogy(
                np.arange(1, d + 1),
                np.mean(r["metrics"]["w2_grad"], 0),
                marker="o",
                ms=2,
                label=f"L = {d}",
                color=colormaps["viridis"](k / max(len(depths) - 1, 1)),
            )
        ax.set(
            xlabel="layer index l",
            ylabel="‖∂loss/∂W^{2,l}‖_F",
            title=f"{pl}: per-layer FFN W² gradient at init",
        )
        ax.legend(fontsize=6.5)
    ax = axes[3]
    for pl in PLACEMENTS:
        for init, ls in (("xavier", "-"), ("normal", ":")):
            rs = sorted(
                (r for r in probes if (r["config"]["placement"], r["config"]["init"]) == (pl, init)),
                key=lambda r: r["config"]["depth"],
            )
            if not rs:
                continue
            cis = [mean_ci(np.array(r["metrics"]["w2_grad"])[:, -1]) for r in rs]
            f = grad_fits[(grad_fits.placement == pl) & (grad_fits.init == init)].iloc[0]
            ax.errorbar(
                [r["config"]["depth"] for r in rs],
                [c.mean for c in cis],
                yerr=[[c.mean - c.lo for c in cis], [c.hi - c.mean for c in cis]],
                ls=ls,
                marker="o",
                ms=3,
                color=COLORS[pl],
                label=f"{pl} ({init}): L^{f.exponent:+.2f}",
            )
    L = np.array(sorted({r["config"]["depth"] for r in xs}), float)
    pre0 = next((r for r in xs if r["config"]["placement"] == "pre" and r["config"]["depth"] == L[0]), None)
    if pre0 is not None:
        y0 = np.mean(np.array(pre0["metrics"]["w2_grad"])[:, -1])
        ax.plot(L, y0 * (L / L[0]) ** -0.5, "k--", lw=0.8, label="∝ L^-1/2 (Theorem 1, Pre-LN)")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="depth L (layers)",
        ylabel="‖∂loss/∂W^{2,L}‖_F, last layer",
        title="Last layer's W² gradient vs depth",
    )
    ax.legend(fontsize=6)
    out.figure(
        "grad-init",
        fig,
        "Gradient norms at initialisation (mean over init seeds, one validation batch). Left three: the "
        "second FFN matrix's gradient per layer, Xavier init, several depths (log scale). Right: the last "
        "layer's, against depth, with 95% CIs and fitted exponents (solid Xavier, dotted the library's "
        "normal init); Theorem 1 predicts L^0 for Post-LN and L^-1/2 for Pre-LN.",
    )


@drawing
def plot_amplification(amp, amp_fits, out):
    from tfclaims.plotting import subplots

    fig, (ax,) = subplots(1, width=5.2, height=3.8)
    for pl in PLACEMENTS:
        for init, ls in (("xavier", "-"), ("normal", ":")):
            g = amp[(amp.placement == pl) & (amp.init == init)]
            if not g.empty:
                f = amp_fits[(amp_fits.placement == pl) & (amp_fits.init == init)].iloc[0]
                ax.errorbar(
                    g.depth,
                    g["output change"],
                    yerr=g["±"],
                    ls=ls,
                    marker="o",
                    ms=3,
                    color=COLORS[pl],
                    label=f"{pl} ({init}): N^{f.slope:.2f}",
                )
    g = amp[(amp.placement == "post") & (amp.init == "xavier")]
    if len(g):
        N, y0 = g.depth.to_numpy(float), g["output change"].iloc[0]
        ax.plot(N, y0 * N / N[0], "k--", lw=0.8, label="∝ N")
        ax.plot(N, y0 * np.log1p(N) / np.log1p(N[0]), "k-.", lw=0.8, label="∝ log(1+N)")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="depth N (layers)",
        ylabel="|Δh|² / |h|² of the final hidden state",
        title="Amplification: output change under weight noise",
    )
    ax.legend(fontsize=6.5)
    out.figure(
        "amplification",
        fig,
        "Relative squared change of the final hidden state when every block weight matrix gets i.i.d. N(0, "
        "ε²) noise (ε = one Adam step at lr 1e-3), at init, against depth; mean and 95% CI over init seeds, "
        "fitted log-log slopes. Liu et al.: O(N) for Post-LN, O(log N) for Pre-LN.",
    )


@drawing
def plot_identity(probes, out):
    from tfclaims.plotting import subplots

    inits = sorted({r["config"]["init"] for r in probes}, key=lambda i: i != "xavier")
    fig, axes = subplots(len(inits) + 1, width=4.3, height=3.6)
    for ax, init in zip(axes, inits):
        deepest = max(r["config"]["depth"] for r in probes if r["config"]["init"] == init)
        for pl in PLACEMENTS:
            r = next(
                r
                for r in probes
                if (r["config"]["init"], r["config"]["depth"], r["config"]["placement"])
                == (init, deepest, pl)
            )
            s = np.array(r["metrics"]["share"])
            n = np.arange(1, s.shape[1] + 1)
            ax.plot(
                n, np.clip(s.mean(0), 1e-6, None), color=COLORS[pl], marker="o", ms=2, label=f"{pl}, measured"
            )
            ax.plot(
                n,
                np.mean(r["metrics"]["predicted"], 0),
                color=COLORS[pl],
                ls=":",
                label=f"{pl}, independence with measured r",
            )
        n = np.arange(1, 2 * deepest + 1)
        ax.plot(n, 2.0**-n, "k--", lw=0.9, label="notes: 2^-n")
        ax.plot(n, 2.0 ** (-n / 2), "k-.", lw=0.9, label="unit-variance independent: 2^(-n/2)")
        ax.set(
            yscale="log",
            ylim=(1e-4, 1.5),
            xlabel="sublayer n (2 per layer)",
            ylabel="cos(stream, input embedding)",
            title=f"Identity share, L = {deepest}, {init} init",
        )
        ax.legend(fontsize=6)
    ax = axes[-1]
    for init, ls in (("xavier", "-"), ("normal", ":")):
        rs = [r for r in probes if r["config"]["init"] == init and r["config"]["placement"] == "post"]
        if rs:
            m = max(rs, key=lambda r: r["config"]["depth"])["metrics"]
            n = np.arange(1, len(m["ratio"][0]) + 1)
            ax.semilogy(n, np.mean(m["ratio"], 0), ls=ls, color="C3", label=f"r_n = |F|²/|s|² ({init})")
            ax.semilogy(
                n, np.abs(np.mean(m["branch_cos"], 0)), ls=ls, color="C1", label=f"|cos(F_n, s_n)| ({init})"
            )
    ax.axhline(1.0, color="k", lw=0.6)
    ax.set(xlabel="sublayer n", ylabel="ratio / |cosine|", title="Post-LN: assumed r = 1, cos = 0")
    ax.legend(fontsize=6)
    out.figure(
        "identity-share",
        fig,
        "The input embedding's share of the stream through depth at init (token cosine, mean over init "
        "seeds), at the deepest probe depth, with the notes' 2^-n, the 2^(-n/2) that LN(x + F) gives for "
        "independent unit-variance x and F, and the independence prediction from the measured branch/stream "
        "energy ratios (dotted). Right: for Post-LN, the branch/stream energy ratio (the derivation assumes "
        "1) and the branch's cosine with its input (assumed 0).",
    )


def sweep_curves(t: dict) -> pd.DataFrame:
    """Per swept arm, width, depth, horizon and rate: the selection seeds' capped final loss and how many
    learned (C's deep sweep beside the main one)."""
    return curve_table(t["runs"][t["runs"].arm.notna()], ["arm", "d_model", "depth", "steps"])


def write_sweep(t: dict, curves: pd.DataFrame, p: dict, out) -> None:
    table = width_scales(curves)
    deep = (table.depth == p["deep_depth"]) & (table.steps == p["deep_steps"])
    table.loc[deep, "scale"] = deep_label(p)  # C's sweep at depth, named as lr_choices names it
    write_sweep_tables(out, t["choices"], table, SweepWords(per="width"))


@drawing
def plot_sweep(t: dict, curves: pd.DataFrame, p: dict, params: dict, labels: dict, out) -> None:
    """The claim's main figure: final loss against peak learning rate, one panel per width, one line per swept
    arm, each arm's chosen rate on the fresh seeds marked."""
    from matplotlib.colors import to_hex

    from tfclaims.plotting import subplots

    fig, axes = subplots(len(p["scales"]) + 1, width=4.6, height=3.6)
    unigram = t["runs"].unigram.iloc[0]
    main = curves[(curves.depth == p["sweep_depth"]) & (curves.steps == p["steps"])]
    for ax, d in zip(axes, p["scales"]):
        tuned = t["tuned"][t["tuned"].scale == f"d{d}"] if len(t["tuned"]) else t["tuned"]
        lr_sweep(ax, main[main.d_model == d], tuned, labels, unigram=unigram)
        ax.set_title(f"d = {d}, L = {p['sweep_depth']} ({params[d] / 1e6:.2f}M parameters)")
    axes[0].legend(fontsize=6)
    ax, deep = axes[-1], curves[(curves.depth == p["deep_depth"]) & (curves.steps == p["deep_steps"])]
    ax.set_prop_cycle(color=[to_hex("C1")])  # warmed-up Post-LN's colour in the other panels
    lr_sweep(ax, deep, t["deep"], {"post-warmup": labels["post-warmup"]}, unigram=unigram)
    pre = t["deep"][t["deep"].arm == "pre-control"].final_val.dropna().to_numpy()
    if len(pre):
        ci = mean_ci(pre)
        err = [[ci.mean - ci.lo], [ci.hi - ci.mean]]
        ax.errorbar(
            [p["deep_control_lr"]],
            [ci.mean],
            yerr=err,
            fmt="D",
            color="C2",
            mec="k",
            mew=0.5,
            label="pre, no warmup, fixed rate (fresh seeds)",
        )
    ax.set_title(f"C: L = {p['deep_depth']}, d = {p['d_model']}, {p['deep_steps']} steps")
    ax.legend(fontsize=6)
    out.figure(
        "lr-sweep",
        fig,
        sweep_caption(
            p,
            f"Final validation loss against peak learning rate, L = {p['sweep_depth']}, {p['steps']} steps",
            per=f"width (left: d = {p['scales'][0]})",
            each="arm",
            note=": the tuned comparison (A, B)",
        )
        + f" Right: C at depth, {p['deep_steps']} steps (warmup the same share): Post-LN with warmup swept "
        "the same way; the diamond is Pre-LN at its one fixed rate on the fresh seeds.",
    )


def tuned_headline(result) -> str:
    """Warmup − none in Post-LN's final loss, each at its own best rate, per scale; and C at depth: warmed-up
    Post-LN at its best rate − Pre-LN, with how many seeds of each learned."""
    parts = [
        f"{c.id.split('/')[1]} {c.diff:+.3f} ({c.decision})" for c in result.of("A") if c.diff is not None
    ]
    c = next((c for c in result.of("C") if c.id.endswith("final_val") and c.diff is not None), None)
    deep = (
        f"; at depth (C), warmed-up Post-LN at its best rate − Pre-LN {c.diff:+.3f} ({c.decision}; learned "
        f"{c.learned_b}/{c.n_b} vs {c.learned_a}/{c.n_a})"
        if c
        else ""
    )
    return "Post-LN, warmup − none at each arm's best rate: " + (", ".join(parts) or "no comparison") + deep


# ---------------------------------------------------------------- the verdict's numbers
def headline(result, sc, final) -> str:
    """The key number: warmup − none in Post-LN's final loss, in the counted cell of sub-claim A with the
    smallest p (the largest effect among ties)."""
    where = {c.id: cell.label for cell in sc.cells if (c := result.at(sc.id, cell, final))}
    fin = [c for c in result.of(sc.id) if c.id in where and not c.excluded and c.diff is not None]
    top = min(fin, key=lambda c: (c.p if c.p is not None else 2.0, -abs(c.diff)), default=None)
    if top is None or top.p is None:
        return "no Post-LN cell where an arm learned"
    return (
        f"Post-LN final loss, warmup − none at {where[top.id]}: {top.diff:+.2f} nats (p = {top.p:.2g}, "
        f"{top.decision})"
    )


def numbers(t: dict) -> dict:
    """Init-time numbers for the evidence: Post-LN's share factor, amplification slopes, gradient
    exponents."""
    fits = {
        k: t[k][t[k].init == "xavier"].set_index("placement") for k in ("grad_fits", "amplification_fits")
    }
    return {
        "post_identity_factor": float(t["mechanism"].set_index("quantity").loc["post-share-q", "share_q"]),
        "amplification_slopes": {k: float(x) for k, x in fits["amplification_fits"]["slope"].items()},
        "grad_exponents": {k: float(x) for k, x in fits["grad_fits"]["exponent"].items()},
    }


def extra_detail(sid: str, t: dict, sig: pd.DataFrame, deep: int) -> str:
    """What a sub-verdict's detail adds beside its comparisons: C-fixed the gradient signature at the
    deepest depth, C how many of warmed-up Post-LN's sweep runs learned at each rate, G the fitted slopes'
    intervals, H the branch statistics the identity law assumes."""
    if sid == "C-fixed":
        text = signature_text(sig, deep)
        return f". {text[0].upper()}{text[1:]}" if text else ""
    if sid == "C":
        by = t["deep_sweep"].groupby("lr").learned.agg(["sum", "size"])
        return ". Warmed-up Post-LN learned, by peak rate on the selection seeds: " + ", ".join(
            f"{lr:g} {int(r['sum'])}/{int(r['size'])}" for lr, r in by.iterrows()
        )
    if sid == "G":
        a = t["amplification_fits"][t["amplification_fits"].init == "xavier"].set_index("placement")
        return ". Log-log slopes in N (95% CI): " + ", ".join(
            f"{pl} {a.loc[pl, 'slope']:.2f} [{a.loc[pl, 'lo']:.2f}, {a.loc[pl, 'hi']:.2f}]" for pl in a.index
        )
    if sid == "H":
        ident = t["identity_share"]
        parts = []
        for init, g in ident.groupby("init"):
            g = g.set_index("placement")
            parts.append(
                f"{init} init, L = {int(g.loc['post', 'depth'])}: q = "
                f"{g.loc['post', 'factor q per sublayer']:.3f}, median branch/stream energy r = "
                f"{g.loc['post', 'median branch/stream energy r']:.2f} (assumed 1), share at the end post "
                f"{g.loc['post', 'share at the end']:.3f}, pre {g.loc['pre', 'share at the end']:.3f}"
            )
        return ". " + "; ".join(parts)
    return ""


def figures(t, train, probes, result, sc, final, *, arms, p, threshold, margin, out) -> None:
    """The claim's six figures: the outcome grid, loss curves, the gradient signature through training, and
    the init probes (gradients, amplification, identity share)."""
    plot_grid(describe_cells(t["fixed"]), arms, p, threshold, margin, out)
    plot_curves(train, result, sc, final, arms, p, threshold=threshold, margin=margin, out=out)
    plot_signature(train, arms, max(r["config"]["depth"] for r in train), p, out)
    plot_grads(probes, t["grad_fits"], out)
    plot_amplification(t["amplification"], t["amplification_fits"], out)
    plot_identity(probes, out)


def caveat_facts(p: dict, deep: int, null_offset: int) -> dict:
    """The numbers the caveats (claim.md: scale, the warmup's side effect, the heads, (E), the null pair,
    the provenance of the cell rule) are filled with."""
    return {
        "deep": deep,
        "n_deep_rates": len(p["deep_rates"]),
        "n_factors": len(p["rate_factors"]),
        "n_rates": len(p["rates"]),
        "n_seeds": len(p["seeds"]),
        "n_selection": len(p["selection_seeds"]),
        "null_offset": null_offset,
        "tokens_m": p["steps"] * p["batch"] * p["seq_len"] / 1e6,
        "warmup_pct": 100 * p["warmup"] / p["steps"],
    }
