"""The additive_vs_dot rule on synthetic run records: every outcome it can give.

The quick profile's grid at two task widths (16 and 64) and four seeds. Score variances are power laws in d
with a given slope (and a tiny wobble, so the slope's CI is finite); timings are per-round times sharing a
round-to-round load factor; task accuracies are set per (kind, width), with a seed-to-seed spread shared by
the arms."""

import math

import numpy as np

from tfclaims.claims.additive_vs_dot import AA, INITS, KINDS
from tfclaims.harness.registry import load

from rules import analyse, decisions, record, sub_verdict, timed

EXP = load("additive_vs_dot")
P = {**EXP.profiles["quick"], "task_dims": [16, 64], "seeds": [0, 1, 2, 3]}
WOBBLE = [1e-4, -2e-4, 1e-4, 0.0, -1e-4, 2e-4]
JITTER = np.array([0.00, 0.02, -0.015, 0.01])
CHANCE = 1 / P["n_values"]


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
    return {"eval_steps": [0, 10, 16, 20], "accuracy": [CHANCE, a - rising, a - rising, a], "auc": a, "final_acc": a,
            "chance": CHANCE, "train_loss": [2.0] * 20, "diverged_at": None}  # fmt: skip


def records(*, slopes=None, speed=-1.5, acc, rising=lambda kind, d: 0.0):
    """speed: log(t_dot / t_additive) (negative: dot faster); acc(kind, d, seed) -> accuracy."""
    recs = []
    for i, c in enumerate(EXP.grid(P)):
        if c["part"] == "variance":
            m = {"rows": variance_rows(c["dims"], slopes or {})}
        elif c["part"] == "timing":
            m = {"rows": [{"n": n, "d": d, "additive": timed(1e-3 * n * d / 512),
                           "dot_scaled": timed(1e-3 * n * d / 512, speed, 1),
                           AA: timed(1e-3 * n * d / 512, speed, 2)} for d in c["ds"] for n in c["ns"]],
                 "threads": 1}  # fmt: skip
        else:
            s = c["seed"] % 1000
            m = task_metrics(acc(c["attn"], c["d"], s), s, rising(c["attn"], c["d"]))
        recs.append(record(c, m, f"r{i}"))
    return recs


def at_chance_at_16(table):
    """table: kind -> accuracy at d = 64; every kind stays at chance at d = 16."""
    return lambda kind, d, s: CHANCE if d == 16 else table[kind]


def test_additive_vs_dot_rule_supported_and_chance_width_excluded(tmp_path):
    v = analyse(
        EXP,
        records(acc=at_chance_at_16({"additive": 0.9, "dot_scaled": 0.6, "dot_unscaled": 0.4})),
        P,
        tmp_path,
    )
    d = decisions(v)
    assert d["acc-d16:additive-vs-dot-scaled"] == d["acc-d16:additive-vs-dot-unscaled"] == "excluded"
    assert d["acc-d64:additive-vs-dot-scaled"] == d["acc-d64:additive-vs-dot-unscaled"] == "b_better"
    assert all(d[k] == "b_better" for k in d if k.startswith("time:"))  # b = dot product, lower time
    assert d["var:additive-torch"] == d["var:dot-unscaled-xavier"] == "equivalent"
    assert (
        sub_verdict(v, "Additive score variance") == "supported"
        and sub_verdict(v, "Dot product faster") == "supported"
    )
    assert v.verdict == "supported"
    c = next(c for c in v.comparisons if c.id == "acc-d64:additive-vs-dot-scaled")
    assert c.paired and c.n == 4 and c.learned_a == 4 and c.learned_b == 4 and c.noise is not None
    nf = {c.id for c in v.noise_floor}
    assert {"null:additive-d16", "null:additive-d64", "aa:n32-d16"} <= nf


def test_additive_vs_dot_rule_refuted_when_every_part_goes_the_other_way(tmp_path):
    v = analyse(
        EXP, records(slopes={"additive (torch)": 0.5, "additive (xavier)": 0.5}, speed=+1.0,
                acc=at_chance_at_16({"additive": 0.3, "dot_scaled": 0.9, "dot_unscaled": 0.8})),
        P, tmp_path,
    )  # fmt: skip
    d = decisions(v)
    assert all(d[k] == "a_better" for k in d if k.startswith("time:"))  # additive faster
    assert d["acc-d64:additive-vs-dot-scaled"] == d["acc-d64:additive-vs-dot-unscaled"] == "a_better"
    assert sub_verdict(v, "Additive score variance") == "refuted"
    assert v.verdict == "refuted"


