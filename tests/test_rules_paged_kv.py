"""The declared rule of `paged_kv`, fed synthetic allocator counts per trace and decode timing rounds."""

import numpy as np
import pytest

from tfclaims.evidence.evaluate import CheckFailed
from tfclaims.harness.registry import load

from rules import LOAD, OWN, analyse, record, sub, verdicts

CLAIM = "paged_kv"
WASTE = {"max": 0.75, "pow2": 0.6, "oracle": 0.5}
BATCH = {"max": 8.0, "pow2": 12.0, "oracle": 16.0}


def rows(cfg, waste=None, batch=None):
    """Contiguous policies at WASTE/BATCH, paged waste growing with the block (2% at 16) and 30 running."""
    seed = cfg["seed"]
    waste, batch = {**WASTE, **(waste or {})}, {**BATCH, **(batch or {})}
    out = [
        {
            "allocator": a,
            "block": 0,
            "waste": waste[a] + 0.01 * (seed % 2),
            "mean_batch": batch[a],
            "reserved_unwritten": waste[a],
            "tokens_per_iteration": batch[a],
            "preempted": 0,
        }
        for a in WASTE
    ]
    for b in cfg["blocks"]:
        w = waste.get(f"paged{b}", 0.0013 * b + 0.001 * (seed % 2))
        out.append(
            {
                "allocator": "paged",
                "block": b,
                "waste": w,
                "mean_batch": batch.get("paged", 30.0) + seed,
                "reserved_unwritten": w,
                "tokens_per_iteration": 30.0,
                "preempted": 5,
            }
        )
    return out


def times(base, factor=1.0):
    return list(base * factor * np.exp(LOAD + OWN))


def records(exp, params="quick", *, paged_cost=1.2, diff=0.0, aa_drift=0.0, **kw):
    """Trace counts from `rows` (kw: waste, batch); decode rounds with paging paged_cost× the contiguous
    time, and the A/A copy of the contiguous read at the largest n, aa_drift slower in log time."""
    out = []
    for i, cfg in enumerate(exp.grid(exp.profiles[params])):
        if cfg["part"] == "trace":
            out.append(
                record(cfg, {"rows": rows(cfg, **kw), "mean_length": 480, "max_length": 2048}, f"t{i}")
            )
            continue
        t = {}
        for n in cfg["ns"]:
            t[f"contiguous|{n}"] = times(1e-3 * n / 64)
            t[f"paged|{n}"] = times(1e-3 * n / 64, paged_cost)
        t["A/A"] = list(np.array(t[f"contiguous|{max(cfg['ns'])}"]) * np.exp(np.roll(OWN, 3) + aa_drift))
        out.append(
            record(cfg, {"times": t, "max_logit_diff": diff, "threads": 1, "aa_n": max(cfg["ns"])}, "d")
        )
    return out


@pytest.fixture(scope="module")
def exp():
    return load(CLAIM)


def test_anchor_like_counts_support_the_claim(exp, tmp_path):
    v = analyse(exp, records(exp), "quick", tmp_path)
    assert verdicts(v) == {
        "same-logits": "supported",
        "max-wastes": "supported",
        "paged-waste": "supported",
        "fits-more": "supported",
        "block-size": "supported",
        "indirection": "supported",
    }
    assert v.verdict == "supported"


def test_paging_that_wastes_a_tenth_refutes_its_part(exp, tmp_path):
    v = analyse(exp, records(exp, waste={"paged16": 0.10}), "quick", tmp_path)
    assert sub(v, "paged-waste").verdict == "refuted"
    assert v.verdict == "mixed"


def test_a_frugal_maximum_reservation_refutes_the_waste(exp, tmp_path):
    v = analyse(exp, records(exp, waste={"max": 0.3}), "quick", tmp_path)
    assert sub(v, "max-wastes").verdict == "refuted"


def test_paging_that_runs_fewer_requests_than_the_oracle_fails_that_cell(exp, tmp_path):
    s = sub(analyse(exp, records(exp, "default", batch={"paged": 10.0}), "default", tmp_path), "fits-more")
    assert s.verdict == "mixed" and "vs-max" in s.holds and "vs-oracle" not in s.holds


def test_a_significant_aa_pair_leaves_the_largest_n_undecided_and_indirection_is_reported_only(exp, tmp_path):
    # paging 20% slower in every round at every n (p tiny), but the A/A copy of the contiguous read, timed at
    # the largest n only, runs 5% slower than itself in every round: that null pair is significant, so that
    # cell is undecided whatever its p, while the smaller n (no A/A copy timed there) still decides
    v = analyse(exp, records(exp, aa_drift=0.05), "quick", tmp_path)
    ns = exp.profiles["quick"]["ns"]
    cs = {n: next(c for c in v.comparisons if c.id == f"indirection/n{n}") for n in ns}
    top = cs[max(ns)]
    assert top.p < 0.05 and top.null_significant and top.decision == "undecided"
    assert all(c.null_p is None and c.decision == "a_better" for n, c in cs.items() if n != max(ns))
    assert "the null pair in the cell is significant" in sub(v, "indirection").detail
    assert sub(v, "indirection").verdict == "inconclusive" and v.verdict == "supported"  # reported only
    assert sub(analyse(exp, records(exp), "quick", tmp_path / "quiet"), "indirection").verdict == "supported"


def test_different_logits_stop_the_claim(exp, tmp_path):
    with pytest.raises(CheckFailed, match="same-logits"):
        analyse(exp, records(exp, diff=1e-3), "quick", tmp_path)
