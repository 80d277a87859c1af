"""The label_smoothing rule on synthetic run records: every outcome it can give.

The quick profile's grid with four seeds (a paired test needs a few to decide), and a profile with two
smoothed ε where ε values must disagree. Each run's two readouts (the last step and the early-stopped
checkpoint) are built per ε: the training-loss price, the accuracy gain and the calibration gains can each
hold, fail, stay undecided, sit inside the null pair's noise floor, or the runs can fail to learn. The verdict
combines the two counted sub-claims (price, accuracy); the others are reported beside it."""

import sys

import numpy as np
import pytest

from tfclaims.harness.registry import load

from rules import analyse, comparison, decisions, record, sub, verdicts

EXP = load("label_smoothing")
MOD = sys.modules[type(EXP).__module__]
P = {**EXP.profiles["quick"], "seeds": [0, 1, 2, 3]}  # ε ∈ {0, 0.1}
P3 = {**P, "epsilons": [0.0, 0.1, 0.2]}
UNIGRAM = 6.30
N_BINS = MOD.N_BINS
TOKENIZER = {"tokenizer": "byte-level BPE", "vocab_size": 4096, "chars_per_token": 2.91, "train_tokens": 1_467_494,
             "val_tokens": 187_421}  # fmt: skip
KEYS = ("train_nll", "test_acc", "test_nll", "test_ece", "test_ece_ts", "test_nll_ts")
SCALE = {
    "train_nll": 1.0,
    "test_nll": 1.0,
    "test_nll_ts": 1.0,
    "test_acc": 0.1,
    "test_ece": 0.1,
    "test_ece_ts": 0.1,
}
JITTER = np.array([0.0, 0.03, -0.02, 0.01])  # seed-to-seed spread shared by every ε (paired), × SCALE
OWN = {  # and a little of each ε's own (the null pair's too), × SCALE
    0.0: np.array([0.002, -0.001, 0.0015, -0.002]),
    0.1: np.array([-0.0015, 0.002, -0.001, 0.0015]),
    0.2: np.array([0.001, 0.0015, -0.002, -0.0005]),
    "null": np.array([0.0015, -0.002, 0.001, -0.0005]),
}
BASE = {
    "train_nll": 3.0,
    "test_acc": 0.20,
    "test_nll": 6.0,
    "test_ece": 0.10,
    "test_ece_ts": 0.02,
    "test_nll_ts": 5.8,
}
# the claim as stated: a training-loss price, an accuracy gain, a test-loss gain, lower ECE before scaling
# (and the same ECE after it: one temperature does what smoothing does)
CLAIMED = {
    "train_nll": 3.3,
    "test_acc": 0.22,
    "test_nll": 5.9,
    "test_ece": 0.03,
    "test_ece_ts": 0.02,
    "test_nll_ts": 5.78,
}


def reliability(conf_shift: float) -> dict:
    """A reliability diagram: empty low bins (NaN), over-confident high ones."""
    count = [0.0] * 5 + [10.0] * 10
    centres = [(i + 0.5) / N_BINS for i in range(N_BINS)]
    conf = [float("nan") if c == 0 else x for c, x in zip(count, centres)]
    acc = [float("nan") if c == 0 else max(0.0, x - conf_shift) for c, x in zip(count, centres)]
    return {"count": count, "confidence": conf, "accuracy": acc}


def readout(v: dict, cal_nll: float, temperature: float) -> dict:
    """One readout as smoothing_train's `_calibrated` gives it."""
    return {
        "temperature": temperature, "cal_nll": cal_nll, "test_nll": v["test_nll"], "test_acc": v["test_acc"],
        "test_ece": v["test_ece"], "test_conf": v["test_acc"] + v["test_ece"], "reliability": reliability(v["test_ece"]),
        "test_nll_ts": v["test_nll_ts"], "test_acc_ts": v["test_acc"], "test_ece_ts": v["test_ece_ts"],
        "test_conf_ts": v["test_acc"] + v["test_ece_ts"], "reliability_ts": reliability(v["test_ece_ts"]),
        "train_nll": v["train_nll"], "train_acc": 0.5, "train_ece": 0.2, "train_conf": 0.7,
    }  # fmt: skip


