"""The postnorm_warmup rule on synthetic run records: every outcome it can give.

Quick profile: cells (depth 1, lr 3e-3) and (depth 2, lr 3e-3), four arms each (Post-LN without and with
warmup, Pre-LN and DeepNorm without), seeds 0 and 1, probe depths 1, 2, 4 with two init seeds. A run 'learns'
when its final validation loss is at least 0.10 nats below the unigram level U; the deciding comparisons are
paired by seed (with two seeds only a very consistent difference survives Holm, so the synthetic effects are).
Comparison ids are `sub/cell/readout` (C-fixed has one cell at the deepest depth: `C-fixed/readout`; C one,
its deep sweep's: `C/readout`; the mechanism numbers `F/quantity`). C's runs are longer (deep_steps): a loss
function sees `steps`."""

import math

import numpy as np
import pandas as pd
import pytest

from tfclaims.harness.registry import load

from rules import analyse, comparison, decisions, grown, sub, verdicts

EXP = load("postnorm_warmup")
P = EXP.profiles["quick"]
U = 3.30
OK, STUCK = 2.50, 3.28  # a loss that learned, one at the unigram plateau
A1, A2 = "A-fixed/L1-lr0.003", "A-fixed/L2-lr0.003"


def train_metrics(loss: float | None, depth: int = 2, steps: int = P["steps"]) -> dict:
    """A run ending at `loss` (None: diverged at step 3); its training loss leaves the plateau at step 2 if it
    learned. Per-block gradient norms every grad_every steps: a run that did not learn has its first block's
    collapse."""
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
        "train_loss": tl,
        "val_loss": vl,
        "eval_steps": [0, 4, 8][: len(vl)],
        "diverged_at": div,
        "final_val": fin,
        "best_val": min(v for v in vl if v is not None),
        "seconds": 0.1,
        "unigram_xent": U,
        "vocab": 85,
        "grad_steps": gsteps,
        "grad_norms": [[f] + [0.3] * (depth - 1) for f in first],
    }


def probe_metrics(pl: str, L: int, *, amp_pre: float = 0.3, q_post: float = 0.5) -> dict:
    """Init-probe numbers built to pass F, G and H: post W² last-layer gradient flat in L and rising with the
    layer index, pre ∝ L^-1/2 and flat in l; output change ∝ N^1 (post), N^amp_pre (pre); post share q^n."""
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


def records(loss, *, null=None, params=P, **probe_kw):
    """loss(placement, warmup, depth, seed, lr=, width=, steps=) -> final loss (None: diverged); null(seed)
    for the null pair (by default a faithful rerun: its arm's own loss, up to a seed wobble of 0.0005 nats).
    The staged grid grows as the runner grows it: the sweep's selection seeds choose each arm's rate, whose
    fresh-seed runs (and the second scale's sweep) join the grid."""

    def final(c: dict, seed: int):
        return loss(
            c["placement"],
            c["warmup"] > 0,
            c["depth"],
            seed,
            lr=c["lr"],
            width=c["d_model"],
            steps=c["steps"],
        )

    def metrics(c: dict) -> dict:
        if c["part"] == "probe":
            m = probe_metrics(c["placement"], c["depth"], **probe_kw)
        elif c["part"] == "null":
            s = c["seed"] % 1000
            f = null(s) if null else final(c, s)
            m = train_metrics(f if null or f is None else f + 0.0005 * (s % 2), c["depth"])
        else:
            m = train_metrics(final(c, c["seed"]), c["depth"])
        return m

    return grown(EXP, params, metrics)


def bowl(lr: float) -> float:
    """A learned run's extra loss away from the rate 1.5e-3 (the sweep widens past an end, then turns
    back)."""
    return 0.05 * abs(math.log2(lr / 1.5e-3))


def anchor_like(pl, wu, d, s, lr=3e-3, steps=P["steps"], **_):
    """Post-LN without warmup stuck everywhere; with warmup it learns at L = 1, and at L = 2 only below the
    fixed cells' rate 3e-3 (so the sweep finds it a rate that trains, while the fixed cell L = 2 has both
    Post-LN arms stuck) and never in C's longer runs at depth (Liu et al.: fails even with warmup); Pre-LN and
    DeepNorm learn everywhere."""
    if pl == "post":
        trains = wu and (d == 1 or (lr < 3e-3 and steps == P["steps"]))
        return (OK + 0.001 * s + bowl(lr)) if trains else STUCK + 0.002 * s
    return OK - 0.05 + 0.001 * s


