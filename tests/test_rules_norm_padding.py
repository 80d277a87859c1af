"""The norm_padding rule on synthetic run records: every outcome it can give.

The quick profile's arms with four fresh seeds: the causal LM on padded lines (LN, BN pads masked and BN with
causal statistics at pre-norm batches 2 and 4, every norm at batch 4, LN and BN masked at post-norm batch 4),
the causal LM on windows (LN, BN masked, BN causal), the masked LM on windows (LN, BN) and on lines (LN, BN,
BN masked); the learning-rate sweep of LN and both BNs on lines and of LN and BN in the masked LM on windows
(rates 5e-4 and 1e-3 on selection seed 10, at d = 32, and the masked LM again at d = 48). The records are made
as the runner makes them: the staged grid grows with the records made so far until it stops changing.

Each run's eval-mode loss is built per (setting, placement, batch, norm, seed) from knobs, one per counted
sub-claim — (a) padding, (b) batch statistics in the masked LM, (d) the train/inference mismatch — each set to
hold, fail, stay undecided or split between widths (b) or models (d); a bowl in the learning rate puts each
arm's best rate where a test wants it. The probes are built to pass or fail the checks (identities) and the
reported pad, leak and fluctuation effects."""

import math

import numpy as np
import pytest

from tfclaims.evidence.decisions import combine
from tfclaims.evidence.evaluate import CheckFailed
from tfclaims.harness.registry import load

from experiments.norm_padding.analysis import setting_of
from experiments.norm_padding.grid import NORMS, swept_name
from rules import analyse, comparison, decisions, grown, sub, verdicts

EXP = load("norm_padding")
P = {**EXP.profiles["quick"], "seeds": [0, 1, 2, 3]}
SMALL = min(a[1] for a in P["line_arms"])  # 2 lines
D0, D1 = P["scales"]  # 32, 48
UNIGRAM, INIT = 3.30, 4.20
JITTER = np.array([0.00, 0.02, -0.015, 0.01])  # seed-to-seed spread shared by every arm (paired)
WOBBLE = np.array([0.004, -0.003, 0.002, -0.004])  # a little per-arm noise
OWN = {n: np.roll(WOBBLE, k) for k, n in enumerate(NORMS)}  # each norm its own
NOISE = np.array([0.30, -0.25, 0.10, -0.20])  # a spread no four-seed test can call either way
EFFECT = 0.2  # nats/char: far outside the ±0.02 margin
VERDICT = {"sup": "supported", "ref": "refuted", "inc": "inconclusive", "mix": "mixed"}
COUNTED = ("a", "b", "d")
LINES = {n: swept_name("lines", "pre", 4, n) for n in ("layer", "batch", "batch_masked")}
ENC = {n: swept_name("enc-windows", "pre", 4, n) for n in ("layer", "batch")}


def stats(multiple, seed):
    """One BN layer's record: deviations that are `multiple` × i.i.d. noise (mean and variance) at every
    step."""
    steps = list(range(0, P["steps"], P["stat_every"]))
    n = 64
    x = multiple * (1 + 0.05 * (seed % 4))
    return {
        "blocks.0.norm1": {
            "step": steps,
            "mean_dev": [x / math.sqrt(n)] * len(steps),
            "var_dev": [x / math.sqrt(n / 2)] * len(steps),
            "n": [n] * len(steps),
        }
    }


