"""The verdict rule of `flash_memory`, fed synthetic byte counts. The counts are deterministic (no seeds, no
learning): there is no noise floor and no 'both arms failed to learn' cell; the closest analogue, a grid with no
size in the fit range, is shown to end inconclusive rather than counted."""

import pytest

from tfclaims.harness.registry import load
from tfclaims.measure.attention_cost import VARIANTS, hand_bytes

from rules import analyse, comparisons, record

CLAIM = "flash_memory"


@pytest.fixture(scope="module")
def exp():
    return load(CLAIM)


def _inventory(name, h, n, dk):
    """What each path keeps, as the run records it (the fused paths: q, k, v, the output and the log-sum-exp)."""
    qkv = [{"shape": [1, h, n, dk], "dtype": "float32", "bytes": 4 * h * n * dk}] * 3
    if name.startswith("fused"):
        lse = [{"shape": [1, h, n], "dtype": "float32", "bytes": 4 * h * n}]
        return qkv + [{"shape": [1, h, n, dk], "dtype": "float32", "bytes": 4 * h * n * dk}] + lse
    return qkv + [{"shape": [1, h, n, n], "dtype": "float32", "bytes": 4 * h * n * n}]


def linear_peak(name, n, h=2, dk=16):
    """Peak bytes of forward + backward: the explicit paths hold three n×n tensors, the fused ones O(n·d_k)."""
    return 4 * h * (3 * n * n + 4 * n * dk) if name.startswith("explicit") else 4 * h * 8 * n * dk


def records(exp, measured=None, n2=0, rows=1, only=lambda n: True, peak=linear_peak):
    """One record per quick-grid size; measured(name, n) overrides the bytes a variant saves (default: its hand
    formula); n2 / rows = the fused paths' n×n / per-row storage counts; peak(name, n) = the peak-part bytes."""
    recs = []
    for cfg in exp.grid(exp.profiles["quick"]):
        n, h, dk = cfg["n"], cfg["heads"], cfg["head_dim"]
        if cfg["part"] == "peak":
            names = ("explicit", "explicit_causal", "fused", "fused_causal")
            recs.append(
                record(cfg, {"peak_bytes": {k: peak(k, n) for k in names}, "device": "cpu"}, f"peak{n}")
            )
            continue
        if not only(n):
            continue
        variants = {}
        for name in VARIANTS:
            hand = hand_bytes(name, 1, h, n, dk)
            got = measured(name, n) if measured else hand
            fused = name in ("fused", "fused_causal")
            row = {"bytes": got, "inventory_bytes": got, "hand": hand, "n2_storages": n2 if fused else 1,
                   "row_storages": rows if fused else 0}  # fmt: skip
            if cfg["inventory"]:
                row["inventory"] = _inventory(name, h, n, dk)
                row["kernel"] = "ScaledDotProductFlashAttentionForCpuBackward0" if fused else ""
            variants[name] = row
        metrics = {
            "variants": variants,
            "max_grad_diff_fused_vs_explicit": 1e-6 if cfg["grad_check"] else None,
        }
        recs.append(record(cfg, metrics, str(n)))
    return recs


def test_flash_memory_rule_supported_when_counts_match_the_hand_formulas(exp, tmp_path):
    v = analyse(exp, records(exp), "quick", tmp_path)
    assert v.verdict == "supported"
    assert [s.verdict for s in v.sub_verdicts] == [
        "supported",
        "supported",
        "supported",
        "supported",
        "refuted",
    ]
    c = comparisons(v)
    assert c["peak:explicit"].decision == c["peak:fused"].decision == "equivalent"
    assert v.evidence["peak_ratio_explicit_over_fused"][512] == pytest.approx(
        linear_peak("explicit", 512) / linear_peak("fused", 512)
    )
    assert c["exp:fused"].decision == c["exp:explicit"].decision == "equivalent"
    assert c["exp:fused_mask"].decision == "a_better"  # the mask tensor brings n² back: judged apart
    assert all(x.decision == "equivalent" for x in v.comparisons if x.test == "exact")
    assert v.noise_floor == []  # deterministic counts


def test_flash_memory_rule_refuted_when_the_fused_kernel_keeps_the_matrix(exp, tmp_path):
    def keeps_matrix(name, n):
        return hand_bytes("explicit" if name.startswith("fused") else name, 1, 2, n, 16)

    v = analyse(exp, records(exp, keeps_matrix, n2=1), "quick", tmp_path)
    assert v.verdict == "refuted"
    c = comparisons(v)
    assert c["inv:fused-no-nxn"].decision == "undecided" and "failed" in c["inv:fused-no-nxn"].note
    assert c["exp:fused"].decision == "a_better"  # grows faster than claimed


def test_flash_memory_rule_refuted_when_only_the_explicit_exponent_misses(exp, tmp_path):
    def linear_explicit(name, n):
        return 4 * 2 * 3 * n * 16 if name == "explicit" else hand_bytes(name, 1, 2, n, 16)

    v = analyse(exp, records(exp, linear_explicit), "quick", tmp_path)
    assert v.sub_verdicts[1].verdict == "mixed"  # fused within, explicit beyond its margin
    assert comparisons(v)["exp:explicit"].decision == "b_better"
    assert v.verdict == "refuted"  # the claim needs both halves of (2)


def test_flash_memory_rule_mixed_when_only_a_hand_formula_is_off(exp, tmp_path):
    def off(name, n):
        return hand_bytes(name, 1, 2, n, 16) + (4 if name == "module_explicit" else 0)

    v = analyse(exp, records(exp, off), "quick", tmp_path)
    assert [s.verdict for s in v.sub_verdicts][:3] == ["supported", "supported", "refuted"]
    assert v.verdict == "mixed"
    assert {x.id for x in v.comparisons if x.decision != "equivalent" and x.test == "exact"} == {
        "bytes:module_explicit"
    }


def test_flash_memory_rule_inconclusive_without_sizes_in_the_fit_range(exp, tmp_path):
    v = analyse(
        exp, records(exp, only=lambda n: n < 16 * 16), "quick", tmp_path
    )  # the fit starts at 16·head size
    assert v.verdict == "inconclusive"
    assert not [c for c in v.comparisons if c.id.startswith("exp:")]
    assert v.sub_verdicts[1].verdict == "inconclusive"


def test_flash_memory_rule_refuted_when_the_fused_peak_grows_as_n_squared(exp, tmp_path):
    # the saved bytes are linear, but forward + backward holds an n×n workspace at its peak
    def quadratic_peak(name, n):
        return linear_peak(name, n) + (4 * 2 * n * n if name.startswith("fused") else 0)

    v = analyse(exp, records(exp, peak=quadratic_peak), "quick", tmp_path)
    assert comparisons(v)["peak:fused"].decision == "a_better"
    # explicit within its margin, both fused paths beyond: the peak sub-verdict is mixed, and so is the claim
    assert next(s for s in v.sub_verdicts if s.name.startswith("Peak memory")).verdict == "mixed"
    assert v.verdict == "mixed"