def test_postnorm_warmup_rule_supported_and_both_failed_cell_is_excluded_from_A(tmp_path):
    v = analyse(EXP, records(anchor_like), P, tmp_path)
    assert v.verdict == "supported"
    assert verdicts(v) == {
        "A-fixed": "supported",
        "A": "supported",
        "A-range": "inconclusive",
        "B-fixed": "supported",
        "B": "supported",
        "B-range": "inconclusive",
        "C-fixed": "supported",
        "C": "supported",
        "D": "supported",
        "F": "supported",
        "G": "supported",
        "G-paired": "supported",
        "H": "supported",
    }
    kinds = {s.id: (s.kind, s.counts) for s in v.sub_verdicts}
    assert kinds["A"] == kinds["B"] == kinds["C"] == ("effect", True)
    assert all(kinds[k][1] is False for k in kinds if k not in ("A", "B", "C"))
    a = decisions(v, "A-fixed/")
    assert a[f"{A1}/final_val"] == "b_better"  # b = warmed-up Post-LN
    # L = 2: both Post-LN arms stuck at the plateau: never counted for or against A ...
    assert {a[f"{A2}/{m}"] for m in ("learned", "final_val", "escape")} == {"excluded"}
    # ... but evidence for C: Pre-LN (a) learned there, warmed-up Post-LN did not, at one rate and at its best
    assert comparison(v, "C-fixed/final_val").decision == "a_better"
    assert comparison(v, "C/final_val").decision == "a_better" and comparison(v, "C/final_val").learned_b == 0
    # tuned: warmed-up Post-LN chose a rate that trains, at both widths; only the final loss counts
    assert sub(v, "A").holds == ["d16", "d32"] and sub(v, "A").comparisons == [
        "A/d16/final_val",
        "A/d32/final_val",
    ]
    assert "A/d16/learned" in sub(v, "A").reported and "Other readouts, reported" in sub(v, "A").detail
    ch = {(r["arm"], r["scale"]): r["chosen_lr"] for r in v.evidence["lr_choices"]}
    # d16 sweeps 1.5e-3 and 3e-3, widens to 7.5e-4 (1.5e-3 sat at the lower end) and keeps 1.5e-3; d32 sweeps
    # its ×½ and ×1 and widens to 3e-3, where Post-LN is stuck
    assert ch[("post-warmup", "d16")] == ch[("post-warmup", "d32")] == 1.5e-3
    ids = {c.id for c in v.comparisons}
    assert all(i in ids for s in v.sub_verdicts for i in s.comparisons)
    assert [f.id for f in v.noise_floor] == ["null/final_val", "null/escape"]
    # the null pair (Pre-LN, L = 2, lr 3e-3, first width) calibrates the fixed-rate cells it was run in, and
    # no other fixed-rate cell (not L = 1); the tuned cells: test_..._calibrates_only_that_widths_tuned_cell
    fixed = ("A-fixed", "B-fixed", "C-fixed", "D")
    calibrated = {
        c.id
        for c in v.comparisons
        if c.metric == "final validation loss" and c.null_p is not None and c.sub_claim.split()[0] in fixed
    }
    at_l2 = ("B-fixed/L2-lr0.003/final_val", "C-fixed/final_val", "D/L2-lr0.003/final_val")
    assert calibrated == {f"{A2}/final_val", *at_l2}
    assert not any(comparison(v, i).null_significant for i in calibrated)
    assert v.evidence["sub_verdicts"]["A"] == "supported" and "E" not in verdicts(v)


