"""The declared rule of `parallel_decoding`, fed synthetic records: each outcome it can give.

The exact part is deterministic given its seed: its sub-claims are bounds on every row (no null pair).
The timing part compares interleaved rounds; nothing trains, so no arm can fail to learn and no comparison is
ever `excluded`. The world note 004 describes (a decoder whose training must take its positions in order)
appears as sequential paths costing about the one pass's time."""

import math

import numpy as np
import pytest

from tfclaims.evidence.evaluate import CheckFailed
from tfclaims.harness.registry import load

from rules import OWN, analyse, comparison, record, sub, times, verdicts

EXP = load("parallel_decoding")
P = EXP.profiles["quick"]
COUNTED = ("exact", "same-gradient", "float-error", "leak", "train-ratio", "train-grows", "generate-slower")
ERR = {"float64": 3e-16, "float32": 2e-7, "bfloat16": 4e-3}


def exact_metrics(n, err, leak):
    """What run_exact records: err(dtype, path) is every position's error against the float64 one pass."""
    errors = {
        dt: {
            p: [0.0 if (dt, p) == ("float64", "onepass") else err(dt, p)] * n
            for p in ("onepass", "prefix", "cached")
        }
        for dt in ERR
    }
    same = {f"{dt}|{p}": [ERR[dt]] * n for dt in ERR for p in ("prefix", "cached")}
    return {
        "errors": errors,
        "same_dtype": same,
        "leak": [leak * (n - t) / n for t in range(n)],
        "grad_errors": {"prefix": 4e-16, "cached": 5e-16},
        "logit_scale": 1.0,
        "threads": 1,
    }


def timing_metrics(cfg, ratio, gen, aa_drift=0.0, grad=3e-7):
    """Per-round seconds: the one pass ∝ n^0.3, each sequential path ratio(path, n) times it; the forward ∝
    n^0.5 and generation gen(n) times it, each callable with its own jitter per length; the A/A copy of the
    forward at the largest n is aa_drift slower in log time in every round."""
    ns, out, grads = cfg["ns"], {}, {}
    for i, n in enumerate(ns):
        one, fwd = 1e-3 * (n / 8) ** 0.3, 4e-4 * (n / 8) ** 0.5
        out[f"onepass|{n}"] = times(one, 0.0, 5 * i)
        for k, p in enumerate(("prefix", "cached"), 1):
            out[f"{p}|{n}"] = times(one, math.log(ratio(p, n)), 5 * i + k)
            grads[f"{p}|{n}"] = grad
        out[f"forward|{n}"] = times(fwd, 0.0, 5 * i + 3)
        out[f"generate|{n}"] = times(fwd, math.log(gen(n)), 5 * i + 4)
    top = out[f"forward|{max(ns)}"]  # timed again, with a jitter of its own
    out["A/A"] = [t * math.exp(j + aa_drift) for t, j in zip(top, np.roll(OWN, 3))]
    return {"times": out, "load": [0.1, 0.1], "grad_errors": grads, "threads": 1, "aa_n": max(ns)}


def records(
    err=lambda dt, p: ERR[dt], leak=0.2, ratio=lambda p, n: 3.0 * n, gen=lambda n: 2.0 * n**0.5, **kw
):
    out = []
    for i, cfg in enumerate(EXP.grid(P)):
        if cfg["part"] == "exact":
            out.append(record(cfg, exact_metrics(cfg["n"], err, leak), f"e{i}"))
        else:
            out.append(record(cfg, timing_metrics(cfg, ratio, gen, **kw), f"t{i}"))
    return out


def test_an_exact_one_pass_and_cheap_parallel_training_support_the_claim(tmp_path):
    v = analyse(EXP, records(), P, tmp_path)
    assert verdicts(v) == {
        "timed-gradients": "supported",
        **dict.fromkeys(COUNTED, "supported"),
        "generate-grows": "supported",
    }
    assert v.verdict == "supported"
    kinds = {s.id: (s.kind, s.counts) for s in v.sub_verdicts}
    assert kinds["timed-gradients"][0] == "check" and kinds["generate-grows"] == ("effect", False)
    assert [k for k, (kind, counts) in kinds.items() if kind == "effect" and counts] == list(COUNTED)
    # the ratio at n = 32: 3·32 = 96×, read on log seconds paired over rounds
    r = comparison(v, "train-ratio/prefix")
    assert r.diff == pytest.approx(math.log(96), abs=0.01) and r.lo == pytest.approx(math.log(10))
    # the ratio grows as n^1 (prefix and cached), generation ÷ forward as n^0.5
    assert comparison(v, "train-grows/cached").diff == pytest.approx(1.0, abs=0.01)
    assert comparison(v, "generate-grows").diff == pytest.approx(0.5, abs=0.01)
    assert [c.id for c in v.noise_floor] == ["aa"]
    assert "96×" in v.key_number and "e-16" in v.key_number


