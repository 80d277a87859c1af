"""The additive_vs_dot rule on synthetic run records: every outcome its declared sub-claims can give.

The quick profile's grid at two task widths (16 and 64) and four seeds. Score variances are power laws in d
with a given slope (and a tiny wobble, so the slope's CI is finite); timings are per-round times sharing a
round-to-round load factor; task accuracies are set per (kind, width), with a seed-to-seed spread shared by
the arms. Accuracy comparisons are dot product (b) − additive (a), the speed comparison additive (b) − dot
product (a): the arm each sub-claim names as better is a."""

import math

import numpy as np
import pytest

from tfclaims.claims.additive_vs_dot import AA, INITS, KINDS
from tfclaims.evidence.evaluate import CheckFailed
from tfclaims.harness.registry import load

from rules import analyse, comparison, decisions, record, sub, timed, verdicts

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
    return [{"d": d, **{c: float(0.3 * d**s * math.exp(WOBBLE[j % 6])) for c, s in cols.items()}}
            for j, d in enumerate(dims)]  # fmt: skip


def task_metrics(auc, seed, rising=0.0):
    """A learning curve that ends at `auc` (± seed jitter); `rising`: how much it still gained over the last
    evaluation interval (the last 20% of training: a run has not converged when this exceeds 0.02)."""
    a = float(min(1.0, max(0.0, auc + (JITTER[seed] if auc > CHANCE + 0.05 else 0.0))))
    return {"eval_steps": [0, 10, 16, 20], "accuracy": [CHANCE, a - rising, a - rising, a], "auc": a,
            "final_acc": a, "chance": CHANCE, "train_loss": [2.0] * 20, "diverged_at": None}  # fmt: skip


def records(*, slopes=None, speed=-1.5, acc, rising=lambda kind, d: 0.0, null=lambda s: 0.0):
    """speed: log(t_dot / t_additive) (negative: dot faster), or (n, d) -> that; acc(kind, d, seed) ->
    accuracy; null(seed): what the null pair's rerun of additive adds to its accuracy."""
    gap = speed if callable(speed) else lambda n, d: speed  # per (n, d) cell, or one value for all
    recs = []
    for i, c in enumerate(EXP.grid(P)):
        if c["part"] == "variance":
            m = {"rows": variance_rows(c["dims"], slopes or {})}
        elif c["part"] == "timing":
            m = {"rows": [{"n": n, "d": d, "additive": timed(1e-3 * n * d / 512),
                           "dot_scaled": timed(1e-3 * n * d / 512, gap(n, d), 1),
                           AA: timed(1e-3 * n * d / 512, gap(n, d), 2)} for d in c["ds"] for n in c["ns"]],
                 "threads": 1}  # fmt: skip
        else:
            s = c["seed"] % 1000
            m = task_metrics(acc(c["attn"], c["d"], s), s, rising(c["attn"], c["d"]))
            if c["seed"] >= 1000:
                m["final_acc"] = m["accuracy"][-1] = m["final_acc"] + null(s)
        recs.append(record(c, m, f"r{i}"))
    return recs


def at_chance_at_16(table):
    """table: kind -> accuracy at d = 64; every kind stays at chance at d = 16."""
    return lambda kind, d, s: CHANCE if d == 16 else table[kind]


def test_additive_vs_dot_rule_supported_and_chance_width_excluded(tmp_path):
    acc = at_chance_at_16({"additive": 0.9, "dot_scaled": 0.6, "dot_unscaled": 0.4})
    v = analyse(EXP, records(acc=acc), P, tmp_path)
    d = decisions(v)
    assert d["acc-scaled/d16"] == d["acc-unscaled/d16"] == "excluded"
    assert d["acc-scaled/d64"] == d["acc-unscaled/d64"] == "a_better"  # a = additive
    assert {d[k] for k in d if k.startswith("speed/")} == {"a_better"}  # a = dot product, lower time
    assert d["variance/lnvar_additive_torch"] == d["variance/lnvar_additive_xavier"] == "equivalent"
    assert d["law/dot-xavier"] == d["law/raw"] == "equivalent"
    assert {k: verdicts(v)[k] for k in COUNTED} == dict.fromkeys(COUNTED, "supported")
    assert v.verdict == "supported"
    c = comparison(v, "acc-scaled/d64")
    assert c.paired and c.n == 4 and c.learned_a == 4 and c.learned_b == 4 and c.noise is not None
    assert c.diff == pytest.approx(0.6 - 0.9) and c.arm_a == "additive"
    s = comparison(v, "speed/n32-d16")
    assert s.diff == pytest.approx(1.5, abs=0.01) and s.noise is not None  # log t_additive − log t_dot
    nf = {c.id for c in v.noise_floor}
    assert {"null/d16", "null/d64", "aa/n32-d16"} <= nf
    kinds = {x.id: (x.kind, x.counts) for x in v.sub_verdicts}
    assert kinds["law"][0] == "check" and kinds["keys"] == ("effect", False)


