"""The postnorm_warmup rule on synthetic run records: every outcome it can give.

Quick profile: cells (depth 1, lr 3e-3) and (depth 2, lr 3e-3), four arms each (Post-LN without and with warmup,
Pre-LN and DeepNorm without), seeds 0 and 1, probe depths 1, 2, 4 with two init seeds. A run
'learns' when its final validation loss is at least 0.10 nats below the unigram level U; the deciding comparisons
are paired by seed (with two seeds only a very consistent difference survives Holm, so the synthetic effects are).
"""

import math
from functools import partial

import numpy as np
import pytest

from tfclaims.harness.registry import load

import rules
from rules import analyse, decisions, record

EXP = load("postnorm_warmup")
P = EXP.profiles["quick"]
U = 3.30
subs = partial(rules.subs, key=lambda name: name.split(".")[0])  # sub-claim letter -> verdict
OK, STUCK = 2.50, 3.28  # a loss that learned, one at the unigram plateau


def train_metrics(loss: float | None, depth: int = 2, steps: int = P["steps"]) -> dict:
    """A run ending at `loss` (None: diverged at step 3); its training loss leaves the plateau at step 2 if it learned.
    Per-block gradient norms every grad_every steps: a run that did not learn has its first block's collapse."""
    if loss is None:
        tl = [U + 0.2, U + 0.5, U + 2.0, None]
        return _m(tl, [U + 0.2, None], 3, None, depth, False)
    learned = loss <= U - 0.10
    tl = [U + 0.3, U + 0.1] + [(loss - 0.5) if learned else loss] * (steps - 2)
    return _m(tl, [U + 0.3, loss, loss], None, loss, depth, learned)


def _m(tl, vl, div, fin, depth, learned):
    gsteps = [0, *range(P["grad_every"] - 1, len(tl), P["grad_every"])]
    first = [0.3] + [0.3 if learned else 1e-6] * (len(gsteps) - 1)
    return {
        "train_loss": tl, "val_loss": vl, "eval_steps": [0, 4, 8][: len(vl)], "diverged_at": div, "final_val": fin,
        "best_val": min(v for v in vl if v is not None), "seconds": 0.1, "unigram_xent": U, "vocab": 85,
        "grad_steps": gsteps, "grad_norms": [[f] + [0.3] * (depth - 1) for f in first],
    }  # fmt: skip


def probe_metrics(pl: str, L: int, *, amp_pre: float = 0.3, q_post: float = 0.5) -> dict:
    """Init-probe numbers built to pass F, G and H: post W² last-layer gradient flat in L and rising with the layer
    index, pre ∝ L^-1/2 and flat in l; output change ∝ N^1 (post), N^amp_pre (pre); post share q^n."""
    seeds = range(P["init_seeds"])
    layers = np.arange(1, L + 1)
    if pl == "post":
        w2, slope, q = 2.0 * (1 + layers / L) / 2, 1.0, q_post
    elif pl == "pre":
        w2, slope, q = np.full(L, L**-0.5), amp_pre, 0.9
    else:
        w2, slope, q = np.ones(L), 0.0, 0.95
    n = np.arange(1, 2 * L + 1)
    return {
        "w2_grad": [list(w2 * (1 + 0.001 * s)) for s in seeds],
        "block_grad": [list(w2 * 3) for s in seeds],
        "amplification": [1e-4 * L ** (slope + (0.01 if pl == "post" else 0.02) * s) for s in seeds],
        "share": [list(q**n) for s in seeds],
        "ratio": [[0.3] * len(n) for s in seeds],
        "branch_cos": [[0.0] * len(n) for s in seeds],
        "predicted": [list(1.3**-n) for s in seeds],
    }


def records(loss, *, null=None, **probe_kw):
    """loss(placement, warmup, depth, seed) -> final loss (None: diverged); null(seed) for the null pair."""
    out = []
    for i, c in enumerate(EXP.grid(P)):
        if c["part"] == "probe":
            m = probe_metrics(c["placement"], c["depth"], **probe_kw)
        elif c["part"] == "null":
            m = train_metrics(null(c["seed"]) if null else OK + 0.01 * (c["seed"] % 2), c["depth"])
        else:
            m = train_metrics(loss(c["placement"], c["warmup"] > 0, c["depth"], c["seed"]), c["depth"])
        out.append(record(c, m, f"r{i}"))
    return out


def anchor_like(pl, wu, d, s):
    """Post-LN without warmup stuck everywhere; with warmup it learns at L = 1 but is stuck at L = 2 (both
    Post-LN arms fail there); Pre-LN and DeepNorm learn everywhere."""
    if pl == "post":
        return (OK + 0.001 * s) if (wu and d == 1) else STUCK + 0.002 * s
    return OK - 0.05 + 0.001 * s


