"""The embedding_scale rule on synthetic run records: every outcome it can give.

The quick profile's grid with both inits and four seeds; the as-initialised rows are built to pass or fail the
unit-variance checks, the training arms to make the factor help, hurt, stay undecided, or fail to learn."""

import numpy as np

from tfclaims.registry import load

from rules import analyse, decisions, record, sub_verdict

EXP = load("embedding_scale")
P = {**EXP.profiles["quick"], "inits": ["normal", "xavier"], "seeds": [0, 1, 2, 3]}
UNIGRAM = 3.30
JITTER = np.array([0.00, 0.02, -0.015, 0.01])  # seed-to-seed spread shared by both arms (paired)
WOBBLE = np.array([0.004, -0.003, 0.002, -0.004])


def init_rows(xavier_var=1.0):
    rows = []
    for d in P["init_dims"]:
        for init in ("normal", "xavier"):
            for pos in ("learned", "sinusoidal"):
                for scaled in (False, True):
                    var = (xavier_var / d if init == "xavier" else 0.0004) * (d if scaled else 1)
                    share = 0.8 if scaled and init == "xavier" else 0.05
                    rows.append({"d": d, "init": init, "pos": pos, "scaled": scaled, "var_table": var, "var_tok": var,
                                 "var_pos": 0.5, "var_in": var + 0.5, "tok_share": share, "update": 0.3})  # fmt: skip
    return rows


def records(loss, *, xavier_var=1.0):
    """loss(init, scaled, seed) -> final validation loss before the shared jitter."""
    recs = []
    for i, c in enumerate(EXP.grid(P)):
        if c["part"] == "init":
            m = {"rows": init_rows(xavier_var)}
        else:
            s = c["seed"] % 1000
            v = float(
                loss(c["init"], c["emb_scale"], s) + JITTER[s] + (WOBBLE[s] if c["part"] == "null" else 0.0)
            )
            m = {"final_val": v, "val_loss": [4.4, v + 0.3, v], "eval_steps": [0, 6, 12], "diverged_at": None,
                 "unigram_xent": UNIGRAM}  # fmt: skip
        recs.append(record(c, m, f"r{i}"))
    return recs


def training(v, init):
    return next(
        s for s in v.sub_verdicts if s.name.startswith("Training") and s.name.endswith(f"{init} init")
    )


def test_embedding_scale_rule_supported_when_unit_variance_holds_and_the_factor_helps(tmp_path):
    v = analyse(EXP, records(lambda init, scaled, s: 2.5 if scaled else 2.7), P, tmp_path)
    d = decisions(v)
    assert v.verdict == "supported"
    assert d["xavier:with-vs-without-factor"] == d["normal:with-vs-without-factor"] == "b_better"
    assert sub_verdict(v, "N(0, 1/d) embeddings") == "supported"
    assert sub_verdict(v, "Unit variance also") == "refuted"  # 0.0004·d: reported, not judged
    assert sub_verdict(v, "The factor puts tokens") == "supported"
    cell = next(c for c in v.comparisons if c.id == "xavier:with-vs-without-factor")
    assert cell.paired and cell.n == 4 and cell.margin == 0.02 and cell.noise is not None
    assert cell.learned_a == cell.learned_b == 4
    assert {f.id for f in v.noise_floor} == {"null:normal", "null:xavier"}


def test_embedding_scale_rule_mixed_when_the_factor_hurts_training(tmp_path):
    v = analyse(EXP, records(lambda init, scaled, s: 2.8 if scaled else 2.6), P, tmp_path)
    assert decisions(v)["xavier:with-vs-without-factor"] == "a_better"
    assert training(v, "N(0, 1/d)").verdict == "refuted"
    assert v.verdict == "mixed"


def test_embedding_scale_rule_refuted_when_the_scaled_variance_is_not_unit(tmp_path):
    v = analyse(EXP, records(lambda init, scaled, s: 2.5 if scaled else 2.7, xavier_var=1.5), P, tmp_path)
    assert sub_verdict(v, "N(0, 1/d) embeddings") == "refuted"
    assert decisions(v)[f"unit-var:xavier-d{P['init_dims'][0]}-sinusoidal"] == "undecided"
    assert v.verdict == "refuted"


def test_embedding_scale_rule_underpowered_or_equivalent_training_is_inconclusive(tmp_path):
    noise = {0: 0.3, 1: -0.25, 2: 0.1, 3: -0.2}
    v = analyse(EXP, records(lambda init, scaled, s: 2.6 + (noise[s] if scaled else 0.0)), P, tmp_path)
    c = next(c for c in v.comparisons if c.id == "xavier:with-vs-without-factor")
    assert c.decision == "undecided" and c.mde is not None
    assert v.verdict == "inconclusive"
    # equivalent within the margin, but no positive control: a naive rule would refute; this one must not
    v = analyse(
        EXP, records(lambda init, scaled, s: 2.6 + (0.001 + WOBBLE[s] / 2 if scaled else 0.0)), P, tmp_path
    )
    assert decisions(v)["xavier:with-vs-without-factor"] == "equivalent"
    assert training(v, "N(0, 1/d)").verdict == "inconclusive"
    assert v.verdict == "inconclusive"


def test_embedding_scale_rule_two_failed_arms_are_excluded_and_one_failed_arm_is_no_headline(tmp_path):
    def loss(init, scaled, s):
        if init == "xavier":
            return UNIGRAM  # neither arm learns
        return 2.8 if scaled else UNIGRAM - 0.01  # without the factor the normal init never learns

    v = analyse(EXP, records(loss), P, tmp_path)
    d = decisions(v)
    assert d["xavier:with-vs-without-factor"] == "excluded"
    assert training(v, "N(0, 1/d)").verdict == "inconclusive"
    assert v.verdict == "inconclusive"  # two failures count neither way
    normal = next(c for c in v.comparisons if c.id == "normal:with-vs-without-factor")
    assert normal.learned_a == 0 and normal.learned_b == 4 and normal.decision == "b_better"
    assert "failed arm" in training(v, "N(0, 0.02²)").detail and "failed arm" in v.key_number
    normal_key = next(k for k in v.key_number.split("; ") if k.startswith("N(0, 0.02²)"))
    assert "with − without" not in normal_key  # the loss gap to a run that never learned is not the headline
