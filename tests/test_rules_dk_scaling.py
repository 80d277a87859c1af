"""The dk_scaling rule on synthetic run records: every outcome it can give.

The quick profile's grid with four seeds (a paired test needs a few to decide). The Monte Carlo rows carry
per-query softmax-Jacobian norms built to make the saturation trend tests pass or fail (ln|J| = const +
slope · log2 d_k + the same per-query noise at every d_k, so the fitted slope is the declared one); the
training arms (unit-variance q, k, d_k varied), the logit-scale arms (d_k = ref_dk, scaled, initial logit std
s) and the null pair are built to make each cell go either way, stay undecided, or fail to learn in both
arms."""

import numpy as np
import pytest

from tfclaims.evidence.evaluate import CheckFailed
from tfclaims.harness.registry import load

from rules import analyse, comparison, decisions, grown, sub, verdicts

EXP = load("dk_scaling")
P = {**EXP.profiles["quick"], "seeds": [0, 1, 2, 3]}
UNIGRAM = 3.30
JITTER = np.array([0.00, 0.02, -0.015, 0.01])  # seed-to-seed spread shared by every arm (paired)
W8 = {0: 0.004, 1: -0.003, 2: 0.002, 3: -0.003}  # per-seed wobble of an arm difference, so slopes have spread
W32 = {0: -0.003, 1: 0.004, 2: -0.003, 3: 0.002}  # W32 − W8 sums to zero over seeds: a flat gap has slope 0
Z = np.random.default_rng(0).normal(0.0, 0.3, 64)  # per-query ln|J| noise, the same draws at every d_k


def mc_rows(law=1.0, unscaled_slope=-0.8, scaled_slope=0.0, max_p=0.95):
    """Monte Carlo rows: ln|J| per query falls by `unscaled_slope` / `scaled_slope` per doubling of d_k."""
    rows = []
    for dk in P["mc_dks"]:
        x = np.log2(dk) - np.log2(min(P["mc_dks"]))
        ju = np.exp(np.log(0.15) + unscaled_slope * x + Z)
        js = np.exp(np.log(0.2) + scaled_slope * x + 0.2 * Z)
        big = dk == max(P["mc_dks"])
        rows.append(
            {
                "dk": dk,
                "var_dot": law * dk,
                "var_scaled": law,
                "var_additive": 0.1 + 0.001 * dk,
                "unscaled": {
                    "max_prob": max_p if big else 0.5,
                    "entropy": 0.2,
                    "jacobian_norm": float(ju.mean()),
                },
                "scaled": {"max_prob": 0.11, "entropy": 3.9, "jacobian_norm": float(js.mean())},
                "jac_unscaled": ju.tolist(),
                "jac_scaled": js.tolist(),
            }
        )
    return rows


def train_metrics(final, seed, n_layers):
    v = float(final + JITTER[seed % len(JITTER)])
    return {
        "final_val": v,
        "val_loss": [4.4, v + 0.3, v],
        "eval_steps": [0, 6, 12],
        "diverged_at": None,
        "unigram_xent": UNIGRAM,
        "n_params": 1000,
        "probes": [
            {"logit_var": lv, "max_prob": 0.2, "wq_grad": [g] * n_layers}
            for lv, g in ((1.0, 0.5), (2.0, 0.3), (3.0, 0.2))
        ],
    }


def records(train, logit=None, *, params=P, qknorm=None, by_rate=None, **mc):
    """train(dk, scaled, seed) -> final validation loss before the shared jitter (the training part, the null
    pair and the learning-rate sweep, whatever the rate); logit(s, seed) -> that of the logit part's arm with
    initial logit std s (default: the scaled arm at ref_dk, i.e. no effect of the logit scale);
    qknorm(lr, seed) -> the unscaled qk-layernorm arm's (default: as unscaled); by_rate(part, scaled, lr,
    seed), when given, sets every training run's loss instead; `mc` goes to mc_rows. The staged grid grows as
    the runner grows it."""
    return grown(EXP, params, lambda c: _metrics(c, train, logit, qknorm, by_rate, mc))


