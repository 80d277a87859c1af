"""norm_padding: observation tables from its records, its own tables and its figures."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.declare import Cell, Readout, cell
from tfclaims.evidence.plots import drawing, lr_sweep, sweep_caption
from tfclaims.evidence.stats import mean_ci
from tfclaims.evidence.tables import comparison_table, runs_table
from tfclaims.evidence.tuning import (
    SweepWords,
    curve_table,
    fixed_rate,
    read_sweep,
    width_scales,
    write_sweep_tables,
)
from tfclaims.nn.config import ConfigError

from .grid import (  # the design's settings and arms, shared with the run configs
    PART,
    PLACEMENTS,
    SETTINGS,
    arms,
    swept_arms,
)

LABEL = {
    "layer": "LN",
    "batch": "BN pads counted",
    "batch_masked": "BN pads masked",
    "batch_causal": "BN causal statistics",
    "power": "PowerNorm",
}
COLOR = {"layer": "C0", "batch": "C3", "batch_masked": "C1", "batch_causal": "C4", "power": "C2"}
YCUT = 5.0  # nats/char: top of the training-loss axis (the unigram level is about 3.3)
PROBES = {"pads": "pads added", "nb": "other neighbours", "leak": "future leak (same row)"}
FLUCT = ("log2 mean x iid", "log2 var x iid")


# ---------------------------------------------------------------------------- readouts (observe's columns)
LOSS = Readout(
    "eval_mixed",
    "eval-mode validation loss",
    "nats/char",
    definition="per predicted character in eval mode (running statistics), on fixed validation lines "
    "(windows for the window models; the masked characters for the masked LM) batched eval_batch at a time "
    "in random order; a diverged run has none",
    fn=lambda m: m.get("eval_mixed") if m.get("diverged_at") is None else None,
)


GAP = Readout(
    "diff",
    "difference of eval-mode losses",
    "nats/char",
    definition="per seed, on padded lines at one placement and batch: BN − LN (BN with causal statistics, or "
    "BN masked for the leaky version; its null pair: LN at the smallest − LN at the largest batch)",
)
MODE = Readout(
    "loss",
    "validation loss by mode",
    "nats/char",
    definition="one trained model's validation loss in eval mode (running statistics) and in train mode "
    "(batch statistics at the training batch size)",
)
PROBE_READOUTS = tuple(
    Readout(
        f"{k}_{mode}",
        f"change {what} ({mode} mode)",
        "relative",
        fmt=".1e",
        definition="the largest relative change of a target token's logits over one trained line model's "
        "probes (float64)",
    )
    for k, what in (
        ("pads", "with pads added"),
        ("nb", "beside other lines"),
        ("leak", "of earlier outputs when a later token changes"),
    )
    for mode in ("train", "eval")
)
FLUCT_READOUTS = tuple(
    Readout(
        c,
        f"log2 batch-{s} deviation (× i.i.d. noise)",
        "log2",
        "higher",
        "welch",
        definition="log2 of the distance of a BatchNorm's batch statistic from its running statistic as a "
        "multiple of i.i.d. sampling noise, mean over layers and the second half of training",
    )
    for c, s in zip(FLUCT, ("mean", "variance"))
)


def norm_label(setting: str, norm: str) -> str:
    """A norm's label in a setting: plain 'BN' on fixed windows, where there are no pads to count."""
    return "BN" if norm == "batch" and "windows" in setting else LABEL[norm]


def swept_cell(swept: dict, setting: str) -> tuple[str, str, int]:
    """(setting, placement, batch) of the swept arms in `setting` (the tuned sub-claims' cell)."""
    found = sorted({a[:3] for a in swept.values() if a[0] == setting})
    if len(found) != 1:
        raise ConfigError(f"sweep_arms: give the swept arms of {setting!r} in one (placement, batch) cell")
    return found[0]


def label(setting: str, pl: str, b: int) -> str:
    """A cell's label: placement and batch, with 'win-' on fixed windows and 'enc-' for the masked LM."""
    return f"{'enc-' if setting.startswith('enc-') else ''}{'win-' if 'windows' in setting else ''}{pl}-B{b}"


def where(arms_: list, *norms: str) -> list[tuple[str, int]]:
    """(placement, batch) of every cell in which each of `norms` has an arm, pre-norm first."""
    pbs = {(pl, b) for pl, b, _ in arms_ if all((pl, b, n) in arms_ for n in norms)}
    return sorted(pbs, key=lambda x: (PLACEMENTS.index(x[0]), x[1]))


