"""The weight_tying rule on synthetic run records: every outcome it can give.

The quick profile's grid with four seeds (a test needs a few to decide). Parameter counts are built to match
V·d (or not: a failing check stops the claim); each training run's validation curve is built so that it reaches
the target loss at a chosen step (interpolated between evaluations; compared by a log-rank test) and ends at a
chosen final loss (paired by seed). The verdict combines convergence and final loss; the equal-parameter
comparison is reported beside it."""

import sys

import numpy as np
import pytest

from tfclaims.analysis.weight_tying import steps_to_target
from tfclaims.claims.weight_tying import TYING_ARMS, matched_d_ff
from tfclaims.evidence.evaluate import CheckFailed
from tfclaims.harness.registry import load
from tfclaims.measure.counting import model_params
from tfclaims.train.small_lm import model_config

from rules import analyse, comparison, decisions, record, sub, verdicts

EXP = load("weight_tying")
MOD = sys.modules[type(EXP).__module__]
BELOW = MOD.TARGET_BELOW_UNIGRAM
P = {**EXP.profiles["quick"], "seeds": [0, 1, 2, 3]}
V, D, D_FF = 4096, P["d_model"], 4 * P["d_model"]
UNIGRAM = 6.30
TARGET = UNIGRAM - MOD.TARGET_BELOW_UNIGRAM
START = 8.32  # ≈ ln V: the loss of the untrained model
EVAL_STEPS = [0, 6, 12]  # the quick profile's evaluations (eval_every = 6, steps = 12)
TOKENIZER = {"tokenizer": "byte-level BPE", "vocab_size": V, "chars_per_token": 2.91, "train_tokens": 1_467_494,
             "val_tokens": 187_421}  # fmt: skip
# seed-to-seed spread shared by every arm (paired), and a little of each arm's own (mean zero)
JITTER_STEPS, JITTER_LOSS = np.array([0.0, 0.3, -0.2, 0.1]), np.array([0.0, 0.03, -0.02, 0.01])
OWN = {
    "tied": np.array([0.02, -0.01, 0.015, -0.025]),
    "untied": np.array([-0.01, 0.02, -0.025, 0.015]),
    "tied-wide": np.array([0.01, 0.015, -0.02, -0.005]),
    "null": np.array([0.015, -0.02, 0.01, -0.005]),
}


def curve(steps_to_target: float, final: float) -> list[float]:
    """Validation losses at EVAL_STEPS: from START, crossing TARGET at `steps_to_target` (in (0, 6]) on the
    segment to step 6, ending at `final`. With final ≥ TARGET the target is never reached."""
    if final >= TARGET:
        return [START, final + 0.2, final]
    return [START, START - (START - TARGET) * EVAL_STEPS[1] / steps_to_target, final]


def train_metrics(steps_to_target, final, diverged_at=None):
    return {
        "eval_steps": EVAL_STEPS, "val_loss": curve(steps_to_target, final), "final_val": final,
        "diverged_at": diverged_at, "unigram_xent": UNIGRAM, "n_params": 275_904, "tokenizer": TOKENIZER,
    }  # fmt: skip


def count_rows(miscount=0, instantiated_off=0):
    """Rows as tying_counts emits them: this project's model (three arms, instantiated too), then presets."""
    tied = 144_864
    own = "subword LM (this project), d = 32"
    rows = [
        {"model": own, "arm": "tied", "V": V, "d": D, "d_ff": D_FF, "closed_form": tied, "instantiated": tied},
        {"model": own, "arm": "untied", "V": V, "d": D, "d_ff": D_FF, "closed_form": tied + V * D + miscount,
         "instantiated": tied + V * D + miscount + instantiated_off},
        {"model": own, "arm": "tied-wide", "V": V, "d": D, "d_ff": 2144, "closed_form": tied + V * D - 32,
         "instantiated": tied + V * D - 32},
    ]  # fmt: skip
    presets = {  # every preset the grid names (the check covers each one): V, d, d_ff, tied parameters
        "gpt2-small": (50257, 768, 3072, 124_439_808), "gpt2-medium": (50257, 1024, 4096, 354_823_168),
        "gpt2-xl": (50257, 1600, 6400, 1_557_611_200), "bert-base": (30522, 768, 3072, 109_482_240),
        "llama-7b": (32000, 4096, 11008, 6_607_343_616),
    }  # fmt: skip
    for name in MOD.COUNT_PRESETS:
        pv, pd_, ff, base = presets[name]
        rows += [
            {"model": name, "arm": "tied", "V": pv, "d": pd_, "d_ff": ff, "closed_form": base, "instantiated": None},
            {"model": name, "arm": "untied", "V": pv, "d": pd_, "d_ff": ff, "closed_form": base + pv * pd_,
             "instantiated": None},
        ]  # fmt: skip
    return rows