def test_additive_vs_dot_rule_mixed_when_better_than_unscaled_only(tmp_path):
    # the committed shape: additive beats the unscaled dot product, loses to the scaled one
    v = analyse(
        EXP,
        records(acc=at_chance_at_16({"additive": 0.7, "dot_scaled": 0.9, "dot_unscaled": 0.4})),
        P,
        tmp_path,
    )
    assert sub_verdict(v, "Additive more accurate than the unscaled") == "supported"
    assert sub_verdict(v, "Additive more accurate than the scaled") == "refuted"
    assert v.verdict == "mixed"


def test_additive_vs_dot_rule_underpowered_accuracy_is_inconclusive(tmp_path):
    # accuracy differences inside the seed noise: a naive "no difference, so additive is not better" would
    # refute; the ladder leaves the accuracy sub-verdicts inconclusive, and with them the whole claim
    noise = np.array([0.2, -0.25, 0.15, -0.1])
    v = analyse(EXP, records(acc=lambda k, d, s: 0.6 + (noise[s] if k == "additive" else 0.0)), P, tmp_path)
    d = decisions(v)
    assert d["acc-d64:additive-vs-dot-scaled"] == "undecided"
    assert sub_verdict(v, "Additive more accurate than the scaled") == "inconclusive"
    assert v.verdict == "inconclusive"


def test_additive_vs_dot_rule_excludes_widths_where_every_arm_is_at_chance(tmp_path):
    v = analyse(EXP, records(acc=lambda k, d, s: CHANCE), P, tmp_path)
    acc = [c for c in v.comparisons if c.id.startswith("acc-")]
    assert acc and all(c.decision == "excluded" and c.learned_a == 0 and c.learned_b == 0 for c in acc)
    assert sub_verdict(v, "Additive more accurate than the scaled") == "inconclusive"
    assert v.verdict == "inconclusive"


def test_additive_vs_dot_rule_variance_inconclusive_when_slope_ci_straddles_the_bound(tmp_path):
    v = analyse(EXP, records(slopes={"additive (torch)": 0.1}, acc=lambda k, d, s: CHANCE), P, tmp_path)
    assert decisions(v)["var:additive-torch"] == "undecided"
    assert sub_verdict(v, "Additive score variance") == "inconclusive"


def test_additive_vs_dot_rule_speed_requires_every_cell(tmp_path):
    v = analyse(EXP, records(speed=0.0, acc=lambda k, d, s: CHANCE), P, tmp_path)
    assert all(c.decision == "undecided" for c in v.comparisons if c.id.startswith("time:"))
    assert sub_verdict(v, "Dot product faster") == "inconclusive"


def test_additive_vs_dot_rule_unconverged_accuracy_decides_nothing(tmp_path):
    # additive ahead at the end, but its accuracy still rose by 0.1 over the last 20% of training: the
    # comparison is undecided (quality is judged at convergence), so the accuracy sub-verdicts are inconclusive
    acc = at_chance_at_16({"additive": 0.9, "dot_scaled": 0.6, "dot_unscaled": 0.4})
    v = analyse(EXP, records(acc=acc, rising=lambda kind, d: 0.1 if kind == "additive" else 0.0), P, tmp_path)
    d = decisions(v)
    assert d["acc-d64:additive-vs-dot-scaled"] == d["acc-d64:additive-vs-dot-unscaled"] == "undecided"
    assert d["acc-d16:additive-vs-dot-scaled"] == "excluded"  # at chance everywhere: still excluded
    assert "not converged" in next(c.note for c in v.comparisons if c.id == "acc-d64:additive-vs-dot-scaled")
    converged = analyse(EXP, records(acc=acc, rising=lambda kind, d: 0.015), P, tmp_path / "c")
    assert decisions(converged)["acc-d64:additive-vs-dot-scaled"] == "b_better"  # within the 0.02 tolerance