def test_postnorm_warmup_rule_refuted_when_warmup_hurts_post_ln_and_pre_ln_is_worse(tmp_path):
    """A, B and C all refuted: refuted (at depth, Post-LN with warmup at its best rate beats Pre-LN). A
    refuted beside an inconclusive B is refuted too: the counted sub-claims are combined by the ladder that
    decides a sub-claim's cells (fails in one, holds in none)."""

    def loss(pl, wu, d, s, steps=P["steps"], **_):
        if steps > P["steps"]:
            return OK + 0.001 * s if pl == "post" else OK + 0.3 + 0.001 * s
        if pl == "post":
            return (STUCK - 0.03 + 0.001 * s) if wu else OK + 0.001 * s
        return (STUCK - 0.01 + 0.001 * s) if pl == "pre" else OK + 0.001 * s

    v = analyse(EXP, records(loss, null=lambda s: STUCK - 0.01 + 0.0012 * s), P, tmp_path)  # the rerun agrees
    assert decisions(v)[f"{A1}/final_val"] == "a_better"
    assert verdicts(v)["A"] == verdicts(v)["B"] == verdicts(v)["C"] == "refuted" and v.verdict == "refuted"

    def only_a(pl, wu, d, s, steps=P["steps"], **_):
        # Pre-LN against Post-LN without warmup: every seed of both learned, Pre-LN's loss off by +0.02 or
        # -0.01 from seed to seed (undecided, and too spread for TOST within ±0.05: B inconclusive); at depth
        # over the longer run nothing learned (C inconclusive)
        if steps > P["steps"]:
            return STUCK + 0.001 * s
        if pl == "pre":
            return OK + 0.001 * s + (0.02, -0.01)[s % 2]
        return (STUCK - 0.03 + 0.001 * s) if (pl == "post" and wu) else OK + 0.001 * s

    v = analyse(EXP, records(only_a), P, tmp_path)
    assert set(decisions(v, "B/").values()) == {"undecided"}
    assert verdicts(v)["A"] == "refuted" and verdicts(v)["B"] == "inconclusive"
    assert v.verdict == "refuted"


def test_postnorm_warmup_rule_cell_where_both_arms_always_learned_is_reported_not_counted(tmp_path):
    """Warmup costs 0.5 nats in every seed, but both arms learned in every seed: no training failure to
    compare (the schedule itself shifts fit and speed), so the cell is reported with its decision and A stays
    inconclusive."""

    def loss(pl, wu, d, s, **_):
        if pl == "post":
            return (3.0 + 0.001 * s) if wu else OK + 0.001 * s
        return OK + 0.001 * s

    v = analyse(EXP, records(loss), P, tmp_path)
    assert verdicts(v)["A-fixed"] == "inconclusive"
    c = comparison(v, f"{A1}/final_val")
    assert c.decision == "a_better" and "reported" in c.sub_claim
    a = sub(v, "A-fixed")
    assert c.id not in a.comparisons and c.id in a.reported and "Reported, not counted" in a.detail
    # each arm at its own best rate there is no such carve-out: warmup costs 0.5 nats at both widths
    assert verdicts(v)["A"] == "refuted" and decisions(v, "A/")["A/d32/final_val"] == "a_better"


def test_postnorm_warmup_rule_both_arms_at_the_plateau_is_not_warmup_not_needed(tmp_path):
    """The committed failure mode: Post-LN with and without warmup both at the unigram level (3.28 vs 3.29)
    read as 'warmup not needed'. Here every such comparison is excluded and A is inconclusive, not refuted."""

    def loss(pl, wu, d, s, **_):
        if pl == "post":
            return 3.29 + 0.001 * s if wu else 3.28 + 0.001 * s
        return OK + 0.001 * s

    v = analyse(EXP, records(loss), P, tmp_path)
    assert verdicts(v)["A"] == "inconclusive" and v.verdict == "inconclusive"
    assert set(decisions(v, A1).values()) == {"excluded"}
    assert set(decisions(v, A2).values()) == {"excluded"}
    assert verdicts(v)["B"] == "supported" and verdicts(v)["C-fixed"] == "supported"  # the same cells


def test_postnorm_warmup_rule_underpowered_null_is_inconclusive(tmp_path):
    def noisy(pl, wu, d, s, **_):  # seed 0 learns only with warmup, seed 1 only without: an underpowered null
        if pl != "post":
            return OK - 0.3 + 0.001 * s
        return OK if wu == (s == 0) else 3.25

    v = analyse(EXP, records(noisy), P, tmp_path)
    assert verdicts(v)["A-fixed"] == "inconclusive" and verdicts(v)["A"] == "inconclusive"
    assert v.verdict == "inconclusive"
    assert set(decisions(v, A1).values()) == {"undecided"}