def test_additive_vs_dot_rule_refuted_when_every_part_goes_the_other_way(tmp_path):
    v = analyse(
        EXP, records(slopes={"additive (torch)": 0.5, "additive (xavier)": 0.5}, speed=+1.0,
                     acc=at_chance_at_16({"additive": 0.3, "dot_scaled": 0.9, "dot_unscaled": 0.8})),
        P, tmp_path,
    )  # fmt: skip
    d = decisions(v)
    assert {d[k] for k in d if k.startswith("speed/")} == {"b_better"}  # additive faster
    assert d["acc-scaled/d64"] == d["acc-unscaled/d64"] == "b_better"  # the dot products more accurate
    assert {k: verdicts(v)[k] for k in COUNTED} == dict.fromkeys(COUNTED, "refuted")
    assert v.verdict == "refuted"


def test_additive_vs_dot_rule_mixed_when_better_than_unscaled_only(tmp_path):
    # the committed shape: additive beats the unscaled dot product, loses to the scaled one
    acc = at_chance_at_16({"additive": 0.7, "dot_scaled": 0.9, "dot_unscaled": 0.4})
    v = analyse(EXP, records(acc=acc), P, tmp_path)
    assert verdicts(v)["acc-unscaled"] == "supported" and verdicts(v)["acc-scaled"] == "refuted"
    assert v.verdict == "mixed"


def test_additive_vs_dot_rule_underpowered_accuracy_is_inconclusive(tmp_path):
    # accuracy differences inside the seed noise: a naive "no difference, so additive is not better" would
    # refute; the ladder leaves the accuracy sub-verdicts inconclusive, and with them the whole claim
    noise = np.array([0.2, -0.25, 0.15, -0.1])
    v = analyse(EXP, records(acc=lambda k, d, s: 0.6 + (noise[s] if k == "additive" else 0.0)), P, tmp_path)
    assert decisions(v)["acc-scaled/d64"] == "undecided"
    assert verdicts(v)["acc-scaled"] == "inconclusive"
    assert v.verdict == "inconclusive"


def test_additive_vs_dot_rule_an_accuracy_gain_inside_the_null_pairs_spread_is_not_supported(tmp_path):
    # additive 0.05 ahead in every seed (p tiny), but its own rerun differs by up to ±0.2: inside the floor
    acc = at_chance_at_16({"additive": 0.65, "dot_scaled": 0.6, "dot_unscaled": 0.6})
    v = analyse(EXP, records(acc=acc, null=lambda s: [0.2, -0.15, 0.1, -0.2][s]), P, tmp_path)
    c = comparison(v, "acc-scaled/d64")
    assert c.p < 0.05 and c.in_noise and c.decision == "undecided"
    assert verdicts(v)["acc-scaled"] == "inconclusive"
    assert verdicts(analyse(EXP, records(acc=acc), P, tmp_path / "quiet"))["acc-scaled"] == "supported"


def test_additive_vs_dot_rule_excludes_widths_where_every_arm_is_at_chance(tmp_path):
    v = analyse(EXP, records(acc=lambda k, d, s: CHANCE), P, tmp_path)
    acc = [c for c in v.comparisons if c.id.startswith("acc-")]
    assert len(acc) == 4 and all(c.decision == "excluded" and c.learned_a == c.learned_b == 0 for c in acc)
    assert "excluded" in sub(v, "acc-scaled").detail
    assert verdicts(v)["acc-scaled"] == "inconclusive" and v.verdict == "inconclusive"


