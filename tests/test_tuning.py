"""Learning-rate sweeps: the choice on selection seeds, Wortsman et al.'s sensitivity against closed forms,
the staged grid (selection, then fresh seeds at the choice, then the next scale), and the runner growing
it."""

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from tfclaims.evidence.decisions import EvidenceError
from tfclaims.evidence.tuning import (
    Sweep,
    capped,
    choose,
    read_sweep,
    sensitivity,
    sensitivity_interval,
)
from tfclaims.grids.sweep import sweep_grid
from tfclaims.harness.experiment import Experiment, Part, Verdict
from tfclaims.harness.provenance import grid_run_ids
from tfclaims.harness.runner import run_experiment, stale_results

SWEEP = Sweep((1e-3, 2e-3, 4e-3, 8e-3), selection=(10, 11), fresh=(0, 1, 2), factors=(0.5, 1.0))
INIT = 4.0


def test_capped_counts_a_failed_run_at_the_loss_at_init():
    assert capped(2.5, INIT) == 2.5
    assert capped(None, INIT) == capped(math.nan, INIT) == capped(math.inf, INIT) == INIT
    assert capped(5.0, INIT) == INIT  # worse than at init: no better than not training


def test_choose_takes_the_lowest_mean_and_the_lower_rate_on_a_tie():
    assert choose({1e-3: [3.0, 3.2], 2e-3: [2.9, 3.1], 4e-3: [2.0, 4.0]}) == 2e-3
    assert choose({2e-3: [3.0], 1e-3: [3.0]}) == 1e-3
    with pytest.raises(EvidenceError):
        choose({})


def test_sensitivity_is_the_mean_excess_over_the_best_of_the_seed_mean_curve():
    # seed-mean curve 1, 2, 3, 6 → mean 3, best 1: sensitivity 2 (a flat curve: 0)
    curve = np.array([[1.0, 1.0], [1.5, 2.5], [3.0, 3.0], [6.0, 6.0]])
    assert sensitivity(curve) == pytest.approx(2.0)
    assert sensitivity(np.full((5, 3), 2.7)) == 0.0


@pytest.mark.parametrize("rates,seeds", [(2, 3), (5, 8), (9, 2), (17, 9)])
def test_sensitivity_interval_is_scipys_bootstrap_of_the_one_curve_statistic(rates, seeds):
    """The resamples are scored at once; the interval must be, to the bit, the bootstrap that scores each
    resample with `sensitivity` (9 and 17 rates: numpy sums 8 or more terms pairwise)."""
    from scipy import stats

    curve = np.random.default_rng(rates * seeds).normal(3.0, 0.3, (rates, seeds))

    def one(idx, axis=-1):
        return np.apply_along_axis(lambda i: sensitivity(curve[:, i]), axis, idx)

    res = stats.bootstrap(
        (np.arange(seeds),), one, n_resamples=2000, method="percentile", random_state=np.random.default_rng(0)
    )
    ci = res.confidence_interval
    assert sensitivity_interval(curve) == (sensitivity(curve), float(ci.low), float(ci.high))


def test_sensitivity_interval_resamples_seeds_and_is_deterministic():
    rng = np.random.default_rng(0)
    curve = np.array([1.0, 1.2, 2.0, 3.5])[:, None] + rng.normal(0, 0.1, (4, 5))
    est, lo, hi = sensitivity_interval(curve)
    assert lo <= est <= hi and hi - lo > 0
    assert sensitivity_interval(curve) == (est, lo, hi)
    one = sensitivity_interval(curve[:, :1])
    assert one[0] == one[1] == one[2] == pytest.approx(sensitivity(curve[:, :1]))


def test_sweep_declaration_is_validated_and_later_scales_centre_on_the_choice():
    assert SWEEP.decades == pytest.approx(math.log10(8))
    assert Sweep((2.5e-4, 8e-3), (1,), (0,)).later(4e-3) == (1e-3, 2e-3, 4e-3)
    repeated = dict(rates=(1e-3, 1e-3, 2e-3))
    for bad in (
        dict(rates=(1e-3,)),
        dict(rates=(2e-3, 1e-3)),
        repeated,
        dict(fresh=(10,)),
        dict(selection=()),
    ):
        with pytest.raises(EvidenceError):
            Sweep(**{"rates": (1e-3, 2e-3), "selection": (10,), "fresh": (0,), **bad})


