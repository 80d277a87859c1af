"""The declared rule of `masking`, fed synthetic records of its three parts. Every number is exact given its
seed: each sub-claim is a bound on every row, so there is no null pair; a cell without rows decides
nothing, and a reference that disagrees with SDPA stops the claim."""

import math

import pytest

from tfclaims.evidence.evaluate import CheckFailed
from tfclaims.harness.registry import load

from rules import analyse, record, sub, verdicts

CLAIM = "masking"
HOLDS = {
    "reference": "supported",
    "builders": "supported",
    "invariant": "supported",
    "needs-pad-mask": "supported",
    "swap": "supported",
    "swap-change": "supported",
    "pad-weight": "supported",
    "representable": "mixed",
    "causal-hides": "supported",
    "inf-leak": "supported",
    "full-uniform": "supported",
    "full-inf": "supported",
    "sdpa-zero": "supported",
}


@pytest.fixture(scope="module")
def exp():
    return load(CLAIM)


def padding_row(level, kind, path, variant, k):
    """What run_padding records in the world the claim describes: masked outputs move by rounding only;
    unmasked pads move them unless the causal mask hides them; −inf in a left-padded model is NaN."""
    if level == "model" and kind == "decoder_left" and path == "explicit" and variant == "pad":
        return {"drift": None, "nan": True}
    hidden = variant == "pad" or kind == "decoder"
    return {"drift": 1.5e-7 if hidden else 0.05 * math.log2(2 * k), "nan": False}


def convention_rows(kind):
    rows = []
    for path in ("fill_1e9", "fill_inf", "sdpa"):
        rows.append(
            {
                "path": path,
                "convention": "correct",
                "allowed_max": 1.0,
                "allowed_min": 1.0,
                "change_min": 0.0,
                "change_median": 1e-8,
                "ref_error": 1e-7,
                "full_rows": 0,
            }
        )
        full = {"fill_1e9": (False, False, 0.0), "fill_inf": (True, False, None), "sdpa": (False, True, 1.0)}[
            path
        ]
        rows.append(
            {
                "path": path,
                "convention": "swapped",
                "allowed_max": 0.0,
                "allowed_min": 0.0,
                "change_min": 0.4,
                "change_median": 1.3,
                "full_rows": 2,
                **dict(zip(("full_nan", "full_zero", "full_uniform_dev"), full)),
            }
        )
    return rows


def fill_row(dtype, fill, path, scale):
    """torch's behaviour: float16 cannot hold the notes' fills (masked_fill refuses them, a cast gives −inf);
    −inf rows are NaN in explicit softmax and zero in SDPA; masked_fill with a finite fill is uniform."""
    if fill == "bool":
        return {
            "fill": fill,
            "path": path,
            "scale": scale,
            "cast": None,
            "raises": False,
            "masked_max": 0.0,
            "kept_error": 1e-7,
            "full_nan": False,
            "full_zero": True,
            "full_uniform_dev": 1.0,
        }
    inf = fill == "-inf" or (dtype == "float16" and fill in ("-1e9", "-2^32+1"))
    cast = -math.inf if inf else {"-1e9": -1e9, "-2^32+1": -(2.0**32), "finfo.min": -3e38}[fill]
    if path == "masked_fill" and dtype == "float16" and fill in ("-1e9", "-2^32+1"):
        return {"fill": fill, "path": path, "scale": scale, "cast": cast, "raises": True}
    nan, zero = inf and path != "sdpa_additive", inf and path == "sdpa_additive"
    dev = None if nan else (1.0 if zero else (0.0 if path == "masked_fill" else 31.0 * (scale > 1)))
    return {
        "fill": fill,
        "path": path,
        "scale": scale,
        "cast": cast,
        "raises": False,
        "masked_max": 0.0,
        "kept_error": 1e-7,
        "full_nan": nan,
        "full_zero": zero,
        "full_uniform_dev": dev,
    }


def records(
    exp,
    profile="quick",
    *,
    padding=padding_row,
    conventions=convention_rows,
    fill=fill_row,
    mismatch=0,
    drop=(),
):
    """One record per config of the grid, each part's rows from the functions given; `drop`: parts omitted."""
    recs = []
    for i, cfg in enumerate(exp.grid(exp.profiles[profile])):
        if cfg["part"] in drop:
            continue
        if cfg["part"] == "padding":
            paths = (
                ("notes", "sdpa") if cfg["level"] == "attention" else ("sdpa", "explicit", "notes", "finfo")
            )
            rows = [
                {"path": p, "variant": v, "k": k, **padding(cfg["level"], cfg["kind"], p, v, k)}
                for p in paths
                for v in ("pad", "nopad")
                for k in cfg["pads"]
            ]
            metrics = {"rows": rows}
        elif cfg["part"] == "conventions":
            ex = [[1.0, 0.0], [0.5, 0.5]]
            metrics = {
                "rows": conventions(cfg["kind"]),
                "mismatch": mismatch,
                "example": {"correct": ex, "swapped": ex},
                "example_len": 1,
            }
        else:
            cases = [("bool", "sdpa_bool")] + [
                (f, p)
                for f in ("-1e9", "-2^32+1", "finfo.min", "-inf")
                for p in ("masked_fill", "additive", "sdpa_additive")
            ]
            metrics = {"rows": [fill(cfg["dtype"], f, p, s) for s in cfg["scales"] for f, p in cases]}
        recs.append(record(cfg, metrics, f"r{i}"))
    return recs