def test_postnorm_warmup_rule_supported_and_both_failed_cell_is_excluded_from_A(tmp_path):
    v = analyse(EXP, records(anchor_like), P, tmp_path)
    sv = subs(v)
    assert v.verdict == "supported"
    assert (
        sv["A"] == "supported"
        and sv["B"] == "supported"
        and sv["C"] == "supported"
        and sv["D"] == "supported"
    )
    a = decisions(v, "L")
    assert a["L1-lr0.003:post:warmup-vs-none:final"] == "b_better"
    # L = 2: both Post-LN arms stuck at the plateau: never counted for or against A ...
    assert {a[f"L2-lr0.003:post:warmup-vs-none:{m}"] for m in ("learned", "final", "escape")} == {"excluded"}
    # ... but evidence for C: Pre-LN learned there, warmed-up Post-LN did not
    assert a["L2-lr0.003:post-warmup-vs-pre:final"] == "a_better"
    ids = {c.id for c in v.comparisons}
    assert all(i in ids for s in v.sub_verdicts for i in s.comparisons)
    assert v.noise_floor and {f.metric for f in v.noise_floor} == {"final val loss", "escape step"}
    assert all(c.noise is not None for c in v.comparisons if c.metric == "final val loss" and not c.excluded)


def test_postnorm_warmup_rule_refuted_when_warmup_hurts_post_ln(tmp_path):
    def loss(pl, wu, d, s):
        if pl == "post":
            return (STUCK - 0.03 + 0.001 * s) if wu else OK + 0.001 * s
        return OK + 0.001 * s

    v = analyse(EXP, records(loss), P, tmp_path)
    assert subs(v)["A"] == "refuted" and v.verdict == "refuted"
    assert (
        decisions(v, "L1-lr0.003:post:warmup-vs-none")["L1-lr0.003:post:warmup-vs-none:final"] == "a_better"
    )


def test_postnorm_warmup_rule_cell_where_both_arms_always_learned_is_reported_not_counted(tmp_path):
    """Warmup costs 0.5 nats in every seed, but both arms learned in every seed: no training failure to compare (the
    schedule itself shifts fit and speed), so the cell is reported with its decision and A stays inconclusive."""

    def loss(pl, wu, d, s):
        if pl == "post":
            return (3.0 + 0.001 * s) if wu else OK + 0.001 * s
        return OK + 0.001 * s

    v = analyse(EXP, records(loss), P, tmp_path)
    assert subs(v)["A"] == "inconclusive"
    c = next(c for c in v.comparisons if c.id == "L1-lr0.003:post:warmup-vs-none:final")
    assert c.decision == "a_better" and "reported" in c.sub_claim
    a = next(s for s in v.sub_verdicts if s.name.startswith("A."))
    assert c.id not in a.comparisons and "reported, not counted" in a.detail


def test_postnorm_warmup_rule_both_arms_at_the_plateau_is_not_warmup_not_needed(tmp_path):
    """The committed failure mode: Post-LN with and without warmup both at the unigram level (3.28 vs 3.29) read as
    'warmup not needed'. Here every such comparison is excluded and A is inconclusive, not refuted."""

    def loss(pl, wu, d, s):
        if pl == "post":
            return 3.29 + 0.001 * s if wu else 3.28 + 0.001 * s
        return OK + 0.001 * s

    v = analyse(EXP, records(loss), P, tmp_path)
    assert subs(v)["A"] == "inconclusive" and v.verdict == "inconclusive"
    assert set(decisions(v, "L1-lr0.003:post:warmup-vs-none").values()) == {"excluded"}
    assert set(decisions(v, "L2-lr0.003:post:warmup-vs-none").values()) == {"excluded"}
    assert subs(v)["C"] == "supported"  # the same cells say Post-LN fails even with warmup


def test_postnorm_warmup_rule_underpowered_or_equivalent_null_is_inconclusive(tmp_path):
    def noisy(pl, wu, d, s):  # seed 0 learns only with warmup, seed 1 only without: an underpowered null
        if pl != "post":
            return OK - 0.3 + 0.001 * s
        return OK if wu == (s == 0) else 3.25

    v = analyse(EXP, records(noisy), P, tmp_path)
    assert subs(v)["A"] == "inconclusive" and v.verdict == "inconclusive"
    assert set(decisions(v, "L1-lr0.003:post:warmup-vs-none").values()) == {"undecided"}

    def same(pl, wu, d, s):  # both arms on the learned threshold; warmup changes the loss by < the margin
        if pl != "post":
            return OK - 0.3 + 0.001 * s
        return (3.21, 3.19)[s] + ((0.002 if s == 0 else -0.001) if wu else 0.0)

    v = analyse(EXP, records(same), P, tmp_path)
    assert (
        decisions(v, "L1-lr0.003:post:warmup-vs-none")["L1-lr0.003:post:warmup-vs-none:final"] == "equivalent"
    )
    assert subs(v)["A"] == "inconclusive"  # no positive control: equivalence does not refute


