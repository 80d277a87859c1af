"""The declared rule of `int8_inference` on synthetic records: per trained model the held-out loss and
accuracy of each copy (steered: INT8 inside or outside the margin, or too noisy to tell; the 4-bit control
large or small), timing rounds with a shared load (rules.times), the INT8 copy's bytes and checks; a run that
did not learn or diverged is excluded, and a failing check stops the claim."""

import math

import pytest

from tfclaims.evidence.evaluate import CheckFailed
from tfclaims.harness.registry import load

from experiments.int8_inference.grid import AA, FP32, INT8, variants
from rules import analyse, comparison, record, sub, times, verdicts

EXP = load("int8_inference")
P = EXP.profiles["default"]
UNIGRAM = 3.3
JITTER = (0.0004, -0.0003, 0.0001, -0.0002, 0.0003)


def probe(seed, bits, *, int8=0.001, control=0.2, noise=0.0, acc_drop=0.0005):
    """Each copy's loss and accuracy: float32 at 2.0, INT8 `int8` above it, the b-bit copy at
    control·2^(4−b)."""
    j = JITTER[seed % len(JITTER)] + noise * (1 if seed % 2 else -1) * (1 + seed % 3)
    base = 2.0 + 0.01 * seed
    loss = {FP32: base, INT8: base + int8 + j, "int8-channel": base + int8 / 2 + j}
    loss |= {f"w{b}": base + control * 2.0 ** (4 - b) + j for b in bits}
    return {v: {"loss": loss[v], "acc": 0.45 - (loss[v] - base) * acc_drop / 0.001} for v in variants(bits)}


def records(
    *,
    int8=0.001,
    control=0.2,
    noise=0.0,
    speed=-0.5,
    learned=True,
    diverged=(),
    left=0,
    step=0.5,
    linear_ratio=3.9,
    aa=lambda d, b: 0.0,
    p=P,
):
    """speed: log time ratio INT8 / float32 in every timed cell; diverged: seeds whose runs diverged;
    control: the 4-bit copy's loss above float32 at 4 bits, or d_model -> that (per trained scale);
    aa(d, batch): what the A/A copy of float32 adds to its log time in that timed cell."""
    out, ctl = [], control if callable(control) else lambda d: control
    for i, c in enumerate(EXP.grid(p)):
        if c["part"] == "timing":
            rows = [
                {
                    "d_model": d,
                    "n_layers": L,
                    "batch": b,
                    "tokens": b * c["seq_len"],
                    "times": {
                        k: times(1e-3 * d / 64, r, k=j)
                        for j, (k, r) in enumerate({FP32: 0.0, INT8: speed, AA: aa(d, b)}.items())
                    },
                }
                for d, L, _ in c["sizes"]
                for b in c["batches"]
            ]
            out.append(record(c, {"rows": rows, "threads": 1, "quantization": {"engine": "x86"}}, f"t{i}"))
            continue
        s = c["seed"]
        if s in diverged:
            out.append(record(c, {"diverged_at": 7, "final_val": None, "unigram_xent": UNIGRAM}, f"q{i}"))
            continue
        m = {
            "final_val": 2.0 if learned else UNIGRAM - 0.05,
            "unigram_xent": UNIGRAM,
            "diverged_at": None,
            "probe": probe(s, c["bits"], int8=int8, control=ctl(c["d_model"]), noise=noise),
            "size": {
                "fp32": 4_000_000,
                "int8": 1_200_000,
                "linear_fp32": 3_900_000,
                "linear_int8": 3_900_000 / linear_ratio,
            },
            "coverage": {"quantised": 6 * c["n_layers"] + 1, "float_linear_left": left, "changed": 0},
            "step_error": {INT8: step, "int8-channel": 0.5},
            "quantization": {"engine": "x86"},
        }
        out.append(record(c, m, f"q{i}"))
    return out


def test_int8_inside_the_margin_with_a_detecting_control_and_a_faster_forward_supports_the_claim(tmp_path):
    v = analyse(EXP, records(), P, tmp_path)
    assert verdicts(v) == {
        "coverage": "supported",
        "rounding": "supported",
        "quality": "supported",
        "accuracy": "supported",
        "control": "supported",
        "per-channel": "supported",
        "speed": "supported",
        "speed-small": "supported",
        "speed-band": "supported",
        "size": "supported",
    }
    assert v.verdict == "supported" and not sub(v, "control").counts and sub(v, "coverage").kind == "check"
    assert "nan" not in v.key_number and "+0.00" in v.key_number


