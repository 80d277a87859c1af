"""The sinusoidal_relative rule on synthetic records: the identity's checks (a failure stops the claim); the
use half (offset-only share against learned positions, the loss increase beyond the training length against
RoPE's + margin) with its guard, exclusions, not-applicable learned cells and noise floor; the learned-table
sub-claim's guard, convergence gate (a declared cell rule) and thresholds. Then the measures themselves: the
offset-only share in closed form, and the length recipe's pieces on tiny models."""

import copy

import numpy as np
import pytest
import torch

from tfclaims.claims.sinusoidal_relative import offset_share, position_logits, position_losses
from tfclaims.evidence.evaluate import CheckFailed
from tfclaims.harness.registry import load
from tfclaims.nn.attention import KVCache
from tfclaims.nn.models import LM
from tfclaims.train.small_lm import model_config

from rules import analyse, comparison, decisions, record, sub, verdicts

EXP = load("sinusoidal_relative")
P = {**EXP.profiles["quick"], "seeds": [0, 1, 2, 3, 4]}  # five seeds: enough power for the synthetic effects
T = P["seq_len"]
UNIGRAM = 3.3
EXP_ARMS = ("sinusoidal", "learned", "rope", "none")
CHECKS = ("identity", "dots", "construction")
COUNTED = ("share", "extra")

# a use half that holds: sinusoidal attends more by offset than learned, and extends like RoPE
HOLDS = {
    "share": {"sinusoidal": 0.6, "learned": 0.2, "rope": 1.0, "none": None},
    "inc": {"sinusoidal": (0.02, 0.05), "rope": (0.03, 0.06), "none": (0.04, 0.08)},
    "loss1": {"sinusoidal": 2.40, "learned": 2.40, "rope": 2.30, "none": 2.45},
    "shift": {"sinusoidal": 0.0, "rope": 0.0, "none": 0.0},
}


def identity_metrics(err32=1.2e-7, dot_spread=1e-8):
    rows = [
        {"d": d, "k": k, "err32": err32 if (d, k) == (16, 3) else 1e-7, "err64": 5e-8, "orth_err": 2e-16,
         "compose_err": 1e-15, "dot_mean": 1.0, "dot_spread": dot_spread * d / 2, "dot_closed": 1.0,
         "dot_closed_err": 1e-8}
        for d in P["d_models"] for k in P["offsets"]
    ]  # fmt: skip
    return {"rows": rows, "curve_ks": [0, 1, 2], "curves": {"0": [8.0, 7.9, 7.7]}, "curve_d": 16}


def stats(r2, res):
    return {"toeplitz_r2": r2, "shift_residual": {"1": res, "4": res}}


def learned_metrics(seed, r2_path, res_path, final_val=2.6):
    """r2_path / res_path: the measures at each probe; the last is the trained table."""
    rng = np.random.default_rng(seed)
    jit = 0.004 * rng.standard_normal()  # seed-to-seed differences, the same at every probe
    wob = 0.002 * rng.standard_normal(len(r2_path))  # and probe-to-probe wobble
    probes = [stats(r + jit + w, s - jit - w) for r, s, w in zip(r2_path, res_path, wob)]
    return {
        "eval_steps": [6 * i for i in range(len(probes))], "val_loss": [3.5] * len(probes), "final_val": final_val,
        "unigram_xent": UNIGRAM, "probes": probes, "final_table": probes[-1],
        "sinusoidal_table": stats(1.0, 1e-8), "gram_learned": np.eye(4).tolist(),
        "gram_sinusoidal": np.eye(4).tolist(), "gram_stride": 12, "norms": [1.0] * 48,
    }  # fmt: skip