def test_postnorm_warmup_rule_mixed_when_warmup_helps_in_one_cell_and_hurts_in_another(tmp_path):
    def loss(pl, wu, d, s):
        if pl == "post":
            if d == 1:
                return (OK if wu else 3.25) + 0.001 * s
            return (3.25 if wu else OK) + 0.001 * s
        return OK - 0.3 + 0.001 * s

    v = analyse(EXP, records(loss), P, tmp_path)
    assert subs(v)["A"] == "mixed" and v.verdict == "mixed"


def test_postnorm_warmup_rule_nothing_learned_excludes_every_training_comparison(tmp_path):
    v = analyse(EXP, records(lambda pl, wu, d, s: STUCK + 0.001 * s), P, tmp_path)
    train = [c for c in v.comparisons if c.id.startswith("L")]
    assert train and all(c.decision == "excluded" for c in train)
    assert {subs(v)[k] for k in "ABCD"} == {"inconclusive"} and v.verdict == "inconclusive"
    assert subs(v)["E"] == "inconclusive"


def test_postnorm_warmup_rule_divergence_counts_as_not_learned(tmp_path):
    """Post-LN without warmup diverges in every seed: it learned in none; the paired loss has no seed to pair, the
    cell is not excluded (the warmed-up arm learned) and B still sees Pre-LN learning where Post-LN diverged."""

    def loss(pl, wu, d, s):
        if pl == "post":
            return (OK + 0.001 * s) if wu else None
        return OK + 0.001 * s

    v = analyse(EXP, records(loss), P, tmp_path)
    a = {c.id: c for c in v.comparisons if c.id.startswith("L1-lr0.003:post:warmup-vs-none")}
    assert a["L1-lr0.003:post:warmup-vs-none:learned"].learned_a == 0
    assert a["L1-lr0.003:post:warmup-vs-none:learned"].learned_b == 2
    assert all(c.decision != "excluded" for c in a.values())
    assert a["L1-lr0.003:post:warmup-vs-none:final"].n == 0


def test_postnorm_warmup_rule_control_failing_does_not_flip_A(tmp_path):
    """An old rule dropped every cell where the Pre-LN control failed, from every sub-verdict: a failing control
    flipped A. The control enters only B and C (excluded there where Post-LN failed too) and A is unchanged."""

    def loss(pl, wu, d, s):
        if pl == "pre":
            return STUCK + 0.001 * s
        return anchor_like(pl, wu, d, s)

    v = analyse(EXP, records(loss, null=lambda s: STUCK + 0.001 * (s % 2)), P, tmp_path)
    assert subs(v)["A"] == "supported" and subs(v)["C"] == "inconclusive"
    assert set(decisions(v, "L2-lr0.003:post-warmup-vs-pre").values()) == {"excluded"}


def test_postnorm_warmup_rule_gradient_signature_separates_failed_from_learned_runs(tmp_path):
    """The signature table reads the per-block gradient norms: a failed run's first block collapsed by step ~30."""
    v = analyse(EXP, records(anchor_like), P, tmp_path)
    sig = (tmp_path / "grad_signature.csv").read_text()
    assert "learned" in sig and "first/last there" in sig
    c = next(s for s in v.sub_verdicts if s.name.startswith("C."))
    assert "not learned" in c.detail and "first/last-layer gradient norm" in c.detail


def test_postnorm_warmup_rule_D_inconclusive_when_post_ln_never_fails(tmp_path):
    v = analyse(EXP, records(lambda pl, wu, d, s: OK + 0.001 * s), P, tmp_path)
    assert subs(v)["D"] == "inconclusive" and not decisions(v, "L1-lr0.003:nowarmup:deepnorm")


def test_postnorm_warmup_rule_init_mechanism_checks(tmp_path):
    v = analyse(EXP, records(anchor_like), P, tmp_path)
    sv = subs(v)
    assert sv["F"] == "supported" and sv["G"] == "supported" and sv["H"] == "supported"
    assert decisions(v, "G:amp-slope")["G:amp-slope:post-vs-pre"] == "b_better"
    v = analyse(EXP, records(anchor_like, amp_pre=1.6, q_post=0.85), P, tmp_path)
    sv = subs(v)
    assert sv["G"] == "refuted" and sv["H"] == "refuted"
    assert decisions(v, "H:")["H:post-share-factor"] == "undecided"
    assert sv["A"] == "supported"  # the mechanism checks never enter the overall verdict
    assert math.isfinite(v.evidence["post_identity_factor"])
    assert v.evidence["post_identity_factor"] == pytest.approx(0.85, abs=1e-6)