def sizes(arms_: list, norm: str) -> dict[str, tuple[int, int]]:
    """placement -> (smallest, largest) batch at which LN and `norm` both have an arm on lines (two sizes at
    least): the small-batch interaction's cells."""
    out = {}
    for pl in PLACEMENTS:
        bs = [b for pl_, b in where(arms_, "layer", norm) if pl_ == pl]
        if len(bs) >= 2:
            out[pl] = (bs[0], bs[-1])
    return out


def cell_of(setting: str, pl: str, b: int) -> Cell:
    """The fixed-rate cell of one (setting, placement, batch): its runs (the null pair's reruns have part
    'null')."""
    data, attn = SETTINGS[setting]
    return cell(label(setting, pl, b), data=data, attn=attn, part=PART[setting], placement=pl, batch=b)


def cells_at(setting: str, arms_: list, *norms: str) -> tuple[Cell, ...]:
    """The cells of `setting` in which each of `norms` has an arm (arms_: [placement, batch, norm] there)."""
    return tuple(cell_of(setting, pl, b) for pl, b in where(arms_, *norms))


def interaction_cells(arms_: list, norm: str) -> tuple[Cell, ...]:
    """The small-batch interaction's cells: one per placement with two batch sizes ((`norm` − LN) rows)."""
    return tuple(cell(pl, placement=pl, pair=f"{norm}-ln") for pl in sizes(arms_, norm))


def floored(p: dict, arms_: list, norm: str) -> tuple[Cell, ...]:
    """The small-batch interaction's placements whose two batch sizes both have a null cell on lines."""
    nulls = {tuple(c) for c in p["null_cells"]}
    return tuple(
        cell(pl, placement=pl)
        for pl, bs in sizes(arms_, norm).items()
        if {("lines", pl, b) for b in bs} <= nulls
    )


def fluct_arm(arms_: list) -> tuple[str, int]:
    """(placement, batch) of the LM arm set against the MLP control: first placement, largest batch."""
    return min((a[0] for a in arms_), key=PLACEMENTS.index), max(a[1] for a in arms_)


def with_arms(p: dict, arms_: list, norms) -> dict:
    """The profile with the lines' placements (pre first), batch sizes and norms, which the figures read."""
    return {
        **p,
        "placements": sorted({a[0] for a in arms_}, key=PLACEMENTS.index),
        "batches": sorted({a[1] for a in arms_}),
        "norms": [n for n in norms if any(a[2] == n for a in arms_)],
    }


def late_multiple(m: dict, steps: int, col: str) -> float | None:
    """log2 of the batch statistics' distance from the running statistics as a multiple of i.i.d. sampling
    noise (mean over layers and the recorded steps of the second half of training)."""
    k = 1.0 if col == "mean" else 0.5
    xs = [
        md * math.sqrt(n * k)
        for d in m.get("stats", {}).values()
        for s, md, n in zip(d["step"], d[f"{col}_dev"], d["n"])
        if s >= steps // 2
    ]
    return math.log2(float(np.mean(xs))) if xs else None


def _ok(m, key):
    return m.get(key) if m.get("diverged_at") is None else None


def _by_unit(df: pd.DataFrame, **fields) -> dict:
    """unit -> (eval-mode loss, learned) of the rows matching `fields`."""
    for k, v in fields.items():
        df = df[df[k] == v]
    return {u: (v, bool(ok)) for u, v, ok in zip(df["unit"], df["eval_mixed"], df["learned"])}


def _diff(x: dict, y: dict) -> dict:
    """unit -> (x − y, both learned), over the units of x (None where either value is missing)."""
    out = {}
    for u, (vx, ok) in x.items():
        vy, ok_y = y.get(u, (None, False))
        out[u] = (vx - vy if vx is not None and vy is not None else None, bool(ok and ok_y))
    return out


def _interaction(t: pd.DataFrame, arms_: list, norms) -> list[dict]:
    """Per BatchNorm and placement with two batch sizes: (BN − LN) per seed at the smallest and the largest
    batch; the null pair's LN at the smallest − LN at the largest, at the seeds and at their reruns."""
    rows, nulls = [], set()
    for norm in norms:
        for pl, (small, big) in sizes(arms_, norm).items():
            for size, b in (("smallest", small), ("largest", big)):
                bn = _by_unit(t, part="lines", placement=pl, batch=b, norm=norm)
                ln = _by_unit(t, part="lines", placement=pl, batch=b, norm="layer")
                rows += [
                    {
                        "placement": pl,
                        "pair": f"{norm}-ln",
                        "size": size,
                        "batch": b,
                        "unit": u,
                        "diff": d,
                        "learned": ok,
                    }
                    for u, (d, ok) in _diff(bn, ln).items()
                ]
            nulls.add((pl, small, big))
    for pl, small, big in sorted(nulls):
        for pair, src in (("ln", "lines"), ("ln-rerun", "null")):
            s, g = (
                _by_unit(t, part=src, data="lines", attn="causal", placement=pl, batch=b, norm="layer")
                for b in (small, big)
            )
            if s and g:
                rows += [
                    {"placement": pl, "pair": pair, "unit": u, "diff": d, "learned": ok}
                    for u, (d, ok) in _diff(s, g).items()
                ]
    return rows


