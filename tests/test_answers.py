"""The answers table, verdicts.json and the summary figure's orientation, on synthetic result.json data: each
verdict's phrase, the key number in plain units, the second scale and the sign convention (right = the note
holds) for every kind of claim."""

import math

import pytest

from tfclaims.report.answers import (
    answer,
    answer_row,
    design,
    headline_oriented,
    oriented,
    plain_number,
    role,
    second_scale,
    short_answer,
    verdicts_document,
)


def cmp(id, diff, cl=None, ch=None, decision="undecided", **kw):
    return {
        "id": id,
        "sub_claim": id.split("/")[0],
        "metric": kw.pop("metric", "final validation loss"),
        "arm_a": kw.pop("arm_a", "untied, at its best rate"),
        "arm_b": kw.pop("arm_b", "tied, at its best rate"),
        "better": kw.pop("better", "lower"),
        "diff": diff,
        "ci_low": cl,
        "ci_high": ch,
        "decision": decision,
        "p": kw.pop("p", 0.01),
        **kw,
    }


def sub(id, verdict, comparisons, claimed="b_better", counts=True, name=None):
    return {
        "id": id,
        "name": name or f"Statement of {id} (its conditions)",
        "verdict": verdict,
        "kind": "effect",
        "counts": counts,
        "comparisons": comparisons,
        "claimed": claimed,
    }


def result(verdict, subs, cmps, **kw):
    return {
        "claim_id": "toy",
        "title": "A toy claim",
        "verdict": verdict,
        "notes_say": "the notes' words",
        "anchor_number": "7% (Someone 2019)",
        "sub_verdicts": subs,
        "comparisons": cmps,
        "params": {"scales": [[64, 2], [128, 2]], "steps": 100},
        **kw,
    }


def test_each_verdict_has_its_phrase_naming_the_parts():
    a, b, c = sub("a", "supported", []), sub("b", "refuted", []), sub("c", "inconclusive", [])
    assert answer(result("supported", [a], [])) == "True"
    assert answer(result("supported", [a, sub("x", "supported", [])], [])) == "True: all 2 counted parts hold"
    assert answer(result("refuted", [b], [])) == "False: Statement of b"
    mixed = answer(result("mixed", [a, b, c, sub("r", "refuted", [], counts=False)], []))
    # what holds, fails and is undecided, each by its statement without the parenthesised conditions; a
    # reported (not counted) sub-claim is not named
    assert mixed == (
        "Partly. Holds: Statement of a. Fails: Statement of b. Undecided: Statement of c. Not counted, but "
        "false: Statement of r."
    )
    # a supported claim says which of its reported parts are false (a law the notes state, say)
    law = sub(
        "law", "refuted", [], counts=False, name="Reported: the identity share halves per layer (x/2^L)"
    )
    assert answer(result("supported", [a, law], [])) == (
        "True. Not counted, but false: the identity share halves per layer."
    )


def test_cannot_tell_says_what_this_run_could_detect_and_what_would_decide():
    c = cmp("c/d64-L2", 0.1, -0.15, 0.35, mde=0.4, noise=0.05)  # a null pair's bound no longer decides
    r = result("inconclusive", [sub("c", "inconclusive", ["c/d64-L2"])], [c])
    # (0.4 / 0.1)^2 = 16 times the samples at the same spread
    assert answer(r) == (
        "Cannot tell at this scale. Undecided: Statement of c; detectable here ≥ 0.4 against an effect of "
        "0.1: ≈16× the samples"
    )
    # the null pair in its cell is significant: more samples do not help, a quieter setup does
    drift = cmp("c/d64", -0.05, -0.2, 0.1, mde=0.3, null_p=0.003, metric="log time per call")
    r = result("inconclusive", [sub("c", "inconclusive", ["c/d64"])], [drift])
    assert answer(r).endswith(
        "the null pair in its cell is significant (p = 0.003): the variance there is underestimated, so a "
        "quieter setup or more samples would decide it"
    )
    # under 80% power at its SESOI: the seeds per arm that would reach it
    weak = cmp("c/d64", -0.05, -0.2, 0.1, mde=0.3, sesoi=0.1, power=0.35, seeds_80=19)
    r = result("inconclusive", [sub("c", "inconclusive", ["c/d64"])], [weak])
    assert answer(r).endswith("power at its SESOI (±0.1) is 35%: about 19 seeds per arm would reach 80%")
    # an interval straddling the claimed bound: (half-width / distance to the bound)^2
    edge = cmp("c/n", -0.03, -0.21, 0.15, lo=-0.1, hi=0.1, mde=0.3)
    r = result("inconclusive", [sub("c", "inconclusive", ["c/n"], claimed="inside")], [edge])
    assert answer(r).endswith(
        "its interval (±0.18) reaches the claimed bound (0.07 away): ≈7× the samples would place it"
    )


