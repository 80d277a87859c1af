"""The additive_vs_dot rule on synthetic run records: every outcome its declared sub-claims can give.

The quick profile's grid at two task widths (16 and 64) and four fresh seeds, the learning-rate sweep grown as
the runner grows it. Score variances are power laws in d with a given slope (and a tiny wobble, so the slope's
CI is finite); timings are per-round times sharing a round-to-round load factor; each kind's final held-out
loss is set per (kind, width) at its best rate (3e-3 unless a test moves it), with a seed-to-seed spread
shared by the kinds. Quality comparisons are dot product (b) − additive (a) in held-out loss, the speed
comparison additive (b) − dot product (a): the arm each sub-claim names as better is a."""

import math

import numpy as np
import pytest

from tfclaims.evidence.evaluate import CheckFailed
from tfclaims.harness.registry import load

from experiments.additive_vs_dot.grid import AA, KINDS
from experiments.additive_vs_dot.recipes import INITS
from rules import analyse, comparison, decisions, grown, sub, timed, verdicts

EXP = load("additive_vs_dot")
P = {**EXP.profiles["quick"], "task_dims": [16, 64], "seeds": [0, 1, 2, 3]}
WOBBLE = [1e-4, -2e-4, 1e-4, 0.0, -1e-4, 2e-4]
JITTER = np.array([0.00, 0.02, -0.015, 0.01])
CHANCE = 1 / P["n_values"]
COUNTED = ("variance", "speed", "acc-scaled", "acc-unscaled")


def variance_rows(dims, slopes):
    """slopes: column -> log-log slope; every column a power law c · d^slope."""
    cols = {"raw q·k": 1.0, **{f"{k} ({i})": 0.0 for k in KINDS for i in INITS}}
    cols["dot_unscaled (torch)"] = cols["dot_unscaled (xavier)"] = 1.0
    cols["additive, keys of size 2d (torch)"] = 0.0
    cols.update(slopes)
    return [
        {"d": d, **{c: float(0.3 * d**s * math.exp(WOBBLE[j % 6])) for c, s in cols.items()}}
        for j, d in enumerate(dims)
    ]


LN = math.log(P["n_values"])  # the loss of guessing: what an arm that learned nothing ends at


KIND_JITTER = {"additive": [0.01, -0.012, 0.006, -0.004], "dot_scaled": [0.0] * 4, "dot_unscaled": [0.0] * 4}


def task_metrics(loss, seed, kind):
    """A run that ends at held-out loss `loss` (± seed jitter where it learned, shared by the kinds, and a
    small one of additive's own, so that paired differences vary); its accuracy 0.9 where the loss is well
    below chance, else chance."""
    learned = loss < LN - 0.3
    final = loss + (JITTER[seed % 4] + KIND_JITTER[kind][seed % 4] if learned else 0.0)
    acc = 0.9 if learned else CHANCE
    return {
        "eval_steps": [0, 10, 20],
        "accuracy": [CHANCE, acc, acc],
        "val_loss": [LN, final, final],
        "final_val": final,
        "final_acc": acc,
        "auc": acc,
        "chance": CHANCE,
        "train_loss": [2.0] * 20,
        "diverged_at": None,
    }


def records(
    *,
    slopes=None,
    speed=-1.5,
    loss,
    null=lambda s, d: 0.0,
    aa=lambda n, d: 0.0,
    best=lambda kind, d: 3e-3,
    off=0.2,
):
    """speed: log(t_dot / t_additive) (negative: dot faster), or (n, d) -> that; loss(kind, d, seed) -> the
    final held-out loss at the kind's best rate best(kind, d) (every other rate `off` nats worse; 0: a flat
    sweep, whose choice is no end's);
    null(seed, d): what the null pair's rerun of additive adds to its loss; aa(n, d): what the A/A timing of
    the dot product adds to its log time. The staged grid grows as the runner grows it."""
    gap = speed if callable(speed) else lambda n, d: speed  # per (n, d) cell, or one value for all

    def metrics(c: dict) -> dict:
        if c["part"] == "variance":
            m = {"rows": variance_rows(c["dims"], slopes or {})}
        elif c["part"] == "timing":
            m = {
                "rows": [
                    {
                        "n": n,
                        "d": d,
                        "additive": timed(1e-3 * n * d / 512),
                        "dot_scaled": timed(1e-3 * n * d / 512, gap(n, d), 1),
                        AA: timed(1e-3 * n * d / 512, gap(n, d) + aa(n, d), 2),
                    }
                    for d in c["ds"]
                    for n in c["ns"]
                ],
                "threads": 1,
            }
        else:
            s, worse = c["seed"] % 1000, 0.0 if c["lr"] == best(c["attn"], c["d"]) else off
            extra = worse + (null(s, c["d"]) if c["seed"] >= 1000 else 0.0)
            m = task_metrics(loss(c["attn"], c["d"], s) + extra, s, c["attn"])
        return m

    return grown(EXP, P, metrics)