def probe_rows(lines: list[dict]) -> pd.DataFrame:
    """One row per invariance probe of a trained line model: probe, mode, padding fraction, change."""
    rows = []
    for r in lines:
        inv, c = r["metrics"].get("invariance"), r["config"]
        if not inv:
            continue
        base = {"norm": c["norm"], "batch": c["batch"], "placement": c["placement"], "seed": c["seed"]}
        rows += [{**base, "probe": PROBES["pads"], **e} for e in inv["padding"]]
        rows += [
            {**base, "probe": PROBES["nb"], **{k: v for k, v in e.items() if k != "n_neighbours"}}
            for e in inv["neighbours"]
        ]
        for mode, e in inv["leak"].items():
            for probe, tag in ((PROBES["leak"], "same_row"), ("future leak (other rows)", "other_rows")):
                rows.append(
                    {
                        **base,
                        "probe": probe,
                        "mode": mode,
                        "frac": 0.0,
                        "abs": e[f"{tag}_abs"],
                        "rel": e[f"{tag}_rel"],
                    }
                )
    cols = ["norm", "batch", "placement", "seed", "probe", "mode", "frac", "abs", "rel"]
    return pd.DataFrame(rows, columns=cols)


def setting_of(data: str, attn: str) -> str:
    return {v: k for k, v in SETTINGS.items()}[(data, attn)]


def _stats_rows(runs: list[dict], factor: float) -> list[dict]:
    """Per BatchNorm run (and the MLP control) the late batch statistics' deviation as a log2 multiple of
    i.i.d. noise; the control's rows again raised by log2(factor)."""
    stats = []
    for r in part(runs, "lines") + part(runs, "windows") + part(runs, "encoder") + part(runs, "mlp"):
        c, m = r["config"], r["metrics"]
        if not m.get("stats"):
            continue
        dev = {f: late_multiple(m, c["steps"], col) for f, col in zip(FLUCT, ("mean", "var"))}
        stats.append(
            {
                "data": c.get("data", "mlp"),
                "attn": c.get("attn"),
                "norm": c.get("norm"),
                "placement": c.get("placement"),
                "batch": c["batch"],
                "unit": c["seed"],
                **dev,
            }
        )
        if "data" not in c:
            up = {f: None if v is None else v + math.log2(factor) for f, v in dev.items()}
            stats.append({**stats[-1], "data": f"mlp-x{factor:g}", **up})
    return stats


