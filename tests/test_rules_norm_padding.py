"""The norm_padding rule on synthetic run records: every outcome it can give.

The quick profile's arms (lines: every norm at pre-norm batches 2 and 4, LN/BN/BN masked at post-norm batch 4;
windows: LN and BN masked at pre- and post-norm batch 4, the previous-batch BN at pre-norm) with four seeds. Each
run's eval-mode loss and its eval − train-mode gap are built per (data, placement, norm, batch, seed) from four
knobs, one per sub-verdict — (a) padding, (b) batch statistics on windows, (c) small batches, (d) the train/inference
mismatch — each set to hold, fail, stay undecided or split between placements; the probes are built to pass or fail
the invariance, leak and fluctuation checks."""

import math

import numpy as np
import pytest

from tfclaims.claims.norm_padding import NORMS
from tfclaims.harness.registry import load

from rules import analyse, comparison, decisions, find_sub, record, sub_verdict

EXP = load("norm_padding")
P = {**EXP.profiles["quick"], "seeds": [0, 1, 2, 3]}
SMALL = min(a[1] for a in P["line_arms"])  # 2 lines
UNIGRAM = 3.30
JITTER = np.array([0.00, 0.02, -0.015, 0.01])  # seed-to-seed spread shared by every arm (paired)
WOBBLE = np.array([0.004, -0.003, 0.002, -0.004])  # a little per-arm noise
OWN = {n: np.roll(WOBBLE, k) for k, n in enumerate(NORMS)}  # each norm its own
NOISE = np.array([0.30, -0.25, 0.10, -0.20])  # a spread no four-seed test can call either way
EFFECT = 0.2  # nats/char: far outside the ±0.02 margin
VERDICT = {"sup": "supported", "ref": "refuted", "inc": "inconclusive", "mix": "mixed"}


def stats(multiple, seed):
    """One BN layer's record: deviations that are `multiple` × i.i.d. noise (mean and variance) at every step."""
    steps = list(range(0, P["steps"], P["stat_every"]))
    n = 64
    x = multiple * (1 + 0.05 * (seed % 4))
    return {"blocks.0.norm1": {"step": steps, "mean_dev": [x / math.sqrt(n)] * len(steps),
                               "var_dev": [x / math.sqrt(n / 2)] * len(steps), "n": [n] * len(steps)}}  # fmt: skip


def invariance(norm, leak_ok=True, inv_ok=True, prev_rel=0.0):
    """The probes of one trained line model: relative change of the targets' logits per probe and mode."""
    train_dep = {"layer": 0.0, "power": 0.0, "batch": 2.0, "batch_masked": 0.0, "batch_prev": prev_rel}[norm]
    if not inv_ok and norm == "layer":
        train_dep = 1e-3
    nb_dep = {"batch": 0.5, "batch_masked": 0.5, "batch_prev": prev_rel}.get(norm, 0.0)
    leak = {"batch": 0.1, "batch_masked": 0.1, "batch_prev": prev_rel}.get(norm, 0.0)
    if not leak_ok and norm in ("batch", "batch_masked"):
        leak = 0.0
    pad = [{"mode": m, "frac": f, "abs": train_dep if m == "train" else 0.0, "rel": train_dep if m == "train" else 0.0}
           for m in ("train", "eval") for f in P["pad_fracs"]]  # fmt: skip
    nbs = [{"mode": m, "n_neighbours": 2, "frac": 0.3, "abs": nb_dep if m == "train" else 0.0,
            "rel": nb_dep if m == "train" else 0.0} for m in ("train", "eval")]  # fmt: skip
    lk = {m: {"same_row_abs": leak if m == "train" else 0.0, "same_row_rel": leak if m == "train" else 0.0,
              "other_rows_abs": 0.0, "other_rows_rel": 0.0} for m in ("train", "eval")}  # fmt: skip
    return {"padding": pad, "neighbours": nbs, "leak": lk}