@pytest.mark.parametrize(
    "wobble, powered, verdict",
    [
        ((0.002, -0.001), True, "refuted"),  # a seed spread of 0.0015 nats: power ≥ 80% at ±0.05
        ((0.003, -0.002), False, "inconclusive"),  # TOST still passes, but power < 80%: does not refute
    ],
)
def test_postnorm_warmup_rule_an_equivalence_refutes_only_with_power_at_the_sesoi(
    tmp_path, wobble, powered, verdict
):
    """Both Post-LN arms on the learned threshold (one seed learns, one does not: the cells are counted) and
    warmup changes the loss by < the ±0.05 SESOI: an equivalence. A-fixed has no positive control, so it
    refutes exactly where its power at the SESOI is at least 80%."""

    def same(pl, wu, d, s, **_):
        if pl != "post":
            return OK - 0.3 + 0.001 * s
        return (3.21, 3.19)[s % 2] + (wobble[s % 2] if wu else 0.0)

    v = analyse(EXP, records(same), P, tmp_path)
    fixed = [comparison(v, f"{c}/final_val") for c in (A1, A2)]
    assert all(c.decision == "equivalent" and 0 < c.power <= 1 for c in fixed)
    assert all((c.power >= 0.8) == powered for c in fixed)
    assert set(sub(v, "A-fixed").roles.values()) == {"refute" if powered else "undecided"}
    assert verdicts(v)["A-fixed"] == verdict
    # tuned: the same arms at their best rates, equivalent too; A's control (A-fixed) was run in other cells
    # (L·-lr· against d16, d32), so it covers none of A's: A reads the power alone
    assert set(decisions(v, "A/").values()) >= {"equivalent"} and verdicts(v)["A"] == verdict


def warmup_helps(pl, wu, d, s, **_):
    """Warmup lowers Post-LN's final loss by 0.08 nats in both seeds (p small, beyond the ±0.05 SESOI), one
    seed learning in each arm (so the fixed-rate cells are counted), at every rate and width."""
    if pl == "post":
        return (3.35, OK)[s % 2] - (0.08 + 1e-4 * s if wu else 0.0)
    return OK + 0.001 * s


DRIFT = lambda s: OK + 0.1 + 0.0015 * s  # noqa: E731  # the null rerun of Pre-LN (OK + 0.001 s), 0.1 off


def test_postnorm_warmup_rule_a_drifting_null_pair_undecides_only_the_cell_it_was_run_in(tmp_path):
    """The null pair's rerun (Pre-LN, L = 2, lr 3e-3) drifts 0.1 nats away from its first run: significant,
    so the variance at L = 2 is underestimated and that fixed-rate cell is undecided whatever its p; L = 1,
    where it was not run, decides. A-fixed needs both cells: not supported."""
    v = analyse(EXP, records(warmup_helps, null=DRIFT), P, tmp_path)
    null = next(f for f in v.noise_floor if f.id == "null/final_val")
    assert null.p < 0.05
    l1, l2 = comparison(v, f"{A1}/final_val"), comparison(v, f"{A2}/final_val")
    assert l2.p < 0.05 and l2.null_p == null.p and l2.null_significant and l2.decision == "undecided"
    assert l1.p < 0.05 and l1.null_p is None and l1.decision == "b_better"
    assert l1.diff == l2.diff == pytest.approx(-0.08005)
    assert sub(v, "A-fixed").roles == {f"{A1}/final_val": "support", f"{A2}/final_val": "undecided"}
    assert verdicts(v)["A-fixed"] == "inconclusive"
    assert "L2-lr0.003/final_val: the null pair in the cell is significant" in sub(v, "A-fixed").detail


