"""Standard readouts, named once: how a run's record becomes the number a comparison reads.

Each returns a `declare.Readout` whose `fn(metrics)` reads one run; `tables.runs_table` applies them. Sweep
readouts (best-of-sweep loss, learning-rate sensitivity) summarise several runs, and achieved rates set a
measured amount per second against a measured limit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from .decisions import escape_step as _escape
from .decisions import learned as _learned
from .declare import Readout


def _ok(m: dict) -> bool:
    return m.get("diverged_at") is None


def sensitivity(unit: str = "nats", loss: str = "final loss") -> Readout:
    """Wortsman et al.'s learning-rate sensitivity of one selection seed's sweep (`tuning.read_sweep`'s seeds
    table, column `sensitivity`); `loss` names the loss the sweep chooses by."""
    return Readout(
        "sensitivity",
        "learning-rate sensitivity",
        unit,
        "lower",
        "paired",
        f"Wortsman et al.'s: over the sweep's rates, the mean excess of one selection seed's {loss} over its "
        "best, a failed run counted at the loss at init",
    )


def final_loss(
    unit: str = "nats/char", key: str = "final_val", label: str = "final validation loss"
) -> Readout:
    """The loss at the last evaluation; a run that diverged has none (it drops out of paired tests)."""
    return Readout(
        key,
        label,
        unit,
        "lower",
        "paired",
        "the held-out loss at the last step (a diverged run has none)",
        fn=lambda m: m.get(key) if _ok(m) else None,
    )


def learned(
    margin: float, key: str | Callable = "final_val", baseline: str = "unigram_xent", what: str = "final loss"
) -> Readout:
    """The learned-at-all guard: no divergence, and the loss `key` (a metric's name, or a function of the
    metrics; `what` in the rule's words) at least `margin` below the unigram level (the cross-entropy of
    predicting token frequencies alone, recorded in every run)."""
    read = key if callable(key) else (lambda m: m.get(key))
    return Readout(
        "learned",
        "learned at all",
        "",
        "higher",
        "fisher",
        f"the run did not diverge and its {what} is at least {margin:g} nats below the unigram level",
        fn=lambda m: bool(_ok(m) and _learned(read(m), m[baseline], margin)),
    )


def escape_step(margin: float, window: int, horizon: int, baseline: str = "unigram_xent") -> Readout:
    """The first step at which the trailing `window`-step mean training loss falls `margin` below the unigram
    level (None: never within the run, censored at `horizon`)."""

    def fn(m):
        tl = [math.nan if v is None else v for v in m["train_loss"]]
        return _escape(range(len(tl)), tl, m[baseline] - margin, window)

    return Readout(
        "escape",
        "escape step",
        "steps",
        "lower",
        "logrank",
        f"the first step whose trailing {window}-step mean training loss is {margin:g} nats below the "
        f"unigram level",
        horizon=horizon,
        fn=fn,
    )


def steps_to_target(target: float, horizon: int, key: str = "val_loss", steps: str = "eval_steps") -> Readout:
    """The first evaluation step whose held-out loss is at or below `target` (None: never, censored)."""

    def fn(m):
        for s, v in zip(m.get(steps, []), m.get(key, [])):
            if v is not None and math.isfinite(v) and v <= target:
                return int(s)
        return None

    return Readout(
        "steps_to_target",
        "steps to the target loss",
        "steps",
        "lower",
        "logrank",
        f"the first evaluation step whose validation loss is at or below {target:g}",
        horizon=horizon,
        fn=fn,
    )


def log_time(label: str = "log time per call") -> Readout:
    """Natural log of seconds per call in one timing round (paired over rounds: b − a is a log-ratio)."""
    return Readout(
        "log_time",
        label,
        "log s",
        "lower",
        "paired",
        "the natural log of the seconds per call in one interleaved timing round; b − a is log(t_b / t_a)",
    )


# ------------------------------------------------------------------ sweeps and rates
def best_of_sweep(losses: Mapping[float, float | None]) -> float | None:
    """The lowest finite final loss over a learning-rate sweep (lr -> loss; None or non-finite: failed)."""
    ok = [v for v in losses.values() if v is not None and math.isfinite(v)]
    return min(ok) if ok else None


def lr_sensitivity(losses: Mapping[float, float | None], init_loss: float) -> float:
    """Wortsman et al. (2023)'s learning-rate sensitivity: the mean over the sweep of the excess over the best
    loss, a failed run (diverged, or worse than at initialisation) counted at the loss at initialisation."""
    vals = [init_loss if v is None or not math.isfinite(v) else min(v, init_loss) for v in losses.values()]
    if not vals:
        return math.nan
    return float(np.mean(vals) - min(vals))


def achieved(amount: float, seconds: float) -> float:
    """Bytes (or FLOPs) per second."""
    return amount / seconds if seconds > 0 else math.nan


def of_limit(rate: float, limit: float | None) -> float:
    """An achieved rate as a fraction of a measured limit (copy bandwidth, GEMM peak)."""
    return rate / limit if limit else math.nan
