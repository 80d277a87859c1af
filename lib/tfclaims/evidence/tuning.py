"""Learning-rate sweeps per arm, read as Wortsman et al. (2023) read them: each arm's rate is chosen on
selection seeds and the arms are compared at their chosen rates on fresh seeds (choosing and testing on the
same seeds favours the noisiest arm); learning-rate sensitivity summarises a whole curve.

A failed run (diverged, or ending worse than at initialisation) counts at the loss at initialisation, in the
choice and in the sensitivity alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from .decisions import EvidenceError
from .tables import select


@dataclass(frozen=True)
class Sweep:
    """A learning-rate sweep, declared before running.

    rates: the first scale's rates, ×2 apart; selection: the seeds that choose each arm's rate; fresh: the
    seeds that compare the arms at their chosen rates; factors: a later scale sweeps the arm's first-scale
    choice times these (fewer rates, centred where the optimum at 4× the parameters is expected: ×1 to ×½);
    extend: while an arm's choice is the highest (lowest) rate it swept, the next rate ×2 (÷2) joins its
    sweep, at most this many times, so that a choice sits inside the sweep rather than at its end."""

    rates: tuple[float, ...]
    selection: tuple[int, ...]
    fresh: tuple[int, ...]
    factors: tuple[float, ...] = (0.25, 0.5, 1.0)
    extend: int = 0

    def __post_init__(self):
        increasing = all(a < b for a, b in zip(self.rates, self.rates[1:]))
        if len(self.rates) < 2 or any(r <= 0 for r in self.rates) or not increasing:
            raise EvidenceError(f"Sweep: give at least two increasing positive rates, got {self.rates}")
        if self.extend < 0:
            raise EvidenceError(f"Sweep: extend must be 0 or more, got {self.extend}")
        if not self.selection or not self.fresh or set(self.selection) & set(self.fresh):
            raise EvidenceError(
                f"Sweep: selection seeds {self.selection} and fresh seeds {self.fresh} must be given and "
                f"disjoint"
            )

    def rule(self, chosen_by: str = "final loss") -> str:
        """The sweep's part of a tuned sub-claim's rule text, from its own settings: what a rate is chosen by
        (the lowest mean of it). What an equivalent comparison decides (a positive control or none) is the
        sub-claim's own declaration, rendered beside this by `evidence.rules`."""
        wide = f"widens it by one ×2 step, at most {self.extend} times" if self.extend else "is kept"
        return (
            f"Each arm's rate is chosen on the selection seeds (lowest mean {chosen_by}, a failed run "
            f"counted at the loss at init; a choice at an end of the sweep {wide}) and the arms are compared "
            "on the fresh seeds; a later scale, where there is one, sweeps the first scale's choice "
            + ", ".join(f"×{f:g}" for f in self.factors)
            + "."
        )

    @property
    def decades(self) -> float:
        return math.log10(self.rates[-1] / self.rates[0])

    def later(self, chosen: float) -> tuple[float, ...]:
        """A later scale's rates around the first scale's choice (rounded to 6 significant digits)."""
        return tuple(_round(chosen * f) for f in self.factors)

    def widened(self, rates: Sequence[float], chosen: float) -> list[float] | None:
        """The rates with one more step beyond the end the choice sits at; None if it sits inside."""
        if chosen == max(rates):
            return [*rates, _round(chosen * 2)]
        if chosen == min(rates):
            return [_round(chosen / 2), *rates]
        return None


def _round(x: float) -> float:
    return float(f"{x:.6g}")


def capped(loss: float | None, init: float) -> float:
    """A run's loss for a sweep: min(loss, init); a diverged run (None or non-finite) counts at init."""
    return init if loss is None or not math.isfinite(loss) else min(float(loss), init)


def choose(curve: Mapping[float, Sequence[float]]) -> float:
    """The rate whose mean capped loss over the selection seeds is lowest (a tie: the lower rate)."""
    if not curve:
        raise EvidenceError("choose: an empty sweep")
    return min(sorted(curve), key=lambda lr: float(np.mean(curve[lr])))