def test_postnorm_warmup_rule_the_fixed_designs_null_pair_never_calibrates_the_tuned_cells(tmp_path):
    """The null pair reruns the fixed design's Pre-LN control, another arm at another rate than the tuned
    Post-LN arms of A: it says nothing of their cells, so even when its rerun drifts A still decides at both
    widths (it used to lend its spread to both)."""
    v = analyse(EXP, records(warmup_helps, null=DRIFT), P, tmp_path)
    for w in ("d16", "d32"):
        c = comparison(v, f"A/{w}/final_val")
        assert c.null_p is None and c.decision == "b_better"
    assert verdicts(v)["A"] == "supported"
    assert any(comparison(v, c.id).null_significant for c in v.comparisons if c.id.startswith("A-fixed"))


def test_postnorm_warmup_rule_mixed_when_warmup_helps_in_one_cell_and_hurts_in_another(tmp_path):
    def loss(pl, wu, d, s, **_):
        if pl == "post":
            if d == 1:
                return (OK if wu else 3.25) + 0.001 * s
            return (3.25 if wu else OK) + 0.001 * s
        return OK - 0.3 + 0.001 * s

    v = analyse(EXP, records(loss, null=lambda s: OK - 0.3 + 0.0012 * s), P, tmp_path)
    assert verdicts(v)["A-fixed"] == "mixed"
    # the sweep runs at L = 2, where warmup hurts: refuted there, while B holds: the claim is mixed
    assert verdicts(v)["A"] == "refuted" and verdicts(v)["B"] == "supported" and v.verdict == "mixed"


def test_postnorm_warmup_rule_nothing_learned_excludes_every_training_comparison(tmp_path):
    v = analyse(EXP, records(lambda pl, wu, d, s, **_: STUCK + 0.001 * s), P, tmp_path)
    train = [c for c in v.comparisons if c.id[0] in "ABCD" and "-range" not in c.id]
    assert train and all(c.decision == "excluded" for c in train)
    assert {verdicts(v)[k] for k in ("A", "A-fixed", "B", "B-fixed", "C-fixed", "C", "D")} == {"inconclusive"}
    assert v.verdict == "inconclusive"
    assert not (tmp_path / "post_vs_pre.csv").exists()  # (E) has no cell where both arms learned


def test_postnorm_warmup_rule_E_is_reported_without_a_verdict(tmp_path):
    """Where warmed-up Post-LN and Pre-LN both learned in every seed their final losses are compared (paired,
    Holm, calibrated by the null pair where it was run) and written, but never decided into a sub-verdict."""
    v = analyse(
        EXP,
        records(lambda pl, wu, d, s, **_: OK - (0.1 if pl == "post" and wu else 0) + 0.001 * s),
        P,
        tmp_path,
    )
    assert "E" not in verdicts(v) and not any(c.id.startswith("E") for c in v.comparisons)
    table = (tmp_path / "post_vs_pre.csv").read_text()
    assert "E/L1-lr0.003" in table and "E/L2-lr0.003" in table and "b_better" in table
    assert any("not decided, by design" in c for c in v.caveats)


def test_postnorm_warmup_rule_divergence_counts_as_not_learned(tmp_path):
    """Post-LN without warmup diverges in every seed: it learned in none; the paired loss has no seed to pair,
    the cell is not excluded (the warmed-up arm learned) and B still sees Pre-LN learning where Post-LN
    diverged."""

    def loss(pl, wu, d, s, **_):
        if pl == "post":
            return (OK + 0.001 * s) if wu else None
        return OK + 0.001 * s

    v = analyse(EXP, records(loss), P, tmp_path)
    a = {c.id: c for c in v.comparisons if c.id.startswith(A1)}
    assert a[f"{A1}/learned"].learned_a == 0 and a[f"{A1}/learned"].learned_b == 2
    assert all(c.decision != "excluded" for c in a.values())
    assert a[f"{A1}/final_val"].n == 0
    assert comparison(v, "B-fixed/L1-lr0.003/learned").learned_b == 2


def test_postnorm_warmup_rule_control_failing_does_not_flip_A(tmp_path):
    """An old rule dropped every cell where the Pre-LN control failed, from every sub-verdict: a failing
    control flipped A. The control enters only B and C (excluded there where Post-LN failed too) and A is
    unchanged."""

    def loss(pl, wu, d, s, **kw):
        if pl == "pre":
            return STUCK + 0.001 * s
        return anchor_like(pl, wu, d, s, **kw)

    v = analyse(EXP, records(loss, null=lambda s: STUCK + 0.001 * s), P, tmp_path)
    assert verdicts(v)["A"] == "supported" and verdicts(v)["C-fixed"] == verdicts(v)["C"] == "inconclusive"
    assert set(decisions(v, "C-fixed/").values()) == set(decisions(v, "C/").values()) == {"excluded"}


