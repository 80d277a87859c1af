"""rmsnorm: observation tables from its records, its own tables and its figures."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.plots import arm_bands, drawing
from tfclaims.evidence.readouts import achieved, of_limit
from tfclaims.evidence.tables import comparison_table, runs_table, timing_rows, uncontended
from tfclaims.evidence.tuning import SweepWords, null_at_choice, read_sweep, sweep_curves, write_sweep_tables
from tfclaims.grids.sweep import scale_label

from .grid import NORMS, scales

LABEL = {"builtin": "built-in", "eager": "eager", "fused": "fused"}


def observe(
    runs: list[dict], p: dict, readouts, null_offset: int, aa: str, contended: float
) -> dict[str, pd.DataFrame]:
    """alone: one row per width d, implementation (`impl`; `aa` is the built-in LayerNorm's copy timed again)
    and interleaved round of the norm timed alone; step: one row per model (d_model, n_layers),
    implementation and round of the whole training step; in both only the rounds whose copy probe reached
    `contended` × its timing call's median (`tables.uncontended`), the same rounds for every implementation;
    runs: one row per training run with its role (selection, test, or null: the null pairs' seeds s +
    null_offset), scale label and loss at init; tuned, choices, sensitivity: each norm's learning-rate sweep
    read by `evidence.tuning`; first: the tuned null pair (LayerNorm's fresh seeds at the first scale's chosen
    rate and their reruns)."""
    micro = part(runs, "norm_alone")[0]["metrics"]
    impls = [*micro["impls"], aa]
    alone = [
        r
        for row in micro["rows"]
        for k in impls
        for r in timing_rows(row[k]["times"], uncontended(row.get("probe"), contended), d=row["d"], impl=k)
    ]
    step = [
        r
        for rec in part(runs, "step")
        for k, v in rec["metrics"]["step"].items()
        for r in timing_rows(
            v["times"],
            uncontended(rec["metrics"].get("probe"), contended),
            d_model=rec["config"]["d_model"],
            n_layers=rec["config"]["n_layers"],
            impl=k,
            # what bounds the step's saving: its median, its norms' count and one norm's median alone
            step_s=v["median"],
            norm_s=rec["metrics"]["norm"].get(k, {}).get("median", math.nan),
            n_norms=rec["metrics"]["n_norms"],
        )
    ]
    sel, sc = set(p["selection_seeds"]), scales(p)
    labels = {(s["d_model"], s["n_layers"]): scale_label(s) for s in sc}

    def role(c, m):
        return "null" if c["seed"] >= null_offset else "selection" if c["seed"] in sel else "test"

    train = runs_table(
        part(runs, "train"),
        readouts,
        rerun=lambda c, m: c["seed"] >= null_offset,
        role=role,
        scale=lambda c, m: labels.get((c["d_model"], c["n_layers"])),
        init_loss=lambda c, m: m["val_loss"][0],
        unigram=lambda c, m: m["unigram_xent"],
        steps_per_s=lambda c, m: m["steps_per_s"],
    )
    swept = train[train.role.isin(["selection", "test"])]
    choices, tuned, seeds = read_sweep(
        swept, {n: {"norm": n} for n in NORMS}, {scale_label(s): s for s in sc}
    )
    return {
        "alone": pd.DataFrame(alone),
        "step": pd.DataFrame(step),
        "runs": train,
        "tuned": tuned,
        "choices": choices,
        "sensitivity": seeds,
        "first": null_at_choice(train, tuned, choices, "layer", scale_label(sc[0])),
    }


def by_cell(result, sub_id: str) -> dict:
    """cell label -> the comparison of a declared sub-claim in that cell (counted or reported)."""
    return {cell.label: result.at(sub_id, cell) for cell in result.declaration.sub(sub_id).cells}


def ratio_ci(c) -> tuple[float, float, float]:
    """LN/RMS time ratio (exp of −diff) with its interval (at Holm's level)."""
    lo, hi = (math.exp(-v) if v is not None else math.nan for v in (c.ci_high, c.ci_low))
    return math.exp(-c.diff), lo, hi


def write_tables(runs, t: dict, result, p: dict, families: dict, *, aa: str, out) -> dict:
    """norm_alone, step, kernels and training tables; returns what the summary and the figures read."""
    import torch  # only its version, for the summary

    micro = part(runs, "norm_alone")[0]["metrics"]
    impls = micro["impls"]
    fams = [f for f, pair in families.items() if set(pair) <= set(impls)]
    probes = [b for r in micro["rows"] for b in r.get("probe", ())]
    bw = float(np.median(probes)) if probes else None
    kept = t["alone"][t["alone"].impl == aa].groupby("d").size()
    rows = []
    for r in micro["rows"]:
        row = {"width d": r["d"], "tokens": p["tokens"], **{f"{k} (µs)": r[k]["median"] * 1e6 for k in impls}}
        row["rounds kept"] = int(kept.get(r["d"], 0))
        if r.get("probe"):
            row["probe min/median"] = min(r["probe"]) / float(np.median(r["probe"]))
        if bw and r.get("bytes"):  # achieved bytes/s over the copy bandwidth, per implementation
            for fam in fams:
                for norm, k in zip(("LN", "RMS"), families[fam]):
                    rate = achieved(r["bytes"], r[k]["median"])
                    row[f"{LABEL[fam]} {norm} % of copy bandwidth"] = 100 * of_limit(rate, bw)
        for fam in fams:
            ratio = ratio_ci(by_cell(result, f"alone-{fam}")[f"d{r['d']}"])
            row[f"LN/RMS {LABEL[fam]}"], row[f"LN/RMS {LABEL[fam]} lo"], row[f"LN/RMS {LABEL[fam]} hi"] = (
                ratio
            )
        row["eager/built-in LN"] = r["eager_layer"]["median"] / r["layer"]["median"]
        row["eager/built-in RMS"] = r["eager_rms"]["median"] / r["rms"]["median"]
        row["A/A LN/LN"] = r["layer"]["median"] / r[aa]["median"]
        rows.append(row)
    mdf = pd.DataFrame(rows)
    out.table(
        "norm_alone",
        mdf,
        f"Norm alone: median forward+backward time over {p['repeats']} interleaved rounds "
        f"({micro['threads']} intra-op thread(s)); LN/RMS = exp of the mean paired log ratio over rounds, "
        "with its CI at Holm's level (across widths); % of copy bandwidth = compulsory bytes (5 × tokens × d "
        "× 4) per second over a large copy's bytes per second"
        + (f" (the median probe, {bw / 1e9:.1f} GB/s)" if bw else "")
        + f"; rounds kept (of {p['repeats']}): those whose copy probe, taken before the round, reached the "
        "declared share of the width's median probe (the rest contended: dropped from every implementation); "
        "probe min/median: the slowest probe of the width over its median; A/A: the built-in LayerNorm timed "
        "twice",
    )
    sdf = _step_table(runs, result, families, t["step"], aa, out)
    kdf = _kernels(micro)
    out.table(
        "kernels",
        kdf,
        f"Which aten kernels run (torch profiler, width {micro['kernel_width']}): computing ops that call no "
        "other computing op; allocation, view and copy ops left out",
    )
    _training_tables(t, result, out)
    return dict(
        mdf=mdf, sdf=sdf, kdf=kdf, bw=bw, fams=fams, threads=micro["threads"], torch=torch.__version__
    )


def _training_tables(t: dict, result, out) -> None:
    """The training runs, the quality comparisons and the learning-rate sweep's tables."""
    names = {"unit": "seed", "final_val": "final val", "steps_per_s": "steps/s"}
    cols = ["scale", "role", "norm", "lr", "unit", "final_val", "unigram", "learned", "steps_per_s"]
    tdf = t["runs"][cols].rename(columns=names).sort_values(["scale", "role", "norm", "lr", "seed"])
    out.table(
        "training",
        tdf,
        "Training runs: final validation loss (nats/char); learned = the run did not diverge and ended at "
        "least the declared margin below the unigram cross-entropy; role: selection (the sweep's seeds), "
        "test (the fixed design and each norm's chosen rate), null (LayerNorm at seed + 1000)",
        in_report=False,
    )
    out.table(
        "quality",
        comparison_table(
            [*result.of("quality"), *result.of("quality-fixed"), *result.of("range"), *result.floors]
        ),
        "Validation loss, RMSNorm (b) − LayerNorm (a): each at its own best rate per scale (counted), both "
        "at the profile's rate (reported), and the learning-rate sensitivity; the null pairs last",
    )
    write_sweep_tables(out, t["choices"], sweep_curves(t["runs"], "norm"), SweepWords(arm="norm"))


def _step_table(runs, result, families: dict, step: pd.DataFrame, aa: str, out) -> pd.DataFrame:
    kept = step[step.impl == aa].groupby(["d_model", "n_layers"]).size()
    srows = []
    for r in sorted(part(runs, "step"), key=lambda r: (r["config"]["d_model"], r["config"]["n_layers"])):
        c, m = r["config"], r["metrics"]
        row = {"d_model": c["d_model"], "layers": c["n_layers"], "tokens/step": c["batch"] * c["seq_len"]}
        row["rounds kept"] = int(kept.get((c["d_model"], c["n_layers"]), 0))
        if m.get("probe"):
            row["probe min/median"] = min(m["probe"]) / float(np.median(m["probe"]))
        for fam in ("builtin", "eager"):  # the whole step is timed with these two families
            ln, rms = families[fam]
            cmp, name = by_cell(result, f"step-{fam}")[f"d{c['d_model']}-L{c['n_layers']}"], LABEL[fam]
            row[f"{name} LN step (ms)"] = m["step"][ln]["median"] * 1e3
            row[f"{name} RMS step (ms)"] = m["step"][rms]["median"] * 1e3
            row[f"{name} saving"] = 1 - math.exp(cmp.diff)
            row[f"{name} saving lo"] = 1 - math.exp(cmp.ci_high) if cmp.ci_high is not None else math.nan
            row[f"{name} saving hi"] = 1 - math.exp(cmp.ci_low) if cmp.ci_low is not None else math.nan
            share = m["n_norms"] * m["norm"][ln]["median"] / m["step"][ln]["median"]
            row[f"{name} LN share of step"] = share
            # the most the step can save: the norms' share times what RMSNorm saves on them alone
            alone = 1 - m["norm"][rms]["median"] / m["norm"][ln]["median"]
            row[f"{name} saving the share allows"] = share * alone
        srows.append(row)
    sdf = pd.DataFrame(srows)
    out.table(
        "step",
        sdf,
        "Whole training step: median time, saving 1 − t_RMS/t_LN (from the mean paired log ratio over the "
        "interleaved rounds kept, as in the norm_alone table) with its CI at Holm's level (across model "
        "sizes), the norms' estimated share of "
        "the LN step, and the saving that share allows (share × the saving of the norms timed alone at the "
        "model's shape): a step cannot save more than it spends in its norms",
    )
    return sdf


def step_ceiling(rows_a: pd.DataFrame, rows_b: pd.DataFrame) -> float | None:
    """The largest log-time saving RMSNorm can bring a whole step (LayerNorm's rows a, RMSNorm's b): the
    norms' share of the LayerNorm step times the saving of one norm timed alone at the model's shape,
    −log(1 − share × saving). None without the numbers."""
    if rows_a.empty or rows_b.empty or "norm_s" not in rows_a:
        return None
    a, b = rows_a.iloc[0], rows_b.iloc[0]
    share = a["n_norms"] * a["norm_s"] / a["step_s"]
    most = share * (1 - b["norm_s"] / a["norm_s"])
    if not math.isfinite(most):
        return None
    return -math.log1p(-most) if most < 1 else math.inf


def _kernels(micro: dict) -> pd.DataFrame:
    from tfclaims.nn.norm_variants import VARIANTS  # torch's modules; their labels name the implementations

    rows = []
    for k in micro["kernels"]:  # the built-in and eager implementations, profiled at one width
        row = {"implementation": VARIANTS[k][1]}
        for phase in ("forward", "backward"):
            ks = micro["kernels"][k][phase]["kernels"]
            n = sum(ks.values())
            row[f"{phase}: kernels run"] = n
            row[f"{phase}: which"] = ", ".join(
                f"{o.removeprefix('aten::')}×{c}" if c > 1 else o.removeprefix("aten::")
                for o, c in ks.items()
            )
            row[f"{phase}: fused?"] = "fused (1 kernel)" if n == 1 else f"composite ({n} kernels)"
        rows.append(row)
    return pd.DataFrame(rows)


def describe(result, v: dict, p: dict) -> tuple[str, str]:
    """The key number and the summary sentence."""
    mdf, sdf, kdf, bw = v["mdf"], v["sdf"], v["kdf"], v["bw"]

    def rng(s):
        return f"{s.min():.2f}–{s.max():.2f}×"

    def steps(name):
        return "; ".join(
            f"d={int(r['d_model'])}, {int(r['layers'])} layers: {r[f'{name} saving']:+.1%} "
            f"[{r[f'{name} saving lo']:+.1%}, {r[f'{name} saving hi']:+.1%}] (its norms' share allows at "
            f"most {r[f'{name} saving the share allows']:+.1%})"
            for _, r in sdf.iterrows()
        )

    fused = "fused" in v["fams"]
    kern = "; ".join(
        f"{r['implementation'].split(',')[0]}: forward {r['forward: kernels run']}, backward "
        f"{r['backward: kernels run']} kernels"
        for _, r in kdf.head(2).iterrows()
    )
    bw_txt = ""
    if bw:
        ln, rms = (mdf.filter(like=f" {n} % of copy bandwidth").max(axis=1) for n in ("LN", "RMS"))
        bw_txt = (
            " Measured as compulsory bytes per second, the fastest LayerNorm reaches at most "
            f"{ln.max():.0f}% and the fastest RMSNorm {rms.max():.0f}% of a large copy's bandwidth "
            f"({bw / 1e9:.1f} GB/s, one thread), {ln.iloc[-1]:.0f}% and {rms.iloc[-1]:.0f}% at d = "
            f"{int(mdf['width d'].iloc[-1])}."
        )
    q = result.per_cell("quality")
    qf = result.get("quality-fixed")
    summary = (
        f"Like with like, LayerNorm/RMSNorm time alone is {rng(mdf['LN/RMS eager'])} in eager ops"
        + (f", fused by torch.compile {rng(mdf['LN/RMS fused'])}" if fused else "")
        + f" (>1: RMSNorm faster); the whole training step with eager norms saves {steps('eager')}.{bw_txt} "
        f"PyTorch's built-in functions on this device give {rng(mdf['LN/RMS built-in'])} ({kern}) and a step "
        f"saving of {steps('built-in')}: a finding about its kernels, not counted. Validation loss, RMSNorm "
        f"− LayerNorm, each at its own best rate: {q}; at one rate (reported): "
        f"{qf.text(' nats') if qf else '—'}."
    )
    key = (
        f"norm alone LN/RMS eager {rng(mdf['LN/RMS eager'])}"
        + (f", fused {rng(mdf['LN/RMS fused'])}" if fused else "")
        + f"; step saving (eager) {', '.join(f'{s:+.1%}' for s in sdf['eager saving'])}; built-in (PyTorch "
        f"kernels) {rng(mdf['LN/RMS built-in'])}; val Δ at each norm's best rate {q}"
    )
    return key, summary


# ------------------------------------------------------------------ figures
STYLES = {
    "layer": ("C0", "-", "o", "LayerNorm, built-in"),
    "rms": ("C1", "-", "o", "RMSNorm, built-in"),
    "eager_layer": ("C0", "--", "s", "LayerNorm, eager"),
    "eager_rms": ("C1", "--", "s", "RMSNorm, eager"),
    "fused_layer": ("C0", ":", "^", "LayerNorm, fused (compile)"),
    "fused_rms": ("C1", ":", "^", "RMSNorm, fused (compile)"),
}


@drawing
def plot_micro(mdf: pd.DataFrame, out) -> None:
    from tfclaims.plotting import log_ticks, subplots

    have_bw = any(c.endswith("% of copy bandwidth") for c in mdf)
    fig, axes = subplots(3 if have_bw else 2, width=4.6, height=3.6)
    a, b = axes[0], axes[1]
    for k, (c, ls, mk, lab) in STYLES.items():
        if f"{k} (µs)" in mdf:
            a.loglog(mdf["width d"], mdf[f"{k} (µs)"], marker=mk, ms=3.5, color=c, ls=ls, label=lab)
    a.set(xlabel="width d (features per token)", ylabel="forward+backward time (µs)")
    a.set_title(f"Norm alone, {int(mdf['tokens'].iloc[0])} tokens")
    a.legend(fontsize=7)
    fams = {
        "built-in": ("o", "-", "built-in (PyTorch kernels)"),
        "eager": ("s", "--", "eager formulas"),
        "fused": ("^", ":", "fused by torch.compile"),
    }
    for fam, (mk, ls, lab) in fams.items():
        if f"LN/RMS {fam}" in mdf:
            r, lo, hi = mdf[f"LN/RMS {fam}"], mdf[f"LN/RMS {fam} lo"], mdf[f"LN/RMS {fam} hi"]
            b.errorbar(mdf["width d"], r, yerr=[r - lo, hi - r], marker=mk, ls=ls, capsize=2, label=lab)
    b.set_xscale("log")
    b.axhline(1, color="k", lw=0.8)
    b.set(xlabel="width d (features per token)", ylabel="t_LayerNorm / t_RMSNorm (ratio)")
    b.set_title("Speed-up of RMSNorm (>1: faster), CI at Holm's level")
    b.legend(fontsize=7.5)
    log_ticks(a, mdf["width d"])
    log_ticks(b, mdf["width d"])
    if have_bw:
        c = axes[2]
        for k, (col, ls, mk, lab) in STYLES.items():
            fam = {"layer": "built-in", "rms": "built-in"}.get(k, k.split("_")[0])
            key = f"{fam} {'LN' if 'layer' in k else 'RMS'} % of copy bandwidth"
            if key in mdf:
                c.semilogx(mdf["width d"], mdf[key], marker=mk, ms=3.5, color=col, ls=ls, label=lab)
        c.axhline(100, color="k", lw=0.8, ls="--")
        c.set(xlabel="width d (features per token)", ylabel="achieved bandwidth (% of a large copy's)")
        c.set_title("Compulsory bytes per second")
        c.set_ylim(0, 110)
        c.legend(fontsize=6.5, loc="center right")
        log_ticks(c, mdf["width d"])
    out.figure(
        "norm-alone",
        fig,
        "Forward+backward time of LayerNorm and RMSNorm alone vs width: PyTorch's built-in functions "
        "(solid), the standard formulas in eager ops (dashed) and those formulas fused by torch.compile "
        "(dotted), medians of interleaved rounds; middle: the LN/RMS time ratio per family with its CI over "
        "rounds (at Holm's level across widths); right: compulsory bytes (5 × tokens × d × 4) per second as "
        "a share of a large copy's bandwidth.",
    )


@drawing
def plot_step_and_training(runs, sdf: pd.DataFrame, table: pd.DataFrame, quality, out) -> None:
    """Left: the step-time saving per model size and family; right: validation loss over training for the two
    arms of the declared quality sub-claim (mean and 95% band over seeds)."""
    from tfclaims.plotting import subplots

    fig, (a, b) = subplots(2, width=4.6, height=3.6)
    x = np.arange(len(sdf))
    for i, fam in enumerate(("built-in", "eager")):
        s = sdf[f"{fam} saving"] * 100
        err = np.vstack([s - sdf[f"{fam} saving lo"] * 100, sdf[f"{fam} saving hi"] * 100 - s])
        a.bar(x + (i - 0.5) * 0.38, s, 0.38, yerr=err, capsize=3, label=f"{fam} norms")
    a.axhline(6.9, color="k", ls="--", lw=1, label="anchor: 6.9% (Transformer)")
    a.axhline(0, color="k", lw=0.6)
    a.set_xticks(x, [f"d={d}, {L} layers" for d, L in zip(sdf["d_model"], sdf["layers"])])
    a.set(ylabel="step time saved by RMSNorm (%)", title="Whole training step (CI over rounds)")
    a.legend(fontsize=7.5)
    arm_bands(b, runs, table, quality)
    b.set(
        xlabel="training step", ylabel="validation loss (nats/char)", title="Training: LayerNorm vs RMSNorm"
    )
    b.legend()
    out.figure(
        "step-and-quality",
        fig,
        "Left: the share of a whole training step (forward, backward, AdamW) saved by RMSNorm over "
        "LayerNorm, with PyTorch's built-in functions and with the eager formulas (error bars: CI over "
        "interleaved rounds at Holm's level); dashed: the anchor's 6.9%. Right: validation loss during "
        "training, mean and 95% band over seeds (dashed LayerNorm, solid RMSNorm).",
    )


def plot_sweep(t: dict, p: dict, out) -> None:
    """Final loss against peak learning rate per scale, both norms, each norm's chosen rate on the seeds."""
    from tfclaims.evidence.plots import model_sweep_figure

    sc = scales(p)
    model_sweep_figure(
        out,
        t,
        p,
        sc,
        [scale_label(s) for s in sc],
        NORMS,
        arm_column="norm",
        per="scale",
        each="norm",
        note=": the tuned quality comparison",
    )
