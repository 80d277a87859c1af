"""Tables the analyses write: shaping only, never a run's numbers (analysis-only, outside every code hash)."""

from __future__ import annotations

import pandas as pd

# The columns of a comparisons table, in order: what was compared, the effect and its interval, the
# equivalence test, the power, whether each arm learned, and the decision.
COMPARISON_COLUMNS = ("id", "metric", "arm_a", "arm_b", "n", "mean_a", "mean_b", "diff", "ci_low", "ci_high", "p",
                      "p_equiv", "mde", "noise", "learned_a", "learned_b", "decision")  # fmt: skip


def comparison_table(cmps, cols=COMPARISON_COLUMNS) -> pd.DataFrame:
    """One row per comparison (`decisions.Comparison`), the fields `cols` of its `as_dict()`, in that order."""
    return pd.DataFrame([{k: c.as_dict()[k] for k in cols} for c in cmps], columns=list(cols))