def length_metrics(pos, seed, spec, failed=(), noise=0.01):
    """One length run: per-position losses whose window means give spec's 1× loss and increases at 2× and 4×,
    the moved windows' change, the offset-only share; seed-to-seed noise of size `noise`."""
    rng = np.random.default_rng(1000 * EXP_ARMS.index(pos) + 7 * seed)
    a = spec["loss1"][pos] + noise * rng.standard_normal()
    share = spec["share"][pos]
    if share is not None and pos != "rope":
        share = float(np.clip(share + 2 * noise * rng.standard_normal(), 0, 1))
    m = {
        "final_val": 3.25 if pos in failed else a, "unigram_xent": UNIGRAM, "diverged_at": None, "seconds": 1.0,
        "offset_share": share, "offset_share_init": None if share is None else 0.05,
        "probes": [{"offset_share": 0.05 if share is not None else None}, {"offset_share": share}],
    }  # fmt: skip
    if pos == "learned":  # no rows beyond T: per-position losses over the first T positions only
        m["position_loss"] = {"at_0": [a] * T}
        m["position_logits"], m["logits_head"] = np.tril(np.ones((T, T))).tolist(), 0
        return m
    i2, i4 = (v + noise * rng.standard_normal() for v in spec["inc"][pos])
    b = a + 2 * i2  # positions T..2T: their mean lifts the 2T-window mean by i2
    c = a + (4 * i4 - (b - a)) / 2  # positions 2T..4T
    m["position_loss"] = {"at_0": [a] * T + [b] * T + [c] * 2 * T}
    for k in P["shift_mults"]:
        d = spec["shift"][pos] + (noise * rng.standard_normal() if pos == "sinusoidal" else 0.0)
        m["position_loss"][f"at_{k * T}"] = [a + d] * T
    if pos == "sinusoidal":
        m["position_logits"], m["logits_head"] = np.tril(np.ones((T, T))).tolist(), 0
    return m


def records(ident=None, r2_path=(0.02, 0.5, 0.95, 0.951), res_path=(0.7, 0.1, 0.02, 0.021), final_val=2.6,
            spec=HOLDS, failed=(), noise=0.01, drop=()):  # fmt: skip
    out = []
    for i, c in enumerate(EXP.grid(P)):
        if c["part"] == "identity":
            m = ident or identity_metrics()
        elif c["part"] in ("length", "length_null"):
            if c["pos"] in drop:
                continue
            m = length_metrics(c["pos"], c["seed"], spec, failed, noise)
        else:
            m = learned_metrics(c["seed"], r2_path, res_path, final_val)
        out.append(record(c, m, f"r{i}"))
    return out


def with_spec(**changes):
    return {k: {**HOLDS[k], **changes.get(k, {})} for k in HOLDS}


# ---------------------------------------------------------------------------- identity and learned table
def test_sinusoidal_relative_rule_supported_when_the_identity_and_its_use_hold(tmp_path):
    v = analyse(EXP, records(), P, tmp_path)
    assert v.verdict == "supported"
    others = {k: x for k, x in verdicts(v).items() if k != "nope-rope"}  # RoPE − NoPE: 0.01 nats, undecided
    assert others == dict.fromkeys(others, "supported")  # every other sub-claim, reported ones too
    kinds = {s.id: (s.kind, s.counts) for s in v.sub_verdicts}
    assert all(kinds[c] == ("check", False) for c in CHECKS)
    assert [k for k, (kind, counts) in kinds.items() if kind == "effect" and counts] == list(COUNTED)
    d = decisions(v)
    assert (
        d["identity/d16/err32"]
        == d["identity/d64/compose_err"]
        == d["dots/d16/dot_spread_rel"]
        == "equivalent"
    )
    assert d["construction/rope_share"] == d["construction/none_moved"] == "equivalent"
    assert d["share"] == "a_better"  # a = sinusoidal, more offset-only than learned
    assert d["extra/increase2x"] == d["extra/increase4x"] == "equivalent"  # shown inside [−∞, 0.05]
    assert d["converged"] == "equivalent"
    assert d["learned/r2"] == d["learned/res1"] == "a_better"  # a = the trained table, beyond both thresholds
    floors = {f.id for f in v.noise_floor}
    assert {"learned-null/r2", "learned-null/res1", "null/share", "null/increase2x", "null/movedT"} <= floors
    # every use comparison stands beside the noise floor of its metric
    assert comparison(v, "extra/increase2x").noise is not None
    assert comparison(v, "share").noise is not None and comparison(v, "learned/r2").noise is not None


def test_sinusoidal_relative_rule_a_failing_identity_stops_the_claim(tmp_path):
    """The identity is exact mathematics: an error above 1e-6 is a bug in the table or M_k, not evidence."""
    with pytest.raises(CheckFailed, match=r"identity.*identity/d16/err32"):
        analyse(EXP, records(ident=identity_metrics(err32=2e-6)), P, tmp_path)


