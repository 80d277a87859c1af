"""notes_code: observation tables from its records, its own tables, figures and summary."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.curves import curve
from tfclaims.evidence.declare import Readout
from tfclaims.evidence.plots import drawing
from tfclaims.evidence.tables import runs_table
from tfclaims.evidence.tuning import null_at_choice, read_sweep
from tfclaims.grids.sweep import scale_label

from .grid import ARMS, scales

# the snippets, by what they define (cell labels and the `snippet` field of the snippets table)
ATTENTION = ("000-attention", "002-attention", "002-attention-unmasked", "004-attention")
MHA = ("000-mha", "001-mha", "004-mha", "004-bert-mha")
MASKS = ("004-pad-mask", "004-decoder-mask")
POSITIONS = ("004-pe", "001-pe")
VIEWS = ("001-view-bare", "001-view-contiguous")
WHERE = {
    "000-attention": "000 §1", "002-attention": "002 §Attention steps, with a mask",
    "002-attention-unmasked": "002 §Attention steps, no mask", "004-attention": "004 §attention / Bert Q2",
    "000-mha": "000 §1", "001-mha": "001 §code", "004-mha": "004 §attention", "004-bert-mha": "004 Bert Q2",
    "004-pad-mask": "004 §masks", "004-decoder-mask": "004 §masks / Decoder",
    "004-pe": "004 §Position Encoding", "001-pe": "001 §Positional Embedding",
    "ffn": "001 §summary, 003 §FFN",
    "001-view-bare": "001 §code, without contiguous()", "001-view-contiguous": "001 §code, with contiguous()",
    "library": "the library itself",
}  # fmt: skip

SHORT = {
    "fixed": "fixed",
    "bert": "004 Bert Q2",
    "attention_ln": "004 §attention",
    "no_wo": "no W^O (001 <4.7>)",
}

RUNS = Readout(
    "runs",
    "ran as written",
    better="higher",
    fmt=".0f",
    definition="1 if the snippet, as the note writes it, ran in float32 on the run's device "
    "without an exception, else 0 (the exception is in the snippets table)",
)
ERR_REF = Readout(
    "err_ref",
    "relative max error against the library",
    fmt=".2g",
    definition="max|y − y_lib| ÷ max|y_lib| in float64, the snippet (changed only where it "
    "cannot run) against the library's module with the same weights (explicit attention "
    "path)",
)
ERR_SDPA = Readout(
    "err_sdpa",
    "relative max error against SDPA",
    fmt=".2g",
    definition="the same against the library's attention on PyTorch's scaled_dot_product_attention",
)
REPEAT = Readout(
    "repeat_diff",
    "max |y₁ − y₂|, one input twice",
    fmt=".2g",
    definition="the largest difference between two calls on the same input (eval mode, float64)",
)
UNREG = Readout(
    "unregistered",
    "weights built inside forward",
    "values",
    fmt=".0f",
    definition="the number of parameter values modules build while the snippet runs: they are "
    "not in its .parameters(), so no optimiser trains them",
)
MISMATCH = Readout(
    "mismatch",
    "mask entries that differ",
    fmt=".0f",
    definition="entries where the note's mask (True = masked) differs from the complement of "
    "the library's build_mask (True = may attend)",
)
PE_ERR = Readout(
    "pe_err",
    "max abs error of the positional table, as written",
    fmt=".2g",
    definition="max |PE_note − PE_lib| over every position and feature, the note's float32 "
    "table against the library's (computed in float64, stored in float32), and over the "
    "encoder's input after the table is added in the note's layout",
)
PE_ERR64 = Readout(
    "pe_err64",
    "the same, the note's formula in float64",
    fmt=".2g",
    definition="the note's formula evaluated in float64 against the library's float32 table",
)
SNIPPET_READOUTS = (RUNS, ERR_REF, ERR_SDPA, REPEAT, UNREG, MISMATCH, PE_ERR, PE_ERR64)


def observe(runs: list[dict], p: dict, readouts, null_offset: int) -> dict[str, pd.DataFrame]:
    """snippets: one row per snippet and seed (unit) with the readouts; runs: one row per training run with
    its arm, role (selection, test, or null: seeds s + null_offset), scale label, loss at init and unigram
    level; tuned, choices: each arm's sweep read by `evidence.tuning`; first: the null pair (the fixed
    module's fresh seeds at its chosen rate and their reruns)."""
    rows = [
        {**row, "unit": r["config"]["seed"], "runs": float(row["runs"])}
        for r in part(runs, "snippets")
        for row in r["metrics"]["rows"]
    ]
    cols = [
        "snippet",
        "unit",
        "exception",
        "registered",
        "unregistered_names",
        *(x.column for x in SNIPPET_READOUTS),
    ]
    snippets = pd.DataFrame(rows, columns=cols).astype({x.column: float for x in SNIPPET_READOUTS})
    sel, sc = set(p["selection_seeds"]), scales(p)
    labels = {(s["d_model"], s["n_layers"]): scale_label(s) for s in sc}

    def role(c, m):
        return "null" if c["seed"] >= null_offset else "selection" if c["seed"] in sel else "test"

    t = runs_table(
        part(runs, "train"),
        readouts,
        role=role,
        scale=lambda c, m: labels.get((c["d_model"], c["n_layers"])),
        init_loss=lambda c, m: m["val_loss"][0],
        unigram=lambda c, m: m["unigram_xent"],
        n_params=lambda c, m: m["n_params"],
    )
    swept = t[t.role.isin(["selection", "test"])] if len(t) else t
    choices, tuned, _ = read_sweep(
        swept, {k: {"arm": k} for k in ARMS}, {labels[k]: {"d_model": k[0], "n_layers": k[1]} for k in labels}
    )
    return {
        "snippets": snippets,
        "runs": t,
        "tuned": tuned,
        "choices": choices,
        "first": null_at_choice(t, tuned, choices, "fixed", scale_label(sc[0])),
    }