def _metrics(c, train, logit, qknorm, by_rate, mc):
    part = c["part"]
    if part == "monte_carlo":
        return {"rows": mc_rows(**mc)}
    if part == "init":
        return {
            "var_q": 0.01,
            "var_k": 0.01,
            "var_dot": 1e-4 * c["dk"],
            "law_prediction": 1e-4 * c["dk"],
            "unscaled": {"max_prob": 0.1},
            "scaled": {"max_prob": 0.1},
        }
    s = c["seed"] % 1000
    if by_rate is not None:
        loss = by_rate(part, c["scaled"], c["lr"], c["seed"])
    elif part == "logit" and logit is not None:
        loss = logit(round(c["qk_std"] ** 2, 6), s)
    elif part == "qknorm" and qknorm is not None:
        loss = qknorm(c["lr"], s)
    else:
        loss = train(c["dk"], c["scaled"], s)
    return train_metrics(loss, s, c["n_layers"])


def scaled_better(dk, scaled, s):
    return 2.6 if scaled else 2.9


def gap_arms(gap8, gap32):
    """Scaled at 2.6, unscaled above it by gap8 (d_k = 8) or gap32 (d_k = 32), with a per-seed wobble."""
    return lambda dk, scaled, s: (
        2.6 if scaled else 2.6 + (gap8 + W8[s % 4] if dk == 8 else gap32 + W32[s % 4])
    )


def train_cells(v):
    return decisions(v, "training/")


def test_dk_scaling_rule_supported_when_law_holds_softmax_saturates_and_unscaled_trains_worse(tmp_path):
    v = analyse(EXP, records(scaled_better), P, tmp_path)
    assert v.verdict == "supported"
    assert train_cells(v) == {"training/dk8": "a_better", "training/dk32": "a_better"}  # a = scaled
    assert verdicts(v) == {
        "law": "supported",
        "saturation": "supported",
        "flat": "supported",
        "one-hot": "supported",
        "additive": "supported",
        "training": "supported",
        "tuned": "supported",
        # qk-norm and the logit arm reproduce their reference arm exactly (se 0: power 1 at the SESOI), so the
        # equivalence is powered and refutes both (reported beside the verdict, not in it)
        "qk-norm": "refuted",
        "collapse": "inconclusive",
        "logit-growth": "inconclusive",
        "harm": "inconclusive",
        "logit": "refuted",
        "logit-trend": "inconclusive",
    }
    kinds = {s.id: (s.kind, s.counts) for s in v.sub_verdicts}
    assert kinds["law"] == ("check", False) and kinds["tuned"] == ("effect", True)
    assert kinds["training"] == kinds["qk-norm"] == ("effect", False)
    # each arm at its own best rate, on the fresh seeds, at both widths
    assert decisions(v, "tuned/") == {"tuned/d32": "a_better", "tuned/d64": "a_better"}
    assert sub(v, "tuned").holds == ["d32", "d64"]
    assert kinds["harm"] == ("effect", False)
    d = decisions(v)
    assert all(d[k] == "equivalent" for k in d if k.startswith(("law", "additive", "one-hot")))
    assert d["flat"] == "equivalent"
    # the unscaled Jacobian falls by the declared 0.8 in ln per doubling: significantly negative
    u = comparison(v, "saturation")
    assert (
        u.decision == "b_better" and u.diff == pytest.approx(-0.8, abs=1e-6) and u.n == 64 * len(P["mc_dks"])
    )
    s = comparison(v, "flat")
    assert abs(s.diff) < 1e-6 and -0.05 < s.ci_low < s.ci_high < 0.05 and s.level == pytest.approx(0.9)
    assert [c.id for c in v.noise_floor] == ["null"]
    cell = comparison(v, "training/dk32")
    assert cell.paired and cell.n == 4 and cell.noise is not None and cell.sesoi == 0.02
    assert cell.null_p is not None and not cell.null_significant  # the null pair was run at d_k = 32
    assert cell.diff == pytest.approx(0.3) and cell.arm_a == "scaled"
    assert comparison(v, "training/dk8").noise is None  # ... and not at d_k = 8: it calibrates no other cell
    assert comparison(v, "qk-norm/d32").power == 1.0 and comparison(v, "qk-norm/d32").decision == "equivalent"
    assert {"harm", "logit", "logit-trend"} <= set(d)  # one logit std in this profile: one cell
    assert v.evidence["sub_verdicts"]["training"] == "supported"


