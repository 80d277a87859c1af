"""The declared rule of `truncate_distill` on synthetic records: counts from the recipe itself (exact, cheap),
timing rounds with a shared load (rules.times), and the students' sweep grown as the runner grows it, each
student's loss set against its own seed's teacher so that the share of the teacher's gain is known in
advance."""

import numpy as np
import pytest

from tfclaims.evidence.decisions import percent
from tfclaims.harness.registry import load

from experiments.truncate_distill.grid import AA
from experiments.truncate_distill.recipes import run_counts
from rules import analyse, comparison, decisions, grown, sub, times, verdicts

EXP = load("truncate_distill")
P = {**EXP.profiles["quick"], "seeds": [0, 1, 2, 3]}
P2 = {**P, "n_layers": 4, "keep": [2, 1]}  # two depths: a half and a quarter
UNIGRAM = 3.3
TEACHER = (0.011, -0.007, 0.004, -0.009)  # per seed: each teacher's offset from 2.0
OWN = {"distil": (0.002, -0.001, 0.0015, -0.002), "plain": (-0.001, 0.002, -0.002, 0.001),
       "scratch": (0.001, 0.001, -0.001, -0.001)}  # fmt: skip
RERUN = (0.004, -0.003, 0.002, -0.004)  # the null pair's reruns: another data order
BEST = {"distil": 3e-3, "plain": 3e-3, "scratch": 6e-3}  # scratch's choice lies beyond the first sweep
GAPS = {
    "distil": 0.01,
    "plain": 0.06,
    "scratch": 0.2,
}  # nats/char above the teacher: share 0.992 with distillation


def student(s: dict, seed: int, gaps: dict, learned: bool) -> dict:
    i = seed % 1000 % 4
    teacher = 2.0 + TEACHER[i]
    gap = gaps[s["student"]]
    gap = gap[s["keep"]] if isinstance(gap, dict) else gap
    gap = gap[i] if isinstance(gap, tuple) else gap  # per seed
    v = teacher + gap + OWN[s["student"]][i] + 0.05 * np.log2(s["lr"] / BEST[s["student"]]) ** 2
    v += RERUN[i] if s.get("rerun") else 0.0
    if not learned:
        v = UNIGRAM + 0.02 * (i % 2)
    init = 4.4 if s["student"] == "scratch" else 3.0
    return {"final_val": v, "val_loss": [init, v + 0.1, v], "eval_steps": [0, 4, 8], "diverged_at": None}


def records(gaps=GAPS, speed=-0.69, learned=True, counts_off=0, p=P):
    """gaps: per arm (or per arm and depth) the final loss above the teacher of the same seed; speed: the log
    time ratio of the first student depth to the teacher."""

    def metrics(c: dict) -> dict:
        if c["part"] == "counts":
            m = run_counts(c, None)
            m["rows"][0]["params"] += counts_off
        elif c["part"] == "timing":
            ratios = {
                "teacher": 0.0,
                "1/2 of the layers": speed,
                "1/4 of the layers": speed * 1.5,
                AA: 0.0,
            }
            on = {k: r for k, r in ratios.items() if k != "1/4 of the layers" or p is P2}
            m = {
                "rows": [
                    {
                        "size": s,
                        "tokens": c["seq_len"],
                        "times": {k: times(1e-4, r, k=j) for j, (k, r) in enumerate(on.items())},
                    }
                    for s in c["sizes"]
                ],
                "threads": 1,
            }
        else:
            t = 2.0 + TEACHER[c["seed"] % 4] if learned else UNIGRAM + 0.01
            m = {
                "teacher": {"final_val": t},
                "unigram_xent": UNIGRAM,
                "students": [student(s, c["seed"], gaps, learned) for s in c["students"]],
            }
        return m

    return grown(EXP, p, metrics)


def test_truncate_rule_supported_when_distillation_closes_the_gap(tmp_path):
    v = analyse(EXP, records(), P, tmp_path)
    # scratch's best rate lies beyond the quick profile's sweep even widened: its cell counts neither way
    assert {k: x for k, x in verdicts(v).items() if k != "scratch"} == dict.fromkeys(
        ("counts", "gap", "distil", "match", "params", "speed"), "supported"
    )
    assert (
        verdicts(v)["scratch"] == "inconclusive" and "sits at an end of its sweep" in sub(v, "scratch").detail
    )
    assert v.verdict == "supported" and sub(v, "counts").kind == "check"
    assert {s.id for s in v.sub_verdicts if s.counts} == {"distil", "match"}
    assert "k1-of-2: with − without distillation -0.050 nats/char" in v.key_number


def test_truncate_rule_refuted_when_distillation_hurts(tmp_path):
    v = analyse(EXP, records(gaps={**GAPS, "distil": 0.1}), P, tmp_path)
    assert verdicts(v)["distil"] == "refuted" and verdicts(v)["match"] == "refuted"
    assert v.verdict == "refuted"