def records(
    loss, gap=lambda c, s: 0.01, *, lm_fluct=4.0, mlp_fluct=1.0, leak_ok=True, inv_ok=True, prev_rel=0.0
):
    """loss(config, seed) -> eval-mode validation loss before the shared jitter; gap(config, seed) -> eval-mode
    minus train-mode loss of the same run. Every record carries what `padded_lm` returns."""
    recs = []
    for i, c in enumerate(EXP.grid(P)):
        part, s = c["part"], c["seed"] % 1000
        if part == "mlp":
            m = {"stats": stats(mlp_fluct, s), "test_acc": 0.8, "chance": 0.1, "final_train_loss": 0.5}
        else:
            v = float(loss(c, s) + JITTER[s])
            if part == "null":
                v += np.roll(WOBBLE, c["batch"])[s]  # the LN arm again at another seed: a little different
            m = {"diverged_at": None, "train_loss": [4.0, v + 0.1], "seconds": 1.0, "unigram_xent": UNIGRAM,
                 "pad_frac_train": 0.3 if c["data"] == "lines" else 0.0, "eval_mixed": v,
                 "train_mixed": v - float(gap(c, s)), "stats": {}}  # fmt: skip
            if c["norm"].startswith("batch"):
                m["stats"] = stats(lm_fluct, s)
            if c["data"] == "lines":
                m["train_sorted"] = v - 0.005
                m["invariance"] = invariance(c["norm"], leak_ok, inv_ok, prev_rel)
        recs.append(record(c, m, f"r{i}"))
    return recs


def delta(kind, s, pl):
    """The effect one knob sets: +EFFECT (the claimed direction), −EFFECT, undecidable noise, or split by placement."""
    return {"sup": EFFECT, "ref": -EFFECT, "inc": NOISE[s], "mix": EFFECT if pl == "pre" else -EFFECT}[kind]


def world(a="sup", b="sup", c="sup", d="sup"):
    """(loss, gap) for `records`; each knob moves one sub-verdict and cancels out of the others.

    a: BN counting pads − BN masked on lines; b: BN masked − LN on windows; c: (BN masked − LN) on lines at the
    smallest batch against the others ('sup' 0.30 vs 0.10, 'ref' 0.10 vs 0.30, 'inc' noise at the small batch);
    d: eval − train-mode loss of BN masked (lines and windows)."""

    def loss(cfg, s):
        n, bs, pl = cfg["norm"], cfg["batch"], cfg["placement"]
        if cfg["data"] == "windows":
            ln = 2.40
            v = {"layer": ln, "batch_masked": ln + delta(b, s, pl), "batch_prev": ln + 0.10}[n]
        else:
            ln = 2.50
            if c == "inc":
                cg = 0.2 + (NOISE[s] if bs == SMALL else 0.0)
            else:
                cg = {"sup": (0.30, 0.10), "ref": (0.10, 0.30)}[c][0 if bs == SMALL else 1]
            masked = ln + cg
            v = {"layer": ln, "batch_masked": masked, "batch": masked + delta(a, s, pl),
                 "batch_prev": masked - 0.05, "power": ln - 0.05}[n]  # fmt: skip
        return v + OWN[n][s]

    def gap(cfg, s):
        return delta(d, s, cfg["placement"]) if cfg["norm"] == "batch_masked" else 0.01

    return loss, gap