def test_dk_scaling_rule_training_refuted_when_unscaled_trains_significantly_better(tmp_path):
    v = analyse(EXP, records(lambda dk, scaled, s: 2.9 if scaled else 2.6), P, tmp_path)
    assert set(train_cells(v).values()) == {"b_better"}
    assert verdicts(v)["training"] == "refuted" and verdicts(v)["saturation"] == "supported"
    assert v.verdict == "mixed"  # saturation holds, training refutes


def test_dk_scaling_rule_a_failing_variance_law_stops_the_claim(tmp_path):
    """The law is an identity the Monte Carlo relies on: failing it is a bug, not evidence against the
    claim."""
    with pytest.raises(CheckFailed, match="law"):
        analyse(EXP, records(scaled_better, law=1.5), P, tmp_path)


@pytest.mark.parametrize(
    "mc, failing, sub_v, decision, verdict",
    [
        # unscaled Jacobians do not fall with d_k: no significant slope, so saturation cannot be shown
        ({"unscaled_slope": 0.0}, "saturation", "inconclusive", "undecided", "inconclusive"),
        # unscaled Jacobians grow with d_k: the opposite of the claim
        ({"unscaled_slope": 0.5}, "saturation", "refuted", "a_better", "mixed"),
        # the scaled Jacobian is not flat (-0.2 per doubling): shown outside ±0.05
        ({"scaled_slope": -0.2}, "flat", "refuted", "b_better", "mixed"),
        # max p at the largest d_k is not above 0.9
        ({"max_p": 0.5}, "one-hot", "refuted", "a_better", "mixed"),
    ],
)
def test_dk_scaling_rule_each_saturation_sub_claim_decides_alone(
    tmp_path, mc, failing, sub_v, decision, verdict
):
    v = analyse(EXP, records(scaled_better, **mc), P, tmp_path)
    assert verdicts(v)[failing] == sub_v
    assert decisions(v)[failing if failing != "one-hot" else "one-hot"] == decision
    assert verdicts(v)["training"] == "supported"
    assert v.verdict == verdict


@pytest.mark.parametrize(
    "spread, powered, verdict",
    [
        (1.0, True, "refuted"),  # seed spread ~0.003 nats: power ≈ 1 at ±0.02, so the equivalence refutes
        (4.0, False, "inconclusive"),  # four times the spread: TOST still passes, but power < 80%: undecided
    ],
)
def test_dk_scaling_rule_equivalent_training_refutes_only_with_power_at_the_sesoi(
    tmp_path, spread, powered, verdict
):
    # |Δ| ≈ 0 nats: TOST within ±0.02 passes at either spread; only a powered equivalence refutes
    wobble = {0: 0.003, 1: -0.002, 2: 0.001, 3: -0.003}
    v = analyse(
        EXP,
        records(lambda dk, scaled, s: 2.6 + (0.001 + spread * wobble[s % 4] if scaled else 0.0)),
        P,
        tmp_path,
    )
    assert set(train_cells(v).values()) == {"equivalent"}
    for c in (comparison(v, "training/dk8"), comparison(v, "training/dk32")):
        assert c.sesoi == 0.02 and 0 < c.power <= 1 and (c.power >= 0.8) == powered
    assert set(sub(v, "training").roles.values()) == {"refute" if powered else "undecided"}
    assert verdicts(v)["training"] == verdict
    assert ("under 80% power there, so this does not refute" in sub(v, "training").detail) != powered


def test_dk_scaling_rule_underpowered_null_is_inconclusive(tmp_path):
    noise = {0: 0.3, 1: -0.25, 2: 0.1, 3: -0.2}
    v = analyse(EXP, records(lambda dk, scaled, s: 2.6 + (0.0 if scaled else noise[s % 4])), P, tmp_path)
    assert set(train_cells(v).values()) == {"undecided"}
    assert verdicts(v)["training"] == "inconclusive"
    assert v.verdict == "inconclusive"
    assert all(c.mde is not None and c.mde > 0 for c in v.comparisons if c.id.startswith("training/"))