def invariance(norm, inv_ok=True, leak_ok=True, pads_enter=2.0, causal_rel=0.0):
    """The probes of one trained causal line model: relative change of the targets' logits per probe and mode.
    BN with causal statistics changes with its neighbours and, in the other lines, at the changed token's own
    position (not a leak); `causal_rel` is its change with pads and of earlier outputs (0: exact)."""
    pads = {"batch": pads_enter, "batch_causal": causal_rel}.get(norm, 0.0)
    if not inv_ok and norm == "layer":
        pads = 1e-3
    nb = {"batch": 0.5, "batch_masked": 0.5, "batch_causal": 0.5}.get(norm, 0.0)
    leak = {"batch": 0.1, "batch_masked": 0.1, "batch_causal": causal_rel}.get(norm, 0.0)
    if not leak_ok and norm in ("batch", "batch_masked"):
        leak = 0.0
    other = {"batch": 0.1, "batch_masked": 0.1, "batch_causal": 0.3}.get(norm, 0.0)

    def at(m, v):
        return v if m == "train" else 0.0

    pad = [
        {"mode": m, "frac": f, "abs": at(m, pads), "rel": at(m, pads)}
        for m in ("train", "eval")
        for f in P["pad_fracs"]
    ]
    nbs = [
        {"mode": m, "n_neighbours": 2, "frac": 0.3, "abs": at(m, nb), "rel": at(m, nb)}
        for m in ("train", "eval")
    ]
    lk = {
        m: {
            "same_row_abs": at(m, leak),
            "same_row_rel": at(m, leak),
            "other_rows_abs": at(m, other),
            "other_rows_rel": at(m, other),
        }
        for m in ("train", "eval")
    }
    return {"padding": pad, "neighbours": nbs, "leak": lk}


def setting(c) -> str:
    return setting_of(c["data"], c["attn"])


def metrics(c, loss, gap, null, lm_fluct, mlp_fluct, probes) -> dict:
    """What `padded_lm` (or `bn_mlp`) returns for config c."""
    s = c["seed"] % 1000
    if c["part"] == "mlp":
        return {"stats": stats(mlp_fluct, s), "test_acc": 0.8, "chance": 0.1, "final_train_loss": 0.5}
    v = float(loss(c, s) + JITTER[s % 4])
    if c["part"] == "null":  # the LN arm again at another seed: a little different
        v += np.roll(WOBBLE, c["batch"])[s] if null is None else null(c, s)
    m = {
        "diverged_at": None,
        "train_loss": [4.0, v + 0.1],
        "seconds": 1.0,
        "unigram_xent": UNIGRAM,
        "init_loss": INIT,
        "pad_frac_train": 0.3 if c["data"] == "lines" else 0.0,
        "eval_mixed": v,
        "train_mixed": v - float(gap(c, s)),
        "stats": {},
    }
    if c["norm"].startswith("batch"):
        m["stats"] = stats(lm_fluct, s)
    if c["data"] == "lines":
        m["train_sorted"] = v - 0.005
        if c["attn"] == "causal":
            m["invariance"] = invariance(c["norm"], **probes)
    return m


def records(loss, gap=lambda c, s: 0.01, *, params=P, lm_fluct=4.0, mlp_fluct=1.0, null=None, **probes):
    """loss(config, seed) -> eval-mode validation loss before the shared jitter; gap(config, seed) ->
    eval-mode minus train-mode loss of the same run; null(config, seed) -> what the null pair's rerun adds
    (default: a little wobble); `probes` go to `invariance`. The staged grid grows as the runner grows it: the
    sweep's selection seed chooses each arm's rate, whose fresh-seed runs (and the next width's sweep) join
    the grid."""
    return grown(EXP, params, lambda c: metrics(c, loss, gap, null, lm_fluct, mlp_fluct, probes))


def delta(kind, s, first=True):
    """The effect one knob sets: +EFFECT (the claimed direction), −EFFECT, undecidable noise, or (mix) +EFFECT
    where `first` and −EFFECT elsewhere."""
    return {"sup": EFFECT, "ref": -EFFECT, "inc": NOISE[s % 4], "mix": EFFECT if first else -EFFECT}[kind]


def bowl(lr, best=1e-3, k=0.05):
    """A run's extra loss away from its arm's best rate: k nats per ×2."""
    return k * abs(math.log2(lr / best))


