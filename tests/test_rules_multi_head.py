"""The declared rule of `multi_head` on synthetic records: a sweep grown as the runner grows it, each arm
with its own best rate, and the null pair's reruns with a spread of their own."""

import math

import numpy as np
import pandas as pd

from tfclaims.harness.registry import load

from rules import analyse, comparison, grown, verdicts

EXP = load("multi_head")
P = EXP.profiles["quick"]
UNIGRAM = 3.3
JITTER = (0.011, -0.007, 0.004, -0.009)  # per fresh seed, shared by both arms (the pairing removes it)
OWN = (0.002, -0.001, 0.001, -0.002)  # per seed, four heads only: the paired differences' own spread
RERUN = (0.002, -0.001)  # the null pair's reruns differ from their seeds by this


def records(gap=-0.05, learned=True, best=None, rerun=RERUN):
    """gap: four heads − one head at each arm's best rate; best: arm -> its best rate (default: both the
    sweep's top rate)."""
    best = best or {"h1": P["rates"][-1], "h4": P["rates"][-1]}

    def metrics(c: dict) -> dict:
        s = c["seed"] % 1000 % 4
        v = (
            2.0
            + JITTER[s]
            + 0.05 * np.log2(c["lr"] / best[c["arm"]]) ** 2
            + (gap + OWN[s] if c["arm"] == "h4" else 0)
        )
        if c["seed"] >= 1000:
            v += rerun[s % len(rerun)]
        if not learned:
            v = UNIGRAM + 0.02 * (s % 2)
        return {
            "final_val": v,
            "best_val": v,
            "val_loss": [4.4, v + 0.2, v],
            "eval_steps": [0, 6, 12],
            "unigram_xent": UNIGRAM,
            "diverged_at": None,
        }

    return grown(EXP, P, metrics)


def test_multi_head_rule_supported_when_four_heads_end_lower(tmp_path):
    v = analyse(EXP, records(), P, tmp_path)
    assert verdicts(v) == {"quality": "supported"} and v.verdict == "supported"
    assert math.isclose(comparison(v, "quality").diff, -0.05 + np.mean(OWN[:2]), abs_tol=1e-9)


def test_multi_head_rule_refuted_when_one_head_ends_lower(tmp_path):
    v = analyse(EXP, records(gap=0.05), P, tmp_path)
    assert verdicts(v) == {"quality": "refuted"} and v.verdict == "refuted"


def test_multi_head_rule_an_effect_inside_the_null_pairs_floor_is_undecided(tmp_path):
    """A gap smaller than what reruns of one arm give decides nothing, however consistent over seeds."""
    v = analyse(EXP, records(gap=-0.003, rerun=(0.02, -0.02)), P, tmp_path)
    assert verdicts(v) == {"quality": "inconclusive"}


def test_multi_head_rule_nothing_learned_is_excluded_not_refuted(tmp_path):
    v = analyse(EXP, records(learned=False), P, tmp_path)
    assert verdicts(v) == {"quality": "inconclusive"} and comparison(v, "quality").excluded


def test_multi_head_each_arm_is_compared_at_its_own_chosen_rate(tmp_path):
    """One head best at the sweep's lower rate, four heads at its upper: each is read there, so the gap is the
    declared one, not one confounded by a shared rate."""
    best = {"h1": P["rates"][0], "h4": P["rates"][-1]}
    v = analyse(EXP, records(best=best), P, tmp_path)
    assert math.isclose(comparison(v, "quality").diff, -0.05 + np.mean(OWN[:2]), abs_tol=1e-9)
    chosen = pd.read_csv(tmp_path / "lr_choices.csv").set_index("arm").chosen_lr.to_dict()
    assert chosen == best


def test_multi_head_writes_the_standard_tables_and_its_two_figures(tmp_path):
    v = analyse(EXP, records(), P, tmp_path, render=True)
    assert {"lr_choices.csv", "lr_sweep.csv", "runs.csv"} <= {p.name for p in tmp_path.glob("*.csv")}
    assert {f"{n}.png" for n in ("lr-sweep", "curves")} <= {p.name for p in (tmp_path / "figures").glob("*")}
    assert v.arms is not None and set(v.arms.arm) >= {
        "one head, at its best rate",
        "four heads, at its best rate",
    }


def test_the_smallest_effect_of_interest_is_the_papers_perplexity_ratio_per_character():
    from experiments.multi_head.claim import PIECE_CHARS, SESOI

    assert SESOI == round(math.log(5.29 / 4.92) / PIECE_CHARS, 3) == 0.018