def test_dk_scaling_rule_a_drifting_null_pair_undecides_only_the_cell_it_was_run_in(tmp_path):
    """The null pair (scaled, d_k = 32, against its rerun) drifts: the rerun is ≈0.05 nats worse in every
    seed, so the null comparison is significant and the variance at d_k = 32 is underestimated: training/dk32
    is undecided whatever its p, while d_k = 8, where the null pair was not run, still decides. Every cell
    must hold ('all'), so training is not supported."""
    drift = {0: 0.05, 1: 0.052, 2: 0.049, 3: 0.051}
    recs = records(scaled_better)
    for r in recs:
        if r["config"]["part"] == "null":
            r["metrics"]["final_val"] += drift[r["config"]["seed"] % 1000]
    v = analyse(EXP, recs, P, tmp_path)
    (null,) = v.noise_floor
    assert null.p < 0.05
    dk32, dk8 = comparison(v, "training/dk32"), comparison(v, "training/dk8")
    assert dk32.p < 0.05 and dk32.null_p == null.p and dk32.null_significant and dk32.decision == "undecided"
    assert dk8.p < 0.05 and dk8.null_p is None and dk8.decision == "a_better"
    assert sub(v, "training").roles == {"training/dk8": "support", "training/dk32": "undecided"}
    assert verdicts(v)["training"] == "inconclusive"
    assert "dk32: the null pair in the cell is significant" in sub(v, "training").detail


def test_dk_scaling_rule_mixed_when_cells_disagree(tmp_path):
    v = analyse(
        EXP,
        records(lambda dk, scaled, s: (2.6 if scaled else 2.9) if dk == 32 else (2.9 if scaled else 2.6)),
        P,
        tmp_path,
    )
    assert train_cells(v) == {"training/dk32": "a_better", "training/dk8": "b_better"}
    assert verdicts(v)["training"] == "mixed"
    assert v.verdict == "mixed"


def test_dk_scaling_rule_cell_where_neither_arm_learned_is_excluded_not_counted(tmp_path):
    # d_k = 8: both arms stay at the unigram level (one of them far above): excluded, not a win for scaling
    v = analyse(
        EXP,
        records(lambda dk, scaled, s: (2.6 if scaled else 2.9) if dk == 32 else (UNIGRAM if scaled else 4.0)),
        P,
        tmp_path,
    )
    assert train_cells(v) == {"training/dk8": "excluded", "training/dk32": "a_better"}
    assert verdicts(v)["training"] == "supported"
    ex = comparison(v, "training/dk8")
    assert ex.learned_a == 0 and ex.learned_b == 0 and ex.p is None
    # with d_k = 8 left out each seed has one d_k level: no harm trend at all (not one driven by the 0.7 gap)
    h = comparison(v, "harm")
    assert h.n == 0 and h.diff is None and h.decision == "undecided"
    assert verdicts(v)["harm"] == "inconclusive"


@pytest.mark.parametrize(
    "gap8, gap32, decision, verdict",
    [
        (0.1, 0.4, "b_better", "supported"),  # the gap grows with d_k
        (0.3, 0.3, "undecided", "inconclusive"),  # flat gap: scaling helps, but not more at larger d_k
        (0.4, 0.1, "a_better", "refuted"),  # the gap shrinks with d_k
    ],
)
def test_dk_scaling_rule_harm_trend_across_dk(tmp_path, gap8, gap32, decision, verdict):
    v = analyse(EXP, records(gap_arms(gap8, gap32)), P, tmp_path)
    assert set(train_cells(v).values()) == {"a_better"}  # scaled better in every cell, whatever the trend
    h = comparison(v, "harm")
    assert h.n == 4 and h.paired and h.arm_a == "slope in log2 d_k"
    assert h.diff == pytest.approx((gap32 - gap8) / (np.log2(32) - np.log2(8)), abs=1e-9)
    assert h.decision == decision
    assert verdicts(v)["harm"] == verdict
    assert v.verdict == "supported"  # the trend is reported beside the overall verdict, not in it