def test_postnorm_warmup_rule_gradient_signature_separates_failed_from_learned_runs(tmp_path):
    """The signature table reads the per-block gradient norms: a failed run's first block collapsed by step
    ~30."""
    v = analyse(EXP, records(anchor_like), P, tmp_path)
    sig = (tmp_path / "grad_signature.csv").read_text()
    assert "learned" in sig and "first/last there" in sig
    c = sub(v, "C-fixed")
    assert "not learned" in c.detail and "first/last-layer gradient norm" in c.detail.lower()


def test_postnorm_warmup_rule_D_inconclusive_when_post_ln_never_fails(tmp_path):
    v = analyse(EXP, records(lambda pl, wu, d, s, **_: OK + 0.001 * s), P, tmp_path)
    assert verdicts(v)["D"] == "inconclusive" and not decisions(v, "D/")
    assert "Left out" in sub(v, "D").detail


def test_postnorm_warmup_rule_D_counts_only_cells_where_post_ln_failed(tmp_path):
    """Post-LN without warmup fails at L = 2 only: D compares DeepNorm there and leaves L = 1 out."""

    def loss(pl, wu, d, s, **_):
        return (STUCK + 0.001 * s) if (pl == "post" and not wu and d == 2) else OK + 0.001 * s

    v = analyse(EXP, records(loss), P, tmp_path)
    d = decisions(v, "D/")
    assert d["D/L2-lr0.003/final_val"] == "b_better" and not any(k.startswith("D/L1") for k in d)
    assert verdicts(v)["D"] == "supported"


def test_postnorm_warmup_rule_init_mechanism_numbers(tmp_path):
    v = analyse(EXP, records(anchor_like), P, tmp_path)
    d = decisions(v)
    assert all(
        d[f"F/{q}"] == "equivalent"
        for q in ("post-exponent", "pre-exponent", "post-last-first", "pre-last-first")
    )
    assert d["G-paired"] == "b_better" and d["H"] == "equivalent"
    assert comparison(v, "G-paired").n == P["init_seeds"]
    v = analyse(EXP, records(anchor_like, amp_pre=1.6, q_post=0.85), P, tmp_path)
    vs = verdicts(v)
    # Pre-LN's amplification slope 1.6 is above its bound (Post-LN's 1.0 within its own): mixed; per seed
    # Pre-LN's
    # slope is the larger: the paired comparison refutes
    assert vs["G"] == "mixed" and decisions(v)["G/post-amp-slope"] == "equivalent"
    assert decisions(v)["G/pre-amp-slope"] == "b_better" and vs["G-paired"] == "refuted"
    assert vs["H"] == "refuted" and decisions(v)["H"] == "b_better"  # q = 0.85 lies above [0.4, 0.6]
    assert (
        vs["A"] == "supported" and v.verdict == "supported"
    )  # the mechanism never enters the overall verdict
    assert math.isfinite(v.evidence["post_identity_factor"])
    assert v.evidence["post_identity_factor"] == pytest.approx(0.85, abs=1e-6)


def test_postnorm_warmup_rule_F_fails_when_the_post_ln_gradient_shrinks_with_depth(tmp_path):
    recs = records(anchor_like)
    for r in recs:
        c = r["config"]
        if c["part"] == "probe" and c["placement"] == "post":  # last-layer W² gradient ∝ L^-0.5, flat in l
            r["metrics"]["w2_grad"] = [[c["depth"] ** -0.5] * c["depth"] for _ in range(P["init_seeds"])]
    v = analyse(EXP, recs, P, tmp_path)
    d = decisions(v, "F/")
    assert (
        d["F/post-exponent"] == "a_better" and d["F/post-last-first"] == "a_better"
    )  # both below their bounds
    assert d["F/pre-exponent"] == "equivalent" and verdicts(v)["F"] == "mixed"