def probe(v: dict, later: float) -> dict:
    """One evaluation's probe: train_/cal_/test_ nll, acc, ece, conf (`later` ∈ [0, 1] along training)."""
    out = {}
    for split, nll in (
        ("train", v["train_nll"] + 2 * (1 - later)),
        ("cal", v["test_nll"] - 0.3),
        ("test", v["test_nll"]),
    ):
        out.update({f"{split}_nll": nll, f"{split}_acc": v["test_acc"] * later, f"{split}_ece": v["test_ece"] * later,
                    f"{split}_conf": v["test_acc"] * later + v["test_ece"] * later})  # fmt: skip
    return out


def metrics(v: dict, cal_nll: float, eps: float) -> dict:
    final = readout(v, cal_nll, 1.5 - eps)
    early = {**readout({**v, "train_nll": v["train_nll"] + 0.5}, cal_nll - 0.05, 1.2 - eps), "step": 6}
    return {
        "eval_steps": [0, 6, 12], "val_loss": [8.3, cal_nll - 0.05, cal_nll], "final_val": cal_nll,
        "probes": [probe(v, x) for x in (0.0, 0.5, 1.0)], "diverged_at": None, "unigram_xent": UNIGRAM,
        "n_params": 144_864, "tokenizer": TOKENIZER, "epochs": 1.5, "final": final, "early": early,
    }  # fmt: skip


def records(spec, p=P, cal_nll=5.5, null=None):
    """spec(eps, seed) -> {measure: value} before the jitter (missing measures: BASE); the null pair reruns
    ε = 0, plus null(seed) -> {measure: shift} where given. `cal_nll(eps, seed)` (or a number): the
    calibration-split loss, which decides 'learned'."""
    recs = []
    for i, c in enumerate(EXP.grid(p)):
        s = c["seed"] % MOD.NULL_OFFSET
        own = OWN["null" if c["part"] == "null" else c["eps"]][s]
        v = {**BASE, **spec(c["eps"], s)}
        if c["part"] == "null" and null is not None:
            v = {k: x + null(s).get(k, 0.0) for k, x in v.items()}
        v = {k: v[k] + (JITTER[s] + own) * SCALE[k] for k in KEYS}
        cn = cal_nll(c["eps"], s) if callable(cal_nll) else cal_nll
        recs.append(record(c, metrics(v, cn, c["eps"]), f"r{i}"))
    return recs


def claimed(eps, s):
    return CLAIMED if eps > 0 else {}


def cid(sub_id, eps=None):
    """A comparison id: `sub` in the quick profile (one smoothed ε), `sub/eps0.1` with several."""
    return sub_id if eps is None else f"{sub_id}/eps{eps:g}"


SHOWN = ("price", "accuracy", "accuracy-early", "test-loss", "ece", "ece-ts")