def test_sinusoidal_relative_rule_dot_products_that_depend_on_position_stop_the_claim(tmp_path):
    with pytest.raises(CheckFailed, match="dots"):
        analyse(EXP, records(ident=identity_metrics(dot_spread=1e-3)), P, tmp_path)


def test_sinusoidal_relative_rule_learned_table_lacks_the_property_once_converged(tmp_path):
    v = analyse(EXP, records(r2_path=(0.02, 0.15, 0.2, 0.2), res_path=(0.7, 0.6, 0.58, 0.58)), P, tmp_path)
    assert v.verdict == "supported"  # the learned table is a comparison beside the verdict
    assert decisions(v)["converged"] == "equivalent"
    assert decisions(v)["learned/r2"] == decisions(v)["learned/res1"] == "b_better"  # b = the thresholds
    assert verdicts(v)["learned"] == "refuted"


def test_sinusoidal_relative_rule_still_rising_is_inconclusive_not_refuted(tmp_path):
    # a naive rule would call R² 0.2 "lacks the property"; R² rose by 0.08 over the last interval
    v = analyse(EXP, records(r2_path=(0.02, 0.05, 0.12, 0.2), res_path=(0.7, 0.65, 0.6, 0.58)), P, tmp_path)
    assert decisions(v)["converged"] == "b_better"  # shown above +0.02
    assert verdicts(v)["converged"] == "refuted"
    s = sub(v, "learned")
    assert s.verdict == "inconclusive" and not s.comparisons
    assert s.reported == ["learned/r2", "learned/res1"]  # reported, not counted: the cell rule failed
    assert (
        decisions(v)["learned/r2"] == "b_better" and "converged" in s.detail and "does not hold" in s.detail
    )


def test_sinusoidal_relative_rule_learned_table_short_of_the_thresholds_is_refuted(tmp_path):
    # R² 0.7 and residual 0.1: between the old rule's 'shares' and 'lacks' thresholds, which it called
    # inconclusive; the declared sub-claim is 'shares the property' (R² above 0.9, residual below 0.05), and a
    # table significantly short of both does not share it
    v = analyse(EXP, records(r2_path=(0.02, 0.6, 0.7, 0.7), res_path=(0.7, 0.12, 0.1, 0.1)), P, tmp_path)
    assert decisions(v)["converged"] == "equivalent"
    assert verdicts(v)["learned"] == "refuted"


def test_sinusoidal_relative_rule_learned_table_at_the_thresholds_is_inconclusive(tmp_path):
    v = analyse(EXP, records(r2_path=(0.02, 0.6, 0.9, 0.9), res_path=(0.7, 0.12, 0.05, 0.05)), P, tmp_path)
    assert decisions(v)["converged"] == "equivalent"
    assert decisions(v)["learned/r2"] == decisions(v)["learned/res1"] == "undecided"
    assert verdicts(v)["learned"] == "inconclusive"


def test_sinusoidal_relative_rule_learned_table_runs_that_never_learned_are_excluded(tmp_path):
    v = analyse(
        EXP,
        records(r2_path=(0.02, 0.03, 0.2, 0.2), res_path=(0.7, 0.6, 0.58, 0.58), final_val=3.28),
        P,
        tmp_path,
    )
    d = {k: x for k, x in decisions(v).items() if k.startswith(("learned/", "converged"))}
    assert len(d) == 3 and all(x == "excluded" for x in d.values())
    assert verdicts(v)["learned"] == verdicts(v)["converged"] == "inconclusive"
    assert v.verdict == "supported"