def observe(runs: list[dict], p: dict, readouts, factor: float) -> dict[str, pd.DataFrame]:
    """runs: one row per fixed-rate LM run (lines, windows, the masked LM, the null pair's reruns) with its
    eval-mode loss, learned and the train-mode losses; interaction: the small-batch interaction's differences
    per seed; modes: each run's validation loss in eval and in train mode; probes: per trained line model the
    largest relative change of a target's logits per probe and mode (float64); stats: per BatchNorm run (and
    the MLP control) the late batch statistics' deviation as a log2 multiple of i.i.d. noise, and the
    control's rows again raised by log2(factor) (data 'mlp-x{factor}': 'factor × more than the control' as a
    comparison with them); sweep, tuned, choices, sensitivity: the learning-rate sweep of the swept arms, read
    by `evidence.tuning`."""
    sel = set(p["selection_seeds"])
    extra = dict(
        train_mixed=lambda c, m: _ok(m, "train_mixed"),
        train_sorted=lambda c, m: _ok(m, "train_sorted"),
        pad_frac_train=lambda c, m: m.get("pad_frac_train"),
        diverged_at=lambda c, m: m.get("diverged_at"),
        init_loss=lambda c, m: m.get("init_loss"),
        unigram=lambda c, m: m.get("unigram_xent"),
        role=lambda c, m: "selection" if c["seed"] in sel else "test",
        setting=lambda c, m: setting_of(c["data"], c["attn"]),
    )
    every = [r for n in ("lines", "windows", "encoder") for r in part(runs, n)]
    swept = swept_arms(p, list(LABEL))
    sw = runs_table(every, readouts, **extra)
    sw["arm"] = [
        next((k for k, a in swept.items() if a == (st, pl, b, n)), None)
        for st, pl, b, n in zip(sw.setting, sw.placement, sw.batch, sw.norm)
    ]
    sw = sw[sw.arm.notna()]
    scales = {f"d{d}": {"d_model": d} for d in p["scales"]}
    choices, tuned, seeds = read_sweep(sw, {k: {"arm": k} for k in swept}, scales, loss="eval_mixed")
    runs = fixed_rate(runs, p)
    lm = [r for n in ("lines", "windows", "encoder", "null") for r in part(runs, n)]
    t = runs_table(lm, readouts, **extra)
    base = t[t["part"] != "null"]
    keys = ["part", "data", "attn", "setting", "placement", "batch", "norm", "unit", "learned"]
    modes = pd.concat(
        [
            base[keys].assign(mode="eval", loss=base["eval_mixed"]),
            base[keys].assign(mode="train", loss=base["train_mixed"]),
        ],
        ignore_index=True,
    )
    df = probe_rows(part(runs, "lines"))
    probes = []
    for (norm, b, pl, s), g in df.groupby(["norm", "batch", "placement", "seed"], sort=False):
        row = {"norm": norm, "batch": b, "placement": pl, "unit": s}
        for k, probe in PROBES.items():
            for mode in ("train", "eval"):
                row[f"{k}_{mode}"] = float(g[(g.probe == probe) & (g["mode"] == mode)]["rel"].max())
        probes.append(row)
    stats = _stats_rows(runs, factor)
    line_arms = arms(p, "line_arms", list(LABEL))
    return {
        "runs": t,
        "interaction": pd.DataFrame(_interaction(t, line_arms, ("batch_causal", "batch_masked"))),
        "modes": modes,
        "probes": pd.DataFrame(probes),
        "stats": pd.DataFrame(stats),
        "sweep": sw,
        "tuned": tuned,
        "choices": choices,
        "sensitivity": seeds,
    }


def probe_maxima(df: pd.DataFrame) -> dict:
    """The largest relative changes the summary quotes (NaN where no model has the norm)."""

    def mx(probes, modes, norms):
        s = df[df.probe.isin(probes) & df["mode"].isin(modes) & df.norm.isin(norms)]["rel"]
        return float(s.max()) if len(s) else math.nan

    both, leak = (PROBES["pads"], PROBES["nb"]), (PROBES["leak"],)
    return {
        "ln_max_rel": mx(both, ("train", "eval"), ("layer",)),
        "bn_counted_pads_rel": mx((PROBES["pads"],), ("train",), ("batch",)),
        "bn_masked_neighbours_rel": mx((PROBES["nb"],), ("train",), ("batch_masked",)),
        "leak_bn_train_rel": mx(leak, ("train",), ("batch", "batch_masked")),
    }


def headline(result, decl) -> str:
    """The tuned comparisons (a per width, b per width), each arm at its own best rate."""

    def part_(sub, what):
        cs = result.of(sub)
        lab = [c.label for c in decl.sub(sub).cells]
        return f"{what}: " + ", ".join(
            f"{lb} {c.short()}" + ("" if c.excluded else f" ({c.decision})") for lb, c in zip(lab, cs)
        )

    return (
        "Each norm at its own best rate — "
        + part_("a", "BN pads counted − BN pads masked (causal LM, lines)")
        + "; "
        + part_("b", "BN − LN (masked LM, fixed windows)")
        + " nats/char"
    )


def summary(t: dict, fl: pd.DataFrame, inv: dict, p: dict, key: str) -> str:
    """The key numbers, mean eval-mode losses on lines at the first placement, and the mechanisms."""
    pl, big, q = p["placements"][0], max(p["batches"]), quality_frame(t["runs"])
    means = q[(q.placement == pl) & (q.setting == "lines")].groupby(["batch", "norm"])["eval_mixed"].mean()
    mtxt = "; ".join(
        f"batch {b}: "
        + ", ".join(f"{LABEL[n]} {means[(b, n)]:.3f}" for n in p["norms"] if (b, n) in means.index)
        for b in p["batches"]
    )
    mult = dict(zip(fl["setting"], fl["mean_x_iid"]))
    cm, mm = (
        mult.get(f"LM, padded lines, {LABEL[n]} (batch {big})", math.nan) for n in ("batch", "batch_masked")
    )
    ch = t["choices"]
    rates = (
        "; ".join(f"{a} ({s}): {r:g}" for a, s, r in zip(ch.arm, ch.scale, ch.chosen_lr)) if len(ch) else ""
    )
    return (
        f"{key}. Chosen rates: {rates}. At one rate ({p['lr']:g}), eval-mode validation loss ({pl}-norm, "
        f"{p['steps']} steps, {len(p['seeds'])} seeds) — {mtxt}. Mechanisms: pads change a token's "
        f"train-mode output (relative {inv['bn_counted_pads_rel']:.1e}) while LN is invariant "
        f"({inv['ln_max_rel']:.1e} in float64); batch means deviate {cm:.2f}× i.i.d. noise with pads "
        f"counted, {mm:.2f}× masked; BN in train mode leaks later tokens into earlier outputs "
        f"({inv['leak_bn_train_rel']:.1e}), which BN with causal statistics and the masked LM remove."
    )