# ------------------------------------------------------------------ the overall verdict
def test_label_smoothing_rule_supported_when_the_price_and_the_accuracy_gain_hold(tmp_path):
    v = analyse(EXP, records(claimed), P, tmp_path)
    d = decisions(v)
    assert d["price"] == "a_better"  # ε = 0 (a) has the lower training loss: the price
    assert d["accuracy"] == "b_better" and d["accuracy-early"] == "b_better"
    assert d["test-loss"] == "b_better" and d["ece"] == "b_better"
    assert verdicts(v) == {"price": "supported", "accuracy": "supported", "accuracy-early": "supported",
                           "test-loss": "supported", "ece": "supported", "ece-ts": "refuted"}  # fmt: skip
    assert {s.id for s in v.sub_verdicts if s.counts} == {"price", "accuracy"}
    assert v.verdict == "supported"
    assert set(d) == set(SHOWN)  # one comparison per sub-claim (one smoothed ε)
    assert [c.id for c in v.noise_floor] == [
        "null/train_nll_final", "null/test_acc_final", "null/test_acc_early", "null/test_nll_final",
        "null/test_ece_final", "null/test_ece_ts_final",
    ]  # fmt: skip
    assert all(c.noise is not None for c in v.comparisons)
    acc = comparison(v, "accuracy")
    assert acc.paired and acc.n == 4 and acc.margin == MOD.MEASURES["test_acc"][4] == 0.005
    assert acc.learned_a == acc.learned_b == 4
    assert acc.diff == pytest.approx(0.02 + np.mean(OWN[0.1] - OWN[0.0]) * 0.1)
    assert v.evidence["temperature"][0.0] == pytest.approx(1.5)
    assert v.evidence["temperature"][0.1] == pytest.approx(1.4)
    assert v.evidence["tokenizer"] == TOKENIZER
    assert v.evidence["sub_verdicts"]["accuracy"] == "supported"


@pytest.mark.parametrize(
    "spec, price, accuracy, overall",
    [
        # the price is paid but accuracy falls: the old rule ('refuted if accuracy is refuted') said refuted
        ({**CLAIMED, "test_acc": 0.18}, "supported", "refuted", "mixed"),
        # accuracy falls and the training loss does not rise: the old rule said refuted
        ({"test_acc": 0.18}, "inconclusive", "refuted", "inconclusive"),
        # both fail: smoothing lowers the training loss and the accuracy
        ({"train_nll": 2.7, "test_acc": 0.18}, "refuted", "refuted", "refuted"),
        # smoothing lowers the training loss but raises accuracy
        ({**CLAIMED, "train_nll": 2.7}, "refuted", "supported", "mixed"),
        # the price alone
        ({"train_nll": 3.3}, "supported", "inconclusive", "inconclusive"),
    ],
)
def test_label_smoothing_overall_verdict_combines_price_and_accuracy(
    tmp_path, spec, price, accuracy, overall
):
    v = analyse(EXP, records(lambda e, s: spec if e > 0 else {}), P, tmp_path)
    assert verdicts(v)["price"] == price and verdicts(v)["accuracy"] == accuracy
    assert v.verdict == overall


def test_label_smoothing_rule_underpowered_null_is_inconclusive_not_refuted(tmp_path):
    # accuracy Δ ≈ +0.005 with a seed spread (×0.1 below) that makes its CI about ±0.06
    noise = {0: 0.6, 1: -0.5, 2: 0.4, 3: -0.3}
    v = analyse(
        EXP,
        records(lambda e, s: {**CLAIMED, "test_acc": 0.205 + noise[s] * 0.1} if e > 0 else {}),
        P,
        tmp_path,
    )
    assert decisions(v)["accuracy"] == "undecided"
    assert verdicts(v)["accuracy"] == "inconclusive"
    assert v.verdict == "inconclusive"  # price supported, accuracy inconclusive
    acc = comparison(v, "accuracy")
    assert acc.mde is not None and acc.mde > acc.margin
    assert "smallest detectable effect" in sub(v, "accuracy").detail
    assert f"detectable ≥ {acc.mde:.2g}" in sub(v, "accuracy").detail
    assert any("seeds per arm would resolve the margin" in c for c in v.caveats)


def test_label_smoothing_rule_equivalent_accuracy_without_positive_control_is_inconclusive(tmp_path):
    v = analyse(
        EXP, records(lambda e, s: {**CLAIMED, "test_acc": BASE["test_acc"]} if e > 0 else {}), P, tmp_path
    )
    assert decisions(v)["accuracy"] == "equivalent"
    s = sub(v, "accuracy")
    assert s.verdict == "inconclusive" and "no positive control" in s.detail
    assert v.verdict == "inconclusive"


