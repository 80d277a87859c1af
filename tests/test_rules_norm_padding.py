"""The norm_padding rule on synthetic run records: every outcome it can give.

The quick profile's grid with four seeds; each LM run's eval-mode loss is built per (norm, batch, seed) so the
sub-verdicts (a) padding, (b) batch statistics, (c) small batches go either way, stay undecided, or have arms
that never learned; the probes are built to pass or fail the invariance, leak and fluctuation checks."""

import math

import numpy as np

from tfclaims.registry import load

from rules import analyse, decisions, record, sub_verdict

EXP = load("norm_padding")
P = {**EXP.profiles["quick"], "seeds": [0, 1, 2, 3]}
UNIGRAM = 3.30
JITTER = np.array([0.00, 0.02, -0.015, 0.01])  # seed-to-seed spread shared by every arm (paired)
WOBBLE = np.array([0.004, -0.003, 0.002, -0.004])  # a little per-arm noise


def stats(multiple, seed):
    """One BN layer's record: deviations that are `multiple` × i.i.d. noise (mean and variance) at every step."""
    steps = list(range(0, P["steps"], P["stat_every"]))
    n = 64
    x = multiple * (1 + 0.05 * (seed % 4))
    return {"blocks.0.norm1": {"step": steps, "mean_dev": [x / math.sqrt(n)] * len(steps),
                               "var_dev": [x / math.sqrt(n / 2)] * len(steps), "n": [n] * len(steps)}}  # fmt: skip


def invariance(norm, leak_ok=True, inv_ok=True):
    train_dep = {"layer": 0.0, "power": 0.0, "batch": 2.0, "batch_masked": 0.0}[norm]
    if not inv_ok and norm == "layer":
        train_dep = 1e-3
    nb_dep = 0.5 if norm.startswith("batch") else 0.0
    leak = 0.1 if (norm.startswith("batch") and leak_ok) else 0.0
    pad = [{"mode": m, "frac": f, "abs": train_dep if m == "train" else 0.0, "rel": train_dep if m == "train" else 0.0}
           for m in ("train", "eval") for f in P["pad_fracs"]]  # fmt: skip
    nbs = [{"mode": m, "n_neighbours": 2, "frac": 0.3, "abs": nb_dep if m == "train" else 0.0,
            "rel": nb_dep if m == "train" else 0.0} for m in ("train", "eval")]  # fmt: skip
    lk = {m: {"same_row_abs": leak if m == "train" else 0.0, "same_row_rel": leak if m == "train" else 0.0,
              "other_rows_abs": 0.0, "other_rows_rel": 0.0} for m in ("train", "eval")}  # fmt: skip
    return {"padding": pad, "neighbours": nbs, "leak": lk}


def records(loss, *, lm_fluct=4.0, mlp_fluct=1.0, leak_ok=True, inv_ok=True):
    """loss(norm, batch, seed) -> eval-mode validation loss before the shared jitter."""
    recs = []
    for i, c in enumerate(EXP.grid(P)):
        part, s = c["part"], c["seed"] % 1000
        if part == "mlp":
            m = {"stats": stats(mlp_fluct, s), "test_acc": 0.8, "chance": 0.1, "final_train_loss": 0.5}
        else:
            v = float(loss(c["norm"], c["batch"], s) + JITTER[s])
            if part == "null":
                v += WOBBLE[s]
            m = {"diverged_at": None, "train_loss": [4.0, v + 0.1], "seconds": 1.0, "pad_frac_train": 0.3,
                 "unigram_xent": UNIGRAM, "eval_mixed": v, "train_mixed": v - 0.01, "train_sorted": v}  # fmt: skip
            if c["norm"].startswith("batch"):
                m["stats"] = stats(lm_fluct, s)
            if part == "lines":
                m["invariance"] = invariance(c["norm"], leak_ok, inv_ok)
        recs.append(record(c, m, f"r{i}"))
    return recs


BASE = {"layer": 2.50, "power": 2.50}


def claim_true(norm, batch, s):
    # pads counted worse than masked; masked worse than LN, more so at the small batch
    gap = 0.30 if batch == min(P["batches"]) else 0.10
    return {"layer": 2.50, "power": 2.45, "batch_masked": 2.50 + gap + WOBBLE[s], "batch": 2.50 + gap + 0.2}[
        norm
    ]


def test_norm_padding_rule_supported_when_padding_batch_statistics_and_small_batches_all_hurt(tmp_path):
    v = analyse(EXP, records(claim_true), P, tmp_path)
    d = decisions(v)
    assert v.verdict == "supported"
    assert sub_verdict(v, "(a)") == sub_verdict(v, "(b)") == sub_verdict(v, "(c)") == "supported"
    assert all(d[f"pre-B{b}:bn-pads-vs-masked"] == "a_better" for b in P["batches"])  # a = BN masked
    assert all(d[f"pre-B{b}:bn-masked-vs-ln"] == "a_better" for b in P["batches"])  # a = LN
    assert d["pre:small-batch-interaction"] == "a_better"  # a = the large batch
    assert sub_verdict(v, "PowerNorm better") == "supported"
    assert (
        sub_verdict(v, "LN is invariant") == "supported"
        and sub_verdict(v, "BN in train mode leaks") == "supported"
    )
    assert sub_verdict(v, "Batch statistics of the LM fluctuate more") == "supported"
    assert sub_verdict(v, "Batch statistics of the LM fluctuate ≥ 2× more") == "supported"
    assert d["fluct:mean-above-2x-control"] == "b_better"
    cell = next(c for c in v.comparisons if c.id == "pre-B4:bn-masked-vs-ln")
    assert cell.paired and cell.n == 4 and cell.margin == 0.02 and cell.noise is not None
    assert cell.learned_a == 4 and cell.learned_b == 4
    assert {f.id for f in v.noise_floor} == {"null:pre-B2", "null:pre-B4", "null:pre:interaction"}