def test_norm_padding_rule_supported_when_padding_batch_statistics_small_batches_and_mismatch_all_hurt(
    tmp_path,
):
    v = analyse(EXP, records(*world()), P, tmp_path)
    d = decisions(v)
    assert v.verdict == "supported"
    assert [sub_verdict(v, k) for k in ("(a)", "(b)", "(c)", "(d)")] == ["supported"] * 4
    # (a) on lines, every cell with both BNs: a = BN masked
    assert {k: x for k, x in d.items() if k.endswith(":bn-pads-vs-masked")} == {
        "pre-B2:bn-pads-vs-masked": "a_better", "pre-B4:bn-pads-vs-masked": "a_better",
        "post-B4:bn-pads-vs-masked": "a_better",
    }  # fmt: skip
    # (b) on windows only: a = LN
    assert {k: x for k, x in d.items() if k.endswith(":bn-masked-vs-ln")} == {
        "win-pre-B4:bn-masked-vs-ln": "a_better", "win-post-B4:bn-masked-vs-ln": "a_better",
    }  # fmt: skip
    assert d["pre:small-batch-interaction"] == "a_better"  # a = the large batch
    assert "post:small-batch-interaction" not in d  # one batch size at post-norm: no interaction
    # (d) on lines and windows: a = train mode
    assert {k: x for k, x in d.items() if k.endswith(":bn-masked-eval-vs-train-mode")} == {
        k: "a_better" for k in ("pre-B2:bn-masked-eval-vs-train-mode", "pre-B4:bn-masked-eval-vs-train-mode",
                                "post-B4:bn-masked-eval-vs-train-mode", "win-pre-B4:bn-masked-eval-vs-train-mode",
                                "win-post-B4:bn-masked-eval-vs-train-mode")
    }  # fmt: skip
    assert sorted(find_sub(v, "(b)").comparisons) == [
        "win-post-B4:bn-masked-vs-ln",
        "win-pre-B4:bn-masked-vs-ln",
    ]
    # the reported arms
    assert d["win-pre-B4:bn-prev-vs-ln"] == "a_better"  # the leak-free BN worse than LN on windows
    assert d["pre-B2:bn-prev-vs-masked"] == d["pre-B4:bn-prev-vs-masked"] == "b_better"
    assert d["pre-B2:power-vs-ln"] == "b_better" and d["post-B4:bn-pads-vs-ln"] == "a_better"
    assert (
        sub_verdict(v, "Reported: leak-free batch statistics (previous batch's) worse than LN") == "supported"
    )
    assert sub_verdict(v, "Reported: PowerNorm better") == "supported"
    assert sub_verdict(v, "LN (and BN with the previous batch's statistics) is invariant") == "supported"
    assert sub_verdict(v, "BN in train mode leaks") == "supported"
    assert {c.id: c.decision for c in v.comparisons if c.id.startswith(("inv:", "leak:"))} == {
        k: "equivalent" for k in ("inv:ln", "inv:eval-mode", "inv:bn-pads-counted-train", "inv:bn-masked-pads-train",
                                  "inv:bn-prev-train", "leak:bn-train", "leak:ln-train", "leak:eval-mode",
                                  "leak:bn-prev-train")
    }  # fmt: skip
    assert sub_verdict(v, "Batch statistics of the LM fluctuate more") == "supported"
    assert sub_verdict(v, "Batch statistics of the LM fluctuate ≥ 2× more") == "supported"
    assert d["fluct:mean-above-2x-control"] == "b_better"
    # the null pairs: one per declared null cell, the interaction where both batch sizes have one
    assert {f.id for f in v.noise_floor} == {
        "null:pre-B2",
        "null:pre-B4",
        "null:win-pre-B4",
        "null:pre:interaction",
    }
    assert all(f.decision in ("undecided", "equivalent") for f in v.noise_floor)
    cell = comparison(v, "win-pre-B4:bn-masked-vs-ln")
    assert cell.paired and cell.n == 4 and cell.margin == 0.02 and cell.noise is not None
    assert cell.learned_a == 4 and cell.learned_b == 4
    assert comparison(v, "pre-B4:bn-pads-vs-masked").noise is not None
    assert comparison(v, "win-post-B4:bn-masked-vs-ln").noise is None  # no null cell declared there
    assert comparison(v, "pre:small-batch-interaction").noise is not None