def test_label_smoothing_rule_mixed_when_epsilon_values_disagree(tmp_path):
    def spec(e, s):
        if e == 0.1:
            return CLAIMED
        return {**CLAIMED, "test_acc": 0.18} if e == 0.2 else {}

    v = analyse(EXP, records(spec, P3), P3, tmp_path)
    d = decisions(v)
    assert d[cid("accuracy", 0.1)] == "b_better" and d[cid("accuracy", 0.2)] == "a_better"
    s = sub(v, "accuracy")
    assert s.verdict == "mixed"
    assert "holds in eps0.1" in s.detail and "fails in eps0.2" in s.detail
    assert s.comparisons == [cid("accuracy", 0.1), cid("accuracy", 0.2)]
    assert verdicts(v)["price"] == "supported"
    assert v.verdict == "mixed"


def test_label_smoothing_rule_holm_corrects_across_epsilon(tmp_path):
    v = analyse(EXP, records(lambda e, s: CLAIMED if e > 0 else {}, P3), P3, tmp_path)
    a, b = comparison(v, cid("accuracy", 0.1)), comparison(v, cid("accuracy", 0.2))
    (lo, c_lo), (hi, c_hi) = sorted([(a.p_raw, a), (b.p_raw, b)], key=lambda x: x[0])
    # Holm over two ε: the smaller p doubled, the larger kept (or raised to the first)
    assert c_lo.p == pytest.approx(min(1.0, 2 * lo)) and c_hi.p == pytest.approx(min(1.0, max(2 * lo, hi)))
    assert c_lo.p > c_lo.p_raw
    assert c_lo.level == pytest.approx(1 - 0.05 / 2)  # its interval at the level Holm tested it at
    assert v.verdict == "supported"


def test_label_smoothing_rule_neither_arm_learned_is_excluded(tmp_path):
    # the early-stopped calibration loss at the unigram level: no run learned
    v = analyse(EXP, records(claimed, cal_nll=UNIGRAM), P, tmp_path)
    d = decisions(v)
    assert all(x == "excluded" for x in d.values()), d
    assert all(s.verdict == "inconclusive" for s in v.sub_verdicts)
    assert v.verdict == "inconclusive"
    assert comparison(v, "accuracy").learned_a == 0


def test_label_smoothing_rule_learned_is_judged_at_the_early_stopped_checkpoint(tmp_path):
    """Only the ε = 0 runs fail to learn: a comparison, not an exclusion."""
    v = analyse(EXP, records(claimed, cal_nll=lambda e, s: UNIGRAM if e == 0 else 5.5), P, tmp_path)
    acc = comparison(v, "accuracy")
    assert acc.decision == "b_better" and acc.learned_a == 0 and acc.learned_b == 4
    assert v.verdict == "supported"


# ------------------------------------------------------------------ the noise floor
def test_an_ece_gain_inside_the_null_pairs_spread_is_not_supported(tmp_path):
    """The committed default's ε = 0.1 pattern: ECE lower by 0.02 in every seed (p small), but the ε = 0 rerun
    moves ECE by up to ±0.03: the gain is inside the noise floor, so it is undecided, not supported."""
    spread = {0: 0.03, 1: -0.025, 2: 0.02, 3: -0.03}
    v = analyse(
        EXP,
        records(
            lambda e, s: {**CLAIMED, "test_ece": 0.08} if e > 0 else {},
            null=lambda s: {"test_ece": spread[s]},
        ),
        P,
        tmp_path,
    )
    c = comparison(v, "ece")
    assert (
        c.p < 0.05 and c.diff == pytest.approx(-0.02, abs=0.002) and c.in_noise and c.decision == "undecided"
    )
    assert c.noise > 0.02
    assert verdicts(v)["ece"] == "inconclusive"
    assert "inside the noise floor" in sub(v, "ece").detail
    # with no positive control left, equal ECE after scaling no longer refutes
    assert v.evidence["positive_control_after_ts"] is False
    assert verdicts(v)["ece-ts"] == "inconclusive"
    assert v.verdict == "supported"  # ECE is reported beside the verdict