def test_torchs_behaviour_gives_every_sub_claim_but_float16_and_a_mixed_verdict(exp, tmp_path):
    v = analyse(exp, records(exp), "quick", tmp_path, render=True)
    assert verdicts(v) == HOLDS
    assert sub(v, "representable").holds == [
        "float32_-1e9_masked_fill",
        "float32_-2^32+1_masked_fill",
        "bfloat16_-1e9_masked_fill",
        "bfloat16_-2^32+1_masked_fill",
    ]
    assert v.verdict == "mixed"
    assert "refuses −1e9 in float16" in v.key_number and "nan" not in v.key_number


def test_a_dtype_that_held_the_notes_fills_would_support_the_claim(exp, tmp_path):
    def fill(dtype, f, path, scale):
        return fill_row("float32" if dtype == "float16" else dtype, f, path, scale)

    v = analyse(exp, records(exp, fill=fill), "quick", tmp_path)
    assert sub(v, "representable").verdict == "supported" and v.verdict == "supported"


def test_a_drift_beyond_rounding_in_one_cell_fails_invariance_there(exp, tmp_path):
    def padding(level, kind, path, variant, k):
        row = padding_row(level, kind, path, variant, k)
        return (
            {**row, "drift": 1e-5}
            if (level, kind, path, variant) == ("model", "encoder", "sdpa", "pad")
            else row
        )

    s = sub(analyse(exp, records(exp, padding=padding), "quick", tmp_path), "invariant")
    assert s.verdict == "mixed" and "model_encoder_sdpa_pad" not in s.holds and len(s.holds) == 11


def test_a_nan_at_a_real_token_fails_invariance(exp, tmp_path):
    def padding(level, kind, path, variant, k):
        bad = (level, kind, path, variant) == ("model", "decoder_left", "notes", "pad")
        return {"drift": None, "nan": True} if bad else padding_row(level, kind, path, variant, k)

    v = analyse(exp, records(exp, padding=padding), "quick", tmp_path)
    assert "model_decoder_left_notes_pad" not in sub(v, "invariant").holds
    assert sub(v, "inf-leak").verdict == "mixed"


def test_pads_that_move_nothing_without_the_mask_fail_the_control(exp, tmp_path):
    """A setup blind to pads: invariance alone would look fine, the control says the setup cannot see."""

    def padding(level, kind, path, variant, k):
        return {"drift": 1e-7, "nan": False}

    v = analyse(exp, records(exp, padding=padding), "quick", tmp_path)
    assert sub(v, "needs-pad-mask").verdict == "refuted" and sub(v, "invariant").verdict == "supported"
    assert sub(v, "inf-leak").verdict == "mixed"  # the explicit path's NaN did not show either


def test_a_swap_that_keeps_weight_on_allowed_keys_refutes_that_the_conventions_matter(exp, tmp_path):
    def conventions(kind):
        rows = convention_rows(kind)
        for r in rows:
            if r["convention"] == "swapped":
                r["allowed_max"], r["change_min"] = 0.5, 1e-4
        return rows

    v = analyse(exp, records(exp, conventions=conventions), "quick", tmp_path)
    assert sub(v, "swap").verdict == "refuted" and sub(v, "swap-change").verdict == "refuted"


def test_a_builder_that_disagrees_with_the_library_refutes_it(exp, tmp_path):
    v = analyse(exp, records(exp, mismatch=3), "quick", tmp_path)
    assert sub(v, "builders").verdict == "refuted" and v.verdict == "mixed"


def test_weight_left_on_a_masked_key_fails_pad_weight(exp, tmp_path):
    def fill(dtype, f, path, scale):
        row = fill_row(dtype, f, path, scale)
        return (
            {**row, "masked_max": 1e-3} if (dtype, f) == ("bfloat16", "-1e9") and "masked_max" in row else row
        )

    s = sub(analyse(exp, records(exp, fill=fill), "quick", tmp_path), "pad-weight")
    assert s.verdict == "mixed" and not any(c.startswith("bfloat16_-1e9") for c in s.holds)


def test_a_finite_fully_masked_row_that_is_not_uniform_fails_the_reported_sub_claim_only(exp, tmp_path):
    def fill(dtype, f, path, scale):
        row = fill_row(dtype, f, path, scale)
        return (
            {**row, "full_uniform_dev": 31.0}
            if path == "masked_fill" and row.get("full_uniform_dev") == 0
            else row
        )

    v = analyse(exp, records(exp, fill=fill), "quick", tmp_path)
    assert sub(v, "full-uniform").verdict == "refuted" and v.verdict == "mixed"
    assert sub(v, "full-uniform").counts is False


def test_a_part_that_did_not_run_decides_nothing(exp, tmp_path):
    v = analyse(exp, records(exp, drop=("padding",)), "quick", tmp_path)
    for sid in ("invariant", "needs-pad-mask", "causal-hides", "inf-leak"):
        assert sub(v, sid).verdict == "inconclusive", sid
    assert sub(v, "swap").verdict == "supported"


def test_a_reference_that_disagrees_with_sdpa_stops_the_claim(exp, tmp_path):
    def conventions(kind):
        rows = convention_rows(kind)
        rows[0]["ref_error"] = 1e-3
        return rows

    with pytest.raises(CheckFailed, match="reference"):
        analyse(exp, records(exp, conventions=conventions), "quick", tmp_path)


def test_the_default_profile_declares_every_cell_it_runs(exp, tmp_path):
    v = analyse(exp, records(exp, "default"), "default", tmp_path)
    assert verdicts(v) == HOLDS