# ---------------------------------------------------------------------------- the use half
def test_sinusoidal_relative_rule_absolute_use_refutes_both_counted_sub_claims(tmp_path):
    # learned positions more offset-like, and the sinusoidal model breaks beyond T while RoPE does not
    spec = with_spec(
        share={"sinusoidal": 0.2, "learned": 0.6},
        inc={"sinusoidal": (0.5, 0.9)},
        shift={"sinusoidal": 0.4},
    )
    v = analyse(EXP, records(spec=spec), P, tmp_path)
    d = decisions(v)
    assert d["share"] == "b_better"  # b = learned
    assert d["extra/increase2x"] == d["extra/increase4x"] == "a_better"  # above RoPE + 0.05: RoPE better
    assert verdicts(v)["share"] == verdicts(v)["extra"] == "refuted"
    assert v.verdict == "refuted"  # the identity's checks pass and do not count: its claimed use fails
    assert verdicts(v)["moved"] == "refuted"  # 0.4 nats: far outside ±0.02
    assert d["moved/T"] == d["moved/3T"] == "a_better"
    assert verdicts(v)["nope-sinusoidal"] == "refuted"


def test_sinusoidal_relative_rule_one_counted_sub_claim_undecided_makes_it_inconclusive(tmp_path):
    """The overall verdict combines the counted effects only: share undecided beside extra refuted is
    inconclusive (the old rule combined the identity's two checks in and said mixed)."""
    spec = with_spec(share={"sinusoidal": 0.3, "learned": 0.3}, inc={"sinusoidal": (0.5, 0.9)})
    v = analyse(EXP, records(spec=spec, noise=0.08), P, tmp_path)
    assert verdicts(v)["share"] == "inconclusive" and verdicts(v)["extra"] == "refuted"
    assert verdicts(v)["identity"] == "supported"
    assert v.verdict == "inconclusive"


def test_sinusoidal_relative_rule_extension_within_the_margin_but_not_below_it_is_inconclusive(tmp_path):
    # sinusoidal's increase sits at RoPE's + 0.05 (+0.06 at 2×, with these seeds' noise): neither shown inside
    # nor outside
    spec = with_spec(inc={"sinusoidal": (0.09, 0.11)})
    v = analyse(EXP, records(spec=spec, noise=0.03), P, tmp_path)
    assert decisions(v, "extra/") == {"extra/increase2x": "undecided", "extra/increase4x": "undecided"}
    assert verdicts(v)["extra"] == "inconclusive"


def test_sinusoidal_relative_rule_underpowered_null_is_inconclusive_never_refuted(tmp_path):
    # equal shares with large seed noise: no difference shown, and none refuted without a positive control
    spec = with_spec(share={"sinusoidal": 0.3, "learned": 0.3})
    v = analyse(EXP, records(spec=spec, noise=0.08), P, tmp_path)
    c = comparison(v, "share")
    assert c.decision in ("undecided", "equivalent") and c.mde is not None
    assert verdicts(v)["share"] == "inconclusive"
    assert v.verdict == "inconclusive"


def test_sinusoidal_relative_rule_an_effect_inside_the_noise_floor_is_not_supported(tmp_path):
    """Sinusoidal's share 0.05 above learned's in every seed (p tiny), but the sinusoidal arm rerun at seeds
    + 1000 moves its share by up to ±0.15: the effect is inside the noise floor, so share is undecided."""
    recs = records(spec=with_spec(share={"sinusoidal": 0.35, "learned": 0.3}), noise=0.002)
    wobble = {1000: 0.15, 1001: -0.12, 1002: 0.1, 1003: -0.15, 1004: 0.05}
    for r in recs:
        if r["config"]["part"] == "length_null":
            r["metrics"]["offset_share"] += wobble[r["config"]["seed"]]
    v = analyse(EXP, recs, P, tmp_path)
    c = comparison(v, "share")
    assert c.p < 0.05 and c.in_noise and c.decision == "undecided"
    assert verdicts(v)["share"] == "inconclusive" and v.verdict == "inconclusive"


def test_sinusoidal_relative_rule_one_failed_arm_leaves_its_comparisons_undecided(tmp_path):
    # RoPE never learns: its values are missing (runs that did not learn are left out), so the comparisons
    # with it have no paired seed; a comparison is excluded only when neither arm learned
    v = analyse(EXP, records(failed=("rope",)), P, tmp_path)
    for n in (2, 4):
        c = comparison(v, f"extra/increase{n}x")
        assert c.decision == "undecided" and c.n == 0 and c.learned_a == 0 and c.learned_b == len(P["seeds"])
    assert verdicts(v)["extra"] == "inconclusive"
    assert decisions(v)["share"] == "a_better"  # other arms still decide
    assert v.verdict == "inconclusive"