# ------------------------------------------------------------------ the staged grid
def loss_of(cfg) -> float:
    """A bowl in log rate, optimum at 2e-3 at width 1 and at 1e-3 at width 2; 8e-3 diverges."""
    if cfg["lr"] >= 8e-3:
        return math.nan
    best = 2e-3 / cfg["width"]
    return 2.0 + 0.3 * math.log2(cfg["lr"] / best) ** 2 + (0.1 if cfg["arm"] == "b" else 0.0)


def make(arm, scale, lr, seed):
    return {"part": "train", **arm, **scale, "lr": lr, "seed": seed}


def finish(configs):
    return [{"config": c, "metrics": {"loss": loss_of(c), "init": INIT}, "status": "ok"} for c in configs]


def read(m):
    return m["loss"], m["init"]


def test_sweep_grid_grows_from_selection_to_fresh_seeds_to_the_next_scale():
    arms, scales = {"a": {"arm": "a"}, "b": {"arm": "b"}}, [{"width": 1}, {"width": 2}]
    rounds, done = [], []
    while len(rounds) < 2 or rounds[-1] != rounds[-2]:
        rounds.append(sweep_grid(SWEEP, arms, scales, make, done, read))
        done = finish(rounds[-1])
    assert len(rounds) == 4  # selection; fresh and the second width's selection; its fresh; unchanged
    first = rounds[0]
    assert {c["seed"] for c in first} == {10, 11} and {c["width"] for c in first} == {1}
    assert len(first) == 2 * 4 * 2
    final = rounds[-1]
    fresh = {(c["arm"], c["width"]): c["lr"] for c in final if c["seed"] in SWEEP.fresh}
    assert fresh == {("a", 1): 2e-3, ("b", 1): 2e-3, ("a", 2): 1e-3, ("b", 2): 1e-3}
    assert sorted({c["lr"] for c in final if c["width"] == 2}) == [1e-3, 2e-3]  # the choice ×½, ×1
    assert len(final) == len({json.dumps(c, sort_keys=True) for c in final})


def test_an_unfinished_sweep_chooses_nothing():
    arms, scales = {"a": {"arm": "a"}}, [{"width": 1}, {"width": 2}]
    first = sweep_grid(SWEEP, arms, scales, make, [], read)
    done = finish(first[:-1])  # one selection run missing
    assert sweep_grid(SWEEP, arms, scales, make, done, read) == first


def test_read_sweep_agrees_with_the_grid_and_reads_the_fresh_seeds_only():
    arms, scales = {"a": {"arm": "a"}, "b": {"arm": "b"}}, [{"width": 1}, {"width": 2}]
    done: list = []
    for _ in range(4):
        done = finish(sweep_grid(SWEEP, arms, scales, make, done, read))
    rows = [
        {
            **r["config"],
            "unit": r["config"]["seed"],
            "final_val": r["metrics"]["loss"],
            "init_loss": INIT,
            "role": "selection" if r["config"]["seed"] in SWEEP.selection else "test",
        }
        for r in done
    ]
    choices, tuned, seeds = read_sweep(pd.DataFrame(rows), arms, {"w1": {"width": 1}, "w2": {"width": 2}})
    got = {(r.arm, r.scale): r.chosen_lr for r in choices.itertuples()}
    assert got == {("a", "w1"): 2e-3, ("b", "w1"): 2e-3, ("a", "w2"): 1e-3, ("b", "w2"): 1e-3}
    assert choices.set_index(["arm", "scale"]).loc[("a", "w1"), "at_edge"] == np.False_
    assert set(tuned.unit) == set(SWEEP.fresh) and len(tuned) == 4 * len(SWEEP.fresh)
    # width 1: rates 1, 2, 4 and 8e-3 (diverged, at init): capped 2.3, 2.0, 2.3, 4.0 → mean 2.65 − best 2.0
    row = choices.set_index(["arm", "scale"]).loc[("a", "w1")]
    assert (
        row.sensitivity == pytest.approx(0.65) and row.sensitivity_lo == row.sensitivity_hi == row.sensitivity
    )
    assert set(seeds.unit) == set(SWEEP.selection)


# ------------------------------------------------------------------ the runner grows a staged grid
def toy_run(cfg, ctx):
    return {"loss": loss_of(cfg), "init": INIT}


def toy_grid(p, done):
    return sweep_grid(
        Sweep(tuple(p["rates"]), (10,), (0, 1)), {"a": {"arm": "a"}}, [{"width": 1}], make, done, read
    )