def test_norm_padding_rule_refuted_when_pads_and_batch_statistics_both_help(tmp_path):
    def loss(norm, batch, s):
        return {"layer": 2.60, "power": 2.60, "batch_masked": 2.45 + WOBBLE[s], "batch": 2.30}[norm]

    v = analyse(EXP, records(loss), P, tmp_path)
    assert sub_verdict(v, "(a)") == "refuted" and sub_verdict(v, "(b)") == "refuted"
    assert sub_verdict(v, "(c)") == "inconclusive"
    assert v.verdict == "refuted"


def test_norm_padding_rule_mixed_when_padding_helps_but_batch_statistics_hurt(tmp_path):
    # the committed default's pattern: counting pads is better than masking, masked BN worse than LN
    def loss(norm, batch, s):
        return {"layer": 2.50, "power": 2.48, "batch_masked": 2.75 + WOBBLE[s], "batch": 2.45}[norm]

    v = analyse(EXP, records(loss), P, tmp_path)
    assert sub_verdict(v, "(a)") == "refuted" and sub_verdict(v, "(b)") == "supported"
    assert v.verdict == "mixed"


def test_norm_padding_rule_underpowered_null_is_inconclusive_never_refuted(tmp_path):
    noise = {0: 0.3, 1: -0.25, 2: 0.1, 3: -0.2}

    def loss(norm, batch, s):
        return 2.5 + (noise[(s + len(norm) + batch) % 4] if norm != "layer" else 0.0)

    v = analyse(EXP, records(loss), P, tmp_path)
    assert sub_verdict(v, "(a)") == sub_verdict(v, "(b)") == "inconclusive"
    assert v.verdict == "inconclusive"
    c = next(c for c in v.comparisons if c.id == "pre-B4:bn-masked-vs-ln")
    assert c.decision == "undecided" and c.mde is not None


def test_norm_padding_rule_equivalence_without_positive_control_does_not_refute(tmp_path):
    # a naive "CI inside ±margin → no effect" rule would refute (a) and (b); without a positive control it must not
    def loss(norm, batch, s):
        return 2.5 + (0.001 + WOBBLE[s] / 2 if norm.startswith("batch") else 0.0)

    v = analyse(EXP, records(loss), P, tmp_path)
    d = decisions(v)
    assert d["pre-B4:bn-pads-vs-masked"] == "equivalent" or d["pre-B4:bn-masked-vs-ln"] == "equivalent"
    assert sub_verdict(v, "(a)") == sub_verdict(v, "(b)") == "inconclusive"
    assert v.verdict == "inconclusive"


def test_norm_padding_rule_cells_where_no_arm_learned_are_excluded(tmp_path):
    # BN (both variants) stays at the unigram level; LN learns
    def loss(norm, batch, s):
        return {"layer": 2.5, "power": 2.5, "batch_masked": UNIGRAM, "batch": UNIGRAM + 0.01}[norm]

    v = analyse(EXP, records(loss), P, tmp_path)
    d = decisions(v)
    assert all(d[f"pre-B{b}:bn-pads-vs-masked"] == "excluded" for b in P["batches"])
    assert sub_verdict(v, "(a)") == "inconclusive"  # two failures compared count neither way
    assert all(
        d[f"pre-B{b}:bn-masked-vs-ln"] == "a_better" for b in P["batches"]
    )  # one arm failed: still counted
    assert d["pre-B2:bn-masked-eval-vs-train-mode"] == "excluded"
    assert sub_verdict(v, "(b)") == "supported"
    assert v.verdict == "mixed"


def test_norm_padding_rule_invariance_leak_and_fluctuation_checks_fail(tmp_path):
    v = analyse(
        EXP, records(claim_true, lm_fluct=1.0, mlp_fluct=1.0, leak_ok=False, inv_ok=False), P, tmp_path
    )
    d = decisions(v)
    assert d["inv:ln"] == "undecided" and d["leak:bn-train"] == "undecided"
    assert (
        sub_verdict(v, "LN is invariant") == "refuted"
        and sub_verdict(v, "BN in train mode leaks") == "refuted"
    )
    assert (
        d["fluct:mean-above-2x-control"] == d["fluct:var-above-2x-control"] == "a_better"
    )  # below 2× the control
    assert sub_verdict(v, "Batch statistics of the LM fluctuate ≥ 2× more") == "refuted"
    assert (
        sub_verdict(v, "Batch statistics of the LM fluctuate more") == "inconclusive"
    )  # equal to the control: undecided
    assert v.verdict == "supported"  # the overall rule rests on (a), (b), (c)