def test_sinusoidal_relative_rule_a_comparison_where_neither_arm_learned_is_excluded(tmp_path):
    v = analyse(EXP, records(failed=("rope", "sinusoidal")), P, tmp_path)
    assert decisions(v, "extra/") == {"extra/increase2x": "excluded", "extra/increase4x": "excluded"}
    assert decisions(v)["share"] == "undecided"  # learned learned, sinusoidal did not: no paired seed
    assert verdicts(v)["extra"] == "inconclusive" and "excluded" in sub(v, "extra").detail
    assert decisions(v, "moved/") == {"moved/T": "excluded", "moved/3T": "excluded"}


def test_sinusoidal_relative_rule_learned_beyond_T_is_not_applicable_and_nothing_crashes(tmp_path):
    v = analyse(EXP, records(), P, tmp_path, render=True)
    assert not [c for c in v.comparisons if "learned" in (c.arm_a, c.arm_b) and "increase" in c.metric]
    tab = (tmp_path / "length.csv").read_text().splitlines()
    learned_row = next(r for r in tab if r.startswith("learned,"))
    assert learned_row.count("n/a") == 2 + 2 + len(
        P["shift_mults"]
    )  # 2×, 4× losses, increases, moved windows
    assert "n/a" not in next(r for r in tab if r.startswith("sinusoidal,"))
    for name in ("length", "position_logits", "identity", "learned"):
        assert (tmp_path / "figures" / f"{name}.png").stat().st_size > 1000


def test_sinusoidal_relative_rule_missing_arm_leaves_its_comparisons_undecided(tmp_path):
    v = analyse(EXP, records(drop=("none",)), P, tmp_path)
    assert decisions(v)["nope-sinusoidal/increase2x"] == "undecided"
    assert "construction/none_moved" not in decisions(v)  # no NoPE run: that cell of the check is left out
    assert v.verdict == "supported"  # NoPE is reported beside the verdict, not part of it


def test_sinusoidal_relative_rule_anchor_equivalence_at_the_training_length(tmp_path):
    v = analyse(EXP, records(noise=0.002), P, tmp_path)
    assert decisions(v)["anchor"] == "equivalent"
    assert verdicts(v)["anchor"] == "supported"
    v = analyse(EXP, records(spec=with_spec(loss1={"sinusoidal": 2.6}), noise=0.002), P, tmp_path)
    assert decisions(v)["anchor"] == "a_better"  # 0.2 nats worse: shown outside ±0.02, learned better
    assert verdicts(v)["anchor"] == "refuted"


@pytest.mark.parametrize("spec", [{"share": {"rope": 0.9}}, {"shift": {"none": 0.01}}])
def test_sinusoidal_relative_rule_construction_checks_catch_a_broken_measure(tmp_path, spec):
    """RoPE's share is 1 and RoPE's and NoPE's losses ignore the window's start by construction: a failure
    points at the measurement, not at the models, so the claim stops."""
    with pytest.raises(CheckFailed, match="construction"):
        analyse(EXP, records(spec=with_spec(**spec)), P, tmp_path)


def test_sinusoidal_relative_rule_diverged_runs_give_no_nan(tmp_path):
    recs = records()
    for r in recs:
        if r["config"]["part"] in ("length", "length_null"):
            r["metrics"] = {**r["metrics"], "final_val": None, "diverged_at": 3}
            r["metrics"].pop("position_loss")
    v = analyse(EXP, recs, P, tmp_path)
    use = [c for c in v.comparisons if c.id.split("/")[0] in ("share", "extra", "anchor", "moved")]
    assert use and all(c.decision == "excluded" for c in use)
    assert v.verdict == "inconclusive"
    assert "nan" not in v.key_number.lower() and "nan" not in v.summary.lower()