@pytest.mark.parametrize(
    "slopes, decision, verdict",
    [
        ({"additive (torch)": 0.1}, "undecided", "inconclusive"),  # the slope's interval straddles the bound
        ({"additive (torch)": 0.5}, "a_better", "mixed"),  # shown above +0.1 with Xavier inside: mixed
    ],
)
def test_additive_vs_dot_rule_variance_needs_every_additive_slope_flat(tmp_path, slopes, decision, verdict):
    v = analyse(EXP, records(slopes=slopes, acc=lambda k, d, s: CHANCE), P, tmp_path)
    assert decisions(v)["variance/lnvar_additive_torch"] == decision
    assert decisions(v)["variance/lnvar_additive_xavier"] == "equivalent"
    assert verdicts(v)["variance"] == verdict


def test_additive_vs_dot_rule_keys_of_another_size_are_reported_not_counted(tmp_path):
    acc = at_chance_at_16({"additive": 0.9, "dot_scaled": 0.6, "dot_unscaled": 0.4})
    v = analyse(EXP, records(slopes={"additive, keys of size 2d (torch)": 0.5}, acc=acc), P, tmp_path)
    assert verdicts(v)["keys"] == "refuted" and v.verdict == "supported"


def test_additive_vs_dot_rule_a_broken_variance_law_stops_the_claim(tmp_path):
    """Var(q·k) ∝ d for the unscaled dot product is the identity the Monte Carlo relies on: failing it is a
    bug, not evidence."""
    with pytest.raises(CheckFailed, match="law"):
        analyse(EXP, records(slopes={"dot_unscaled (xavier)": 0.5}, acc=lambda k, d, s: CHANCE), P, tmp_path)


def test_additive_vs_dot_rule_speed_undecided_cells(tmp_path):
    v = analyse(EXP, records(speed=0.0, acc=lambda k, d, s: CHANCE), P, tmp_path)
    assert {c.decision for c in v.comparisons if c.id.startswith("speed/")} == {"undecided"}
    assert verdicts(v)["speed"] == "inconclusive"


@pytest.mark.parametrize("slow_at_64, verdict", [(0.0, "inconclusive"), (0.5, "mixed")])
def test_additive_vs_dot_rule_speed_claimed_at_every_cell(tmp_path, slow_at_64, verdict):
    # dot product faster at n = 32; at n = 64 as fast (undecided: not every cell) or slower (mixed)
    speed = lambda n, d: -1.5 if n == 32 else slow_at_64  # noqa: E731
    v = analyse(EXP, records(speed=speed, acc=lambda k, d, s: CHANCE), P, tmp_path)
    assert decisions(v)["speed/n32-d16"] == "a_better"
    assert verdicts(v)["speed"] == verdict


def test_additive_vs_dot_rule_unconverged_accuracy_is_reported_not_counted(tmp_path):
    # additive ahead at the end, but its accuracy still rose by 0.1 over the last 20% of training: the width
    # is reported beside the sub-verdict (quality is judged at convergence), so accuracy is inconclusive
    acc = at_chance_at_16({"additive": 0.9, "dot_scaled": 0.6, "dot_unscaled": 0.4})
    rising = lambda kind, d: 0.1 if kind == "additive" and d == 64 else 0.0  # noqa: E731
    v = analyse(EXP, records(acc=acc, rising=rising), P, tmp_path)
    s = sub(v, "acc-scaled")
    assert s.comparisons == ["acc-scaled/d16"] and s.reported == ["acc-scaled/d64"]
    assert comparison(v, "acc-scaled/d16").decision == "excluded"  # at chance everywhere: still excluded
    assert (
        "converged" in s.detail and verdicts(v)["acc-scaled"] == verdicts(v)["acc-unscaled"] == "inconclusive"
    )
    assert v.verdict == "inconclusive"
    converged = analyse(EXP, records(acc=acc, rising=lambda kind, d: 0.015), P, tmp_path / "c")
    assert decisions(converged)["acc-scaled/d64"] == "a_better"  # within the 0.02 tolerance: counted
    assert verdicts(converged)["acc-scaled"] == "supported"
