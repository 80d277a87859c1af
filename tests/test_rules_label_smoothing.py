"""The label_smoothing rule on synthetic run records: every outcome it can give.

The quick profile's grid with four seeds (a paired test needs a few to decide). Each run's end-of-training
measures are built per regime and ε: the training-loss price and the accuracy gain can each hold, fail, stay
undecided, or the regime can fail to learn in both arms."""

import numpy as np

from tfclaims.registry import load

from rules import analyse, decisions, record, sub_verdict

EXP = load("label_smoothing")
P = {**EXP.profiles["quick"], "seeds": [0, 1, 2, 3]}
UNIGRAM = 3.30
JITTER = np.array([0.0, 0.01, -0.008, 0.004])  # seed-to-seed spread shared by both arms (paired)
OWN = np.array([0.002, -0.001, 0.0015, -0.002])  # and a little of the smoothed arm's own


def final(train_nll, val_nll, acc, ece, seed, smoothed):
    j = JITTER[seed] + (OWN[seed] if smoothed else 0.0)
    return {
        "train_nll": train_nll + j, "val_nll": val_nll + j, "val_acc": acc + j / 10, "val_ece": ece + j / 10,
        "val_conf": 0.4 - (0.02 if smoothed else 0.0), "train_acc": acc, "train_ece": ece, "train_conf": 0.4,
    }  # fmt: skip


def metrics(f):
    probes = [{**f, "train_nll": f["train_nll"] + 1.0}, f]
    return {
        "final": f, "final_val": f["val_nll"], "val_loss": [f["val_nll"] + 1.0, f["val_nll"]], "eval_steps": [0, 12],
        "diverged_at": None, "unigram_xent": UNIGRAM, "probes": probes,
        "reliability": {"count": [0, 5, 10], "confidence": [np.nan, 0.3, 0.6], "accuracy": [np.nan, 0.25, 0.55]},
    }  # fmt: skip


def records(measures):
    """measures(regime, smoothed, seed) -> (train_nll, val_nll, val_acc, val_ece) before the jitter."""
    recs = []
    for i, c in enumerate(EXP.grid(P)):
        s, smoothed = c["seed"] % 1000, c["eps"] > 0
        f = final(*measures(c["regime"], smoothed, s), s, smoothed)
        recs.append(record(c, metrics(f), f"r{i}"))
    return recs


def claimed(regime, smoothed, s):
    """The claim as stated: ε = 0.1 raises training loss by 0.1, lifts accuracy by 0.03 and lowers ECE."""
    return (2.0 + 0.1, 2.3 - 0.05, 0.33, 0.01) if smoothed else (2.0, 2.3, 0.30, 0.03)


def test_label_smoothing_rule_supported_when_price_and_gain_hold_in_both_regimes(tmp_path):
    v = analyse(EXP, records(claimed), P, tmp_path)
    d = decisions(v)
    for r in ("full", "subset"):
        assert d[f"{r}:train_nll:eps0.1-vs-0"] == "a_better"  # ε = 0 (a) has the lower training loss
        assert d[f"{r}:val_acc:eps0.1-vs-0"] == "b_better"
        assert d[f"{r}:val_ece:eps0.1-vs-0"] == "b_better"
    assert (
        sub_verdict(v, "Training loss higher") == "supported"
        and sub_verdict(v, "Validation accuracy") == "supported"
    )
    assert v.verdict == "supported"
    assert len(v.noise_floor) == 8 and all(c.noise is not None for c in v.comparisons)
    acc = next(c for c in v.comparisons if c.id == "full:val_acc:eps0.1-vs-0")
    assert acc.paired and acc.n == 4 and acc.margin == 0.01


def test_label_smoothing_rule_refuted_when_accuracy_is_significantly_lower_in_both_regimes(tmp_path):
    def worse(regime, smoothed, s):
        return (2.1, 2.4, 0.27, 0.03) if smoothed else (2.0, 2.3, 0.30, 0.03)

    v = analyse(EXP, records(worse), P, tmp_path)
    assert decisions(v)["full:val_acc:eps0.1-vs-0"] == "a_better"
    assert sub_verdict(v, "Validation accuracy") == "refuted"
    assert v.verdict == "refuted"  # the price is paid, the gain is not there


def test_label_smoothing_rule_underpowered_null_is_inconclusive_not_refuted(tmp_path):
    # the committed case: accuracy Δ ≈ +0.005 with a seed spread that makes its CI about ±0.06
    noise = {0: 0.06, 1: -0.05, 2: 0.04, 3: -0.03}

    def null(regime, smoothed, s):
        return (
            (2.0 + 0.02 + noise[s], 2.3, 0.30 + 0.005 + noise[s], 0.03)
            if smoothed
            else (2.0, 2.3, 0.30, 0.03)
        )

    v = analyse(EXP, records(null), P, tmp_path)
    assert decisions(v)["full:val_acc:eps0.1-vs-0"] == "undecided"
    assert sub_verdict(v, "Validation accuracy") == "inconclusive"
    assert v.verdict == "inconclusive"
    acc = next(c for c in v.comparisons if c.id == "full:val_acc:eps0.1-vs-0")
    assert acc.mde is not None and acc.mde > 0.01


def test_label_smoothing_rule_equivalent_accuracy_without_positive_control_is_inconclusive(tmp_path):
    def same(regime, smoothed, s):
        return (2.1, 2.3, 0.30, 0.03) if smoothed else (2.0, 2.3, 0.30, 0.03)

    v = analyse(EXP, records(same), P, tmp_path)
    assert decisions(v)["full:val_acc:eps0.1-vs-0"] == "equivalent"
    assert sub_verdict(v, "Validation accuracy") == "inconclusive"
    assert v.verdict == "inconclusive"


def test_label_smoothing_rule_mixed_when_regimes_disagree(tmp_path):
    def split(regime, smoothed, s):
        if not smoothed:
            return (2.0, 2.3, 0.30, 0.03)
        return (2.1, 2.25, 0.33 if regime == "subset" else 0.27, 0.02)

    v = analyse(EXP, records(split), P, tmp_path)
    d = decisions(v)
    assert d["subset:val_acc:eps0.1-vs-0"] == "b_better" and d["full:val_acc:eps0.1-vs-0"] == "a_better"
    assert sub_verdict(v, "Validation accuracy") == "mixed"
    assert v.verdict == "mixed"


def test_label_smoothing_rule_regime_where_neither_arm_learned_is_excluded(tmp_path):
    def subset_fails(regime, smoothed, s):
        if regime == "subset":
            return (3.2, UNIGRAM, 0.15, 0.05) if smoothed else (3.1, 3.4, 0.18, 0.05)
        return claimed(regime, smoothed, s)

    v = analyse(EXP, records(subset_fails), P, tmp_path)
    d = decisions(v)
    assert all(
        d[f"subset:{k}:eps0.1-vs-0"] == "excluded" for k in ("train_nll", "val_acc", "val_nll", "val_ece")
    )
    assert d["full:val_acc:eps0.1-vs-0"] == "b_better"
    # the excluded regime counts neither for nor against: the full regime decides
    assert sub_verdict(v, "Validation accuracy") == "supported"
    assert v.verdict == "supported"
