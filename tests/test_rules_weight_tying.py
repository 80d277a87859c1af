"""The weight_tying rule on synthetic run records: every outcome it can give.

The quick profile's grid with four seeds (a paired test needs a few to decide). Parameter counts are built to
match V·d (or not); the tied and untied arms to converge faster either way, stay undecided, or fail to learn."""

import numpy as np

from tfclaims.registry import load

from rules import analyse, decisions, record, sub_verdict

EXP = load("weight_tying")
P = {**EXP.profiles["quick"], "seeds": [0, 1, 2, 3]}
UNIGRAM = 3.30
JITTER = np.array([0.00, 0.03, -0.02, 0.01])  # seed-to-seed spread shared by both arms (paired)
UNTIED = np.array([0.004, -0.003, 0.002, -0.001])  # and a little of the untied arm's own


def count_rows(miscount=0):
    rows = []
    for model, V, d, base in (
        ("char LM (this project), d = 32", 85, 32, 16512),
        ("gpt2-small", 50257, 768, 85_000_000),
    ):
        inst = model.startswith("char")
        rows += [
            {"model": model, "tie": True, "V": V, "d": d, "closed_form": base, "instantiated": base if inst else None},
            {"model": model, "tie": False, "V": V, "d": d, "closed_form": base + V * d + miscount,
             "instantiated": base + V * d + miscount if inst else None},
        ]  # fmt: skip
    return rows


def train_metrics(final, seed):
    v = float(final + JITTER[seed % len(JITTER)])
    return {
        "final_val": v, "val_loss": [4.4, v + 0.4, v + 0.2, v], "eval_steps": [0, 4, 8, 12], "diverged_at": None,
        "unigram_xent": UNIGRAM,
    }  # fmt: skip


def records(loss, *, miscount=0):
    """loss(tie, seed) -> final validation loss before the shared jitter (the curve follows it)."""
    recs = []
    for i, c in enumerate(EXP.grid(P)):
        if c["part"] == "counts":
            m = {"rows": count_rows(miscount)}
        else:
            s = c["seed"] % 1000
            m = train_metrics(loss(c["tie"], s) + (0.0 if c["tie"] else UNTIED[s]), s)
        recs.append(record(c, m, f"r{i}"))
    return recs


def test_weight_tying_rule_supported_when_counts_match_and_tied_converges_faster(tmp_path):
    v = analyse(EXP, records(lambda tie, s: 2.5 if tie else 2.7), P, tmp_path)
    assert v.verdict == "supported"
    d = decisions(v)
    assert d["auc:tied-vs-untied"] == "b_better" and d["final:tied-vs-untied"] == "b_better"  # b = tied
    assert all(x == "equivalent" for k, x in d.items() if k.startswith("params:"))
    assert sub_verdict(v, "Faster convergence") == "supported"
    auc = next(c for c in v.comparisons if c.id == "auc:tied-vs-untied")
    assert auc.paired and auc.n == 4 and auc.margin == 0.02 and auc.noise is not None
    assert {c.id for c in v.noise_floor} == {"null:auc", "null:final"}


def test_weight_tying_rule_convergence_refuted_when_untied_is_significantly_better(tmp_path):
    # the committed direction: untied lower in every seed
    v = analyse(EXP, records(lambda tie, s: 2.7 if tie else 2.5), P, tmp_path)
    assert decisions(v)["auc:tied-vs-untied"] == "a_better"
    assert sub_verdict(v, "Faster convergence") == "refuted"
    assert v.verdict == "mixed"  # parameters cut, convergence refuted


def test_weight_tying_rule_refuted_parameters_when_the_count_is_not_v_times_d(tmp_path):
    v = analyse(EXP, records(lambda tie, s: 2.7 if tie else 2.5, miscount=7), P, tmp_path)
    assert sub_verdict(v, "Tying removes") == "refuted"
    assert decisions(v)["params:char-lm"] == "undecided"
    assert v.verdict == "refuted"


def test_weight_tying_rule_underpowered_null_is_inconclusive_not_refuted(tmp_path):
    # tied worse in every seed by a varying amount (+0.05/+0.28/+0.05/+0.30): not significant at n = 4
    extra = {0: 0.05, 1: 0.28, 2: 0.05, 3: -0.30}
    v = analyse(EXP, records(lambda tie, s: 2.5 + (extra[s] if tie else 0.0)), P, tmp_path)
    assert decisions(v)["auc:tied-vs-untied"] == "undecided"
    assert sub_verdict(v, "Faster convergence") == "inconclusive"
    assert v.verdict == "inconclusive"
    auc = next(c for c in v.comparisons if c.id == "auc:tied-vs-untied")
    assert auc.mde is not None and "detectable" in next(
        s.detail for s in v.sub_verdicts if s.name.startswith("Faster")
    )


def test_weight_tying_rule_equivalence_without_positive_control_does_not_refute(tmp_path):
    wobble = {0: 0.003, 1: -0.002, 2: 0.001, 3: -0.003}
    v = analyse(EXP, records(lambda tie, s: 2.5 + (wobble[s] if tie else 0.0)), P, tmp_path)
    assert decisions(v)["auc:tied-vs-untied"] == "equivalent"
    assert sub_verdict(v, "Faster convergence") == "inconclusive"
    assert v.verdict == "inconclusive"


def test_weight_tying_rule_neither_arm_learned_is_excluded(tmp_path):
    v = analyse(EXP, records(lambda tie, s: UNIGRAM if tie else 3.5), P, tmp_path)
    d = decisions(v)
    assert d["auc:tied-vs-untied"] == "excluded" and d["final:tied-vs-untied"] == "excluded"
    assert sub_verdict(v, "Faster convergence") == "inconclusive"
    assert v.verdict == "inconclusive"