def test_int8_beyond_the_margin_refutes_quality(tmp_path):
    v = analyse(EXP, records(int8=0.08), P, tmp_path)
    assert verdicts(v)["quality"] == "refuted" and v.verdict == "mixed"


def test_noisy_seeds_leave_quality_undecided(tmp_path):
    v = analyse(EXP, records(int8=0.0, noise=0.03), P, tmp_path)
    assert verdicts(v)["quality"] == "inconclusive" and v.verdict == "inconclusive"


@pytest.mark.parametrize(
    "small_at, int8, quality",
    [
        ((128, 256), 0.001, "inconclusive"),  # inside the margin, but no cell could have seen otherwise
        ((256,), 0.001, "supported"),  # d256 not decidable (counted neither way), d128 shown inside
        ((128, 256), 0.08, "refuted"),  # shown outside: a difference needs no control to be seen
    ],
)
def test_quality_shown_inside_is_not_decidable_in_a_cell_whose_4bit_control_fails(
    tmp_path, small_at, int8, quality
):
    # the 4-bit copy only 0.004 nats above float32 (not shown above the margin) at the scales in small_at
    v = analyse(EXP, records(int8=int8, control=lambda d: 0.004 if d in small_at else 0.2), P, tmp_path)
    assert verdicts(v)["control"] == ("refuted" if len(small_at) == 2 else "mixed")
    roles = sub(v, "quality").roles
    for d in (128, 256):
        expect = "refute" if int8 > 0.02 else "not decidable" if d in small_at else "support"
        assert roles[f"quality/d{d}-L4"] == expect
    assert verdicts(v)["quality"] == quality
    if quality != "refuted":
        assert "not decidable here (the positive control failed" in sub(v, "quality").detail


def test_a_slower_int8_forward_refutes_speed(tmp_path):
    v = analyse(EXP, records(speed=0.3), P, tmp_path)
    assert verdicts(v)["speed"] == "refuted" and verdicts(v)["speed-band"] == "refuted"
    assert v.verdict == "mixed"


def test_a_significant_aa_pair_leaves_its_timed_cell_undecided(tmp_path):
    # INT8 faster in every round at every size (p tiny), but at d = 768, batch 8 float32's A/A copy runs 5%
    # slower in every round: that null pair is significant, so that cell is undecided whatever its p, while
    # batch 1 (its A/A copy quiet) still decides; supported in one cell beside an undecided one: inconclusive
    v = analyse(EXP, records(aa=lambda d, b: 0.05 if (d, b) == (768, 8) else 0.0), P, tmp_path)
    drifted, quiet = comparison(v, "speed/d768-L12-b8"), comparison(v, "speed/d768-L12-b1")
    assert drifted.p < 0.05 and drifted.null_significant and drifted.decision == "undecided"
    assert not quiet.null_significant and quiet.decision == "b_better"
    assert verdicts(v)["speed"] == "inconclusive"
    assert "the null pair in the cell is significant" in sub(v, "speed").detail
    assert verdicts(analyse(EXP, records(), P, tmp_path / "quiet"))["speed"] == "supported"


def test_a_speed_up_short_of_the_tutorials_is_reported_not_counted(tmp_path):
    v = analyse(EXP, records(speed=-math.log(1.2)), P, tmp_path)
    assert verdicts(v)["speed"] == "supported" and verdicts(v)["speed-band"] == "refuted"
    assert v.verdict == "supported"


def test_runs_that_did_not_learn_are_excluded(tmp_path):
    v = analyse(EXP, records(learned=False), P, tmp_path)
    for sid in ("quality", "accuracy", "control"):
        assert verdicts(v)[sid] == "inconclusive" and "excluded" in sub(v, sid).detail


def test_a_diverged_seed_drops_out_and_the_others_decide(tmp_path):
    v = analyse(EXP, records(diverged=(0,)), P, tmp_path)
    assert verdicts(v)["quality"] == "supported"
    c = next(c for c in v.comparisons if c.id.startswith("quality/"))
    assert c.n == len(P["seeds"]) - 1


def test_a_linear_size_ratio_far_from_four_is_reported_false(tmp_path):
    assert verdicts(analyse(EXP, records(linear_ratio=2.6), P, tmp_path))["size"] == "refuted"


@pytest.mark.parametrize("kw, name", [({"left": 1}, "coverage"), ({"step": 0.7}, "rounding")])
def test_a_failing_check_stops_the_claim(tmp_path, kw, name):
    with pytest.raises(CheckFailed, match=name):
        analyse(EXP, records(**kw), P, tmp_path)