def world(a="sup", b="sup", d="sup", c="sup", best=None):
    """(loss, gap) for `records`; each knob moves one sub-claim and cancels out of the others.

    a: BN counting pads − BN masking them (causal LM, lines); b: BN − LN in the masked LM on windows ('mix':
    supported at the first width, refuted at the second); d: eval − train-mode loss of the leak-free BNs
    ('mix': supported in the causal LM and the masked LM on windows, refuted on padded lines); c (reported):
    (BN causal − LN) on lines, 0.30 at the smallest batch against 0.10 at the largest ('sup'), the other
    way round ('ref'). Every arm's best rate is the profile's (1e-3) unless `best` ((setting, norm) -> rate)
    says otherwise."""
    best = best or {}

    def loss(cfg, s):
        st, n, bs = setting(cfg), cfg["norm"], cfg["batch"]
        wide = cfg["d_model"] != D0
        if st == "lines":
            ln = 2.50
            cg = {"sup": (0.30, 0.10), "ref": (0.10, 0.30)}[c][0 if bs == SMALL else 1]
            v = {
                "layer": ln,
                "batch_masked": ln + 0.10,
                "batch": ln + 0.10 + delta(a, s),
                "batch_causal": ln + cg,
                "power": ln - 0.05,
            }[n]
        elif st == "windows":
            v = {"layer": 2.40, "batch_masked": 2.45, "batch_causal": 2.50}[n]
        elif st == "enc-windows":
            v = 2.30 - 0.05 * wide + (delta(b, s, not wide) if n == "batch" else 0.0)
        else:  # enc-lines
            v = {"layer": 2.35, "batch_masked": 2.45, "batch": 2.55}[n]
        return v + OWN[n][s % 4] + bowl(cfg["lr"], best.get((st, n), 1e-3))

    def gap(cfg, s):
        st, n = setting(cfg), cfg["norm"]
        leak_free = {
            "lines": "batch_causal",
            "windows": "batch_causal",
            "enc-windows": "batch",
            "enc-lines": "batch_masked",
        }[st]
        if n == leak_free:
            return delta(d, s, st != "enc-lines") + WOBBLE[s % 4] / 4
        return 0.3 if n == "batch_masked" else 0.01  # BN masked in the causal LM: its train mode sees ahead

    return loss, gap


def counted(v):
    return [verdicts(v)[k] for k in COUNTED]


def choices(v) -> dict:
    return {(r["arm"], r["scale"]): r["chosen_lr"] for r in v.evidence["lr_choices"]}


