"""The declared rule of `albert_sharing` on synthetic records: counts from the recipe itself (exact, cheap),
timing rounds with a shared load (rules.times), and a quality sweep grown as the runner grows it."""

import numpy as np
import pytest

from tfclaims.harness.registry import load

from experiments.albert_sharing.grid import AA
from experiments.albert_sharing.recipes import run_counts
from rules import analyse, grown, sub, times, verdicts

EXP = load("albert_sharing")
P = EXP.profiles["quick"]
UNIGRAM = 3.3
JITTER = (0.011, -0.007, 0.004, -0.009)


def records(shared_time=0.0, half_time=-0.69, quality_gap=0.05, learned=True, counts_off=0, p=P):
    """shared_time / half_time: log time ratios to the unshared stack; quality_gap: shared − unshared final
    loss at each arm's best rate."""

    def metrics(c: dict) -> dict:
        if c["part"] == "counts":
            m = run_counts(c, None)
            m["library"][0]["shared"] += counts_off
        elif c["part"] == "timing":
            ratios = {"unshared": 0.0, "shared": shared_time, "half depth": half_time, AA: 0.0}
            m = {
                "rows": [
                    {
                        "d_model": d,
                        "n_layers": L,
                        "tokens": c["batch"] * c["seq_len"],
                        "times": {k: times(1e-3, r, k=j) for j, (k, r) in enumerate(ratios.items())},
                    }
                    for d, L in c["sizes"]
                ],
                "threads": 1,
            }
        else:
            s = c["seed"] % 1000 % 4
            best = p["rates"][-1] if c["n_layers"] == p["scales"][0][1] else p["rates"][-1] / 2
            v = 2.0 + JITTER[s] + 0.05 * np.log2(c["lr"] / best) ** 2 + (quality_gap if c["shared"] else 0)
            if not learned:
                v = UNIGRAM + 0.02 * (s % 2)
            m = {"final_val": v, "best_val": v, "val_loss": [4.4, v + 0.2, v], "eval_steps": [0, 6, 12],
                 "unigram_xent": UNIGRAM, "diverged_at": None}  # fmt: skip
        return m

    return grown(EXP, p, metrics)


def test_albert_rule_supported_when_counts_fall_time_stays_and_quality_drops(tmp_path):
    v = analyse(EXP, records(), P, tmp_path)
    assert verdicts(v) == {
        "counts": "supported",
        "params": "supported",
        "half": "supported",
        "time": "supported",
        "quality": "supported",
    }
    assert v.verdict == "supported" and sub(v, "counts").kind == "check" and not sub(v, "half").counts


def test_albert_rule_refuted_when_sharing_halves_the_time(tmp_path):
    v = analyse(EXP, records(shared_time=-0.69), P, tmp_path)
    assert verdicts(v)["time"] == "refuted" and v.verdict != "supported"


def test_albert_rule_reports_a_failed_positive_control_beside_the_time(tmp_path):
    """Half the depth not running faster is reported (the control is not counted); the time sub-claim is still
    decided by its own interval."""
    v = analyse(EXP, records(half_time=0.0), P, tmp_path)
    assert verdicts(v)["half"] != "supported" and verdicts(v)["time"] == "supported"
    v = analyse(EXP, records(shared_time=0.3), P, tmp_path)  # 35% slower: outside 1/1.1–1.1×
    assert verdicts(v)["time"] == "refuted"


def test_albert_rule_quality_refuted_when_sharing_trains_better(tmp_path):
    v = analyse(EXP, records(quality_gap=-0.05), P, tmp_path)
    assert verdicts(v)["quality"] == "refuted" and v.verdict == "mixed"


def test_albert_rule_quality_excluded_when_nothing_learned(tmp_path):
    v = analyse(EXP, records(learned=False), P, tmp_path)
    assert verdicts(v)["quality"] == "inconclusive"


def test_albert_rule_a_count_that_misses_its_closed_form_stops_the_claim(tmp_path):
    from tfclaims.evidence.evaluate import CheckFailed

    with pytest.raises(CheckFailed, match="counts"):
        analyse(EXP, records(counts_off=1), P, tmp_path)
