"""The standard readouts (named once in evidence/readouts.py), the observation-table builders, and the
standard figures drawn from declarations, against closed forms and hand-counted cases."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from tfclaims.evidence import readouts as rd
from tfclaims.evidence.declare import Better, Declaration, SubClaim, arm, cells
from tfclaims.evidence.evaluate import evaluate
from tfclaims.evidence.tables import runs_table, timing_rows


def metrics(final=2.5, diverged=None, train=(3.4, 3.3, 3.1, 3.0, 2.9), val=(3.3, 2.9, 2.5), unigram=3.3):
    return {
        "final_val": final,
        "diverged_at": diverged,
        "train_loss": list(train),
        "val_loss": list(val),
        "eval_steps": [0, 50, 100],
        "unigram_xent": unigram,
    }


def test_final_loss_and_the_learned_guard():
    assert rd.final_loss().fn(metrics()) == 2.5
    assert rd.final_loss().fn(metrics(diverged=40)) is None  # a diverged run has no final loss
    g = rd.learned(0.1)
    assert g.fn(metrics(final=3.19)) and not g.fn(metrics(final=3.21)) and not g.fn(metrics(diverged=3))
    assert g.test == "fisher" and g.better == "higher"


def test_escape_step_and_steps_to_target():
    e = rd.escape_step(0.1, window=2, horizon=5)
    # trailing 2-step means: 3.35, 3.2, 3.05, 2.95; the first below 3.3 − 0.1 = 3.2 is at step 3 (3.05)
    assert e.fn(metrics()) == 3 and e.test == "logrank" and e.horizon == 5
    assert e.fn(metrics(train=(3.4, 3.4, 3.4))) is None  # never: censored
    t = rd.steps_to_target(2.9, horizon=100)
    assert t.fn(metrics()) == 50 and t.fn(metrics(val=(3.3, 3.0, 2.95))) is None


def test_best_of_sweep_and_wortsman_learning_rate_sensitivity():
    losses = {1e-4: 3.0, 3e-4: 2.6, 1e-3: 2.5, 3e-3: None, 1e-2: math.nan}
    assert rd.best_of_sweep(losses) == 2.5
    # failed runs count at the loss at initialisation (4.2): mean(3.0, 2.6, 2.5, 4.2, 4.2) − 2.5
    assert rd.lr_sensitivity(losses, init_loss=4.2) == pytest.approx(np.mean([3.0, 2.6, 2.5, 4.2, 4.2]) - 2.5)
    assert rd.lr_sensitivity({1e-3: 5.0}, init_loss=4.2) == 0.0  # worse than at init: capped there


def test_achieved_rates_against_a_measured_limit():
    rate = rd.achieved(2e9, 0.5)
    assert rate == 4e9 and rd.of_limit(rate, 8e9) == 0.5
    assert math.isnan(rd.achieved(1.0, 0.0)) and math.isnan(rd.of_limit(rate, None))


def test_runs_table_is_one_row_per_run_with_its_unit_and_readouts():
    recs = [
        {
            "run_id": f"r{s}",
            "config": {"arm": a, "seed": s, "grid": [1, 2]},
            "metrics": metrics(final=2.5 + s),
        }
        for a in ("x", "y")
        for s in (0, 1)
    ]
    t = runs_table(recs, (rd.final_loss(), rd.learned(0.1)), double=lambda c, m: 2 * c["seed"])
    assert list(t["unit"]) == [0, 1, 0, 1] and list(t["run_id"]) == ["r0", "r1", "r0", "r1"]
    assert "grid" not in t.columns  # lists are not fields of a row
    assert list(t["final_val"]) == [2.5, 3.5, 2.5, 3.5] and list(t["learned"]) == [True, False, True, False]
    assert list(t["double"]) == [0, 2, 0, 2]


def test_timing_rows_pair_rounds_by_their_index():
    rows = timing_rows([0.002, 0.004], variant="mqa")
    assert [r["unit"] for r in rows] == [0, 1] and rows[1]["log_time"] == pytest.approx(math.log(0.004))
    assert rows[0]["variant"] == "mqa"


def test_standard_figures_draw_the_declared_arms_and_cells():
    from tfclaims.evidence.plots import arm_bands, effect_heatmap, loglog
    from tfclaims.plotting import plt

    recs, rows = [], []
    for depth in (2, 4):
        for a, shift in (("pre", 0.0), ("post", 0.3)):
            for s in range(3):
                rid = f"{a}{depth}{s}"
                m = {"val_loss": [3.0, 2.5 + shift + 0.01 * s], "eval_steps": [0, 100], "diverged_at": None}
                recs.append({"run_id": rid, "config": {}, "metrics": m})
                rows.append(
                    {
                        "arm": a,
                        "depth": depth,
                        "lr": 1e-3,
                        "unit": s,
                        "run_id": rid,
                        "final_val": m["val_loss"][-1],
                    }
                )
    t = pd.DataFrame(rows)
    sc = SubClaim(
        "x",
        "pre is better",
        Better("a"),
        (rd.final_loss(),),
        a=arm("pre", arm="pre"),
        b=arm("post", arm="post"),
        cells=cells("L{depth}", depth=[2, 4], lr=[1e-3]),
    )
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3)
    arm_bands(ax1, recs, t, sc)
    assert len(ax1.get_lines()) == 4  # two cells × two arms
    assert [ln.get_ydata()[-1] for ln in ax1.get_lines()] == pytest.approx([2.51, 2.81, 2.51, 2.81])
    result = evaluate(Declaration((sc,)), {"runs": t})
    im = effect_heatmap(ax2, result, sc, row="depth", col="lr")
    assert im.get_array().shape == (2, 1) and float(im.get_array()[0, 0]) == pytest.approx(0.3)
    x = np.array([64, 128, 256, 512.0])
    fit = loglog(ax3, x, 3 * x**2, label="explicit")
    assert fit.slope == pytest.approx(2.0) and "exponent 2.00" in ax3.get_lines()[-1].get_label()
    plt.close(fig)
