"""The declared rule of `flash_memory`, fed synthetic byte counts. The counts are deterministic (no seeds, no
learning): every sub-claim is an exact number against declared bounds, so there is no null pair and no
'both arms failed to learn' cell; the closest analogue, a grid with no size in the fit range, declares no
exponent cell and ends inconclusive rather than counted either way."""

import sys

import numpy as np
import pytest

from tfclaims.evidence.evaluate import CheckFailed
from tfclaims.harness.registry import load
from tfclaims.measure.attention_units import VARIANTS, hand_bytes

from rules import analyse, comparisons, decisions, record, sub, verdicts

CLAIM = "flash_memory"
COUNTED = ("keeps", "saved-exponent", "hand", "peak", "peak-live")


@pytest.fixture(scope="module")
def exp():
    return load(CLAIM)


def _inventory(name, h, n, dk):
    """What each path keeps, as the run records it (fused: q, k, v, the output and the log-sum-exp)."""
    qkv = [{"shape": [1, h, n, dk], "dtype": "float32", "bytes": 4 * h * n * dk}] * 3
    if name.startswith("fused"):
        lse = [{"shape": [1, h, n], "dtype": "float32", "bytes": 4 * h * n}]
        return qkv + [{"shape": [1, h, n, dk], "dtype": "float32", "bytes": 4 * h * n * dk}] + lse
    return qkv + [{"shape": [1, h, n, n], "dtype": "float32", "bytes": 4 * h * n * n}]


def linear_peak(name, n, h=2, dk=16):
    """Peak bytes of forward + backward: the explicit paths hold three n×n tensors, the fused O(n·d_k)."""
    return 4 * h * (3 * n * n + 4 * n * dk) if name.startswith("explicit") else 4 * h * 8 * n * dk


def records(
    exp,
    measured=None,
    n2=0,
    rows=1,
    peak=linear_peak,
    params=None,
    inventory_off=0,
    inventory=None,
    kernel=None,
    device="cpu",
):
    """One record per size of the grid (quick by default); measured(name, n) overrides the bytes a variant
    saves (default: its hand formula); n2 / rows = the fused paths' n×n / per-row storage counts;
    peak(name, n) = the peak-part bytes; inventory_off = what the inventory sum of `math` misses;
    inventory(name, h, n, d_k) = the storages listed at the inventory size; kernel = the fused kernel's
    autograd node recorded at every size (default: the CPU kernel, at the inventory size only); device = where
    the peaks were read."""
    recs = []
    for cfg in exp.grid(params or exp.profiles["quick"]):
        n, h, dk = cfg["n"], cfg["heads"], cfg["head_dim"]
        if cfg["part"] == "peak":
            names = ("explicit", "explicit_causal", "fused", "fused_causal")
            recs.append(
                record(cfg, {"peak_bytes": {k: peak(k, n) for k in names}, "device": device}, f"peak{n}")
            )
            continue
        variants = {}
        for name in VARIANTS:
            sdpa = name in ("fused", "fused_causal", "fused_mask", "module_sdpa")
            hand = hand_bytes(name, 1, h, n, dk, kernel=kernel if kernel and sdpa else "")
            got = measured(name, n) if measured else hand
            fused = name in ("fused", "fused_causal")
            listed = got - (inventory_off if name == "math" else 0)
            row = {
                "bytes": got,
                "inventory_bytes": listed,
                "hand": hand,
                "n2_storages": n2 if fused else 1,
                "row_storages": rows if fused else 0,
            }
            if cfg["inventory"]:
                row["inventory"] = (inventory or _inventory)(name, h, n, dk)
                row["kernel"] = "ScaledDotProductFlashAttentionForCpuBackward0" if fused else ""
            if kernel:
                row["kernel"] = kernel if sdpa else ""
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
    assert verdicts(v) == {
        "inventory": "supported",
        "keeps": "supported",
        "saved-exponent": "supported",
        "hand": "supported",
        "peak": "supported",
        "peak-live": "supported",
        "mask": "refuted",
        "ratio": "supported",
    }
    kinds = {s.id: (s.kind, s.counts) for s in v.sub_verdicts}
    assert kinds["inventory"] == ("check", False) and all(kinds[k] == ("effect", True) for k in COUNTED)
    assert kinds["mask"] == kinds["ratio"] == ("effect", False)
    c = comparisons(v)
    assert c["peak/explicit"].decision == c["peak/fused"].decision == "equivalent"
    assert v.evidence["peak_ratio_explicit_over_fused"][512] == pytest.approx(
        linear_peak("explicit", 512) / linear_peak("fused", 512)
    )
    assert c["saved-exponent/fused"].decision == c["saved-exponent/explicit"].decision == "equivalent"
    assert c["saved-exponent/fused"].mean_b == pytest.approx(1.0, abs=0.01)
    # the mask tensor brings n² back: above its declared bounds, reported beside the verdict
    assert c["mask"].decision == "b_better" and c["mask"].mean_b > 1.05
    assert all(x.decision == "equivalent" for x in v.comparisons if x.id != "mask")
    assert v.noise_floor == []  # deterministic counts