def device(runs: list[dict]) -> str:
    """The device the snippets ran on (as their records say), or 'not recorded'."""
    recs = part(runs, "snippets")
    return ", ".join(sorted({str(r.get("device")) for r in recs if r.get("device")})) or "not recorded"


def equal_init(runs: list[dict]) -> str:
    """Whether 000's deep-copied projections started equal in every snippets run: 'all equal' or 'not all'."""
    flags = [r["metrics"].get("runs_mode_equal_init") for r in part(runs, "snippets")]
    return "all equal" if flags and all(flags) else "not all equal"


def snippet_table(snippets: pd.DataFrame) -> pd.DataFrame:
    """Per snippet: where it is in the notes, whether it ran as written and what it raised, and the worst of
    every reading over the seeds."""
    if snippets.empty:
        return snippets
    worst = {x.column: ("min" if x.better == "higher" else "max") for x in SNIPPET_READOUTS}
    g = snippets.groupby("snippet", sort=False)
    out = g.agg({**worst, "registered": "max", "exception": "first"}).reset_index()
    names = g.unregistered_names.first()
    out["built per call"] = [", ".join(names[s]) if isinstance(names[s], list) else "" for s in out.snippet]
    out.insert(1, "where", out.snippet.map(WHERE))
    return out.rename(columns={x.column: x.label for x in SNIPPET_READOUTS})