def kinds(table, at16=None):
    """loss(kind, d, seed): table[kind] at d = 64; at d = 16 at16[kind], or chance for every kind."""
    return lambda kind, d, s: table[kind] if d == 64 else (at16[kind] if at16 else LN)


def acc_cells(v):
    return {k: x for k, x in decisions(v).items() if k.startswith("acc-") and k.endswith("final_val")}


def test_additive_vs_dot_rule_supported_and_chance_width_excluded(tmp_path):
    v = analyse(
        EXP, records(loss=kinds({"additive": 1.0, "dot_scaled": 1.5, "dot_unscaled": 2.0})), P, tmp_path
    )
    d = decisions(v)
    assert d["acc-scaled/d16/final_val"] == d["acc-unscaled/d16/final_val"] == "excluded"
    assert d["acc-scaled/d64/final_val"] == d["acc-unscaled/d64/final_val"] == "a_better"  # a = additive
    assert {d[k] for k in d if k.startswith("speed/")} == {"a_better"}  # a = dot product, lower time
    assert d["variance/lnvar_additive_torch"] == d["variance/lnvar_additive_xavier"] == "equivalent"
    assert d["law/dot-xavier"] == d["law/raw"] == "equivalent"
    assert {k: verdicts(v)[k] for k in COUNTED} == dict.fromkeys(COUNTED, "supported")
    assert v.verdict == "supported"
    c = comparison(v, "acc-scaled/d64/final_val")
    assert c.paired and c.n == 4 and c.learned_a == 4 and c.learned_b == 4 and c.noise is not None
    assert c.diff == pytest.approx(0.5) and c.arm_a.startswith("additive")
    # accuracy is reported beside the loss, not counted
    assert "acc-scaled/d64/final_acc" in sub(v, "acc-scaled").reported
    s = comparison(v, "speed/n32-d16")
    assert s.diff == pytest.approx(1.5, abs=0.01) and s.noise is not None  # log t_additive − log t_dot
    nf = {c.id for c in v.noise_floor}
    assert {"null/d64/final_val", "aa/n32-d16"} <= nf
    kinds_ = {x.id: (x.kind, x.counts) for x in v.sub_verdicts}
    assert kinds_["law"][0] == "check" and kinds_["keys"] == ("effect", False)


def test_additive_vs_dot_rule_refuted_when_every_part_goes_the_other_way(tmp_path):
    v = analyse(
        EXP,
        records(
            slopes={"additive (torch)": 0.5, "additive (xavier)": 0.5},
            speed=+1.0,
            loss=kinds({"additive": 2.0, "dot_scaled": 1.0, "dot_unscaled": 1.2}),
        ),
        P,
        tmp_path,
    )
    d = decisions(v)
    assert {d[k] for k in d if k.startswith("speed/")} == {"b_better"}  # additive faster
    assert (
        acc_cells(v)["acc-scaled/d64/final_val"] == acc_cells(v)["acc-unscaled/d64/final_val"] == "b_better"
    )
    assert {k: verdicts(v)[k] for k in COUNTED} == dict.fromkeys(COUNTED, "refuted")
    assert v.verdict == "refuted"


