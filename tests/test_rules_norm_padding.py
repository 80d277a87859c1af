"""The norm_padding rule on synthetic run records: every outcome it can give.

The quick profile's arms (lines: every norm at pre-norm batches 2 and 4, LN/BN/BN masked at post-norm batch 4;
windows: LN and BN masked at pre- and post-norm batch 4, the previous-batch BN at pre-norm) with four seeds.
Each run's eval-mode loss and its eval − train-mode gap are built per (data, placement, norm, batch, seed)
from four knobs, one per counted sub-claim — (a) padding, (b) batch statistics on windows, (c) small batches,
(d) the train/inference mismatch — each set to hold, fail, stay undecided or split between placements; the
probes are built to pass or fail the checks (identities) and the reported pad, leak and fluctuation effects."""

import math

import numpy as np
import pytest

from tfclaims.claims.norm_padding import NORMS
from tfclaims.evidence.evaluate import CheckFailed
from tfclaims.harness.registry import load

from rules import analyse, comparison, decisions, record, sub, verdicts

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
COUNTED = ("a", "b", "c", "d")


def stats(multiple, seed):
    """One BN layer's record: deviations that are `multiple` × i.i.d. noise (mean and variance) at every step."""
    steps = list(range(0, P["steps"], P["stat_every"]))
    n = 64
    x = multiple * (1 + 0.05 * (seed % 4))
    return {"blocks.0.norm1": {"step": steps, "mean_dev": [x / math.sqrt(n)] * len(steps),
                               "var_dev": [x / math.sqrt(n / 2)] * len(steps), "n": [n] * len(steps)}}  # fmt: skip


def invariance(norm, leak_ok=True, inv_ok=True, prev_rel=0.0, pads_enter=2.0):
    """The probes of one trained line model: relative change of the targets' logits per probe and mode."""
    train_dep = {
        "layer": 0.0,
        "power": 0.0,
        "batch": pads_enter,
        "batch_masked": 0.0,
        "batch_prev": prev_rel,
    }[norm]
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


def records(loss, gap=lambda c, s: 0.01, *, lm_fluct=4.0, mlp_fluct=1.0, null=None, **probes):
    """loss(config, seed) -> eval-mode validation loss before the shared jitter; gap(config, seed) -> eval-mode
    minus train-mode loss of the same run; null(config, seed) -> what the null pair's rerun adds (default: a
    little wobble). Every record carries what `padded_lm` returns; `probes` go to `invariance`."""
    recs = []
    for i, c in enumerate(EXP.grid(P)):
        part, s = c["part"], c["seed"] % 1000
        if part == "mlp":
            m = {"stats": stats(mlp_fluct, s), "test_acc": 0.8, "chance": 0.1, "final_train_loss": 0.5}
        else:
            v = float(loss(c, s) + JITTER[s])
            if part == "null":  # the LN arm again at another seed: a little different
                v += np.roll(WOBBLE, c["batch"])[s] if null is None else null(c, s)
            m = {"diverged_at": None, "train_loss": [4.0, v + 0.1], "seconds": 1.0, "unigram_xent": UNIGRAM,
                 "pad_frac_train": 0.3 if c["data"] == "lines" else 0.0, "eval_mixed": v,
                 "train_mixed": v - float(gap(c, s)), "stats": {}}  # fmt: skip
            if c["norm"].startswith("batch"):
                m["stats"] = stats(lm_fluct, s)
            if c["data"] == "lines":
                m["train_sorted"] = v - 0.005
                m["invariance"] = invariance(c["norm"], **probes)
        recs.append(record(c, m, f"r{i}"))
    return recs


def delta(kind, s, pl, bs):
    """The effect one knob sets: +EFFECT (the claimed direction), −EFFECT, undecidable noise, split by placement,
    or (big) −EFFECT at the larger batch and nothing at the smallest."""
    return {"sup": EFFECT, "ref": -EFFECT, "inc": NOISE[s], "mix": EFFECT if pl == "pre" else -EFFECT,
            "big": 0.0 if bs == SMALL else -EFFECT}[kind]  # fmt: skip