# ---------------------------------------------------------------------------- the measures
def test_offset_share_closed_form():
    n = 48
    i = torch.arange(n)
    g = torch.randn(2 * n)
    toeplitz = g[i[:, None] - i[None, :] + n]  # exactly a function of i − j
    assert offset_share(toeplitz) == pytest.approx(1.0, abs=1e-12)
    assert offset_share(torch.stack([toeplitz, 3 * toeplitz + 1])) == pytest.approx(1.0, abs=1e-12)
    noise = torch.randn(8, n, n, generator=torch.Generator().manual_seed(0))
    assert 0 <= offset_share(noise) < 0.08  # about (n − 1) / (n(n + 1)/2 − 1) = 0.04
    absolute = (i[:, None] * 0 + torch.randn(n)[None, :]).float()  # a function of the key j alone
    assert offset_share(absolute) < 0.2
    mixed = toeplitz / toeplitz.std() + noise[0] / noise[0].std()  # half the variance relative
    assert 0.35 < offset_share(mixed) < 0.65
    assert offset_share(torch.ones(n, n)) is None and offset_share(torch.full((n, n), float("nan"))) is None


def _tiny(pos, max_len, seed=0):
    cfg = {"d_model": 16, "n_layers": 1, "n_heads": 2, "seq_len": 8}
    torch.manual_seed(seed)
    return LM(model_config(cfg, 20, pos=pos, max_seq_len=max_len, emb_scale=True)).eval()


@pytest.mark.parametrize("pos", ["sinusoidal", "rope", "none"])
def test_a_longer_max_seq_len_changes_no_parameter_and_no_output_of_the_fixed_arms(pos):
    a, b = _tiny(pos, 8), _tiny(pos, 32)
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    assert pa.keys() == pb.keys() and all(torch.equal(pa[k], pb[k]) for k in pa)
    x = torch.randint(1, 20, (3, 8))
    assert torch.equal(a(x), b(x))


@pytest.mark.parametrize("pos", ["learned", "sinusoidal", "rope", "none"])
def test_a_start_position_is_the_model_at_zero_and_relative_arms_ignore_it(pos):
    m = _tiny(pos, 8 if pos == "learned" else 32)
    x = torch.randint(1, 20, (3, 8))
    assert torch.equal(m(x, start=0), m(x))
    if pos in ("rope", "none"):  # attention sees offsets only: moving the window changes nothing
        assert torch.allclose(m(x, start=16), m(x), atol=1e-5)
    if pos == "sinusoidal":
        assert not torch.allclose(m(x, start=16), m(x), atol=1e-3)


def test_a_start_position_reads_the_learned_table_from_that_row():
    m = _tiny("learned", 24)
    shifted = copy.deepcopy(m)
    with torch.no_grad():
        shifted.stack.pos.weight[:8] = m.stack.pos.weight[16:24]
    x = torch.randint(1, 20, (3, 8))
    assert torch.equal(m(x, start=16), shifted(x))
    with pytest.raises(ValueError, match="exceeds max_seq_len"):
        m(x, start=17)


def test_a_start_position_agrees_with_decoding_from_a_cache():
    m = _tiny("rope", 32).eval()
    x = torch.randint(1, 20, (2, 12))
    cache = KVCache.for_model(m.cfg, 2, 12)
    m(x[:, :5], cache=cache)
    assert torch.allclose(m(x[:, 5:], cache=cache), m(x)[:, 5:], atol=1e-5)
    with pytest.raises(ValueError, match="contradicts"):
        m(x[:, :1], cache=cache, start=3)


def test_position_logits_rope_is_offset_only_and_nope_has_none():
    m = _tiny("rope", 32)
    L = position_logits(m, 8, torch.randn(16))
    assert L.shape == (2, 8, 8) and offset_share(L) == pytest.approx(1.0, abs=1e-9)
    assert position_logits(_tiny("none", 32), 8) is None
    L = position_logits(_tiny("learned", 8), 8)
    assert L.shape == (2, 8, 8) and offset_share(L) < 0.9


def test_position_losses_cover_each_arm_as_far_as_it_has_positions():
    x = torch.randint(1, 20, (2, 33))
    windows = [(x[:, :-1], x[:, 1:])]  # (B, 32): 4× the training length 8
    out = position_losses(_tiny("sinusoidal", 32), windows, "cpu", 8, (0, 8, 24))
    assert len(out["at_0"]) == 32 and len(out["at_8"]) == len(out["at_24"]) == 8
    out = position_losses(_tiny("learned", 8), windows, "cpu", 8)
    assert list(out) == ["at_0"] and len(out["at_0"]) == 8