def write_sweep(t: dict, out) -> None:
    curves = width_scales(curve_table(t["sweep"], ["arm", "d_model"], loss="eval_mixed"))
    words = SweepWords(arm="swept arm", per="width", reads="eval-mode validation loss (nats/char)")
    write_sweep_tables(out, t["choices"], curves, words)


@drawing
def plot_sweep(t: dict, p: dict, out) -> None:
    """The claim's main figure: eval-mode loss against peak learning rate, one panel per swept setting and
    width, one line per norm, each arm's chosen rate on the fresh seeds marked."""
    from tfclaims.plotting import subplots

    sw = t["sweep"]
    if sw.empty:
        return
    curves = curve_table(sw, ["arm", "d_model"], loss="eval_mixed")
    panels = sorted({(st, d) for st, d in zip(sw.setting, sw.d_model)}, key=lambda x: (x[0] != "lines", x[1]))
    fig, axes = subplots(len(panels), width=4.4, height=3.6)
    what = {"lines": "causal LM, padded lines", "enc-windows": "masked LM, fixed windows"}
    for ax, (st, d) in zip(axes, panels):
        here = sw[(sw.setting == st) & (sw.d_model == d)]
        labels = {a: norm_label(st, n) for a, n in zip(here.arm, here.norm)}
        tuned = t["tuned"][t["tuned"].scale == f"d{d}"] if len(t["tuned"]) else t["tuned"]
        lr_sweep(
            ax,
            curves[(curves.d_model == d) & curves.arm.isin(labels)],
            tuned,
            labels,
            unigram=here.unigram.iloc[0],
            loss="eval_mixed",
        )
        ax.set_ylabel("eval-mode validation loss (nats/char)")
        ax.set_title(f"{what.get(st, st)}, d = {d}", fontsize=9)
        ax.legend(fontsize=5.5, loc="best")
    out.figure(
        "lr-sweep",
        fig,
        sweep_caption(
            p,
            f"Eval-mode validation loss against peak learning rate ({p['steps']} steps)",
            per="setting and width",
            each="norm",
            note=": the tuned comparisons (a: left, b: the masked LM's panels)",
        ),
    )


def caveat_facts(p: dict, null_offset: int) -> dict:
    def widths(setting: str) -> str:
        ds = p["scales"] if setting in p["scale_settings"] else p["scales"][:1]
        return " and ".join(f"d = {d}" for d in ds)

    return {
        "enc_widths": widths("enc-windows"),
        "line_widths": widths("lines"),
        "null_offset": null_offset,
        "second_width": ""
        if "lines" in p["scale_settings"]
        else " A second width for the padded lines (about 25 more minutes on two cores) does not fit the "
        "default profile's budget.",
    }


# ---------------------------------------------------------------------------- tables
def quality_frame(t: pd.DataFrame) -> pd.DataFrame:
    cols = [
        "setting",
        "placement",
        "batch",
        "norm",
        "unit",
        "pad_frac_train",
        "diverged_at",
        "learned",
        "eval_mixed",
        "train_mixed",
        "train_sorted",
    ]
    q = t[t["part"] != "null"].reindex(columns=cols).rename(columns={"unit": "seed"})
    return q.sort_values(["setting", "placement", "batch", "norm", "seed"]).reset_index(drop=True)