def records(spec, *, miscount=0, instantiated_off=0):
    """spec(arm, seed) -> (steps to target, final loss) before the jitter; the null pair reruns 'untied'."""
    recs = []
    for i, c in enumerate(EXP.grid(P)):
        if c["part"] == "counts":
            m = {"rows": count_rows(miscount, instantiated_off), "tokenizer": TOKENIZER}
        else:
            s = c["seed"] % MOD.NULL_OFFSET
            own = OWN["null" if c["part"] == "null" else c["arm"]][s]
            steps, fin = spec(c["arm"], s)
            m = train_metrics(steps + JITTER_STEPS[s] + own, fin + JITTER_LOSS[s] + own / 10)
        recs.append(record(c, m, f"r{i}"))
    return recs


def claimed(arm, s):
    """Tied (either width) reaches the target a step sooner and ends 0.1 nats lower."""
    return (4.0, 4.5) if arm != "untied" else (5.0, 4.6)


# ------------------------------------------------------------------ steps to target
def test_steps_to_target_interpolates_between_evaluations():
    m = {
        "unigram_xent": 3.0,
        "eval_steps": [0, 10, 20, 30],
        "val_loss": [4.5, 2.5, 1.5, 1.0],
        "diverged_at": None,
    }
    # target 2.0, crossed between step 10 (2.5) and step 20 (1.5): 10 + 10 · (2.5 − 2.0) / (2.5 − 1.5)
    assert steps_to_target(m, 1.0) == pytest.approx(15.0)
    m["val_loss"] = [4.5, 2.2, 1.2, 1.0]  # 10 + 10 · 0.2 / 1.0
    assert steps_to_target(m, 1.0) == pytest.approx(12.0)
    m["val_loss"] = [4.5, 2.0, 1.5, 1.0]  # reached exactly at an evaluation
    assert steps_to_target(m, 1.0) == pytest.approx(10.0)
    m["val_loss"] = [4.5, 3.0, 2.5, 1.8]  # between 20 and 30: 20 + 10 · 0.5 / 0.7
    assert steps_to_target(m, 1.0) == pytest.approx(20 + 10 * 0.5 / 0.7)


def test_steps_to_target_uses_the_first_crossing():
    m = {
        "unigram_xent": 3.0,
        "eval_steps": [0, 10, 20, 30],
        "val_loss": [4.0, 1.0, 2.5, 1.5],
        "diverged_at": None,
    }
    assert steps_to_target(m, 1.0) == pytest.approx(20 / 3)  # 10 · (4 − 2) / (4 − 1)


def test_steps_to_target_none_when_never_reached_or_diverged():
    m = {"unigram_xent": 3.0, "eval_steps": [0, 10, 20], "val_loss": [4.5, 2.5, 2.01], "diverged_at": None}
    assert steps_to_target(m, 1.0) is None
    m = {"unigram_xent": 3.0, "eval_steps": [0, 10, 20], "val_loss": [4.5, 1.5, None], "diverged_at": 15}
    assert steps_to_target(m, 1.0) is None  # it reached the target, then diverged: the run counts for nothing


def test_synthetic_curves_reach_the_target_where_built_to():
    for steps in (2.5, 4.0, 5.9):
        assert steps_to_target(train_metrics(steps, 4.5), BELOW) == pytest.approx(steps)
    assert steps_to_target(train_metrics(4.0, TARGET + 0.1), BELOW) is None