def test_norm_padding_rule_supported_when_padding_batch_statistics_and_mismatch_all_hurt(tmp_path):
    recs = records(*world())
    v = analyse(EXP, recs, P, tmp_path)
    d = decisions(v)
    assert v.verdict == "supported"
    assert counted(v) == ["supported"] * 3
    kinds = {s.id: (s.kind, s.counts) for s in v.sub_verdicts}
    assert {k for k, (kind, _) in kinds.items() if kind == "check"} == {
        "ln-invariant",
        "eval-invariant",
        "masked-pads",
        "causal-invariant",
    }
    assert {k for k, (kind, c) in kinds.items() if kind == "effect" and c} == set(COUNTED)
    # (a) tuned, one cell at the first width: a = BN masked, each BN at its own best rate (which null pairs
    # calibrate the tuned cells: test_norm_padding_rule_a_null_pair_run_at_the_first_width_...)
    a = comparison(v, "a")
    assert a.decision == "a_better" and a.arm_a.startswith("BN pads masked") and a.n == 4 and a.paired
    assert a.learned_a == a.learned_b == 4 and a.sesoi == 0.02
    assert sub(v, "a").holds == [f"d{D0}"] and sub(v, "a").comparisons == ["a"]
    # (b) tuned in the masked LM at both widths
    assert decisions(v, "b/") == {f"b/d{D0}": "a_better", f"b/d{D1}": "a_better"}
    assert sub(v, "b").holds == [f"d{D0}", f"d{D1}"]
    # (d): the leak-free BNs, train mode (a) better than eval mode (b); no null pair (one run, two readouts)
    assert decisions(v, "d/") == {f"d/{k}": "a_better" for k in ("enc-win-pre-B4", "enc-pre-B4")}
    # causal statistics (train mode degenerate at early positions by construction): reported, not counted
    assert decisions(v, "d-causal/") == {
        f"d-causal/{k}": "a_better" for k in ("pre-B2", "pre-B4", "win-pre-B4")
    }
    assert not sub(v, "d-causal").counts
    assert comparison(v, "d/enc-win-pre-B4").noise is None
    # every swept arm chose the profile's rate, at every width it swept (the masked LM at two)
    assert choices(v) == {
        **{(k, f"d{D0}"): 1e-3 for k in [*LINES.values(), *ENC.values()]},
        **{(k, f"d{D1}"): 1e-3 for k in ENC.values()},
    }
    # the reported sub-claims, beside the verdict
    assert {k for k, (kind, c) in kinds.items() if kind == "effect" and not c} == {
        "a-fixed",
        "a-enc",
        "b-fixed",
        "b-causal",
        "b-leaky",
        "c",
        "c-leaky",
        "d-causal",
        "d-leaky",
        "naive",
        "naive-fixed",
        "power",
        "pads-enter",
        "leak",
        "fluct",
        "fluct-2x",
    }
    assert d["a-fixed"] == d["a-enc"] == d["b-fixed"] == d["b-causal"] == d["b-leaky"] == "a_better"
    assert d["naive"] == d["naive-fixed"] == "a_better" and d["power"] == "b_better"
    assert d["c"] == "a_better"
    inter = comparison(v, "c")
    assert inter.arm_a == "largest batch" and inter.n == 4 and inter.diff == pytest.approx(0.2, abs=0.01)
    assert decisions(v, "d-leaky/") == {
        f"d-leaky/{k}": "a_better" for k in ("pre-B2", "pre-B4", "post-B4", "win-pre-B4")
    }
    # the checks pass; BN's dependence on pads and its leak are reported effects against bounds
    assert all(
        verdicts(v)[k] == "supported"
        for k in ("ln-invariant", "eval-invariant", "masked-pads", "causal-invariant")
    )
    assert verdicts(v)["pads-enter"] == verdicts(v)["leak"] == "supported"
    assert d["leak/counted"] == d["leak/masked"] == d["pads-enter"] == "equivalent"  # inside [1e-4, ∞)
    assert verdicts(v)["fluct"] == verdicts(v)["fluct-2x"] == "supported"
    assert d["fluct-2x/log2 mean x iid"] == "b_better"
    # the null pairs: one per declared null cell, the tuned comparisons' floors, the interaction's
    assert [f.id for f in v.noise_floor] == [
        "null/pre-B2",
        "null/pre-B4",
        "null/win-pre-B4",
        "null/enc-win-pre-B4",
        "null-lines",
        "null-enc",
        "null-gap",
    ]
    assert all(f.decision in ("undecided", "equivalent") for f in v.noise_floor)
    assert not any(f.p <= 0.05 for f in v.noise_floor)  # no null pair drifts: every cell can decide
    assert (
        comparison(v, "b-fixed").null_p is not None and comparison(v, "a-enc").null_p is None
    )  # no null cell
    assert v.evidence["sub_verdicts"]["d"] == "supported"
    assert "BN pads counted − BN pads masked" in v.key_number and f"d{D1}" in v.key_number
    # the staged grid grew past its first round: the masked LM's fresh runs at the second width are read
    wide = [r for r in recs if r["config"].get("d_model") == D1 and r["config"]["seed"] in P["seeds"]]
    assert {r["config"]["norm"] for r in wide} == {"layer", "batch"} and len(wide) == 2 * len(P["seeds"])


@pytest.mark.parametrize(
    "a, b, d, overall",
    [
        ("sup", "sup", "sup", "supported"),
        ("sup", "sup", "inc", "inconclusive"),  # not all supported, nothing refuted
        ("ref", "sup", "ref", "mixed"),  # supported beside refuted
        ("ref", "ref", "ref", "refuted"),
        ("ref", "ref", "inc", "refuted"),  # refuted where some fail and none holds, as cells of a sub-claim
        ("inc", "ref", "ref", "refuted"),
        ("ref", "inc", "inc", "refuted"),
        ("sup", "mix", "sup", "mixed"),  # (b) supported at the first width, refuted at the second
        ("ref", "ref", "mix", "mixed"),  # (d) supported on the masked LM's windows, refuted on its lines
        ("sup", "ref", "inc", "mixed"),
        ("inc", "inc", "inc", "inconclusive"),
    ],
)
def test_norm_padding_overall_verdict_combines_a_b_and_d(tmp_path, a, b, d, overall):
    v = analyse(EXP, records(*world(a, b, d)), P, tmp_path)
    assert counted(v) == [VERDICT[x] for x in (a, b, d)]
    assert v.verdict == overall == combine(counted(v))
    if b == "mix":
        assert decisions(v, "b/") == {f"b/d{D0}": "a_better", f"b/d{D1}": "b_better"}
        assert sub(v, "b").holds == [f"d{D0}"]
    if d == "mix":
        refuting = {k for k, x in decisions(v, "d/").items() if x == "b_better"}
        assert refuting == {"d/enc-pre-B4"}  # the masked LM on padded lines