class Staged(Experiment):
    claim_id = "staged"
    title = statement = "a staged toy"
    rule = "supported if the chosen rate trains"
    profiles = {k: {"rates": [1e-3, 2e-3, 4e-3]} for k in ("quick", "default", "full")}
    parts = (Part("train", lambda p: [], toy_run), Part("sweep", toy_grid, toy_run, staged=True))

    def analyse(self, runs, p, out):
        fresh = [r for r in runs if r["config"]["seed"] in (0, 1)]
        lr = {r["config"]["lr"] for r in fresh}
        return Verdict("supported", "toy", f"{len(runs)} runs, fresh at {sorted(lr)}", {"lr": sorted(lr)})


def test_the_runner_grows_a_staged_grid_and_check_results_follows_it(tmp_path):
    logs: list[str] = []
    kw = dict(profile="default", device=torch.device("cpu"), results_root=tmp_path, progress=False)
    rc, res = run_experiment(Staged(), log=logs.append, **kw)
    assert rc == 0 and res["evidence"]["lr"] == [2e-3]
    assert len(res["run_ids"]) == 3 + 2 and "5 runs (0 reused, 5 run, 0 failed)" in logs[-2]
    runs = tmp_path / "staged" / "runs"
    assert sorted(grid_run_ids(Staged(), res["params"], "cpu", runs)) == sorted(res["run_ids"])
    assert len(grid_run_ids(Staged(), res["params"], "cpu")) == 3  # without the records: the first round only
    assert stale_results({"staged": Staged()}, tmp_path, reanalyse=True) == []
    logs.clear()
    rc, _ = run_experiment(Staged(), log=logs.append, **kw)
    assert rc == 0 and "5 runs (5 reused, 0 run, 0 failed)" in logs[-2]


def test_a_choice_at_an_end_widens_the_sweep_up_to_its_limit():
    """The optimum (2e-3 at width 1) lies above a sweep of 2.5e-4 and 5e-4: with a limit of two steps the
    sweep widens to 1e-3 and 2e-3 and stops there, the choice at its end; with room for more it also tries
    4e-3, finds it worse and keeps 2e-3, now inside the sweep."""
    arms, scales = {"a": {"arm": "a"}}, [{"width": 1}]

    def settle(extend):
        sweep = Sweep((2.5e-4, 5e-4), (10,), (0,), extend=extend)
        done, grid = [], None
        while (g := sweep_grid(sweep, arms, scales, make, done, read)) != grid:
            grid, done = g, finish(g)
        return grid

    two = settle(2)
    assert sorted({c["lr"] for c in two if c["seed"] == 10}) == [2.5e-4, 5e-4, 1e-3, 2e-3]
    assert {c["lr"] for c in two if c["seed"] == 0} == {2e-3}
    four = settle(4)
    assert sorted({c["lr"] for c in four if c["seed"] == 10}) == [2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3]
    assert {c["lr"] for c in four if c["seed"] == 0} == {2e-3}
    assert Sweep((1e-3, 2e-3), (1,), (0,)).widened([1e-3, 2e-3], 1e-3) == [5e-4, 1e-3, 2e-3]
    assert Sweep((1e-3, 2e-3), (1,), (0,)).widened([1e-3, 2e-3, 4e-3], 2e-3) is None


def toy_run_failing(cfg, ctx):
    if cfg["lr"] == 4e-3:
        raise RuntimeError("boom")
    return toy_run(cfg, ctx)


class StagedFailing(Staged):
    claim_id = "staged_failing"
    parts = (Part("train", lambda p: [], toy_run_failing), Part("sweep", toy_grid, toy_run, staged=True))


def test_a_failed_selection_run_stops_the_growth_and_files_no_result(tmp_path):
    logs: list[str] = []
    kw = dict(profile="default", device=torch.device("cpu"), results_root=tmp_path, progress=False)
    rc, res = run_experiment(StagedFailing(), log=logs.append, **kw)
    assert rc == 1 and res is None and not (tmp_path / "staged_failing" / "result.json").exists()
    assert any("3 runs (0 reused, 2 run, 1 failed)" in m for m in logs)  # no fresh seeds were started


def test_the_rule_text_is_rendered_from_the_sweep_itself():
    text = Sweep((1e-3, 2e-3), (10,), (0,), factors=(0.5, 1.0), extend=3).rule()
    assert "×0.5, ×1." in text and "at most 3 times" in text
    assert "control" not in text  # a sub-claim's own declaration says what an equivalence decides
    assert "is kept" in Sweep((1e-3, 2e-3), (10,), (0,)).rule()