# ------------------------------------------------------------------ the verdict
def test_weight_tying_rule_supported_when_counts_are_exact_and_tied_converges_sooner(tmp_path):
    v = analyse(EXP, records(claimed), P, tmp_path)
    assert v.verdict == "supported"
    d = decisions(v)
    assert d["convergence"] == "b_better" and d["final"] == "b_better"  # b = tied
    assert {k for k in d if k.startswith("params")} == {
        f"params/{m}" for m in ("subword-lm", *MOD.COUNT_PRESETS)
    }
    assert all(d[k] == "equivalent" for k in d if k.startswith(("params", "instantiated")))
    assert verdicts(v) == {"params": "supported", "instantiated": "supported", "convergence": "supported",
                           "final": "supported", "equal-params": "supported"}  # fmt: skip
    kinds = {s.id: (s.kind, s.counts) for s in v.sub_verdicts}
    assert kinds["params"][0] == kinds["instantiated"][0] == "check"
    assert kinds["convergence"] == kinds["final"] == ("effect", True) and kinds["equal-params"] == (
        "effect",
        False,
    )
    steps = comparison(v, "convergence")
    assert steps.test == "log-rank" and steps.n == 4 and steps.noise is not None
    assert steps.learned_a == steps.learned_b == 4
    # the steps compared are the interpolated crossings: tied − untied = −1 step, by construction (every run
    # reaches the target, so the restricted means are the plain means)
    assert steps.diff == pytest.approx(-1.0 + np.mean(OWN["tied"] - OWN["untied"]))
    assert comparison(v, "final").margin == MOD.MARGIN and comparison(v, "final").paired
    assert {c.id for c in v.noise_floor} == {"null/steps_to_target", "null/final_val"}
    assert v.evidence["tokenizer"] == TOKENIZER and v.evidence["sub_verdicts"]["convergence"] == "supported"


def test_weight_tying_rule_convergence_refuted_beside_an_inconclusive_final_loss_is_inconclusive(tmp_path):
    """Untied reaches the target a step sooner in every seed, final losses equal: convergence refuted, final
    inconclusive (equivalent, no positive control). The count is a check, not a sub-verdict beside them (the
    old rule called this mixed: parameters cut, convergence refuted)."""
    v = analyse(EXP, records(lambda arm, s: (5.0, 4.5) if arm != "untied" else (4.0, 4.5)), P, tmp_path)
    assert decisions(v)["convergence"] == "a_better"
    assert verdicts(v)["convergence"] == "refuted" and verdicts(v)["final"] == "inconclusive"
    assert verdicts(v)["params"] == "supported"
    assert v.verdict == "inconclusive"


def test_weight_tying_rule_refuted_when_tying_converges_later_and_ends_higher(tmp_path):
    v = analyse(EXP, records(lambda arm, s: (5.0, 4.6) if arm != "untied" else (4.0, 4.5)), P, tmp_path)
    assert verdicts(v)["convergence"] == "refuted" and verdicts(v)["final"] == "refuted"
    assert v.verdict == "refuted"
    v = analyse(EXP, records(lambda arm, s: (5.0, 4.5) if arm == "untied" else (4.0, 4.6)), P, tmp_path)
    assert verdicts(v)["convergence"] == "supported" and verdicts(v)["final"] == "refuted"
    assert v.verdict == "mixed"  # sooner but worse


def test_weight_tying_rule_a_miscount_stops_the_claim(tmp_path):
    """V·d is an identity the harness relies on: a count that misses it is a bug, not evidence against tying."""
    with pytest.raises(CheckFailed, match="params/subword-lm"):
        analyse(EXP, records(claimed, miscount=7), P, tmp_path)


def test_weight_tying_rule_an_instantiated_arm_off_its_closed_form_stops_the_claim(tmp_path):
    with pytest.raises(CheckFailed, match="instantiated"):
        analyse(EXP, records(claimed, instantiated_off=3), P, tmp_path)