def test_norm_padding_rule_tuned_comparison_reads_the_fresh_seeds_at_each_arms_chosen_rate(tmp_path):
    """BN counting pads is best at 5e-4, BN masking them at the profile's 1e-3; on the selection seed BN
    counting pads is far better (which must not enter the comparison): (a) compares the fresh seeds, each BN
    at its own rate."""
    loss, gap = world(best={("lines", "batch"): 5e-4})

    def selection_apart(cfg, s):
        apart = setting(cfg) == "lines" and cfg["norm"] == "batch" and s in P["selection_seeds"]
        return loss(cfg, s) - (1.0 if apart else 0.0)

    recs = records(selection_apart, gap)
    v = analyse(EXP, recs, P, tmp_path)
    ch = choices(v)
    assert ch[LINES["batch"], f"d{D0}"] == 5e-4 and ch[LINES["batch_masked"], f"d{D0}"] == 1e-3

    def mean(norm, lr, seeds):
        vals = [
            r["metrics"]["eval_mixed"]
            for r in recs
            if r["config"]["part"] == "lines"
            and r["config"]["norm"] == norm
            and r["config"]["lr"] == lr
            and r["config"]["seed"] in seeds
            and r["config"]["batch"] == 4
            and r["config"]["placement"] == "pre"
        ]
        assert len(vals) == len(seeds)
        return float(np.mean(vals))

    a = comparison(v, "a")
    assert a.n == 4 and a.mean_b == pytest.approx(mean("batch", 5e-4, P["seeds"]), abs=1e-12)
    assert a.mean_a == pytest.approx(mean("batch_masked", 1e-3, P["seeds"]), abs=1e-12)
    assert a.mean_b < mean("batch", 1e-3, P["seeds"])  # not the fixed-rate runs
    sel = mean("batch", 5e-4, P["selection_seeds"])
    assert sel < a.mean_b - 0.5  # the selection seed's far lower loss is not among them
    assert a.decision == "a_better" and verdicts(v)["a"] == "supported"


@pytest.mark.parametrize("spread, powered", [(0.0, True), (0.6, False)])
def test_norm_padding_rule_tuned_equivalence_refutes_where_its_control_holds_and_power_suffices(
    tmp_path, spread, powered
):
    """At the profile's rate BN counting pads is 0.2 worse than BN masking them (a-fixed, the positive
    control, one cell that covers (a)'s, supports beyond the SESOI); at its own best rate (5e-4) it is as
    good. With the seeds' spread as it is the equivalence has power ≥ 80% at ±0.02 and (a) is refuted,
    padding costs nothing once each BN has its rate; with BN counting pads' seeds spread 1.6 times as wide
    TOST still passes, but with power < 80% there: undecided, and (a) inconclusive."""
    loss, gap = world(best={("lines", "batch"): 5e-4})

    def equal_at_best(cfg, s):  # BN counting pads at its best rate: BN masked's loss (its own wobble)
        v = loss(cfg, s)
        if setting(cfg) == "lines" and cfg["norm"] == "batch":
            v += -EFFECT - bowl(cfg["lr"], 5e-4) + bowl(cfg["lr"], 5e-4, k=EFFECT)
            v += spread * (OWN["batch"] - OWN["batch_masked"])[s % 4]
        return v

    v = analyse(EXP, records(equal_at_best, gap), P, tmp_path)
    assert comparison(v, "a-fixed").decision == "a_better"
    assert comparison(v, "a-fixed").ci_low > 0.02  # beyond the SESOI: the control holds
    assert choices(v)[LINES["batch"], f"d{D0}"] == 5e-4
    a = comparison(v, "a")
    assert a.decision == "equivalent" and 0 < a.power <= 1 and (a.power >= 0.8) == powered
    assert sub(v, "a").roles == {"a": "refute" if powered else "undecided"}
    assert verdicts(v)["a"] == ("refuted" if powered else "inconclusive")
    assert v.verdict == ("mixed" if powered else "inconclusive")  # beside (b) and (d) supported