def test_flash_memory_rule_when_the_fused_kernel_keeps_the_matrix(exp, tmp_path):
    """The fused paths save what the explicit one does. Each sub-claim about the fused kernel fails in its
    fused cells while the other cells still hold: keeps, the exponents and the hand formulas are mixed, so
    the claim is mixed (combine; the old bespoke rule called it refuted)."""

    def keeps_matrix(name, n):
        return hand_bytes("explicit" if name.startswith("fused") else name, 1, 2, n, 16)

    v = analyse(exp, records(exp, keeps_matrix, n2=1), "quick", tmp_path)
    c = comparisons(v)
    assert c["keeps/fused-nxn"].decision == "b_better" and "outside" in c["keeps/fused-nxn"].note
    assert c["keeps/fused-row"].decision == "equivalent"
    assert c["saved-exponent/fused"].decision == "b_better"  # grows faster than claimed
    assert c["saved-exponent/explicit"].decision == "equivalent"
    assert [verdicts(v)[k] for k in COUNTED] == ["mixed", "mixed", "mixed", "supported", "supported"]
    assert v.verdict == "mixed"


def test_flash_memory_rule_refuted_when_the_opposite_holds_everywhere(exp, tmp_path):
    """The fused kernel keeps the n×n matrix and no per-row statistic (its bytes and peak grow as n²) while
    the explicit paths keep O(n·d_k), every count off its hand formula: every counted sub-claim is refuted."""

    def swapped(name, n):
        fused = name.startswith(("fused", "module_sdpa"))
        return hand_bytes("explicit", 1, 2, n, 16) if fused else 4 * 2 * 3 * n * 16 + 4

    def inventory(name, h, n, dk):
        return _inventory("explicit" if name.startswith("fused") else "fused", h, n, dk)

    def peak(name, n):
        return linear_peak("fused" if name.startswith("explicit") else "explicit", n)

    v = analyse(exp, records(exp, swapped, n2=1, rows=0, peak=peak, inventory=inventory), "quick", tmp_path)
    assert [verdicts(v)[k] for k in COUNTED] == ["refuted"] * 5
    d = decisions(v)
    assert d["keeps/fused-nxn"] == "b_better" and d["keeps/fused-row"] == d["keeps/fused-nxd"] == "a_better"
    assert d["saved-exponent/fused"] == "b_better" and d["saved-exponent/explicit"] == "a_better"
    assert v.verdict == "refuted"