def test_a_float64_gap_beyond_rounding_refutes_exactness(tmp_path):
    v = analyse(
        EXP, records(err=lambda dt, p: 1e-9 if (dt, p) == ("float64", "cached") else ERR[dt]), P, tmp_path
    )
    assert comparison(v, "exact/cached").decision != comparison(v, "exact/prefix").decision
    assert verdicts(v)["exact"] == "mixed" and v.verdict == "mixed"


def test_a_bfloat16_error_beyond_its_tolerance_fails_in_bfloat16_only(tmp_path):
    v = analyse(EXP, records(err=lambda dt, p: 0.05 if dt == "bfloat16" else ERR[dt]), P, tmp_path)
    s = next(s for s in v.sub_verdicts if s.id == "float-error")
    assert s.verdict == "mixed" and s.holds == ["float32-onepass", "float32-prefix", "float32-cached"]


def test_a_mask_that_leaks_nothing_fails_the_control(tmp_path):
    v = analyse(EXP, records(leak=0.01), P, tmp_path)
    assert verdicts(v)["leak"] == "refuted" and v.verdict == "mixed"


def test_training_that_takes_positions_in_order_refutes_the_parallel_sub_claims(tmp_path):
    """Note 004's world: the sequential paths cost what the one pass costs (ratio about 1, not growing)."""
    v = analyse(EXP, records(ratio=lambda p, n: 1.2), P, tmp_path)
    assert verdicts(v)["train-ratio"] == verdicts(v)["train-grows"] == "refuted"
    assert verdicts(v)["exact"] == "supported" and v.verdict == "mixed"


def test_a_ratio_that_stops_growing_is_not_parallel_growth(tmp_path):
    v = analyse(EXP, records(ratio=lambda p, n: 30.0), P, tmp_path)
    assert verdicts(v)["train-ratio"] == "supported" and verdicts(v)["train-grows"] == "refuted"


def test_generation_no_slower_than_the_forward_refutes_sequential_generation(tmp_path):
    v = analyse(EXP, records(gen=lambda n: 0.5), P, tmp_path)
    assert verdicts(v)["generate-slower"] == "refuted"
    assert verdicts(v)["generate-grows"] == "inconclusive"  # a flat ratio: exponent 0, not shown above 0


def test_a_significant_aa_pair_leaves_the_largest_n_undecided(tmp_path):
    """Generation slower than the forward at every n in every round (p tiny), but the forward's A/A copy,
    timed at the largest n only, runs 5% slower than itself in every round: that null pair is significant,
    so that cell is undecided whatever its p, while the shorter lengths (no A/A copy there) still decide."""
    v = analyse(EXP, records(aa_drift=0.05), P, tmp_path)
    cs = {n: comparison(v, f"generate-slower/n{n}") for n in P["ns"]}
    top = cs[max(P["ns"])]
    assert top.p < 0.05 and top.null_significant and top.decision == "undecided"
    assert all(c.null_p is None and c.decision == "a_better" for n, c in cs.items() if n != max(P["ns"]))
    assert "the null pair in the cell is significant" in sub(v, "generate-slower").detail
    assert verdicts(v)["generate-slower"] == "inconclusive"  # supported beside an undecided cell
    quiet = comparison(analyse(EXP, records(), P, tmp_path / "quiet"), f"generate-slower/n{max(P['ns'])}")
    assert quiet.null_p > 0.05 and quiet.decision == "a_better"  # a: the forward, the faster


def test_timed_gradients_that_disagree_stop_the_claim(tmp_path):
    with pytest.raises(CheckFailed, match="timed-gradients"):
        analyse(EXP, records(grad=1e-3), P, tmp_path)


def test_the_tables_report_the_worst_position(tmp_path):
    recs = records()
    worst = next(r for r in recs if r["config"]["part"] == "exact" and r["config"]["n"] == 32)
    worst["metrics"]["errors"]["float32"]["cached"][17] = 5e-6
    analyse(EXP, recs, P, tmp_path)
    import pandas as pd

    t = pd.read_csv(tmp_path / "max_errors.csv")
    row = t[(t.dtype == "float32") & (t.n == 32) & (t.path == "cached")].iloc[0]
    assert row["vs float64 one pass"] == 5e-6 and row["at position"] == 17
    assert np.isclose(t[t.path == "no mask (control)"]["vs float64 one pass"].max(), 0.2)