def world(a="sup", b="sup", c="sup", d="sup"):
    """(loss, gap) for `records`; each knob moves one sub-claim and cancels out of the others.

    a: BN counting pads − BN masked on lines; b: BN masked − LN on windows; c: (BN masked − LN) on lines at the
    smallest batch against the others ('sup' 0.30 vs 0.10, 'ref' 0.10 vs 0.30, 'inc' noise at the small batch);
    d: eval − train-mode loss of BN masked (lines and windows)."""

    def loss(cfg, s):
        n, bs, pl = cfg["norm"], cfg["batch"], cfg["placement"]
        if cfg["data"] == "windows":
            ln = 2.40
            v = {"layer": ln, "batch_masked": ln + delta(b, s, pl, bs), "batch_prev": ln + 0.10}[n]
        else:
            ln = 2.50
            if c == "inc":
                cg = 0.2 + (NOISE[s] if bs == SMALL else 0.0)
            else:
                cg = {"sup": (0.30, 0.10), "ref": (0.10, 0.30)}[c][0 if bs == SMALL else 1]
            masked = ln + cg
            v = {"layer": ln, "batch_masked": masked, "batch": masked + delta(a, s, pl, bs),
                 "batch_prev": masked - 0.05, "power": ln - 0.05}[n]  # fmt: skip
        return v + OWN[n][s]

    def gap(cfg, s):
        return delta(d, s, cfg["placement"], cfg["batch"]) if cfg["norm"] == "batch_masked" else 0.01

    return loss, gap


def counted(v):
    return [verdicts(v)[k] for k in COUNTED]


def test_norm_padding_rule_supported_when_padding_batch_statistics_small_batches_and_mismatch_all_hurt(
    tmp_path,
):
    v = analyse(EXP, records(*world()), P, tmp_path)
    d = decisions(v)
    assert v.verdict == "supported"
    assert counted(v) == ["supported"] * 4
    # (a) on lines, every cell with both BNs: a = BN masked
    assert decisions(v, "a/") == {"a/pre-B2": "a_better", "a/pre-B4": "a_better", "a/post-B4": "a_better"}
    # (b) on windows only: a = LN
    assert decisions(v, "b/") == {"b/win-pre-B4": "a_better", "b/win-post-B4": "a_better"}
    assert sub(v, "b").comparisons == ["b/win-pre-B4", "b/win-post-B4"]
    # (c): one placement with two batch sizes, so one comparison (a = the largest batch)
    assert d["c"] == "a_better" and sub(v, "c").comparisons == ["c"]
    inter = comparison(v, "c")
    assert inter.arm_a == "largest batch" and inter.n == 4 and inter.diff == pytest.approx(0.2, abs=0.01)
    # (d) on lines and windows: a = train mode
    assert decisions(v, "d/") == {
        f"d/{k}": "a_better" for k in ("pre-B2", "pre-B4", "post-B4", "win-pre-B4", "win-post-B4")
    }
    # the reported arms
    assert d["prev-windows"] == "a_better"  # the leak-free BN worse than LN on windows
    assert d["prev-lines/pre-B2"] == d["prev-lines/pre-B4"] == "b_better"
    assert d["power/pre-B2"] == "b_better" and d["naive/post-B4"] == "a_better"
    assert verdicts(v)["prev-windows"] == verdicts(v)["power"] == "supported"
    # the checks (identities) pass; BN's dependence on pads and its leak are reported effects
    kinds = {s.id: (s.kind, s.counts) for s in v.sub_verdicts}
    assert {k for k, (kind, _) in kinds.items() if kind == "check"} == {
        "ln-invariant", "eval-invariant", "masked-pads", "prev-invariant"
    }  # fmt: skip
    assert {k for k, (kind, c) in kinds.items() if kind == "effect" and c} == set(COUNTED)
    assert all(verdicts(v)[k] == "supported" for k in ("ln-invariant", "eval-invariant", "masked-pads"))
    assert verdicts(v)["pads-enter"] == verdicts(v)["leak"] == "supported"
    assert d["leak/counted"] == d["leak/masked"] == d["pads-enter"] == "equivalent"  # inside [1e-4, ∞)
    assert verdicts(v)["fluct"] == verdicts(v)["fluct-2x"] == "supported"
    assert d["fluct-2x/log2 mean x iid"] == "b_better"
    # the null pairs: one per declared null cell, and the interaction's where both batch sizes have one
    assert [f.id for f in v.noise_floor] == ["null/pre-B2", "null/pre-B4", "null/win-pre-B4", "null-gap"]
    assert all(f.decision in ("undecided", "equivalent") for f in v.noise_floor)
    cell = comparison(v, "b/win-pre-B4")
    assert cell.paired and cell.n == 4 and cell.margin == 0.02 and cell.noise is not None
    assert cell.learned_a == 4 and cell.learned_b == 4
    assert comparison(v, "a/pre-B4").noise is not None
    assert comparison(v, "b/win-post-B4").noise is None  # no null cell declared there
    assert inter.noise is not None
    assert comparison(v, "d/pre-B2").noise is None  # both modes are one run: no null pair
    assert v.evidence["sub_verdicts"]["d"] == "supported"