def test_weight_tying_rule_underpowered_null_is_inconclusive_with_the_detectable_effect(tmp_path):
    # tied − untied steps and final losses vary by seed: significant in neither, nor equivalent
    extra = {0: 0.3, 1: 1.5, 2: 0.2, 3: -1.6}
    spec = lambda arm, s: (4.0 + extra[s], 4.5 + 0.1 * extra[s]) if arm == "tied" else (4.0, 4.5)  # noqa: E731
    v = analyse(EXP, records(spec), P, tmp_path)
    assert decisions(v)["convergence"] == "undecided" and decisions(v)["final"] == "undecided"
    assert verdicts(v)["convergence"] == verdicts(v)["final"] == "inconclusive"
    assert v.verdict == "inconclusive"
    fin = comparison(v, "final")
    assert fin.mde is not None and fin.mde > MOD.MARGIN
    assert f"detectable ≥ {fin.mde:.2g}" in sub(v, "final").detail


def test_weight_tying_rule_equivalence_without_positive_control_does_not_refute(tmp_path):
    v = analyse(EXP, records(lambda arm, s: (4.0, 4.5)), P, tmp_path)
    d = decisions(v)
    assert d["final"] == "equivalent" and d["convergence"] == "undecided"  # log-rank: no equivalence test
    assert verdicts(v)["convergence"] == verdicts(v)["final"] == "inconclusive"
    detail = sub(v, "final").detail
    assert f"within ±{MOD.MARGIN:g}" in detail and detail.endswith(": equivalent")
    assert v.verdict == "inconclusive"


def test_weight_tying_rule_an_effect_inside_the_noise_floor_is_not_supported(tmp_path):
    """Tied ends 0.03 nats lower in every seed (p tiny), but the null pair's seeds differ by up to ±0.15: the
    effect is inside the noise floor, so it is undecided and the final loss is not supported."""
    recs = records(lambda arm, s: (4.0, 4.47) if arm == "tied" else (4.0, 4.5))
    for r in recs:
        if r["config"]["part"] == "null":
            r["metrics"]["final_val"] += (0.15, -0.1, 0.12, -0.15)[r["config"]["seed"] % MOD.NULL_OFFSET]
    v = analyse(EXP, recs, P, tmp_path)
    fin = comparison(v, "final")
    assert fin.p < 0.05 and fin.in_noise and fin.decision == "undecided"
    assert verdicts(v)["final"] == "inconclusive" and "inside the noise floor" in sub(v, "final").detail


def test_weight_tying_rule_neither_arm_learned_is_excluded(tmp_path):
    # every arm ends at the unigram level: above the learned line, and the target is never reached
    v = analyse(EXP, records(lambda arm, s: (4.0, UNIGRAM)), P, tmp_path)
    d = decisions(v)
    for cid in ("convergence", "final", "equal-params/steps_to_target", "equal-params/final_val"):
        assert d[cid] == "excluded", cid
    assert verdicts(v)["convergence"] == verdicts(v)["equal-params"] == "inconclusive"
    assert comparison(v, "convergence").learned_a == 0
    assert v.verdict == "inconclusive"


def test_weight_tying_rule_one_arm_learning_is_not_excluded(tmp_path):
    # untied learns, tied does not: a comparison, not an exclusion (the tied runs never reach the target)
    v = analyse(EXP, records(lambda arm, s: (4.0, UNIGRAM) if arm == "tied" else (4.0, 4.5)), P, tmp_path)
    d = decisions(v)
    assert d["final"] == "a_better" and d["convergence"] == "a_better"  # tied censored at the horizon
    assert verdicts(v)["final"] == "refuted" and v.verdict == "refuted"


def test_weight_tying_rule_diverged_runs_leave_the_paired_comparison_and_never_converge(tmp_path):
    recs = records(claimed)
    for r in recs:
        if r["config"].get("arm") == "tied" and r["config"]["seed"] == 1:
            r["metrics"].update(diverged_at=7, final_val=None, val_loss=[START, 5.0, None])
    v = analyse(EXP, recs, P, tmp_path)
    fin = comparison(v, "final")
    assert fin.n == 3 and "[1]" in fin.note
    steps = comparison(v, "convergence")  # the diverged run never reached the target: censored at the horizon
    assert steps.n_b == 4 and steps.learned_b == 3 and steps.mean_b > 4.5


