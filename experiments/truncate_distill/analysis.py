"""truncate_distill's readouts, observation tables, figures and summary.

Every student is read against the teacher of its own seed: its share of the teacher's gain over the unigram
level, (unigram − student) / (unigram − teacher), is 1 where it matches the teacher and 0 where it predicts no
better than character frequencies.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.declare import Readout
from tfclaims.evidence.plots import drawing
from tfclaims.evidence.tables import runs_table, timing_rows
from tfclaims.evidence.tuning import null_at_choice, read_sweep, sweep_curves

from .grid import AA, ARM_LABELS, ARMS, depths, scale_label, student_records


def _share(m: dict) -> float | None:
    """(unigram − final) / (unigram − teacher's final); None if either is missing or the teacher did not
    beat the unigram level."""
    u, s, t = m["unigram_xent"], m.get("final_val"), m.get("teacher_final")
    if s is None or t is None or m.get("diverged_at") is not None or not u > t:
        return None
    return (u - s) / (u - t)


SHARE = Readout(
    "share",
    "share of the teacher's gain over the unigram level",
    better="higher",
    fmt=".3f",
    definition="(unigram − student's final loss) / (unigram − teacher's final loss), the teacher "
    "of the same seed",
    fn=_share,
)
COUNT_ERR = Readout(
    "count_error",
    "built model − closed form",
    "parameters",
    fmt="+.0f",
    definition="parameters of the model built on the meta device less the closed form",
)
PARAM_RATIO = Readout(
    "param_ratio",
    "parameters over the teacher's",
    better="lower",
    fmt=".3f",
    definition="the closed-form count of the student over the teacher's at the same size",
)
EXTRA = ("teacher", "cut")  # rows added to the tuned table: the teacher, and the cut model before fine-tuning


def _extra_rows(students: pd.DataFrame, tuned: pd.DataFrame, readouts, unigram: float) -> pd.DataFrame:
    """Per fresh seed and depth: the teacher (its final loss) and the cut model before fine-tuning (the loss
    at step 0 of a cut student), each with the readouts, as rows of the tuned table."""
    rows = []
    cut = students[(students.role == "test") & (students.student == "plain")]
    for _, r in cut.drop_duplicates(["unit", "keep"]).iterrows():
        label = tuned.scale[tuned.keep == r.keep].iloc[0] if (tuned.keep == r.keep).any() else None
        for name, loss in (("teacher", r.teacher_final), ("cut", r.init_loss)):
            m = {
                "final_val": loss,
                "unigram_xent": unigram,
                "teacher_final": r.teacher_final,
                "diverged_at": None,
            }
            rows.append(
                {
                    "student": name,
                    "arm": name,
                    "keep": r.keep,
                    "scale": label,
                    "unit": r.unit,
                    "role": "test",
                    **{rd.column: rd.fn(m) for rd in readouts},
                }
            )
    return pd.DataFrame(rows)


def observe(runs: list[dict], p: dict, readouts, null_offset: int, aa: str) -> dict[str, pd.DataFrame]:
    """counts: per size and model, parameters built and in closed form, and the ratios to the teacher;
    timing: per size, model and round, the log seconds of a forward; runs: one row per student (role
    selection, test, or null: the null pair's reruns at s + null_offset); tuned, choices: each arm's sweep
    per depth read by `evidence.tuning`, with the teacher and the cut model before fine-tuning added as rows
    of the tuned table (arms 'teacher' and 'cut'); first: the null pair."""
    rows = part(runs, "counts")[0]["metrics"]["rows"] if part(runs, "counts") else []
    counts = pd.DataFrame(rows)
    if len(counts):
        teacher = counts[counts.model == "teacher"].set_index("size")
        counts = counts.assign(
            unit=0,
            count_error=counts.params - counts.closed,
            param_ratio=counts.closed / counts["size"].map(teacher.closed),
            flop_ratio=counts.flops / counts["size"].map(teacher.flops),
        )
    timing = [
        row
        for rec in part(runs, "timing")
        for r in rec["metrics"]["rows"]
        for k, times in r["times"].items()
        for row in timing_rows([t / r["tokens"] for t in times], None, size=r["size"], model=k)
    ]
    sel, L = set(p["selection_seeds"]), p["n_layers"]

    def role(c, m):
        return "null" if c["rerun"] else "selection" if c["seed"] in sel else "test"

    t = runs_table(
        student_records(runs),
        readouts,
        role=role,
        scale=lambda c, m: scale_label(c["keep"], L),
        init_loss=lambda c, m: m["init_loss"],
        unigram=lambda c, m: m["unigram_xent"],
        teacher_final=lambda c, m: m["teacher_final"],
    )
    if t.empty:
        empty = pd.DataFrame()
        return {
            "counts": counts,
            "timing": pd.DataFrame(timing),
            "runs": t,
            "tuned": empty,
            "choices": empty,
            "first": empty,
        }
    labels = {scale_label(k, L): {"keep": k} for k in depths(p)}
    choices, tuned, _ = read_sweep(t[t.role.isin(["selection", "test"])], ARMS, labels)
    if len(tuned):
        tuned = pd.concat(
            [tuned, _extra_rows(t, tuned, readouts, float(t.unigram.iloc[0]))], ignore_index=True
        )
    first = scale_label(depths(p)[0], L)
    return {
        "counts": counts,
        "timing": pd.DataFrame(timing),
        "runs": t,
        "tuned": tuned,
        "choices": choices,
        "first": null_at_choice(t, tuned, choices, "plain", first),
    }


def counts_summary(counts: pd.DataFrame) -> pd.DataFrame:
    if counts.empty:
        return counts
    return counts[["size", "model", "depth", "params", "closed", "param_ratio", "flops", "flop_ratio"]]


def timing_summary(timing: pd.DataFrame) -> pd.DataFrame:
    """Median seconds per token per size and model, and each model's speed-up over the teacher."""
    if timing.empty:
        return timing
    med = timing.groupby(["size", "model"]).seconds.median().unstack("model")
    speed = med.drop(columns="teacher").rdiv(med["teacher"], axis=0).add_prefix("teacher / ")
    return pd.concat([med, speed], axis=1).reset_index()


def students_summary(tuned: pd.DataFrame) -> pd.DataFrame:
    """Per depth and arm (the teacher and the cut model before fine-tuning included): mean final loss and
    share of the teacher's gain over the fresh seeds, with their ranges."""
    if tuned.empty:
        return tuned
    g = tuned.groupby(["scale", "arm"])
    out = pd.DataFrame(
        {
            "seeds": g.final_val.count(),
            "final_val": g.final_val.mean(),
            "min": g.final_val.min(),
            "max": g.final_val.max(),
            "share": g.share.mean(),
            "share_min": g.share.min(),
            "lr": g.lr.first() if "lr" in tuned else None,
        }
    )
    return out.reset_index()


def plot_sweep(t: dict, p: dict, out) -> None:
    """Per depth, each student arm's learning-rate sweep and its chosen rate on the fresh seeds."""
    from tfclaims.evidence.plots import sweep_figure

    L, ks, runs = p["n_layers"], depths(p), t["runs"]
    if not len(runs):
        return
    curves = sweep_curves(runs, "student")
    sweep_figure(
        out,
        p,
        curves,
        t["tuned"],
        [scale_label(k, L) for k in ks],
        ARM_LABELS,
        titles=[f"Students of {k} of {L} layers" for k in ks],
        measured="Final validation loss against peak learning rate",
        per="depth",
        each="student arm",
        unigram=runs.unigram.iloc[0],
        size=(4.2, 3.4),
    )


@drawing
def plot(t: dict, p: dict, out) -> None:
    """Every model's final loss on the fresh seeds per depth, then the forward time of teacher and students
    per size."""
    from tfclaims.plotting import subplots

    L, ks = p["n_layers"], depths(p)
    fig, axes = subplots(2, width=4.2, height=3.4)
    tuned = t["tuned"]
    ax = axes[0]
    if len(tuned):
        teacher = tuned[tuned.arm == "teacher"].set_index(["scale", "unit"]).final_val
        for j, (arm, label) in enumerate(ARM_LABELS.items()):
            for i, k in enumerate(ks):
                here = tuned[(tuned.arm == arm) & (tuned.scale == scale_label(k, L))]
                v = (here.set_index(["scale", "unit"]).final_val - teacher).dropna()
                x = i + (j - 1) * 0.2
                if len(v):
                    ax.plot([x] * len(v), v, ".", color=f"C{j}", alpha=0.5)
                    ax.plot(
                        [x], [v.mean()], "o", color=f"C{j}", mec="k", mew=0.5, label=label if i == 0 else None
                    )
        ax.axhline(0, color="0.5", ls=":", lw=1, label="the teacher")
        ax.set_xticks(range(len(ks)), [f"k = {k} of {L}" for k in ks])
        ax.set_ylabel("final loss − the teacher's (nats/char)")
        ax.set_title("Fresh seeds, each arm at its chosen rate")
        ax.legend(fontsize=6)
    ax = axes[-1]
    tm = t["timing"]
    if len(tm):
        med = tm.groupby(["size", "model"]).seconds
        q = med.median().unstack("model") * 1e6
        lo, hi = (med.quantile(x).unstack("model") * 1e6 for x in (0.25, 0.75))
        models = ["teacher", *sorted(m for m in q.columns if m not in ("teacher", AA))]
        xs = np.arange(len(q.index))
        w = 0.8 / len(models)
        for i, m in enumerate(models):
            ax.bar(xs - 0.4 + w * (i + 0.5), q[m], w, yerr=[q[m] - lo[m], hi[m] - q[m]], label=m)
        ax.set_xticks(xs, list(q.index))
        ax.set_yscale("log")
        ax.set_ylabel("seconds per token (µs), median of rounds")
        ax.set_title("Forward in inference")
        ax.legend(fontsize=6)
    out.figure(
        "students",
        fig,
        "Left: each arm's final loss at its chosen rate less the teacher's of the same seed (dots: fresh "
        "seeds; circles: means); the cut model before fine-tuning is in the students table. Right: seconds "
        f"per token of a forward in inference (median and quartiles of {p['repeats']} interleaved rounds), "
        "teacher and students at each timed size.",
    )


def summary(t: dict) -> str:
    """The distillation effect and the share of the teacher's gain per depth, and the half-depth speed-up."""
    parts = []
    s = students_summary(t["tuned"])
    if len(s):
        m = s.set_index(["scale", "arm"])
        for scale in dict.fromkeys(s.scale):
            have = {a for sc, a in m.index if sc == scale}
            if not {"distil", "plain"} <= have:
                continue
            d = m.loc[(scale, "distil"), "final_val"] - m.loc[(scale, "plain"), "final_val"]
            sh = m.loc[(scale, "distil"), "share"]
            if math.isfinite(d):  # an arm whose fresh runs all diverged has no mean
                share = (
                    f"recovers {sh:.1%} of the teacher's gain over the unigram level"
                    if math.isfinite(sh)
                    else "has no share (the teacher did not beat the unigram level)"
                )
                parts.append(
                    f"{scale}: with − without distillation {d:+.3f} nats/char, the distilled student " + share
                )
    if not parts:
        parts.append("no student finished training (none compared)")
    ts = timing_summary(t["timing"])
    if len(ts):
        cols = [c for c in ts.columns if c.startswith("teacher / ") and "teacher" not in c[10:]]
        parts.append(
            "the teacher's forward takes "
            + ", ".join(
                f"{r[c]:.2f}× the time of the student of {c[10:]} at size {r['size']}"
                for _, r in ts.iterrows()
                for c in cols
            )
        )
    return "; ".join(parts) + "."