def test_plain_numbers_give_time_ratios_and_differences_with_arms_said_once():
    t = [
        cmp(
            f"s/d{d}",
            math.log(0.5),
            math.log(0.4),
            math.log(0.6),
            metric="log time per call",
            arm_a="LayerNorm",
            arm_b="RMSNorm",
        )
        for d in (64, 128)
    ]
    assert plain_number(t) == "RMSNorm / LayerNorm time: 0.50× [0.40, 0.60] (d64); 0.50× [0.40, 0.60] (d128)"
    d = [cmp("q/d64-L2/final_val", 0.012, -0.01, 0.034, lo=-0.02, hi=0.02)]
    assert plain_number(d) == (
        "tied − untied (each at its best rate): +0.012 [-0.01, +0.034] (d64-L2) (final validation loss; "
        "claimed in [-0.02, +0.02])"
    )
    many = [cmp(f"s/n{n}", 0.1 * n, metric="m", arm_a="a", arm_b="b") for n in range(1, 6)]
    assert plain_number(many) == "b − a: 5 cells, first and last: +0.1 (n1); +0.5 (n5) (m)"
    exact = [
        cmp(
            "e/x",
            -1e-4,
            test="exact",
            mean_b=0.6666,
            lo=0.65,
            hi=0.69,
            arm_a="declared bounds",
            arm_b="observed",
            metric="share",
        )
    ]
    assert plain_number(exact) == "observed: 0.6666 in [+0.65, +0.69] (x) (share)"


def test_role_reads_decisions_against_what_was_claimed():
    assert role({"decision": "b_better"}, "b_better") == "support"
    assert role({"decision": "a_better"}, "b_better") == "refute"
    assert role({"decision": "equivalent"}, "b_better") == "undecided"  # no positive control here
    assert role({"decision": "equivalent"}, "inside") == "support"
    assert role({"decision": "b_better"}, "inside") == "refute"
    assert role({"decision": "excluded"}, "a_better") == "excluded"


@pytest.mark.parametrize(
    "better,claimed,diff,expect",
    [
        ("lower", "b_better", -0.2, 2.0),
        ("lower", "a_better", -0.2, -2.0),
        ("higher", "b_better", -0.2, -2.0),
        ("higher", "a_better", 0.3, -3.0),
    ],
)
def test_orientation_puts_the_claimed_arms_advantage_on_the_right_in_sesois(better, claimed, diff, expect):
    o = oriented(cmp("x", diff, diff - 0.05, diff + 0.05, better=better, sesoi=0.1, noise=0.5), claimed)
    assert o.x == pytest.approx(expect) and o.band == 1.0 and o.unit == "SESOIs"
    assert o.lo < o.x < o.hi and o.hi - o.lo == pytest.approx(1.0)