def test_flash_memory_rule_mixed_when_only_the_explicit_exponent_misses(exp, tmp_path):
    def linear_explicit(name, n):
        return 4 * 2 * 3 * n * 16 if name == "explicit" else hand_bytes(name, 1, 2, n, 16)

    v = analyse(exp, records(exp, linear_explicit), "quick", tmp_path)
    assert verdicts(v)["saved-exponent"] == "mixed"  # fused within, explicit below its bounds
    assert comparisons(v)["saved-exponent/explicit"].decision == "a_better"
    assert verdicts(v)["hand"] == "mixed"  # the explicit count is off its formula, the others on it
    assert v.verdict == "mixed"  # combine (the old bespoke rule refuted: it needed both halves of (2))


def test_flash_memory_rule_mixed_when_only_a_hand_formula_is_off(exp, tmp_path):
    def off(name, n):
        return hand_bytes(name, 1, 2, n, 16) + (4 if name == "module_explicit" else 0)

    v = analyse(exp, records(exp, off), "quick", tmp_path)
    assert [verdicts(v)[k] for k in COUNTED] == ["supported", "supported", "mixed", "supported", "supported"]
    assert v.verdict == "mixed"
    failed = {x.id for x in v.comparisons if x.decision != "equivalent"}
    assert failed == {"hand/module_explicit", "mask"}


def test_flash_memory_rule_inconclusive_without_sizes_in_the_fit_range(exp, tmp_path):
    # the fit starts at 16·head size = 256: a grid below it declares no exponent cell, so none is counted
    p = {**exp.profiles["quick"], "ns": [16, 32, 64, 128]}
    v = analyse(exp, records(exp, params=p), p, tmp_path)
    assert not [c for c in v.comparisons if c.id.startswith(("saved-exponent", "mask"))]
    assert sub(v, "saved-exponent").comparisons == [] and verdicts(v)["saved-exponent"] == "inconclusive"
    assert verdicts(v)["keeps"] == verdicts(v)["hand"] == verdicts(v)["peak"] == "supported"
    assert v.verdict == "inconclusive"


def test_a_constant_working_set_bends_no_peak_exponent(exp, tmp_path):
    """A peak of a constant (the allocator's pool, the model) plus its growth: the exponent is the growth's,
    where a log-log fit of the peak itself reads below 1 for the fused paths (as the CPU's did, 0.74)."""
    from tfclaims.evidence.stats import loglog_fit

    view = sys.modules[type(exp).__module__.rsplit(".", 1)[0] + ".analysis"]
    n = np.array([1024, 2048, 4096])
    fused = (
        2_098_184 + 3080 * n
    )  # the CPU's fused peaks: 5,252,104 bytes at 1,024, then +3,153,920, +6,307,840
    assert loglog_fit(n, fused).slope < 0.95 and view.growth_exponent(n, fused) == pytest.approx(1.0)
    explicit = 2_100_000 + 24 * n**2 + 512 * n
    assert view.growth_exponent(n, explicit) == pytest.approx(2.0, abs=0.02)
    assert np.isnan(view.growth_exponent(n, [5, 5, 6]))  # a peak that does not grow: no exponent
    v = analyse(exp, records(exp, peak=lambda k, n: linear_peak(k, n) + 3_000_000), "quick", tmp_path)
    assert comparisons(v)["peak/fused"].decision == comparisons(v)["peak/explicit"].decision == "equivalent"


def test_flash_memory_rule_mixed_when_the_fused_peak_grows_as_n_squared(exp, tmp_path):
    # the saved bytes are linear, but forward + backward holds an n×n workspace at its peak
    def quadratic_peak(name, n):
        return linear_peak(name, n) + (4 * 2 * n * n if name.startswith("fused") else 0)

    v = analyse(exp, records(exp, peak=quadratic_peak), "quick", tmp_path)
    assert comparisons(v)["peak/fused"].decision == "b_better"
    # explicit within its bounds, both fused paths beyond: the peak sub-verdict is mixed, and so is the claim
    assert verdicts(v)["peak"] == "mixed" and v.verdict == "mixed"
    # and the live set does not explain it: 8 n×d tensors plus an n×n one is far more than 16 n×d at n ≥ 256
    assert decisions(v)["peak-live/fused"] != "equivalent" and verdicts(v)["peak-live"] == "mixed"