@pytest.mark.parametrize(
    "a, b, c, d, overall",
    [
        ("sup", "sup", "sup", "sup", "supported"),
        ("sup", "sup", "sup", "inc", "mixed"),  # all four are needed for 'supported'
        ("ref", "sup", "ref", "ref", "mixed"),  # the committed default's pattern: pads help, BN worse than LN
        ("ref", "ref", "sup", "ref", "mixed"),  # (c) alone supported still makes it mixed
        ("mix", "ref", "ref", "ref", "mixed"),  # a mixed sub-verdict makes it mixed
        ("ref", "ref", "ref", "ref", "refuted"),
        ("ref", "ref", "inc", "ref", "refuted"),  # (c) is not needed to refute
        ("ref", "ref", "ref", "inc", "inconclusive"),  # (d) is
        ("ref", "inc", "ref", "ref", "inconclusive"),  # so is (b)
        ("inc", "ref", "ref", "ref", "inconclusive"),  # and (a)
    ],
)
def test_norm_padding_overall_verdict_follows_the_a_to_d_rule(tmp_path, a, b, c, d, overall):
    v = analyse(EXP, records(*world(a, b, c, d)), P, tmp_path)
    assert [sub_verdict(v, k) for k in ("(a)", "(b)", "(c)", "(d)")] == [VERDICT[x] for x in (a, b, c, d)]
    assert v.verdict == overall
    assert v.evidence["sub_verdicts"]["gap"] == VERDICT[d]


def test_norm_padding_rule_b_reads_windows_not_lines(tmp_path):
    # BN masked far worse than LN on padded lines, but nothing to tell apart on windows: (b) is undecided
    lines_only = world(b="inc")
    v = analyse(EXP, records(*lines_only), P, tmp_path)
    d = decisions(v)
    assert comparison(v, "pre-B4:bn-pads-vs-masked").decision == "a_better"
    assert "pre-B4:bn-masked-vs-ln" not in d and "pre-B2:bn-masked-vs-ln" not in d  # no (b) cell on lines
    assert d["win-pre-B4:bn-masked-vs-ln"] == d["win-post-B4:bn-masked-vs-ln"] == "undecided"
    assert sub_verdict(v, "(b)") == "inconclusive" and v.verdict == "mixed"
    # and the other way round: BN masked equal to LN on lines, worse on windows: (b) supported
    loss, gap = world()

    def windows_only(cfg, s):
        if cfg["data"] == "lines" and cfg["norm"] == "batch_masked":
            return 2.50 + OWN["batch_masked"][s]
        return loss(cfg, s)

    v = analyse(EXP, records(windows_only, gap), P, tmp_path / "w")
    assert comparison(v, "win-pre-B4:bn-masked-vs-ln").decision == "a_better"
    assert sub_verdict(v, "(b)") == "supported"


def test_norm_padding_rule_underpowered_null_is_inconclusive_never_refuted(tmp_path):
    v = analyse(EXP, records(*world("inc", "inc", "inc", "inc")), P, tmp_path)
    assert [sub_verdict(v, k) for k in ("(a)", "(b)", "(c)", "(d)")] == ["inconclusive"] * 4
    assert v.verdict == "inconclusive"
    for cid in ("win-pre-B4:bn-masked-vs-ln", "pre-B4:bn-pads-vs-masked", "pre:small-batch-interaction",
                "win-post-B4:bn-masked-eval-vs-train-mode"):  # fmt: skip
        c = comparison(v, cid)
        assert c.decision == "undecided" and c.mde is not None and c.mde > 0.1


def test_norm_padding_rule_equivalence_without_positive_control_does_not_refute(tmp_path):
    # a naive "CI inside ±margin → no effect" rule would refute (a), (b) and (d); without a positive control it must not
    def loss(cfg, s):
        return (2.5 if cfg["data"] == "lines" else 2.4) + (
            0.001 + WOBBLE[s] / 2 if cfg["norm"].startswith("batch") else 0.0
        )

    v = analyse(EXP, records(loss, lambda cfg, s: 0.001 + WOBBLE[s] / 4), P, tmp_path)
    d = decisions(v)
    assert d["pre-B4:bn-pads-vs-masked"] == "equivalent"
    assert d["win-pre-B4:bn-masked-vs-ln"] == "equivalent"
    assert d["pre-B4:bn-masked-eval-vs-train-mode"] == "equivalent"
    assert [sub_verdict(v, k) for k in ("(a)", "(b)", "(c)", "(d)")] == ["inconclusive"] * 4
    assert v.verdict == "inconclusive"