def write_tables(runs, t: dict, result, p: dict, out) -> pd.DataFrame:
    """The claim's tables; returns the per-setting fluctuation table."""
    qdf = quality_frame(t["runs"])
    out.table("quality_runs", qdf, "Validation loss per run (nats/char)", in_report=False)
    rows = []
    for (data, pl, b, n), g in qdf[qdf.diverged_at.isna()].groupby(["setting", "placement", "batch", "norm"]):
        ce, gap = mean_ci(g.eval_mixed), mean_ci(g.eval_mixed - g.train_mixed)
        rows.append(
            {
                "setting": data,
                "placement": pl,
                "batch": b,
                "norm": norm_label(data, n),
                "pad fraction (train)": g.pad_frac_train.mean(),
                "learned": f"{int(g.learned.sum())}/{len(g)}",
                "eval-mode val": ce.mean,
                "±": ce.half_width,
                "train-mode val": g.train_mixed.mean(),
                "train-mode, sorted by length": g.train_sorted.mean(),
                "eval − train mode": gap.mean,
                "± ": gap.half_width,
            }
        )
    out.table(
        "quality",
        pd.DataFrame(rows),
        "Validation loss (nats/char), mean ± 95% CI over seeds. Eval mode: "
        f"running statistics, batches of {p['eval_batch']} lines; train mode: batch statistics at the "
        "training batch size",
    )
    out.table(
        "differences",
        comparison_table([*result.comparisons, *result.floors]),
        "Every declared comparison (b − a): eval-mode validation loss per cell (nats/char, Holm within each "
        "sub-claim), the small-batch interaction, eval vs train mode, the float64 probes against their "
        "bounds, the fluctuation (log2 multiples of i.i.d. noise, Welch); the null pairs last",
    )
    df = probe_rows(part(runs, "lines"))
    tab = (
        df.groupby(["probe", "mode", "norm"])
        .agg(max_abs=("abs", "max"), max_rel=("rel", "max"), median_rel=("rel", "median"))
        .reset_index()
    )
    tab["norm"] = tab["norm"].map(LABEL)
    out.table(
        "invariance", tab, "Change of the same tokens' logits across batch compositions", in_report=False
    )
    wide = tab.pivot_table(index=["probe", "mode"], columns="norm", values="max_rel").reset_index()
    wide.columns.name = None
    out.table(
        "invariance_summary",
        wide,
        "Largest relative change of the same tokens' logits across batch "
        "compositions (float64, trained models, max over runs; 0 = bit-identical)",
        floatfmt=".1e",
    )
    sf = stat_frame(runs)
    late = sf[sf.late] if len(sf) else sf
    cols = ["n", "mean_dev", "var_dev", "mean_x", "var_x"]
    per = late.groupby(["setting", "seed"])[cols].mean().reset_index()
    fl = per.groupby("setting")[cols].mean()
    fl = fl.rename(columns={"n": "positions", "mean_x": "mean_x_iid", "var_x": "var_x_iid"})
    fl["seeds"] = per.groupby("setting")["seed"].count()
    fl = fl.reset_index()
    out.table(
        "fluctuation",
        fl,
        "Batch statistics vs running statistics, second half of training, mean over "
        "layers and seeds: deviation in running-sd units, and as a multiple of i.i.d. sampling noise (×1 = "
        "what independent samples would give)",
    )
    return fl


# ---------------------------------------------------------------------------- figures
def stat_frame(runs) -> pd.DataFrame:
    """One row per (run, BN layer, recorded step): deviations and their multiples of i.i.d. sampling noise."""
    rows = []
    for r in runs:
        c, m, kind = r["config"], r["metrics"], r["config"].get("part")
        if "stats" not in m or kind == "null" or (kind == "lines" and not c["norm"].startswith("batch")):
            continue
        name = LABEL.get(c.get("norm"), "")
        where = "fixed windows" if c.get("data") == "windows" else "padded lines"
        model = "masked LM" if c.get("attn") == "bidirectional" else "LM"
        setting = (
            f"MLP, synthetic (batch {c['batch']})"
            if kind == "mlp"
            else f"{model}, {where}, {name} (batch {c['batch']})"
        )
        for layer, d in m["stats"].items():
            for s, md, vd, n in zip(d["step"], d["mean_dev"], d["var_dev"], d["n"]):
                rows.append(
                    {
                        "setting": setting,
                        "seed": c["seed"],
                        "layer": layer,
                        "step": s,
                        "late": s >= c["steps"] // 2,
                        "n": n,
                        "mean_dev": md,
                        "var_dev": vd,
                        "mean_x": md * math.sqrt(n),
                        "var_x": vd * math.sqrt(n / 2),
                    }
                )
    return pd.DataFrame(rows)