@drawing
def plot_snippets(snippets: pd.DataFrame, out) -> None:
    """One row per snippet, one column per reading: pass (green), fail (red) or not applicable (grey), each
    cell labelled with its worst value over the seeds. 001's bare view is expected to fail (the note's
    point)."""
    from matplotlib.colors import ListedColormap

    from tfclaims.plotting import subplots

    if snippets.empty:
        return
    table = snippet_table(snippets).set_index("snippet")
    err = table[[ERR_REF.label, ERR_SDPA.label]].max(axis=1, skipna=True)  # NaN only where neither applies
    cols = [
        ("ran as written", table[RUNS.label], lambda v: v == 1, ".0f"),
        ("rel. error vs reference", err, lambda v: v <= 1e-12, ".0e"),
        ("|y₁ − y₂|, same input", table[REPEAT.label], lambda v: v == 0, ".2g"),
        ("weights built per call", table[UNREG.label], lambda v: v == 0, ".0f"),
        ("mask entries that differ", table[MISMATCH.label], lambda v: v == 0, ".0f"),
        ("PE abs error (float32)", table[PE_ERR.label], lambda v: v <= 1e-3, ".1e"),
    ]
    names = [s for s in table.index if s != "library"]
    grid = np.full((len(names), len(cols)), np.nan)
    fig, axes = subplots(1, width=8.4, height=0.36 * len(names) + 1.8)
    ax = axes[0]
    for i, s in enumerate(names):
        for j, (_, values, ok, fmt) in enumerate(cols):
            v = values[s]
            if pd.notna(v):
                passed = ok(v) if s != "001-view-bare" else v == 0  # the note says this one cannot run
                grid[i, j] = float(passed)
                label = format(v, fmt) + (", expected" if s == "001-view-bare" else "")
                ax.text(j, i, label, ha="center", va="center", fontsize=7)
    ax.imshow(
        np.ma.masked_invalid(grid), cmap=ListedColormap(["#f4a6a6", "#a8dba8"]), vmin=0, vmax=1, aspect="auto"
    )
    ax.set_facecolor("#e6e6e6")
    ax.set_xticks(range(len(cols)), [c[0] for c in cols], rotation=25, ha="right", fontsize=7.5)
    ax.set_yticks(range(len(names)), [f"{s} ({WHERE[s]})" for s in names], fontsize=7)
    ax.set_xlabel("reading (worst over seeds)")
    ax.set_ylabel("snippet (note, section)")
    ax.set_title("The notes' snippets (green: passes, red: fails, grey: n/a)", fontsize=9.5)
    ax.grid(False)
    out.figure(
        "snippets",
        fig,
        "Every snippet restated from the notes: whether it ran as written (float32 on the run's device), its "
        "relative max error in float64 against the library (attention: the library's module on SDPA and on "
        "its explicit path, the larger shown) once the least change lets it run (bound 1e-12), the largest "
        "difference between two calls on one input, how many weight values it builds inside forward (never "
        "trained), how many mask entries differ from the library's, and the positional table's largest "
        "absolute error in float32 (bound 1e-3). 001's view without contiguous() is expected to fail.",
    )


@drawing
def plot_positions(runs: list[dict], p: dict, tol: float, tol64: float, out) -> None:
    """The positional table's largest absolute error per block of positions, the note's float32 computation
    and its formula in float64, against the library's table, with the declared bounds."""
    from tfclaims.plotting import subplots

    recs = part(runs, "snippets")
    if not recs:
        return
    prof = recs[0]["metrics"]["pe_profile"]  # the tables draw no random numbers: one run shows them
    fig, axes = subplots(1, width=5.4, height=3.6)
    ax = axes[0]
    ax.plot(prof["last_position"], prof["float32"], "o-", ms=3, label="as written (float32)")
    ax.plot(prof["last_position"], prof["float64"], "s-", ms=3, label="the same formula in float64")
    ax.axhline(tol, color="C0", ls=":", lw=1, label=f"bound, as written ({tol:g})")
    ax.axhline(tol64, color="C1", ls=":", lw=1, label=f"bound, float64 ({tol64:.2g})")
    ax.set(
        yscale="log",
        xlabel="position (last of each block of positions)",
        ylabel="max |PE_note − PE_lib| in the block",
        title="Sinusoidal table against the library's",
    )
    ax.legend(fontsize=7)
    out.figure(
        "positions",
        fig,
        f"The notes' sinusoidal table (004 and 001 compute the same one) against the library's, over "
        f"{p['pe_len']} positions in blocks: as written the positions and frequencies are float32 and the "
        "angle's rounding grows with the position; the same formula in float64 matches the library's table "
        "to its float32 storage.",
    )