def test_flash_memory_rule_a_failing_inventory_check_stops_the_claim(exp, tmp_path):
    """saved_bytes and the inventory are two readings of the same hooks: if they disagree the measurement is
    broken, so the claim stops (CheckFailed) instead of issuing a verdict."""
    with pytest.raises(CheckFailed, match="inventory"):
        analyse(exp, records(exp, inventory_off=4), "quick", tmp_path)


def test_flash_memory_rule_reads_the_hand_formula_of_the_cuda_kernel_that_ran(exp, tmp_path):
    """CUDA's memory-efficient kernel (what float32 SDPA runs on a GPU) pads its log-sum-exp rows to a
    multiple of 32 and keeps two int64 of random-number state: bytes counted from those storages (written out
    here, not through `hand_bytes`) meet the hand formula and the explicit/fused ratio of the kernel that ran,
    also at n = 16 where the padding doubles the rows."""
    eff = "ScaledDotProductEfficientAttentionBackward0"

    def measured(name, n, h=2, dk=16):
        fused = 4 * h * 4 * n * dk + 4 * h * (-(-n // 32) * 32) + 16
        return {
            "fused": fused,
            "fused_causal": fused,
            "fused_mask": fused + 4 * n * n,
            "module_sdpa": fused + 4 * n * h * dk,
        }.get(name, hand_bytes(name, 1, h, n, dk))

    assert 16 in exp.profiles["quick"]["ns"]
    v = analyse(exp, records(exp, measured=measured, kernel=eff), exp.profiles["quick"], tmp_path)
    assert verdicts(v)["hand"] == verdicts(v)["ratio"] == "supported"
    cpu = records(exp, measured=lambda name, n: hand_bytes(name, 1, 2, n, 16), kernel=eff)  # the CPU kernel's
    v = analyse(exp, cpu, exp.profiles["quick"], tmp_path)
    assert (
        verdicts(v)["hand"] == "mixed" and verdicts(v)["ratio"] == "refuted"
    )  # the explicit paths still hold


def test_flash_memory_rule_counts_softmax_backwards_buffer_in_the_live_set_on_cuda(exp, tmp_path):
    """On CUDA softmax's backward kernel holds one n×n buffer beside P, dP and dS: an explicit peak of four
    n×n tensors is the live set there, and on the CPU (whose kernel needs none) it is a peak left unexplained;
    three n×n tensors read on CUDA fall below the live set."""

    def peak_of(k):
        return lambda name, n, h=2, dk=16: (
            4 * h * (k * n * n + 4 * n * dk) if name.startswith("explicit") else (linear_peak(name, n))
        )

    cuda = analyse(exp, records(exp, peak=peak_of(4), device="cuda:0"), "quick", tmp_path)
    assert verdicts(cuda)["peak-live"] == "supported"
    assert decisions(cuda)["peak-live/explicit"] == "equivalent"
    for recs in (records(exp, peak=peak_of(4), device="cpu"), records(exp, peak=peak_of(3), device="cuda")):
        v = analyse(exp, recs, "quick", tmp_path)
        assert decisions(v)["peak-live/explicit"] != "equivalent" and verdicts(v)["peak-live"] == "mixed"


@pytest.mark.parametrize("ns", [[1024, 3000, 4096], [2048, 1024, 512], [1024, 1024, 2048]])
def test_peak_sizes_that_do_not_double_are_refused(exp, ns):
    """The growth exponent reads the increments between sizes that double: any other grid is bad input."""
    from tfclaims.nn.config import ConfigError

    with pytest.raises(ConfigError, match="peak_ns: sizes that double"):
        exp.grid({**exp.profiles["default"], "peak_ns": ns})
    assert exp.grid({**exp.profiles["default"], "peak_ns": [512, 1024, 2048, 4096]})