@drawing
def plot_invariance(runs, p, out):
    from tfclaims.plotting import subplots

    lm = part(runs, "lines")
    fig, axes = subplots(2, width=4.8, height=3.9)
    floor, big, pl = 1e-18, max(p["batches"]), p["placements"][0]  # exact zeros are drawn at the floor
    marker = {"layer": "o", "batch": "s", "batch_masked": "^", "batch_causal": "v", "power": "D"}
    for ax, mode in zip(axes, ("train", "eval")):
        for n in p["norms"]:
            rs = [
                r["metrics"]["invariance"]
                for r in lm
                if r["metrics"].get("invariance")
                and (r["config"]["norm"], r["config"]["batch"], r["config"]["placement"]) == (n, big, pl)
            ]
            if not rs:
                continue
            fr = [e["frac"] for e in rs[0]["padding"] if e["mode"] == mode]
            logv = np.log10([[max(e["rel"], floor) for e in iv["padding"] if e["mode"] == mode] for iv in rs])
            cis = [mean_ci(logv[:, j]) for j in range(logv.shape[1])]
            err = [[10**c.mean - 10**c.lo for c in cis], [10**c.hi - 10**c.mean for c in cis]]
            ax.errorbar(
                fr,
                [10**c.mean for c in cis],
                yerr=err,
                marker=marker[n],
                ms=9 if n == "layer" else 5,
                mfc="none" if n == "layer" else COLOR[n],
                color=COLOR[n],
                capsize=2,
                label=f"{LABEL[n]}: pads added",
            )
            nb = [
                (e["frac"], max(e["rel"], floor)) for iv in rs for e in iv["neighbours"] if e["mode"] == mode
            ]
            ax.scatter(
                [a for a, _ in nb],
                [b for _, b in nb],
                s=14,
                marker="x",
                color=COLOR[n],
                alpha=0.7,
                label=f"{LABEL[n]}: other neighbours",
            )
        ax.set_yscale("log")
        ax.set_ylim(floor / 10, 30)
        ax.axhline(1e-15, color="gray", lw=0.6, ls=":")
        tr = ax.get_yaxis_transform()
        ax.text(0.01, 1.6e-15, "float64 rounding", fontsize=7, color="gray", transform=tr)
        ax.text(0.01, floor * 2.5, "exactly 0", fontsize=7, color="gray", transform=tr)
        ax.set(
            xlabel="padding fraction of the batch",
            ylabel="max relative change of a token's logits",
            title=f"{mode} mode ({'batch' if mode == 'train' else 'running'} statistics)",
        )
    handles, labels = axes[0].get_legend_handles_labels()
    axes[1].legend(
        handles, labels, loc="upper right", fontsize=6.5
    )  # eval mode sits at the floor: room for it
    out.figure(
        "invariance",
        fig,
        f"The same {p['inv_K']} validation lines (first {p['inv_T0']} characters) in "
        "batches with pads added (geometric mean and 95% CI over the seeds' trained "
        f"{pl}-norm models at batch {big}) or next to random other lines (crosses): largest relative "
        "change of their logits against the same lines batched alone, in float64, in train mode (left) and "
        "eval mode (right). Exact zeros are drawn at the bottom; the dotted line marks float64 rounding.",
    )


@drawing
def plot_fluctuation(runs, p, out):
    from tfclaims.plotting import band, subplots

    df = stat_frame(runs)
    if df.empty:
        return
    fig, axes = subplots(2, width=4.8, height=3.6)
    for ax, col, name in ((axes[0], "mean_x", "mean"), (axes[1], "var_x", "variance")):
        for i, (setting, g) in enumerate(df.groupby("setting")):
            per = np.log10(g.groupby(["seed", "step"])[col].mean().unstack("step"))  # seeds × steps
            cis = [mean_ci(per[s].dropna()) for s in per.columns]
            ls = "--" if setting.startswith("MLP") else ":" if "windows" in setting else "-"
            band(
                ax,
                list(per.columns),
                [10**c.mean for c in cis],
                [10**c.lo for c in cis],
                [10**c.hi for c in cis],
                label=setting,
                color=f"C{i}",
                marker=None,
                ls=ls,
            )
        ax.axhline(1, color="k", lw=0.7, ls=":")
        ax.set_yscale("log")
        ax.set(
            xlabel="training step",
            ylabel=f"batch − running {name}, × i.i.d. noise",
            title=f"Batch {name} vs running {name} (mean over BN layers)",
        )
    axes[0].legend(fontsize=6)
    out.figure(
        "fluctuation",
        fig,
        "Distance of each BatchNorm's batch statistics from its running statistics "
        "during training, as a multiple of what i.i.d. sampling of the same number of positions would give "
        "(1 = dotted line): mean (left) and variance (right), averaged over layers, geometric mean and 95% "
        f"band over {len(p['seeds'])} seeds. The LM on padded lines is compared with the same LM on "
        "fixed-length windows and an MLP on synthetic fixed-size inputs.",
    )