def test_additive_vs_dot_rule_similar_to_scaled_refutes_better_where_the_unscaled_control_differs(tmp_path):
    # additive well ahead of the unscaled dot product (the positive control), equal to the scaled one within
    # the margin: "additive is better" is refuted there, Vaswani et al.'s "similar" shown
    v = analyse(
        EXP, records(loss=kinds({"additive": 1.0, "dot_scaled": 1.0, "dot_unscaled": 2.0})), P, tmp_path
    )
    assert acc_cells(v)["acc-scaled/d64/final_val"] == "equivalent"
    assert verdicts(v)["acc-unscaled"] == "supported" and verdicts(v)["acc-scaled"] == "refuted"
    assert v.verdict == "mixed"


def test_additive_vs_dot_rule_equivalence_without_the_control_is_inconclusive(tmp_path):
    # every kind alike: the setup shows no difference anywhere, so an equivalence cannot refute "better"
    v = analyse(
        EXP, records(loss=kinds({"additive": 1.0, "dot_scaled": 1.0, "dot_unscaled": 1.0})), P, tmp_path
    )
    assert acc_cells(v)["acc-scaled/d64/final_val"] == "equivalent"
    assert verdicts(v)["acc-scaled"] == "inconclusive"


def test_additive_vs_dot_rule_underpowered_quality_is_inconclusive(tmp_path):
    # differences inside the seed noise: a naive "no difference, so additive is not better" would refute; the
    # ladder leaves the quality sub-verdicts inconclusive, and with them the whole claim
    noise = np.array([0.3, -0.35, 0.25, -0.2])
    v = analyse(
        EXP, records(loss=lambda k, d, s: 1.5 + (noise[s % 4] if k == "additive" else 0.0)), P, tmp_path
    )
    assert acc_cells(v)["acc-scaled/d64/final_val"] == "undecided"
    assert verdicts(v)["acc-scaled"] == "inconclusive"
    assert v.verdict == "inconclusive"


def test_additive_vs_dot_rule_a_significant_null_pair_leaves_its_width_undecided(tmp_path):
    # additive 0.1 nats ahead of the scaled dot product in every seed at both widths (p tiny); at d = 64 its
    # own rerun is ~0.1 nats worse in every seed: that null pair is significant, the variance there is
    # underestimated, so d64 is undecided whatever its p, while d16 (its null pair quiet) still decides
    table = {"additive": 1.4, "dot_scaled": 1.5, "dot_unscaled": 1.5}
    loss = kinds(table, table)
    drift = lambda s, d: [0.1, 0.12, 0.08, 0.11][s] if d == 64 else 0.0  # noqa: E731
    # a flat sweep (the quick profile's two rates would otherwise put every choice at an end)
    v = analyse(EXP, records(loss=loss, null=drift, off=0.0), P, tmp_path)
    c = comparison(v, "acc-scaled/d64/final_val")
    assert c.p < 0.05 and c.null_significant and c.decision == "undecided"
    quiet = comparison(v, "acc-scaled/d16/final_val")
    assert quiet.null_p > 0.05 and quiet.decision == "a_better"
    assert "the null pair in the cell is significant" in sub(v, "acc-scaled").detail
    assert verdicts(v)["acc-scaled"] == "inconclusive"  # support at d16 beside an undecided d64
    quiet_run = analyse(EXP, records(loss=loss, off=0.0), P, tmp_path / "quiet")
    assert verdicts(quiet_run)["acc-scaled"] == "supported"


def test_additive_vs_dot_rule_excludes_widths_where_every_arm_is_at_chance(tmp_path):
    v = analyse(EXP, records(loss=lambda k, d, s: LN), P, tmp_path)
    acc = [c for c in v.comparisons if c.id.startswith("acc-") and c.id.endswith("final_val")]
    assert len(acc) == 4 and all(c.decision == "excluded" and c.learned_a == c.learned_b == 0 for c in acc)
    assert "excluded" in sub(v, "acc-scaled").detail
    assert verdicts(v)["acc-scaled"] == "inconclusive" and v.verdict == "inconclusive"