def test_postnorm_warmup_rule_warmup_that_rescues_one_rate_is_refuted_at_the_best_rate(tmp_path):
    """Without warmup Post-LN is stuck at the fixed cells' rate 3e-3 but trains at the sweep's lower rates as
    well as with warmup: the fixed-rate comparison sees warmup rescue that rate, and the tuned comparison
    finds the arms equivalent within the ±0.05 SESOI with power ≥ 80% there at both widths: (A) refuted, at
    the best rate warmup is not needed; the range sub-claim sees warmup widen the rates that train."""
    p = {**P, "selection_seeds": [10, 11, 12]}

    def loss(pl, wu, d, s, lr=3e-3, **_):
        if pl == "post" and not wu and lr >= 3e-3:
            return STUCK + 0.002 * s
        return OK + 0.001 * (s % 3) + bowl(lr)

    v = analyse(EXP, records(loss, params=p), p, tmp_path)
    assert verdicts(v)["A-fixed"] == "supported"
    assert set(decisions(v, "A/").values()) >= {"equivalent"} and verdicts(v)["A"] == "refuted"
    assert all(r == "refute" for r in sub(v, "A").roles.values())
    assert all(c.power >= 0.8 for c in v.comparisons if c.id.startswith("A/") and c.decision == "equivalent")
    ch = {(r["arm"], r["scale"]): r["chosen_lr"] for r in v.evidence["lr_choices"]}
    assert ch[("post", "d16")] == 1.5e-3 and ch[("post-warmup", "d16")] == 1.5e-3
    assert comparison(v, "A-range").decision == "b_better" and verdicts(v)["A-range"] == "supported"
    sens = (tmp_path / "lr_choices.csv").read_text()
    assert "sensitivity_lo" in sens


def test_postnorm_warmup_rule_chosen_rate_is_read_on_selection_seeds_only(tmp_path):
    """The fresh seeds never choose: at 1.5e-3 warmed-up Post-LN is worse on the selection seed and better on
    the fresh ones, so it keeps 3e-3 (chosen on selection) and its fresh runs there are the fixed cell's."""

    def loss(pl, wu, d, s, lr=3e-3, **_):
        if pl == "post" and wu and lr < 3e-3:
            return OK + (0.2 if s in P["selection_seeds"] else -0.2)
        return OK + 0.001 * s

    v = analyse(EXP, records(loss), P, tmp_path)
    ch = {(r["arm"], r["scale"]): r["chosen_lr"] for r in v.evidence["lr_choices"]}
    assert ch[("post-warmup", "d16")] == 3e-3
    assert comparison(v, "A/d16/final_val").mean_b == pytest.approx(OK + 0.0005)


def test_postnorm_warmup_rule_C_tells_a_late_start_from_a_failure(tmp_path):
    """Post-LN with warmup stuck at depth at the fixed rate over the short run (C-fixed supported), but at its
    own best rate over the longer run it trains level with Pre-LN: 'fails' is refuted (late, not never),
    because C-fixed, the positive control (one cell, so it covers C's), saw the effect there and the
    equivalence has power ≥ 80% at the SESOI. Its sweep chose among the deep rates on the selection seeds
    alone."""

    def late(pl, wu, d, s, lr=3e-3, steps=P["steps"], **kw):
        if pl == "post" and wu and d == 2 and steps > P["steps"]:
            return OK - 0.05 + 0.001 * s + (0.0 if lr < 3e-3 else 0.4)
        return anchor_like(pl, wu, d, s, lr=lr, steps=steps, **kw)

    v = analyse(EXP, records(late), P, tmp_path)
    assert verdicts(v)["C-fixed"] == "supported" and verdicts(v)["C"] == "refuted"
    c = comparison(v, "C/final_val")
    assert c.decision == "equivalent" and c.learned_a == c.learned_b == len(P["seeds"]) and c.power >= 0.8
    assert sub(v, "C").roles == {"C/final_val": "refute"}
    ch = {(r["arm"], r["scale"]): r["chosen_lr"] for r in v.evidence["lr_choices"]}
    assert ch[("post-warmup", f"L{P['deep_depth']}, {P['deep_steps']} steps")] < 3e-3