def at_an_end(curve: Mapping[float, Sequence[float]], best: float) -> bool:
    """The chosen rate sits at an end of the sweep with the loss still falling toward it (its mean strictly
    below its inward neighbour's): the best rate may lie beyond. A flat end (a tie with its neighbour) is
    not: the best region reaches inside the sweep."""
    rates = sorted(curve)
    if len(rates) < 2 or best not in (rates[0], rates[-1]):
        return False
    inward = rates[1] if best == rates[0] else rates[-2]
    return float(np.mean(curve[best])) < float(np.mean(curve[inward]))


def sensitivity(curve: np.ndarray) -> float:
    """Wortsman et al.'s learning-rate sensitivity of a (rates × seeds) array of capped losses: the mean over
    rates of the seed-mean loss, minus its best."""
    m = np.asarray(curve, float).mean(axis=-1)
    return float(m.mean(axis=-1) - m.min(axis=-1))


def sensitivity_interval(curve: np.ndarray, level: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """The sensitivity of a (rates × seeds) array and a percentile bootstrap interval over seeds (seeds are
    resampled whole, so a curve keeps its shape); with one seed the interval is the point."""
    curve = np.asarray(curve, float)
    est = sensitivity(curve)
    if curve.shape[1] < 2:
        return est, est, est

    def resampled(idx: np.ndarray, axis: int = -1) -> np.ndarray:
        # idx: (resamples, seeds) -> (resamples,), reduced as `sensitivity` reduces one resample (same sums)
        m = curve[:, idx.astype(int)].mean(axis=-1)  # (rates, resamples)
        m = np.ascontiguousarray(m.T)  # (resamples, rates): each row summed as one curve's rates are
        return m.mean(axis=-1) - m.min(axis=-1)

    res = stats.bootstrap(
        (np.arange(curve.shape[1]),),
        resampled,
        n_resamples=2000,
        confidence_level=level,
        method="percentile",
        random_state=np.random.default_rng(seed),
    )
    return est, float(res.confidence_interval.low), float(res.confidence_interval.high)


# ------------------------------------------------------------------ reading a sweep from an observation table
def fixed_rate(records: list[dict], p: dict) -> list[dict]:
    """The records of a claim's fixed-rate design: at the profile's `lr` and `d_model` (a config without one
    counts as at it) and not on a selection seed; a sweep's other records are read from its own table."""
    sel = set(p["selection_seeds"])

    def fixed(c: dict) -> bool:
        at = c.get("lr", p["lr"]) == p["lr"] and c.get("d_model", p["d_model"]) == p["d_model"]
        return at and c["seed"] not in sel

    return [r for r in records if fixed(r["config"])]


def read_sweep(
    df: pd.DataFrame,
    arms: Mapping[str, Mapping],
    scales: Mapping[str, Mapping],
    *,
    loss: str = "final_val",
    init: str = "init_loss",
    rate: str = "lr",
    role: str = "role",
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """A sweep's three tables from an observation table with one row per run (arms and scales: name -> the
    fields that select them; columns: those fields, `rate`, `unit` (the seed), `role` ('selection' or 'test'),
    the loss and the loss at init).

    choices: per (arm, scale) the chosen rate, whether it sits at an end of the sweep, and the sensitivity
    with its bootstrap interval; tuned: the test rows at each arm's chosen rate, with columns `arm`, `scale`
    and `lr_at_edge` (where True the evaluator leaves the cell undecided: the arm is not at its best);
    seeds: each selection seed's own sensitivity (for paired comparisons of sensitivity)."""
    df = df.assign(capped=[capped(v, i) for v, i in zip(df[loss], df[init])])
    choices, tuned, seeds = [], [], []
    for label, scale in scales.items():
        for name, fields in arms.items():
            here = select(df, {**fields, **scale})
            sel = here[here[role] == "selection"]
            if sel.empty:
                continue
            grid = sel.pivot_table(index=rate, columns="unit", values="capped", aggfunc="first").sort_index()
            if grid.isna().any().any():
                continue  # an unfinished sweep chooses nothing
            curve = {float(lr): list(row) for lr, row in grid.iterrows()}
            best = choose(curve)
            est, lo, hi = sensitivity_interval(grid.to_numpy())
            edge = at_an_end(curve, best)
            choices.append(
                {
                    "arm": name,
                    "scale": label,
                    "chosen_lr": best,
                    "at_edge": edge,
                    "rates": len(curve),
                    "loss_at_chosen": float(np.mean(curve[best])),
                    "sensitivity": est,
                    "sensitivity_lo": lo,
                    "sensitivity_hi": hi,
                }
            )
            test = here[(here[role] == "test") & (here[rate] == best)]
            tuned.append(test.assign(arm=name, scale=label, lr_at_edge=edge))
            for u in grid.columns:
                seeds.append({"arm": name, "scale": label, "unit": u, "sensitivity": sensitivity(grid[[u]])})
    cols = ["arm", "scale", "unit", "sensitivity"]
    return (
        pd.DataFrame(choices),
        pd.concat(tuned, ignore_index=True) if tuned else df.iloc[:0].assign(arm=[], scale=[]),
        pd.DataFrame(seeds, columns=cols),
    )


def curve_table(
    df: pd.DataFrame,
    by: Sequence[str],
    *,
    loss: str = "final_val",
    init: str = "init_loss",
    rate: str = "lr",
    role: str = "role",
) -> pd.DataFrame:
    """Per group of `by` and rate, the selection seeds' capped loss: seeds, mean, min, max, and how many
    learned (where the table has a `learned` column)."""
    sel = df[df[role] == "selection"]
    sel = sel.assign(capped=[capped(v, i) for v, i in zip(sel[loss], sel[init])])
    g = sel.groupby([*by, rate])
    out = pd.DataFrame(
        {"seeds": g.size(), "mean": g.capped.mean(), "min": g.capped.min(), "max": g.capped.max()}
    )
    if "learned" in sel.columns:
        out["learned"] = g.learned.sum()
    return out.reset_index()


# The `lr_sweep` table's first columns in every tuned claim (tests/test_standard_artefacts.py)
SWEEP_COLUMNS = ("scale", "arm", "lr", "seeds", "mean", "min", "max")


def sweep_table(
    df: pd.DataFrame, arms: Mapping[str, Mapping], scales: Mapping[str, Mapping], **kw
) -> pd.DataFrame:
    """The `lr_sweep` table of a sweep that `read_sweep` reads (the same `arms` and `scales`: name -> the
    fields that select them): `curve_table` per scale, arm and rate, named as in `lr_choices`; `kw` to
    `curve_table`."""
    parts = [
        curve_table(here, [], **kw).assign(scale=label, arm=name)
        for label, scale in scales.items()
        for name, fields in arms.items()
        if len(here := select(df, {**fields, **scale}))
    ]
    if not parts:
        return pd.DataFrame(columns=SWEEP_COLUMNS)
    return _sweep_order(pd.concat(parts, ignore_index=True))


def width_scales(curves: pd.DataFrame, width: str = "d_model") -> pd.DataFrame:
    """A `curve_table` of a sweep whose scales are widths, in the `lr_sweep` schema: the width as the scale
    label `d<width>` (as `lr_choices` names it) in a column `scale`, then `arm`, the rate and its statistics,
    then any other column the table was grouped by."""
    return _sweep_order(curves.assign(scale=[f"d{w}" for w in curves[width]]).drop(columns=width))


def _sweep_order(df: pd.DataFrame) -> pd.DataFrame:
    """An `lr_sweep` table's columns in the schema's order (`SWEEP_COLUMNS`, then `learned`), then the
    rest."""
    first = [c for c in (*SWEEP_COLUMNS, "learned") if c in df.columns]
    return df[[*first, *[c for c in df.columns if c not in first]]]


def sweep_curves(runs: pd.DataFrame, arm_column: str, by: str = "scale") -> pd.DataFrame:
    """The `lr_sweep` table of a runs table (roles 'selection' and 'test'): `curve_table` per cell (`by`), arm
    and rate, with the arm in a column named `arm` whatever the claim calls it."""
    if not len(runs):
        return pd.DataFrame(columns=[by, *SWEEP_COLUMNS[1:]])
    swept = runs[runs.role.isin(["selection", "test"])]
    return curve_table(swept, [by, arm_column]).rename(columns={arm_column: "arm"})


def null_at_choice(
    runs: pd.DataFrame,
    tuned: pd.DataFrame,
    choices: pd.DataFrame,
    arm: str,
    scale: str,
    *,
    rate: str = "lr",
    role: str = "role",
) -> pd.DataFrame:
    """A tuned comparison's null pair: `arm`'s fresh runs at its chosen rate on `scale` (from `tuned`) and its
    reruns there (role 'null' in `runs`) at the same rate; empty reruns while the sweep has chosen nothing."""
    chosen = choices[(choices.arm == arm) & (choices.scale == scale)] if len(choices) else choices
    null = runs[(runs[role] == "null") & (runs.scale == scale)] if len(runs) else runs
    null = null[null[rate] == chosen.chosen_lr.iloc[0]] if len(chosen) else null.iloc[:0]
    return pd.concat([tuned[tuned.scale == scale], null], ignore_index=True)


def model_sweep_runs(
    records: list[dict],
    readouts,
    arms: Mapping[str, Mapping],
    labels: Mapping[tuple[int, int], str],
    selection,
    null_offset: int,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """A sweep over [d_model, n_layers] models, read from its run records: (runs, choices, tuned, seeds).
    runs: `tables.runs_table` with each run's readouts, role ('null' at seeds s + null_offset, 'selection'
    on a `selection` seed, else 'test'), scale label (`labels`: (d_model, n_layers) -> label), loss at init
    and the unigram level; the other three: `read_sweep` of its selection and test runs, per arm and scale."""
    from .tables import runs_table

    sel = set(selection)

    def role(c, m):
        return "null" if c["seed"] >= null_offset else "selection" if c["seed"] in sel else "test"

    t = runs_table(
        records,
        readouts,
        role=role,
        scale=lambda c, m: labels.get((c["d_model"], c["n_layers"])),
        init_loss=lambda c, m: m["val_loss"][0],
        unigram=lambda c, m: m["unigram_xent"],
    )
    scales = {v: {"d_model": k[0], "n_layers": k[1]} for k, v in labels.items()}
    return (t, *read_sweep(t[t.role.isin(["selection", "test"])] if len(t) else t, arms, scales))


@dataclass(frozen=True)
class SweepWords:
    """How a claim's sweep tables name their parts: `arm` what was swept ('arm', 'norm', 'ε'), `per` the cells
    chosen apart ('width', 'scale'), `reads` the selection readout with its unit."""

    arm: str = "arm"
    per: str = "scale"
    reads: str = "final validation loss (nats/char)"


def write_sweep_tables(out, choices: pd.DataFrame, curves: pd.DataFrame, words: SweepWords) -> None:
    """A tuned claim's standard tables: `lr_choices` (each arm's chosen rate per cell, whether it sits at an
    end of the sweep, its learning-rate sensitivity) and `lr_sweep` (the selection seeds' loss per cell, arm
    and rate: the lines of the `lr-sweep` figure; in result.json, not in the report)."""
    out.table(
        "lr_choices",
        choices,
        f"Each {words.arm}'s chosen peak learning rate per {words.per} (lowest mean {words.reads} on the "
        "selection seeds), whether it sits at an end of the sweep, and its learning-rate sensitivity "
        "(Wortsman et al.: mean excess over the best rate across the sweep) with a 95% bootstrap interval "
        "over seeds",
    )
    if len(curves):
        out.table(
            "lr_sweep",
            curves,
            f"The learning-rate sweep on the selection seeds: {words.reads} per {words.per}, {words.arm} and "
            "peak rate (seeds, mean, min, max; a run that failed counts at its loss at initialisation)",
            in_report=False,
        )