def test_norm_padding_rule_tuned_equivalence_is_not_decidable_where_its_control_fails(tmp_path):
    """No effect at the fixed rate either: a-fixed (no control of its own) is a powered equivalence, so it
    refutes; as (a)'s positive control it failed in the cell, so (a)'s equivalence there, powered as it is,
    is not decidable: (a) is inconclusive, not refuted."""
    plain, gap = world()

    def equal_everywhere(cfg, s):  # BN counting pads: BN masked's loss at every rate
        return plain(cfg, s) - (EFFECT if setting(cfg) == "lines" and cfg["norm"] == "batch" else 0.0)

    v = analyse(EXP, records(equal_everywhere, gap), P, tmp_path)
    assert comparison(v, "a-fixed").decision == "equivalent" and verdicts(v)["a-fixed"] == "refuted"
    a = comparison(v, "a")
    assert a.decision == "equivalent" and a.power >= 0.8
    assert sub(v, "a").roles == {"a": "not decidable"} and verdicts(v)["a"] == "inconclusive"
    assert "not decidable here (the positive control failed in the cell" in sub(v, "a").detail
    assert v.verdict == "inconclusive"


def test_norm_padding_rule_b_reads_the_masked_lm_not_the_causal_lm(tmp_path):
    """BN far worse than LN in the causal LM on windows (leaky or causal statistics), but nothing to tell
    apart in the masked LM: (b) is undecided, the causal LM's comparisons are reported beside it."""
    loss, gap = world(b="inc")

    def causal_worse(cfg, s):
        v = loss(cfg, s)
        return v + 0.2 if setting(cfg) == "windows" and cfg["norm"] != "layer" else v

    v = analyse(EXP, records(causal_worse, gap), P, tmp_path)
    assert decisions(v, "b/") == {f"b/d{D0}": "undecided", f"b/d{D1}": "undecided"}
    assert verdicts(v)["b"] == verdicts(v)["b-fixed"] == "inconclusive"
    assert verdicts(v)["b-causal"] == verdicts(v)["b-leaky"] == "supported"
    assert v.verdict == "inconclusive"


def test_norm_padding_rule_underpowered_null_is_inconclusive_never_refuted(tmp_path):
    v = analyse(EXP, records(*world("inc", "inc", "inc")), P, tmp_path)
    assert counted(v) == ["inconclusive"] * 3
    assert v.verdict == "inconclusive"
    for cid in ("a", f"b/d{D0}", f"b/d{D1}", "d/enc-win-pre-B4"):
        c = comparison(v, cid)
        assert c.decision == "undecided" and c.mde is not None and c.mde > 0.1


def test_norm_padding_rule_equivalences_not_decidable_beside_failed_controls_refute_with_power_elsewhere(
    tmp_path,
):
    """Every BN equals LN (and each other) at every rate and width, in both modes, with a small seed spread:
    every comparison is a powered equivalence. (a) and (b) have positive controls (a-fixed, b-fixed, one
    cell each) that saw nothing either: their equivalences are not decidable, so both stay inconclusive. (d)
    has no control (one run, two readouts): its powered equivalence refutes it in every cell."""

    def loss(cfg, s):
        base = {"lines": 2.5, "windows": 2.4, "enc-windows": 2.3, "enc-lines": 2.35}[setting(cfg)]
        bn = 0.001 + WOBBLE[s % 4] / 2 if cfg["norm"].startswith("batch") else 0.0
        return base + bn + bowl(cfg["lr"])

    v = analyse(EXP, records(loss, lambda cfg, s: 0.001 + WOBBLE[s % 4] / 4), P, tmp_path)
    d = decisions(v)
    assert (
        d["a"] == d[f"b/d{D0}"] == d[f"b/d{D1}"] == d["d/enc-pre-B4"] == d["d/enc-win-pre-B4"] == "equivalent"
    )
    assert d["a-fixed"] == d["b-fixed"] == "equivalent"  # the positive controls saw nothing either
    assert set(sub(v, "a").roles.values()) == set(sub(v, "b").roles.values()) == {"not decidable"}
    dd = [c for c in v.comparisons if c.id.startswith("d/")]
    assert all(c.power >= 0.8 for c in dd) and set(sub(v, "d").roles.values()) == {"refute"}
    assert counted(v) == ["inconclusive", "inconclusive", "refuted"]
    assert v.verdict == "refuted"