def test_truncate_rule_no_difference_refutes_only_where_powered_and_the_gap_control_holds(tmp_path):
    """With and without distillation equal: refuted where the teacher beat the student without it (the gap
    control) and the equivalence has 80% power at the SESOI; not decidable in a cell where the cut student
    already matched the teacher (the control, a precondition, failed there: nothing to distil)."""
    v = analyse(EXP, records(gaps={**GAPS, "distil": 0.06}), P, tmp_path)
    c = comparison(v, "distil")
    assert c.decision == "equivalent" and c.power >= 0.8 and sub(v, "distil").roles == {"distil": "refute"}
    assert verdicts(v)["gap"] == "supported" and verdicts(v)["distil"] == "refuted"
    # per cell: a gap at half the layers, none at a quarter (both arms level with the teacher there)
    gaps = {"distil": {2: 0.06, 1: 0.0}, "plain": {2: 0.06, 1: 0.0}, "scratch": 0.2}
    v = analyse(EXP, records(gaps=gaps, p=P2), P2, tmp_path)
    assert sub(v, "gap").holds == ["k2-of-4"]
    assert decisions(v, "distil/") == {"distil/k2-of-4": "equivalent", "distil/k1-of-4": "equivalent"}
    assert comparison(v, "distil/k2-of-4").power >= 0.8
    s = sub(v, "distil")
    assert s.roles == {"distil/k2-of-4": "refute", "distil/k1-of-4": "not decidable"}
    assert (
        s.verdict == "refuted" and "not decidable here (the positive control failed in the cell" in s.detail
    )
    assert decisions(v, "match/")["match/k1-of-4"] == "equivalent"  # the share is inside, but decides nothing
    assert sub(v, "match").roles["match/k1-of-4"] == "not decidable"
    # no gap at all: nothing is decidable, the shown share included
    v = analyse(EXP, records(gaps={**GAPS, "distil": 0.0, "plain": 0.0}), P, tmp_path)
    assert verdicts(v)["gap"] != "supported" and comparison(v, "match").decision == "equivalent"
    assert sub(v, "distil").roles == {"distil": "not decidable"} and verdicts(v)["distil"] == "inconclusive"
    assert sub(v, "match").roles == {"match": "not decidable"} and verdicts(v)["match"] == "inconclusive"


def test_truncate_rule_an_equivalence_without_power_at_the_sesoi_does_not_refute(tmp_path):
    """The same means beside the gap control, but the distilled student's seeds scatter (±0.003 nats/char):
    the 90% interval still lies inside ±0.01 (equivalent), yet the power at ±0.01 is under 80%, so the
    equivalence is undecided, not a refutation, and the detail states that power."""
    spread = (0.063, 0.057, 0.063, 0.057)
    v = analyse(EXP, records(gaps={**GAPS, "distil": spread}), P, tmp_path)
    assert verdicts(v)["gap"] == "supported"
    c = comparison(v, "distil")
    assert c.decision == "equivalent" and c.power < 0.8
    s = sub(v, "distil")
    assert s.roles == {"distil": "undecided"} and s.verdict == "inconclusive"
    assert "with under 80% power there, so this does not refute" in s.detail
    assert f"power there {percent(c.power)}" in s.detail


def test_truncate_rule_mixed_when_the_distilled_student_falls_short_of_the_teacher(tmp_path):
    v = analyse(EXP, records(gaps={**GAPS, "distil": 0.08, "plain": 0.15}), P, tmp_path)
    assert verdicts(v)["distil"] == "supported" and verdicts(v)["match"] == "refuted"
    assert v.verdict == "mixed"


def test_truncate_rule_names_the_depth_where_it_holds(tmp_path):
    gaps = {**GAPS, "distil": {2: 0.01, 1: 0.15}, "plain": 0.06}  # the shallower student gains nothing
    v = analyse(EXP, records(gaps=gaps, p=P2), P2, tmp_path)
    assert verdicts(v)["distil"] == "mixed" and sub(v, "distil").holds == ["k2-of-4"]
    assert verdicts(v)["match"] == "mixed"


def test_truncate_rule_excludes_students_that_did_not_learn(tmp_path):
    v = analyse(EXP, records(learned=False), P, tmp_path)
    assert verdicts(v)["distil"] == "inconclusive" and verdicts(v)["match"] == "inconclusive"
    assert v.verdict == "inconclusive" and "nan" not in v.key_number


def test_truncate_rule_reports_a_slow_student(tmp_path):
    v = analyse(EXP, records(speed=-0.2), P, tmp_path)
    assert verdicts(v)["speed"] == "refuted" and v.verdict == "supported"  # reported, not counted


def test_truncate_rule_a_count_that_misses_its_closed_form_stops_the_claim(tmp_path):
    from tfclaims.evidence.evaluate import CheckFailed

    with pytest.raises(CheckFailed, match="counts"):
        analyse(EXP, records(counts_off=1), P, tmp_path)