def test_postnorm_warmup_rule_C_equivalence_is_not_decidable_where_its_control_fails(tmp_path):
    """The same late start, but at the fixed rate over the short run warmed-up Post-LN is stuck in one seed
    only: C-fixed is counted (a seed failed) yet undecided, so the positive control failed in C's cell and
    C's powered equivalence there is not decidable (counted neither way): C is inconclusive, not refuted."""

    def control_fails(pl, wu, d, s, lr=3e-3, steps=P["steps"], **kw):
        if pl == "post" and wu and d == 2:
            if steps > P["steps"]:
                return OK - 0.05 + 0.001 * s + (0.0 if lr < 3e-3 else 0.4)
            if lr >= 3e-3:
                return (STUCK, OK - 0.05 + 0.001 * s)[s % 2]
        return anchor_like(pl, wu, d, s, lr=lr, steps=steps, **kw)

    v = analyse(EXP, records(control_fails), P, tmp_path)
    assert comparison(v, "C-fixed/final_val").decision == "undecided"
    assert "C-fixed/final_val" in sub(v, "C-fixed").comparisons  # counted: a seed did not learn
    c = comparison(v, "C/final_val")
    assert c.decision == "equivalent" and c.power >= 0.8
    assert sub(v, "C").roles == {"C/final_val": "not decidable"} and verdicts(v)["C"] == "inconclusive"
    assert "not decidable here (the positive control failed in the cell" in sub(v, "C").detail


def test_postnorm_warmup_rule_C_underpowered_equivalence_does_not_refute(tmp_path):
    """C-fixed holds (the control saw the effect), and at its best rate warmed-up Post-LN trains level with
    Pre-LN within ±0.05, but its seeds spread by ±0.005 around Pre-LN's: with two seeds TOST passes, yet the
    power at the SESOI is under 80%, so the equivalence is undecided and C inconclusive."""

    def weak(pl, wu, d, s, lr=3e-3, steps=P["steps"], **kw):
        if pl == "post" and wu and d == 2 and steps > P["steps"]:
            return OK - 0.05 + 0.001 * s + (0.0 if lr < 3e-3 else 0.4) + (0.006, -0.004)[s % 2]
        return anchor_like(pl, wu, d, s, lr=lr, steps=steps, **kw)

    v = analyse(EXP, records(weak), P, tmp_path)
    assert verdicts(v)["C-fixed"] == "supported"
    c = comparison(v, "C/final_val")
    assert c.decision == "equivalent" and c.power < 0.8
    assert sub(v, "C").roles == {"C/final_val": "undecided"} and verdicts(v)["C"] == "inconclusive"
    assert "under 80% power there, so this does not refute" in sub(v, "C").detail


def test_postnorm_warmup_sensitivity_reads_the_fixed_range_only():
    """An arm whose sweep was widened beyond the profile's rates is read over the same rates as the others:
    its widened rate changes nothing; a seed missing one of the fixed rates has no sensitivity."""
    from experiments.postnorm_warmup.analysis import fixed_range_sensitivity

    p = {"d_model": 16, "rates": [1e-3, 2e-3, 4e-3]}
    rows = [
        {
            "arm": a,
            "unit": u,
            "lr": lr,
            "final_val": v + u % 100 * 0.01,
            "init_loss": 4.0,
            "d_model": 16,
            "role": r,
        }
        for a, curve in (
            ("post", {1e-3: 3.0, 2e-3: 2.5, 4e-3: 2.2, 8e-3: 4.0}),
            ("pre", {1e-3: 2.4, 2e-3: 2.3}),
        )
        for u, r in ((100, "selection"), (101, "selection"), (0, "test"))
        for lr, v in curve.items()
    ]
    got = fixed_range_sensitivity(pd.DataFrame(rows), p)
    post = got[got.arm == "post"].set_index("unit").sensitivity
    # mean of (3.0, 2.5, 2.2) less its best, per seed (the shift cancels); the widened 8e-3 left out
    assert list(post.index) == [100, 101] and post.to_numpy() == pytest.approx([2.5667 - 2.2] * 2, abs=1e-4)
    assert got[got.arm == "pre"].empty  # its sweep lacks 4e-3