@pytest.mark.parametrize(
    "a, b, c, d, overall",
    [
        ("sup", "sup", "sup", "sup", "supported"),
        (
            "sup",
            "sup",
            "sup",
            "inc",
            "inconclusive",
        ),  # combine: not all supported, nothing refuted (was mixed)
        ("ref", "sup", "ref", "ref", "mixed"),  # supported beside refuted
        ("ref", "ref", "sup", "ref", "mixed"),  # (c) alone supported beside the refuted others
        ("mix", "ref", "ref", "ref", "mixed"),  # a mixed sub-verdict makes it mixed
        ("ref", "ref", "ref", "ref", "refuted"),
        ("ref", "ref", "inc", "ref", "inconclusive"),  # combine needs all four refuted (was refuted)
        ("ref", "ref", "ref", "inc", "inconclusive"),
        ("inc", "ref", "ref", "ref", "inconclusive"),
        ("sup", "ref", "inc", "inc", "mixed"),
    ],
)
def test_norm_padding_overall_verdict_combines_a_to_d(tmp_path, a, b, c, d, overall):
    v = analyse(EXP, records(*world(a, b, c, d)), P, tmp_path)
    assert counted(v) == [VERDICT[x] for x in (a, b, c, d)]
    assert v.verdict == overall


def test_norm_padding_rule_a_refuted_when_counting_pads_helps_at_the_large_batch_and_none_supports(tmp_path):
    """The committed default's pattern: counting pads significantly better in the larger-batch cells, no
    difference at the smallest batch. The old ladder (require='all') demanded that every cell refute and said
    inconclusive; the rule says refuted when some cell refutes and none supports."""
    v = analyse(EXP, records(*world(a="big")), P, tmp_path)
    assert decisions(v, "a/")["a/pre-B4"] == decisions(v, "a/")["a/post-B4"] == "b_better"
    assert decisions(v, "a/")["a/pre-B2"] in ("equivalent", "undecided")
    assert verdicts(v)["a"] == "refuted"
    assert v.verdict == "mixed"  # (a) refuted beside (b)–(d) supported


def test_norm_padding_rule_b_reads_windows_not_lines(tmp_path):
    # BN masked far worse than LN on padded lines, but nothing to tell apart on windows: (b) is undecided
    v = analyse(EXP, records(*world(b="inc")), P, tmp_path)
    d = decisions(v)
    assert d["a/pre-B4"] == "a_better"
    assert not any(k.startswith("b/") and "win-" not in k for k in d)  # no (b) cell on lines
    assert d["b/win-pre-B4"] == d["b/win-post-B4"] == "undecided"
    assert verdicts(v)["b"] == "inconclusive" and v.verdict == "inconclusive"
    # and the other way round: BN masked equal to LN on lines, worse on windows: (b) supported
    loss, gap = world()

    def windows_only(cfg, s):
        if cfg["data"] == "lines" and cfg["norm"] == "batch_masked":
            return 2.50 + OWN["batch_masked"][s]
        return loss(cfg, s)

    v = analyse(EXP, records(windows_only, gap), P, tmp_path / "w")
    assert comparison(v, "b/win-pre-B4").decision == "a_better"
    assert verdicts(v)["b"] == "supported"


def test_norm_padding_rule_underpowered_null_is_inconclusive_never_refuted(tmp_path):
    v = analyse(EXP, records(*world("inc", "inc", "inc", "inc")), P, tmp_path)
    assert counted(v) == ["inconclusive"] * 4
    assert v.verdict == "inconclusive"
    for cid in ("b/win-pre-B4", "a/pre-B4", "c", "d/win-post-B4"):
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
    assert d["a/pre-B4"] == d["b/win-pre-B4"] == d["d/pre-B4"] == "equivalent"
    assert counted(v) == ["inconclusive"] * 4
    assert v.verdict == "inconclusive"


def test_norm_padding_rule_an_effect_inside_the_noise_floor_is_not_supported(tmp_path):
    """Counting pads worse by 0.03 in every seed (p tiny), but the LN reruns differ from LN by up to ±0.1: in
    the cells with a null pair the effect is inside the noise floor, so it is undecided and (a) is not
    supported; post-norm has no null cell, so its cell is decided without a floor."""
    loss, gap = world()

    def small_a(cfg, s):
        v = loss(cfg, s)
        return v - EFFECT + 0.03 + 0.0005 * s if cfg["data"] == "lines" and cfg["norm"] == "batch" else v

    spread = np.array([0.1, -0.08, 0.06, -0.1])
    v = analyse(EXP, records(small_a, gap, null=lambda c, s: spread[s]), P, tmp_path)
    for cid in ("a/pre-B2", "a/pre-B4"):
        c = comparison(v, cid)
        assert c.p < 0.05 and c.in_noise and c.decision == "undecided"
    post = comparison(v, "a/post-B4")
    assert post.noise is None and post.decision == "a_better"
    assert verdicts(v)["a"] == "inconclusive"  # where='all': every counted cell must support