DRIFT = np.array([0.1, 0.102, 0.099, 0.101])  # a null pair's rerun 0.1 nats off its first run: significant


def drifts(where):
    """null(config, seed) for `records`: the LN reruns for which `where(config)` holds drift by DRIFT, the
    others rerun faithfully (a little wobble)."""
    return lambda c, s: DRIFT[s % 4] if where(c) else np.roll(WOBBLE, c["batch"])[s % 4]


def test_norm_padding_rule_a_drifting_null_pair_undecides_the_fixed_rate_cells_it_was_run_in(tmp_path):
    """The LN rerun of the causal LM on fixed windows drifts: the null pair's cell win-pre-B4 is significant,
    so the variance there is underestimated and both fixed-rate comparisons in that cell are undecided,
    whatever their p (b-causal, b-leaky); the masked LM's fixed-rate cell, whose null rerun is faithful,
    still decides (b-fixed), and so do the counted (a), (b), (d), whose null pairs are faithful too."""
    loss, gap = world()

    def causal_worse(cfg, s):  # BN in the causal LM on windows 0.2 worse than LN: p small in both cells
        v = loss(cfg, s)
        return v + EFFECT if setting(cfg) == "windows" and cfg["norm"] != "layer" else v

    v = analyse(EXP, records(causal_worse, gap, null=drifts(lambda c: setting(c) == "windows")), P, tmp_path)
    floors = {f.id: f.p for f in v.noise_floor}
    assert floors["null/win-pre-B4"] < 0.05 and floors["null/enc-win-pre-B4"] > 0.05
    for cid in ("b-causal", "b-leaky"):
        c = comparison(v, cid)
        assert c.p < 0.05 and c.null_p == floors["null/win-pre-B4"] and c.null_significant
        assert c.decision == "undecided" and verdicts(v)[cid] == "inconclusive"
        assert "the null pair in the cell is significant" in sub(v, cid).detail
    b = comparison(v, "b-fixed")
    assert b.null_p == floors["null/enc-win-pre-B4"] and b.decision == "a_better"
    assert verdicts(v)["b-fixed"] == "supported"
    assert counted(v) == ["supported"] * 3 and v.verdict == "supported"


def test_norm_padding_rule_the_fixed_rate_reruns_never_calibrate_the_tuned_cells(tmp_path):
    """The null pairs null-lines and null-enc rerun LN at the profile's one rate: another design than the
    tuned comparisons of (a) and (b), each arm at its own best rate. Even when null-enc's rerun drifts
    (significant), it says nothing of (b)'s tuned cells: both still decide (it used to lend its spread to
    every width)."""
    loss, gap = world()
    v = analyse(EXP, records(loss, gap, null=drifts(lambda c: setting(c) == "enc-windows")), P, tmp_path)
    floors = {f.id: f.p for f in v.noise_floor}
    assert floors["null-enc"] < 0.05 and floors["null-lines"] > 0.05
    for w in (D0, D1):
        c = comparison(v, f"b/d{w}")
        assert c.p < 0.05 and c.null_p is None and c.decision == "a_better"
    assert verdicts(v)["b"] == "supported"


def test_norm_padding_rule_the_ln_gaps_null_pair_does_not_calibrate_the_bn_interaction(tmp_path):
    """(BN causal − LN) is 0.2 larger at batch 2 than at 4 (c, reported). The null pair null-gap reruns LN's
    own batch-2 − batch-4 difference: another quantity than (c)'s (pair BN causal − LN), so even when LN's
    batch-2 rerun drifts 0.1 nats and null-gap is significant, (c) decides on its own interval."""
    loss, gap = world()
    v = analyse(EXP, records(loss, gap, null=drifts(lambda c: c["batch"] == SMALL)), P, tmp_path)
    assert any(f.id.startswith("null-gap") and f.p < 0.05 for f in v.noise_floor)
    c = comparison(v, "c")
    assert c.p < 0.05 and c.diff == pytest.approx(0.2, abs=0.01)
    assert c.null_p is None and c.decision == "a_better" and verdicts(v)["c"] == "supported"