def test_dk_scaling_rule_excluded_dk_cell_is_left_out_of_the_harm_trend(tmp_path):
    # three d_k cells; d_k = 8 learns in neither arm (its 'gap', 0.7, would turn the trend negative: slope
    # over (8, 16, 32) of (0.7, 0.2, 0.4) is −0.15); over d_k = 16, 32 the gap grows by 0.2 per doubling
    p3 = {**P, "dks": [8, 16, 32]}

    def train(dk, scaled, s):
        if dk == 8:
            return UNIGRAM if scaled else 4.0
        return 2.6 if scaled else 2.6 + (0.2 + W8[s % 4] if dk == 16 else 0.4 + W32[s % 4])

    v = analyse(EXP, records(train, params=p3), p3, tmp_path)
    assert train_cells(v) == {
        "training/dk8": "excluded",
        "training/dk16": "a_better",
        "training/dk32": "a_better",
    }
    h = comparison(v, "harm")
    assert h.n == 4 and h.diff == pytest.approx(0.2, abs=1e-9) and h.decision == "b_better"
    assert verdicts(v)["harm"] == "supported"


@pytest.mark.parametrize(
    "effect, cell, trend, verdict",
    [
        (0.2, "a_better", "b_better", "supported"),  # larger initial logit std -> worse final loss
        (-0.2, "b_better", "a_better", "refuted"),  # larger initial logit std -> better
    ],
)
def test_dk_scaling_rule_logit_scale_alone(tmp_path, effect, cell, trend, verdict):
    v = analyse(EXP, records(scaled_better, lambda s, seed: 2.6 + effect + W8[seed % 4]), P, tmp_path)
    c = comparison(v, "logit")  # a = initial logit std 1 (the training arm at ref_dk), b = std 4
    assert c.decision == cell and c.n == 4
    assert c.noise is None and c.null_p is None  # the null pair ran at d_k = 32, not at ref_dk = 8
    assert c.diff == pytest.approx(effect + np.mean(list(W8.values())), abs=1e-9)
    t = comparison(v, "logit-trend")
    assert t.decision == trend and t.n == 4
    assert t.diff == pytest.approx(
        (effect + np.mean(list(W8.values()))) / np.log2(4), abs=1e-9
    )  # per doubling of s
    assert verdicts(v)["logit"] == verdict and verdicts(v)["logit-trend"] == verdict
    assert v.verdict == "supported"  # reported beside the overall verdict, not in it


def test_dk_scaling_rule_scaling_that_matters_only_at_one_rate_is_refuted_at_the_best_rate(tmp_path):
    """Unscaled attention is worse at the fixed rate (3e-3) but at its own best rate (the lower 1.5e-3) it
    trains as well as scaled attention at its best: the tuned comparisons are equivalent within ±0.02 with
    power ≈ 1 there (a seed spread of ~0.002 nats), so the tuned equivalence refutes."""
    p = {**P, "selection_seeds": [10, 11, 12]}
    wob = {0: 0.001, 1: -0.002, 2: 0.0015, 3: -0.001}

    def by_rate(part, scaled, lr, s):
        if part == "train" and not scaled and lr >= 3e-3:
            return 2.9 + wob[s % 4]
        bowl = 0.05 * abs(np.log2(lr / 1.5e-3))  # the best rate 1.5e-3, inside every sweep once widened
        return 2.6 + bowl + wob[s % 4] * (not scaled)

    recs = records(None, params=p, by_rate=by_rate)
    v = analyse(EXP, recs, p, tmp_path)
    assert verdicts(v)["training"] == "supported"  # at lr 3e-3
    ch = {(r["arm"], r["scale"]): r["chosen_lr"] for r in v.evidence["lr_choices"]}
    assert ch[("unscaled", "d32")] == 1.5e-3
    assert set(decisions(v, "tuned/").values()) == {"equivalent"}
    assert all(c.power >= 0.8 for c in v.comparisons if c.id.startswith("tuned/"))
    assert verdicts(v)["tuned"] == "refuted"
