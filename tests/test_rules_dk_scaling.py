"""The dk_scaling rule on synthetic run records: every outcome it can give.

The quick profile's grid with four seeds (a paired test needs a few to decide); the Monte Carlo rows are built to
pass or fail the law and saturation checks, the training arms to make each (init, d_k) cell go either way, stay
undecided, or fail to learn in both arms."""

import numpy as np

from tfclaims.registry import load

from rules import analyse, decisions, record, sub_verdict

EXP = load("dk_scaling")
P = {**EXP.profiles["quick"], "seeds": [0, 1, 2, 3]}
UNIGRAM = 3.30
JITTER = np.array([0.00, 0.02, -0.015, 0.01])  # seed-to-seed spread shared by both arms (paired)


def mc_rows(law=1.0, sat=True):
    rows = []
    for dk in P["mc_dks"]:
        big = dk == max(P["mc_dks"])
        rows.append(
            {
                "dk": dk, "var_dot": law * dk, "var_scaled": law, "var_additive": 0.1 + 0.001 * dk,
                "unscaled": {"max_prob": 0.95 if (big and sat) else 0.5, "entropy": 0.2,
                             "jacobian_norm": 0.01 if (big and sat) else 0.15},
                "scaled": {"max_prob": 0.11, "entropy": 3.9, "jacobian_norm": 0.2},
            }
        )  # fmt: skip
    return rows


def train_metrics(final, seed):
    v = final + JITTER[seed % len(JITTER)]
    return {
        "final_val": float(v), "val_loss": [4.4, float(v) + 0.3, float(v)], "eval_steps": [0, 6, 12],
        "diverged_at": None, "unigram_xent": UNIGRAM,
        "probes": [{"logit_var": 1.0, "max_prob": 0.2} for _ in range(3)],
    }  # fmt: skip


def records(cell_loss, *, law=1.0, sat=True):
    """cell_loss(dk, init, scaled, seed) -> final validation loss before the shared jitter."""
    recs = []
    for i, c in enumerate(EXP.grid(P)):
        part = c["part"]
        if part == "monte_carlo":
            m = {"rows": mc_rows(law, sat)}
        elif part == "init":
            m = {
                "var_q": 0.01, "var_k": 0.01, "var_dot": 1e-4 * c["dk"], "law_prediction": 1e-4 * c["dk"],
                "unscaled": {"max_prob": 0.1}, "scaled": {"max_prob": 0.1},
            }  # fmt: skip
        else:
            s = c["seed"] % 1000
            m = train_metrics(cell_loss(c["dk"], c["init"], c["scaled"], s), s)
        recs.append(record(c, m, f"r{i}"))
    return recs


def train_cells(v):
    return {k: d for k, d in decisions(v).items() if ":unscaled-vs-scaled" in k}


def test_dk_scaling_rule_supported_when_law_holds_softmax_saturates_and_unscaled_trains_worse(tmp_path):
    v = analyse(EXP, records(lambda dk, init, scaled, s: 2.6 if scaled else 2.9), P, tmp_path)
    assert v.verdict == "supported"
    assert set(train_cells(v).values()) == {"a_better"}  # a = scaled
    assert sub_verdict(v, "Unscaled training") == "supported"
    assert all(
        d == "equivalent" for k, d in decisions(v).items() if k.startswith(("law:", "sat:", "additive:"))
    )
    assert v.noise_floor and all(c.id.startswith("null:") for c in v.noise_floor)
    cell = next(c for c in v.comparisons if c.id.startswith("dk32"))
    assert cell.paired and cell.n == 4 and cell.noise is not None and cell.margin == 0.02


def test_dk_scaling_rule_training_refuted_when_unscaled_trains_significantly_better(tmp_path):
    v = analyse(EXP, records(lambda dk, init, scaled, s: 2.9 if scaled else 2.6), P, tmp_path)
    assert set(train_cells(v).values()) == {"b_better"}
    assert sub_verdict(v, "Unscaled training") == "refuted"
    assert v.verdict == "mixed"  # law and saturation hold, training refutes


def test_dk_scaling_rule_refuted_when_the_variance_law_fails(tmp_path):
    v = analyse(EXP, records(lambda dk, init, scaled, s: 2.6 if scaled else 2.9, law=1.5), P, tmp_path)
    assert sub_verdict(v, "Var(q·k)") == "refuted"
    assert v.verdict == "refuted"


def test_dk_scaling_rule_saturation_check_failing_makes_it_mixed(tmp_path):
    v = analyse(EXP, records(lambda dk, init, scaled, s: 2.6 if scaled else 2.9, sat=False), P, tmp_path)
    assert sub_verdict(v, "Unscaled softmax") == "refuted"
    assert decisions(v)["sat:jacobian-ratio-dk64"] == "undecided"
    assert v.verdict == "mixed"


def test_dk_scaling_rule_equivalent_training_without_positive_control_is_inconclusive(tmp_path):
    # |Δ| = 0.001 nats with small spread: TOST passes, yet with no positive control it must not refute
    wobble = {0: 0.003, 1: -0.002, 2: 0.001, 3: -0.003}
    v = analyse(
        EXP, records(lambda dk, init, scaled, s: 2.6 + (0.001 + wobble[s] if scaled else 0.0)), P, tmp_path
    )
    assert set(train_cells(v).values()) == {"equivalent"}
    assert sub_verdict(v, "Unscaled training") == "inconclusive"
    assert v.verdict == "inconclusive"


def test_dk_scaling_rule_underpowered_null_is_inconclusive(tmp_path):
    noise = {0: 0.3, 1: -0.25, 2: 0.1, 3: -0.2}
    v = analyse(EXP, records(lambda dk, init, scaled, s: 2.6 + (0.0 if scaled else noise[s])), P, tmp_path)
    assert set(train_cells(v).values()) == {"undecided"}
    assert sub_verdict(v, "Unscaled training") == "inconclusive"
    assert all(c.mde is not None for c in v.comparisons if ":unscaled-vs-scaled" in c.id)


def test_dk_scaling_rule_mixed_when_cells_disagree(tmp_path):
    v = analyse(EXP, records(lambda dk, init, scaled, s: (2.6 if scaled else 2.9) if dk == 32 else (2.9 if scaled else 2.6)), P, tmp_path)  # fmt: skip
    cells = train_cells(v)
    assert cells["dk32-normal:unscaled-vs-scaled"] == "a_better"
    assert cells["dk8-normal:unscaled-vs-scaled"] == "b_better"
    assert sub_verdict(v, "Unscaled training") == "mixed"
    assert v.verdict == "mixed"


def test_dk_scaling_rule_cell_where_neither_arm_learned_is_excluded_not_counted(tmp_path):
    # d_k = 8: both arms stay at the unigram level (one of them far above): excluded, not a win for scaling
    v = analyse(
        EXP,
        records(
            lambda dk, init, scaled, s: (2.6 if scaled else 2.9) if dk == 32 else (UNIGRAM if scaled else 4.0)
        ),
        P,
        tmp_path,
    )
    cells = train_cells(v)
    assert cells["dk8-normal:unscaled-vs-scaled"] == "excluded"
    assert cells["dk32-normal:unscaled-vs-scaled"] == "a_better"
    assert sub_verdict(v, "Unscaled training") == "supported"
    ex = next(c for c in v.comparisons if c.id == "dk8-normal:unscaled-vs-scaled")
    assert ex.learned_a == 0 and ex.learned_b == 0 and ex.p is None