def test_norm_padding_rule_cells_where_no_arm_learned_are_excluded(tmp_path):
    # both BNs on padded lines stay at the unigram level at every rate; LN, PowerNorm, BN causal and every
    # masked-LM arm learn
    loss, gap = world()

    def stuck(cfg, s):
        if setting(cfg) == "lines" and cfg["norm"] in ("batch", "batch_masked"):
            return UNIGRAM + 0.01 * (cfg["norm"] == "batch") + 0.001 * s - JITTER[s % 4]
        return loss(cfg, s)

    v = analyse(EXP, records(stuck, gap), P, tmp_path)
    d = decisions(v)
    assert d["a"] == d["a-fixed"] == "excluded"
    assert comparison(v, "a").learned_a == comparison(v, "a").learned_b == 0
    assert verdicts(v)["a"] == "inconclusive"  # two failures compared count neither way
    assert "excluded: neither arm learned" in v.key_number
    # one arm failed: still counted (LN against BN counting pads)
    assert d["naive"] == d["naive-fixed"] == "a_better"
    assert d["c-leaky"] == "excluded"  # a seed's pair learned only if both of its runs did
    assert {d[f"d-leaky/{k}"] for k in ("pre-B2", "pre-B4", "post-B4")} == {"excluded"}
    assert verdicts(v)["b"] == verdicts(v)["d"] == "supported"  # their arms learned
    assert v.verdict == "inconclusive"  # (b), (d) supported, (a) inconclusive


@pytest.mark.parametrize("causal_rel, ok", [(1e-9, False), (1e-12, True)])
def test_norm_padding_rule_causal_statistics_must_be_invariant_and_leak_free(tmp_path, causal_rel, ok):
    # BN with causal statistics must see neither pads nor later tokens: < 1e-10 relative (float64 rounding
    # ~1e-15); its change in the other lines at the changed token's position (0.3 here) is no leak
    recs = records(*world(), causal_rel=causal_rel)
    if not ok:
        with pytest.raises(CheckFailed, match="causal-invariant"):
            analyse(EXP, recs, P, tmp_path)
        return
    v = analyse(EXP, recs, P, tmp_path)
    assert verdicts(v)["causal-invariant"] == "supported"
    for k in ("pads_train", "leak_train"):
        assert comparison(v, f"causal-invariant/{k}").mean_b == causal_rel
    assert v.verdict == "supported"


def test_norm_padding_rule_a_failing_invariance_check_stops_the_claim(tmp_path):
    """LN's outputs changing with pads in float64 is a bug in the harness, not evidence about BatchNorm."""
    with pytest.raises(CheckFailed, match="ln-invariant"):
        analyse(EXP, records(*world(), inv_ok=False), P, tmp_path)


def test_norm_padding_rule_reported_effects_fail_without_touching_the_verdict(tmp_path):
    # BN does not leak, counting pads changes nothing, the LM's statistics fluctuate like the control's, small
    # batches hurt BN causal less than large ones, PowerNorm is no better than LN
    loss, gap = world(c="ref")

    def power_worse(cfg, s):
        return loss(cfg, s) + (0.25 if cfg["norm"] == "power" else 0.0)

    v = analyse(
        EXP,
        records(power_worse, gap, leak_ok=False, pads_enter=0.0, lm_fluct=1.0, mlp_fluct=1.0),
        P,
        tmp_path,
    )
    d = decisions(v)
    assert d["leak/counted"] == d["leak/masked"] == "a_better"  # below the declared [1e-4, ∞)
    assert d["pads-enter"] == "a_better"
    assert verdicts(v)["leak"] == verdicts(v)["pads-enter"] == "refuted"
    assert d["fluct-2x/log2 mean x iid"] == d["fluct-2x/log2 var x iid"] == "a_better"  # below 2× the control
    assert verdicts(v)["fluct-2x"] == "refuted"
    assert verdicts(v)["fluct"] == "inconclusive"  # equal to the control: undecided
    assert d["c"] == "b_better" and verdicts(v)["c"] == "refuted"
    assert d["power"] == "a_better" and verdicts(v)["power"] == "refuted"
    assert counted(v) == ["supported"] * 3 and v.verdict == "supported"  # the verdict rests on (a), (b), (d)