def test_an_accuracy_gain_inside_the_noise_floor_leaves_the_claim_inconclusive(tmp_path):
    spread = {0: 0.008, 1: -0.007, 2: 0.006, 3: -0.008}
    v = analyse(
        EXP,
        records(
            lambda e, s: {**CLAIMED, "test_acc": 0.205} if e > 0 else {},
            null=lambda s: {"test_acc": spread[s]},
        ),
        P,
        tmp_path,
    )
    c = comparison(v, "accuracy")
    assert c.p < 0.05 and c.in_noise and c.decision == "undecided"
    assert verdicts(v)["accuracy"] == "inconclusive" and v.verdict == "inconclusive"


# ------------------------------------------------------------------ calibration
def test_ece_after_scaling_refuted_when_scaling_does_what_smoothing_does(tmp_path):
    # before scaling: ECE 0.10 → 0.03, beyond the 0.01 margin (the positive control); after: equal
    v = analyse(EXP, records(claimed), P, tmp_path)
    before = comparison(v, "ece")
    assert before.decision == "b_better" and before.ci_high < -before.margin
    assert v.evidence["positive_control_after_ts"] is True
    assert decisions(v)["ece-ts"] == "equivalent"
    assert verdicts(v)["ece-ts"] == "refuted"
    assert "Positive control: (ece)" in EXP.rule_text(P)
    assert v.verdict == "supported"  # reported only


def test_ece_after_scaling_inconclusive_without_a_positive_control(tmp_path):
    # before scaling the gain is significant but inside the margin (0.10 → 0.095): no control
    v = analyse(EXP, records(lambda e, s: {**CLAIMED, "test_ece": 0.095} if e > 0 else {}), P, tmp_path)
    before = comparison(v, "ece")
    assert before.decision == "b_better" and not before.ci_high < -before.margin
    assert v.evidence["positive_control_after_ts"] is False
    assert decisions(v)["ece-ts"] == "equivalent"
    assert verdicts(v)["ece-ts"] == "inconclusive"


def test_ece_after_scaling_inconclusive_when_before_scaling_is_equivalent(tmp_path):
    v = analyse(
        EXP, records(lambda e, s: {**CLAIMED, "test_ece": BASE["test_ece"]} if e > 0 else {}), P, tmp_path
    )
    assert decisions(v)["ece"] == "equivalent"
    assert verdicts(v)["ece"] == "inconclusive"  # its own sub-verdict has no control either
    assert v.evidence["positive_control_after_ts"] is False
    assert verdicts(v)["ece-ts"] == "inconclusive"


def test_ece_after_scaling_supported_when_smoothing_beats_one_temperature(tmp_path):
    v = analyse(EXP, records(lambda e, s: {**CLAIMED, "test_ece_ts": 0.005} if e > 0 else {}), P, tmp_path)
    assert decisions(v)["ece-ts"] == "b_better"
    assert verdicts(v)["ece-ts"] == "supported"


# ------------------------------------------------------------------ grid
def test_grid_runs_every_epsilon_on_every_seed_and_the_null_pair():
    grid = EXP.grid(P3)
    train = [c for c in grid if c["part"] == "train"]
    assert sorted((c["eps"], c["seed"]) for c in train) == sorted(
        (e, s) for e in P3["epsilons"] for s in P3["seeds"]
    )
    null = [c for c in grid if c["part"] == "null"]
    assert {(c["eps"], c["seed"]) for c in null} == {(0.0, s + MOD.NULL_OFFSET) for s in P3["seeds"]}
    assert all(c["subset_tokens"] == P3["subset_tokens"] and c["vocab"] == P3["vocab"] for c in grid)