def test_orientation_of_an_interval_claim_is_the_distance_inside_it():
    # claimed inside ±0.02: at 0 the centre (1), at the edge 0, outside negative; the CI's worst end is lo
    centre = oriented(cmp("q", 0.0, -0.01, 0.01, lo=-0.02, hi=0.02), "inside")
    assert (centre.x, centre.lo, centre.hi, centre.band) == (
        pytest.approx(1.0),
        pytest.approx(0.5),
        1.0,
        None,
    )
    outside = oriented(cmp("q", 0.03, 0.025, 0.035, lo=-0.02, hi=0.02), "inside")
    assert outside.x == pytest.approx(-0.5) and outside.hi < 0
    # one-sided: at most 0.05; 0.02 lies 0.03 inside, in CI half-widths (0.01)
    one = oriented(cmp("k", 0.02, 0.01, 0.03, lo=None, hi=0.05), "inside")
    assert one.x == pytest.approx(3.0) and one.unit.startswith("CI half-widths")
    # an exact number: where the observed value lies in its bounds, not its difference from their centre
    exact = oriented(cmp("e", -1e-4, test="exact", mean_b=0.6666, lo=0.6467, hi=0.6867), "inside")
    assert exact.x == pytest.approx((0.6666 - 0.6467) / 0.02) and exact.lo is None


def test_second_scale_reads_the_headline_per_scale_else_the_first_counted_effect_tested_per_scale():
    cmps = [cmp("q/d64-L2", 0.0, -0.01, 0.01, decision="equivalent", lo=-0.02, hi=0.02),
            cmp("q/d128-L2", 0.03, 0.025, 0.035, decision="b_better", lo=-0.02, hi=0.02),
            cmp("t/d64", -0.1, -0.2, 0.0, decision="undecided")]  # fmt: skip
    subs = [
        sub("t", "inconclusive", ["t/d64"]),
        sub("q", "mixed", ["q/d64-L2", "q/d128-L2"], claimed="inside"),
    ]
    r = result("mixed", subs, cmps, headline="q")
    assert second_scale(r) == "fails at d128-L2 (holds at d64-L2)"
    # headline not per scale: the first counted one that is, named
    assert second_scale({**r, "headline": "t"}) == "Statement of q: fails at d128-L2 (holds at d64-L2)"
    assert second_scale({**r, "params": {}}) == "—"
    # the evaluation's reading wins where result.json records it (an equivalence refutes beside a positive
    # control, which a comparison alone cannot tell)
    subs_roles = [subs[0], {**subs[1], "roles": {"q/d64-L2": "refute", "q/d128-L2": "refute"}}]
    assert (
        second_scale(result("mixed", subs_roles, cmps, headline="q")) == "fails at d128-L2 (fails at d64-L2)"
    )
    # a sub-claim whose cells are widths of something else (d64, d128 norms) does not pass for the scales
    widths = [
        cmp("w/d64", -0.1, -0.2, -0.05, decision="b_better"),
        cmp("w/d128", -0.1, -0.2, -0.05, decision="b_better"),
    ]
    r = result("mixed", [sub("w", "supported", ["w/d64", "w/d128"]), *subs], cmps + widths, headline="t")
    assert second_scale(r) == "Statement of q: fails at d128-L2 (holds at d64-L2)"


def test_answer_row_and_verdicts_json_carry_the_headline_and_its_orientation():
    cmps = [
        cmp("a/d64-L2", -0.2, -0.3, -0.1, decision="b_better", sesoi=0.05, p=0.001),
        cmp("a/d128-L2", -0.1, -0.3, 0.1, decision="undecided", sesoi=0.05, p=0.3),
    ]
    r = result("supported", [sub("a", "supported", [c["id"] for c in cmps])], cmps, regime="Partly: tiny.")
    row = answer_row(r)
    assert (
        row["answer"] == "True" and row["anchor"] == "7% (Someone 2019)" and row["regime"] == "Partly: tiny."
    )
    assert row["second_scale"] == "undecided at d128-L2 (holds at d64-L2)"
    assert row["number"].startswith("tied − untied (each at its best rate): -0.2 [-0.3, -0.1] (d64-L2)")
    c, o = headline_oriented(r)
    assert c["id"] == "a/d64-L2" and o.x == pytest.approx(4.0)  # the smallest p; 0.2 / 0.05 on the right
    doc = verdicts_document([r])
    assert (
        doc["schema"] == "tfclaims.verdicts/1"
        and doc["claims"][0]["headline_comparison"]["oriented"]["x"] == 4.0
    )
    assert [s["id"] for s in doc["claims"][0]["subs"]] == ["a"]