def test_norm_padding_rule_cells_where_no_arm_learned_are_excluded(tmp_path):
    # BN (both variants, lines and windows) stays at the unigram level; LN, PowerNorm, the previous-batch BN learn
    def loss(cfg, s):
        return {"batch_masked": UNIGRAM, "batch": UNIGRAM + 0.01}.get(cfg["norm"], 2.5 + OWN[cfg["norm"]][s])

    v = analyse(EXP, records(loss, lambda cfg, s: 0.05), P, tmp_path)
    d = decisions(v)
    assert {k: x for k, x in d.items() if k.endswith(":bn-pads-vs-masked")} == {
        "pre-B2:bn-pads-vs-masked": "excluded", "pre-B4:bn-pads-vs-masked": "excluded",
        "post-B4:bn-pads-vs-masked": "excluded",
    }  # fmt: skip
    assert sub_verdict(v, "(a)") == "inconclusive"  # two failures compared count neither way
    # one arm failed: still counted
    assert d["win-pre-B4:bn-masked-vs-ln"] == d["win-post-B4:bn-masked-vs-ln"] == "a_better"
    assert sub_verdict(v, "(b)") == "supported"
    assert d["pre:small-batch-interaction"] == "excluded"  # needs both arms at both batches
    assert (
        d["pre-B2:bn-masked-eval-vs-train-mode"] == d["win-pre-B4:bn-masked-eval-vs-train-mode"] == "excluded"
    )
    assert sub_verdict(v, "(c)") == sub_verdict(v, "(d)") == "inconclusive"
    assert v.verdict == "mixed"
    assert "excluded (neither arm learned)" in v.key_number


def test_norm_padding_rule_invariance_leak_and_fluctuation_checks_fail(tmp_path):
    v = analyse(EXP, records(*world(), lm_fluct=1.0, mlp_fluct=1.0, leak_ok=False, inv_ok=False), P, tmp_path)
    d = decisions(v)
    assert (
        d["inv:ln"] == "undecided"
        and d["leak:bn-train"] == "undecided"
        and d["leak:ln-train"] == "equivalent"
    )
    assert d["inv:bn-prev-train"] == d["leak:bn-prev-train"] == "equivalent"
    assert sub_verdict(v, "LN (and BN") == "refuted" and sub_verdict(v, "BN in train mode leaks") == "refuted"
    assert (
        d["fluct:mean-above-2x-control"] == d["fluct:var-above-2x-control"] == "a_better"
    )  # below 2× the control
    assert sub_verdict(v, "Batch statistics of the LM fluctuate ≥ 2× more") == "refuted"
    assert (
        sub_verdict(v, "Batch statistics of the LM fluctuate more") == "inconclusive"
    )  # equal to the control: undecided
    assert v.verdict == "supported"  # the overall rule rests on (a)–(d)


@pytest.mark.parametrize("prev_rel, ok", [(1e-9, False), (1e-12, True)])
def test_norm_padding_rule_previous_batch_arm_must_be_exactly_invariant_and_leak_free(tmp_path, prev_rel, ok):
    # the previous-batch BN must not see its own batch in train mode: < 1e-10 relative (float64 rounding is ~1e-15)
    v = analyse(EXP, records(*world(), prev_rel=prev_rel), P, tmp_path)
    d = decisions(v)
    want = "equivalent" if ok else "undecided"
    assert d["inv:bn-prev-train"] == d["leak:bn-prev-train"] == want
    assert (
        d["inv:ln"]
        == d["inv:bn-masked-pads-train"]
        == d["leak:bn-train"]
        == d["leak:ln-train"]
        == "equivalent"
    )
    assert (
        sub_verdict(v, "LN (and BN")
        == sub_verdict(v, "BN in train mode leaks")
        == VERDICT["sup" if ok else "ref"]
    )
    assert (
        v.evidence["invariance"]["bn_prev_train_rel"]
        == v.evidence["invariance"]["leak_bn_prev_rel"]
        == prev_rel
    )
    assert v.verdict == "supported"