# ------------------------------------------------------------------ equal parameters
def test_equal_parameter_sub_verdict_supported_when_the_wide_tied_arm_wins(tmp_path):
    v = analyse(EXP, records(claimed), P, tmp_path)
    d = decisions(v)
    assert d["equal-params/steps_to_target"] == "b_better" and d["equal-params/final_val"] == "b_better"
    s = sub(v, "equal-params")
    assert s.verdict == "supported" and set(s.comparisons) == {
        "equal-params/steps_to_target",
        "equal-params/final_val",
    }
    assert not s.counts and v.evidence["sub_verdicts"]["equal-params"] == "supported"


def test_equal_parameter_sub_verdict_mixed_when_its_measures_disagree(tmp_path):
    # the wide tied arm reaches the target sooner but ends higher; tied and untied are as claimed
    def spec(arm, s):
        return {"tied": (4.0, 4.5), "untied": (5.0, 4.6), "tied-wide": (4.0, 4.8)}[arm]

    v = analyse(EXP, records(spec), P, tmp_path)
    d = decisions(v)
    assert d["equal-params/steps_to_target"] == "b_better" and d["equal-params/final_val"] == "a_better"
    assert verdicts(v)["equal-params"] == "mixed"
    assert v.verdict == "supported"  # reported only: the overall verdict is convergence and final loss


def test_equal_parameter_sub_verdict_refuted_when_untied_wins(tmp_path):
    def spec(arm, s):
        return {"tied": (4.0, 4.5), "untied": (5.0, 4.6), "tied-wide": (5.8, 4.9)}[arm]

    v = analyse(EXP, records(spec), P, tmp_path)
    assert verdicts(v)["equal-params"] == "refuted"
    assert v.verdict == "supported"


# ------------------------------------------------------------------ the parameter-matched arm
@pytest.mark.parametrize(
    "profile, vocab", [("quick", 4096), ("default", 4096), ("quick", 8192), ("full", 4096), ("default", 1000)]
)
def test_matched_d_ff_gives_the_untied_parameter_count(profile, vocab):
    p = EXP.profiles[profile]
    untied = model_params(model_config(p, vocab, tie_weights=False))
    tied = model_config(p, vocab, tie_weights=True)
    f = matched_d_ff(p, vocab)
    assert f > tied.ff
    wide = model_params(tied.replace(d_ff=f))
    assert abs(wide - untied) / untied < 1e-3
    # the closest width: one unit either way is no closer
    assert all(abs(model_params(tied.replace(d_ff=g)) - untied) >= abs(wide - untied) for g in (f - 1, f + 1))


def test_grid_runs_every_arm_on_every_seed_with_the_matched_width():
    grid = EXP.grid(P)
    train = [c for c in grid if c["part"] == "train"]
    assert sorted((c["arm"], c["seed"]) for c in train) == sorted(
        (a, s) for a in TYING_ARMS for s in P["seeds"]
    )
    (counts,) = [c for c in grid if c["part"] == "counts"]
    wide = [c for c in train if c["arm"] == "tied-wide"]
    assert all(c["d_ff_wide"] == counts["d_ff_wide"] for c in wide)
    assert all("d_ff_wide" not in c for c in train if c["arm"] != "tied-wide")
    null = [c for c in grid if c["part"] == "null"]
    assert {(c["arm"], c["seed"]) for c in null} == {("untied", s + MOD.NULL_OFFSET) for s in P["seeds"]}


def test_rule_text_names_the_measures_and_margins():
    rule = EXP.rule_text(P)
    assert "log-rank test, censored at step 12" in rule and f"TOST against ±{MOD.MARGIN:g}" in rule
    assert "V·d" in rule and "positive control" in rule and "(params, instantiated) must pass" in rule
    assert "(convergence, final) combined" in rule