@drawing
def plot_quality(runs, t: dict, p, out):
    from tfclaims.plotting import subplots

    qdf = quality_frame(t["runs"])
    ok, pls, norms = qdf[qdf.diverged_at.isna() & (qdf.setting == "lines")], p["placements"], p["norms"]
    fig, axes = subplots(2 * len(pls), width=4.6, height=3.6)
    width = 0.8 / len(norms)
    for k, pl in enumerate(pls):
        a, b, labelled = axes[2 * k], axes[2 * k + 1], set()
        for i, n in enumerate(norms):
            for j, bs in enumerate(p["batches"]):
                g = ok[(ok.placement == pl) & (ok.norm == n) & (ok.batch == bs)]
                if g.empty:
                    continue
                x = j + (i - (len(norms) - 1) / 2) * width
                ce, gap = mean_ci(g.eval_mixed), mean_ci(g.eval_mixed - g.train_mixed)
                lab = None if n in labelled else LABEL[n]
                labelled.add(n)
                a.errorbar(x, ce.mean, yerr=ce.half_width, fmt="o", color=COLOR[n], capsize=3, label=lab)
                a.scatter([x] * len(g), g.eval_mixed, s=8, color=COLOR[n], alpha=0.4)
                a.scatter(x, mean_ci(g.train_mixed).mean, marker="_", s=80, color=COLOR[n])
                b.bar(
                    x, gap.mean, width=width * 0.9, color=COLOR[n], yerr=gap.half_width, capsize=2, label=lab
                )
        present = [
            j for j, bs in enumerate(p["batches"]) if not ok[(ok.placement == pl) & (ok.batch == bs)].empty
        ]
        for ax in (a, b):  # ticks only where this placement has arms (none where every run diverged)
            ax.set_xticks(present, [f"batch {p['batches'][j]} lines" for j in present])
            if present:
                ax.set_xlim(min(present) - 0.6, max(present) + 0.6)
        a.set(
            ylabel="validation loss (nats/char)",
            title=f"Eval-mode loss, {pl}-norm (dots: seeds; dash: train mode)",
        )
        a.legend(fontsize=7)
        b.axhline(0, color="k", lw=0.7)
        b.set(ylabel="eval-mode − train-mode loss (nats/char)", title="Train/inference gap")
    out.figure(
        "quality",
        fig,
        "Validation loss per norm and batch size (left): eval mode (running statistics) "
        f"mean with 95% CI over {len(p['seeds'])} seeds, seeds as dots, train-mode loss (batch statistics at "
        "the training batch size) as a dash; right: the gap eval − train mode.",
    )
    _plot_training(runs, p, out)


@drawing
def _plot_training(runs, p: dict, out) -> None:
    """Training loss curves on padded lines, per norm and batch size (the first placement)."""
    from tfclaims.plotting import band, subplots

    pls, norms = p["placements"], p["norms"]
    lines = part(runs, "lines")
    fig, axes = subplots(len(p["batches"]), width=4.6, height=3.4)
    for ax, bs in zip(axes, p["batches"]):
        for n in norms:
            rs = [
                r["metrics"]["train_loss"]
                for r in lines
                if r["metrics"]["diverged_at"] is None
                and (r["config"]["norm"], r["config"]["batch"], r["config"]["placement"]) == (n, bs, pls[0])
            ]
            if not rs:
                continue
            k = max(1, len(rs[0]) // 20)  # moving average over ~5% of training
            curves = np.array([np.convolve(tl, np.ones(k) / k, mode="valid") for tl in rs])
            x = (np.arange(curves.shape[1]) + k - 1) * max(1, p["steps"] // 100)
            cis = [mean_ci(curves[:, j]) for j in range(curves.shape[1])]
            band(
                ax,
                x,
                [c.mean for c in cis],
                [c.lo for c in cis],
                [c.hi for c in cis],
                label=LABEL[n],
                color=COLOR[n],
                marker=None,
            )
        ax.set(
            xlabel="training step",
            ylabel="training loss (nats/char, moving average)",
            title=f"Training loss, batch {bs} lines ({pls[0]}-norm)",
        )
        lo, hi = ax.get_ylim()
        ax.set_ylim(max(lo, 1.5), min(hi, YCUT))  # a single seed's loss spike would flatten every other curve
        ax.legend(fontsize=7)
    out.figure(
        "training",
        fig,
        "Training loss on padded lines (train mode, batch statistics), moving average, "
        f"mean and 95% band over {len(p['seeds'])} seeds, per norm and batch size; the axis stops at "
        f"{YCUT:g} nats/char, so a loss spike of one seed runs off the top.",
    )