def test_norm_padding_rule_small_batch_interaction_inside_its_null_pair_is_undecided(tmp_path):
    # (BN masked − LN) larger at batch 2 by 0.05, but LN's own batch-2 − batch-4 difference moves by up to ±0.2
    # between the seeds and their reruns: the interaction is inside its noise floor
    loss, gap = world()

    def bump(cfg, s):
        v = loss(cfg, s)
        small = cfg["data"] == "lines" and cfg["batch"] == SMALL and cfg["norm"] == "batch_masked"
        return v - 0.15 + 0.001 * s if small else v

    rerun = np.array([0.2, -0.15, 0.1, -0.2])
    v = analyse(
        EXP, records(bump, gap, null=lambda c, s: rerun[s] if c["batch"] == SMALL else 0.0), P, tmp_path
    )
    c = comparison(v, "c")
    assert c.p < 0.05 and c.diff == pytest.approx(0.05, abs=0.01) and c.in_noise and c.decision == "undecided"
    assert verdicts(v)["c"] == "inconclusive"


def test_norm_padding_rule_cells_where_no_arm_learned_are_excluded(tmp_path):
    # BN (both variants, lines and windows) stays at the unigram level; LN, PowerNorm, the previous-batch BN learn
    def loss(cfg, s):
        return {"batch_masked": UNIGRAM, "batch": UNIGRAM + 0.01}.get(cfg["norm"], 2.5 + OWN[cfg["norm"]][s])

    v = analyse(EXP, records(loss, lambda cfg, s: 0.05), P, tmp_path)
    d = decisions(v)
    assert decisions(v, "a/") == {"a/pre-B2": "excluded", "a/pre-B4": "excluded", "a/post-B4": "excluded"}
    assert verdicts(v)["a"] == "inconclusive"  # two failures compared count neither way
    # one arm failed: still counted
    assert d["b/win-pre-B4"] == d["b/win-post-B4"] == "a_better"
    assert verdicts(v)["b"] == "supported"
    assert d["c"] == "excluded"  # a seed's pair learned only if both of its runs did
    assert d["d/pre-B2"] == d["d/win-pre-B4"] == "excluded"
    assert verdicts(v)["c"] == verdicts(v)["d"] == "inconclusive"
    assert v.verdict == "inconclusive"  # combine: (b) supported, nothing refuted (was mixed)
    assert "excluded: neither arm learned" in v.key_number


def test_norm_padding_rule_a_failing_invariance_check_stops_the_claim(tmp_path):
    """LN's outputs changing with pads in float64 is a bug in the harness, not evidence about BatchNorm."""
    with pytest.raises(CheckFailed, match="ln-invariant"):
        analyse(EXP, records(*world(), inv_ok=False), P, tmp_path)


@pytest.mark.parametrize("prev_rel, ok", [(1e-9, False), (1e-12, True)])
def test_norm_padding_rule_previous_batch_arm_must_be_exactly_invariant_and_leak_free(tmp_path, prev_rel, ok):
    # the previous-batch BN must not see its own batch in train mode: < 1e-10 relative (float64 rounding ~1e-15)
    if not ok:
        with pytest.raises(CheckFailed, match="prev-invariant"):
            analyse(EXP, records(*world(), prev_rel=prev_rel), P, tmp_path)
        return
    v = analyse(EXP, records(*world(), prev_rel=prev_rel), P, tmp_path)
    assert verdicts(v)["prev-invariant"] == "supported"
    assert all(comparison(v, f"prev-invariant/{k}").mean_b == prev_rel for k in ("pads_train", "nb_train"))
    assert v.verdict == "supported"


def test_norm_padding_rule_reported_effects_fail_without_touching_the_verdict(tmp_path):
    # BN does not leak, counting pads changes nothing, the LM's statistics fluctuate like the control's
    v = analyse(
        EXP, records(*world(), leak_ok=False, pads_enter=0.0, lm_fluct=1.0, mlp_fluct=1.0), P, tmp_path
    )
    d = decisions(v)
    assert d["leak/counted"] == d["leak/masked"] == "a_better"  # below the declared [1e-4, ∞)
    assert d["pads-enter"] == "a_better"
    assert verdicts(v)["leak"] == verdicts(v)["pads-enter"] == "refuted"
    assert d["fluct-2x/log2 mean x iid"] == d["fluct-2x/log2 var x iid"] == "a_better"  # below 2× the control
    assert verdicts(v)["fluct-2x"] == "refuted"
    assert verdicts(v)["fluct"] == "inconclusive"  # equal to the control: undecided
    assert v.verdict == "supported"  # the overall verdict rests on (a)–(d)