@drawing
def plot_training(runs: list[dict], tuned: pd.DataFrame, p: dict, out) -> None:
    """Validation loss against step for each arm at its chosen rate: mean and 95% band over fresh seeds."""
    from tfclaims.plotting import band, subplots

    fig, axes = subplots(1, width=5.6, height=3.8)
    ax = axes[0]
    by_id = {r.get("run_id"): r for r in part(runs, "train")}
    for i, (k, label) in enumerate(ARMS.items()):
        ids = tuned[tuned.arm == k].run_id if len(tuned) else []
        rs = [by_id[x] for x in ids if x in by_id]
        steps, mean, lo, hi = curve(rs)
        if len(steps):
            lr = rs[0]["config"]["lr"]
            band(ax, steps, mean, lo, hi, label=f"{label}, lr {lr:g} (n={len(rs)})", color=f"C{i}")
    ax.set(
        xlabel="training step",
        ylabel="validation loss (nats/char)",
        title="Each arm at its chosen rate (fresh seeds)",
    )
    if ax.get_legend_handles_labels()[0]:  # no arm chose a rate yet: nothing to name
        ax.legend(fontsize=6.5)
    out.figure(
        "training",
        fig,
        f"Validation loss of the small LM ({p['scales'][0][0]} wide, {p['scales'][0][1]} post-LN blocks, "
        f"{p['steps']} steps) whose attention sublayer is, in every block, the fixed module or one of the "
        f"notes' defects; each at its chosen peak rate, mean and 95% band over the {len(p['seeds'])} fresh "
        "seeds.",
    )


def plot_sweep(t: dict, p: dict, out) -> None:
    from tfclaims.evidence.plots import model_sweep_figure

    sc = scales(p)
    model_sweep_figure(
        out,
        t,
        p,
        sc,
        [scale_label(s) for s in sc],
        SHORT,
        arm_column="arm",
        per="model size",
        each="arm",
        note=": the runs every comparison reads",
    )


def gap(tuned: pd.DataFrame, arm: str) -> str:
    """`arm`'s mean final loss minus the fixed module's on the fresh seeds, or 'not measured'."""
    m = tuned.groupby("arm").final_val.mean().dropna() if len(tuned) else pd.Series(dtype=float)
    return f"{m[arm] - m['fixed']:+.3f}" if {arm, "fixed"} <= set(m.index) else "not measured"


def summary(snippets: pd.DataFrame, tuned: pd.DataFrame) -> dict:
    """The snippets' outcomes and the training costs in words; the key number."""
    parts, key = [], "not run"
    tab = snippet_table(snippets)
    if len(tab):
        tab = tab[tab.snippet != "library"]
        fail = tab[(tab[RUNS.label] < 1) & ~tab.snippet.isin(VIEWS)]
        parts.append(
            f"as written, {len(fail)} of {(~tab.snippet.isin(VIEWS)).sum()} snippets fail to run ("
            + "; ".join(f"{s}: {e.split(':')[0]}" for s, e in zip(fail.snippet, fail.exception))
            + ")"
        )
        attn = tab[tab.snippet.isin(ATTENTION + MHA)]
        parts.append(
            f"each attention snippet, run after the least change, is within "
            f"{attn[ERR_SDPA.label].max():.1g} of SDPA in float64"
        )
        built = tab[tab[UNREG.label] > 0]
        values = ", ".join(f"{s} {int(v)} values" for s, v in zip(built.snippet, built[UNREG.label]))
        parts.append("weights built inside forward: " + (values or "none"))
        moved = tab[tab[REPEAT.label] > 0]
        if len(moved):
            parts.append(
                "one input twice gives different outputs in "
                + ", ".join(f"{s} (max diff {v:.2g})" for s, v in zip(moved.snippet, moved[REPEAT.label]))
            )
    costs = {k: gap(tuned, k) for k in ARMS if k != "fixed"}
    costs = {k: v for k, v in costs.items() if v != "not measured"}  # an arm whose runs all diverged has none
    if costs:
        key = "; ".join(f"{k} {v}" for k, v in costs.items()) + " nats/char vs fixed (each at its rate)"
        parts.append("trained, the held-out loss changes by " + key)
    elif len(tuned):
        key = "no tuned run of the fix and a defect finished training"
        parts.append(key)
    return {"summary": ("; ".join(parts) + ".") if parts else "Nothing was measured.", "key": key}