def test_cannot_tell_still_names_the_parts_that_failed():
    # an inconclusive claim whose headline failed: the failure is said, the undecided part and its tail follow
    cmps = [cmp("h/d64", 0.3, 0.2, 0.4, decision="a_better"), cmp("u/d64", 0.1, -0.15, 0.35, mde=0.4)]
    subs = [sub("h", "refuted", ["h/d64"]), sub("u", "inconclusive", ["u/d64"])]
    text = answer(result("inconclusive", subs, cmps, headline="h"))
    assert text.startswith(
        "Cannot tell at this scale. Fails: Statement of h. Undecided: Statement of u; detectable"
    )
    assert (
        short_answer(result("inconclusive", subs, cmps))
        == "Cannot tell at this scale (of 2 counted parts: 1 fail)"
    )


def test_edge_cases_open_upper_end_exact_value_missing_metric_and_equivalence_roles():
    up = [cmp("s/d64", 0.7, 0.6, 0.8, lo=0.5, hi=None, metric="m", arm_a="a", arm_b="b")]
    assert plain_number(up).endswith("(m; claimed in [+0.5, +∞])")
    # a value claimed exactly (lo == hi): on it is inside, off it is measured in CI half-widths, no crash
    on = oriented(cmp("e", 0.0, test="exact", mean_b=2.0, lo=2.0, hi=2.0), "inside")
    off = oriented(cmp("e", 0.5, 0.4, 0.6, lo=2.0, hi=2.0), "inside")
    assert on.x == 1.0 and off.x < 0
    assert plain_number([cmp("s", 0.1, metric=None, arm_a="a", arm_b="b")]) == "b − a: +0.1 ()"
    assert (
        role({"decision": "a_better"}, "equivalent")
        == role({"decision": "b_better"}, "equivalent")
        == "refute"
    )
    assert oriented(cmp("q", 0.1, 0.0, 0.2), "inside") is None  # an interval claim without its bounds


def test_headline_figure_shows_the_comparison_that_carries_the_sub_verdict():
    # refuted at d64 (equivalent with 80% power at its SESOI: the evaluation's reading) though d128 has the
    # smaller p: the figure shows d64, on the side the verdict says
    cmps = [
        cmp("a/d64-L2", 0.001, -0.01, 0.012, decision="equivalent", sesoi=0.02, p=0.7),
        cmp("a/d128-L2", 0.01, -0.005, 0.025, decision="undecided", sesoi=0.02, p=0.2),
    ]
    s = {
        **sub("a", "refuted", [c["id"] for c in cmps]),
        "roles": {"a/d64-L2": "refute", "a/d128-L2": "undecided"},
    }
    c, _ = headline_oriented(result("refuted", [s], cmps))
    assert c["id"] == "a/d64-L2"


def test_a_parts_design_names_its_sesoi_power_range_and_the_cells_that_cannot_decide():
    cmps = [
        cmp("a/d64", 0.1, 0.0, 0.2, power=0.061, test="paired t"),
        cmp("a/d128", 0.1, 0.05, 0.15, power=0.43, test="paired t"),
        cmp("e/x", 0.0, test="exact", power=1.0),
        cmp("i/x", 0.5, test="paired t", power=0.2, lo=0.0, hi=None),
    ]
    result = {"comparisons": cmps}
    roles = {"a/d64": "undecided", "a/d128": "not decidable"}
    a = {**sub("a", "inconclusive", ["a/d64", "a/d128"]), "roles": roles, "sesoi": 0.02, "unit": "nats/char"}
    assert design(result, a) == "±0.02 nats/char, power 6%–43%; not decidable in 1 of 2"
    e = {**sub("e", "supported", ["e/x"], claimed="inside"), "roles": {"e/x": "support"}, "sesoi": None}
    assert design(result, e) == "exact (no sampling error)"
    i = {**sub("i", "supported", ["i/x"], claimed="inside"), "roles": {"i/x": "support"}, "sesoi": 0.1}
    assert design(result, i) == "0.1 from the bounds, power 20%"
    assert design(result, {**a, "sesoi": None}) == ""  # no SESOI recorded (an older result): nothing said