def test_additive_vs_dot_rule_compares_each_kind_at_its_own_rate_on_fresh_seeds(tmp_path):
    # additive's best rate is 1e-3, the dot products' 3e-3: at one shared rate either side would lose 0.2 nats
    best = lambda kind, d: 1e-3 if kind == "additive" else 3e-3  # noqa: E731
    loss = kinds(
        {"additive": 1.0, "dot_scaled": 1.0, "dot_unscaled": 2.0},
        {"additive": 1.0, "dot_scaled": 1.0, "dot_unscaled": 2.0},
    )
    v = analyse(EXP, records(loss=loss, best=best), P, tmp_path)
    chosen = {(c["arm"], c["scale"]): c["chosen_lr"] for c in v.evidence["chosen_rates"]}
    assert chosen[("additive", "d16")] == chosen[("additive", "d64")] == 1e-3
    assert chosen[("dot_scaled", "d64")] == chosen[("dot_unscaled", "d16")] == 3e-3
    assert acc_cells(v)["acc-scaled/d64/final_val"] == "equivalent"  # not 0.2 nats apart: each at its rate
    assert comparison(v, "acc-scaled/d64/final_val").n == len(P["seeds"])  # the fresh seeds only


@pytest.mark.parametrize(
    "slopes, decision, verdict",
    [
        ({"additive (torch)": 0.1}, "undecided", "inconclusive"),  # the slope's interval straddles the bound
        ({"additive (torch)": 0.5}, "a_better", "mixed"),  # shown above +0.1 with Xavier inside: mixed
    ],
)
def test_additive_vs_dot_rule_variance_needs_every_additive_slope_flat(tmp_path, slopes, decision, verdict):
    v = analyse(EXP, records(slopes=slopes, loss=lambda k, d, s: LN), P, tmp_path)
    assert decisions(v)["variance/lnvar_additive_torch"] == decision
    assert decisions(v)["variance/lnvar_additive_xavier"] == "equivalent"
    assert verdicts(v)["variance"] == verdict


def test_additive_vs_dot_rule_keys_of_another_size_are_reported_not_counted(tmp_path):
    loss = kinds({"additive": 1.0, "dot_scaled": 1.5, "dot_unscaled": 2.0})
    v = analyse(EXP, records(slopes={"additive, keys of size 2d (torch)": 0.5}, loss=loss), P, tmp_path)
    assert verdicts(v)["keys"] == "refuted" and v.verdict == "supported"


def test_additive_vs_dot_rule_a_broken_variance_law_stops_the_claim(tmp_path):
    """Var(q·k) ∝ d for the unscaled dot product is the identity the Monte Carlo relies on: failing it is a
    bug, not evidence."""
    with pytest.raises(CheckFailed, match="law"):
        analyse(EXP, records(slopes={"dot_unscaled (xavier)": 0.5}, loss=lambda k, d, s: LN), P, tmp_path)


def test_additive_vs_dot_rule_equal_speed_shown_within_the_sesoi_with_power_refutes(tmp_path):
    # as fast, timed precisely: every cell within ±5% (TOST) with over 80% power at that SESOI, so "dot
    # product faster" is refuted (not merely undecided)
    v = analyse(EXP, records(speed=0.0, loss=lambda k, d, s: LN), P, tmp_path)
    speed = [c for c in v.comparisons if c.id.startswith("speed/")]
    assert len(speed) == 4 and {c.decision for c in speed} == {"equivalent"}
    assert all(c.power >= 0.8 for c in speed)
    assert verdicts(v)["speed"] == "refuted"


@pytest.mark.parametrize(
    "slow_at_64, aa_at_64, verdict",
    [(-1.5, 0.05, "inconclusive"), (0.5, 0.0, "mixed")],
)
def test_additive_vs_dot_rule_speed_claimed_at_every_cell(tmp_path, slow_at_64, aa_at_64, verdict):
    # dot product faster at n = 32; at n = 64 faster too but its A/A timing drifts by 5% there (the null pair
    # significant: those cells undecided, so not every cell holds), or slower (mixed)
    speed = lambda n, d: -1.5 if n == 32 else slow_at_64  # noqa: E731
    aa = lambda n, d: aa_at_64 if n == 64 else 0.0  # noqa: E731
    v = analyse(EXP, records(speed=speed, aa=aa, loss=lambda k, d, s: LN), P, tmp_path)
    assert decisions(v)["speed/n32-d16"] == decisions(v)["speed/n32-d32"] == "a_better"
    assert comparison(v, "speed/n32-d16").null_p > 0.05
    if aa_at_64:
        c = comparison(v, "speed/n64-d16")
        assert c.null_significant and c.p < 0.05 and c.decision == "undecided"
    assert verdicts(v)["speed"] == verdict
