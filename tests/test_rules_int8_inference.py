"""The declared rule of `int8_inference` on synthetic records: per trained model the held-out loss and
accuracy of each copy (steered: INT8 inside or outside the margin, or too noisy to tell; the 4-bit control
large or small), timing rounds with a shared load (rules.times), the INT8 copy's bytes and checks; a run that
did not learn or diverged is excluded, and a failing check stops the claim."""

import math

import pytest

from tfclaims.evidence.evaluate import CheckFailed
from tfclaims.harness.registry import load

from experiments.int8_inference.grid import AA, FP32, INT8, variants
from rules import analyse, record, sub, times, verdicts

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
    p=P,
):
    """speed: log time ratio INT8 / float32 in every timed cell; diverged: seeds whose runs diverged."""
    out = []
    for i, c in enumerate(EXP.grid(p)):
        if c["part"] == "timing":
            ratios = {FP32: 0.0, INT8: speed, AA: 0.0}
            rows = [
                {
                    "d_model": d,
                    "n_layers": L,
                    "batch": b,
                    "tokens": b * c["seq_len"],
                    "times": {k: times(1e-3 * d / 64, r, k=j) for j, (k, r) in enumerate(ratios.items())},
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
            "probe": probe(s, c["bits"], int8=int8, control=control, noise=noise),
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


def test_a_control_below_the_margin_is_reported_as_failed_and_quality_still_decided(tmp_path):
    v = analyse(EXP, records(control=0.004), P, tmp_path)
    assert verdicts(v)["control"] == "refuted" and verdicts(v)["quality"] == "supported"


def test_a_slower_int8_forward_refutes_speed(tmp_path):
    v = analyse(EXP, records(speed=0.3), P, tmp_path)
    assert verdicts(v)["speed"] == "refuted" and verdicts(v)["speed-band"] == "refuted"
    assert v.verdict == "mixed"


def test_a_speed_up_inside_the_aa_noise_floor_is_undecided(tmp_path):
    v = analyse(EXP, records(speed=-0.004), P, tmp_path)
    assert verdicts(v)["speed"] == "inconclusive" and "noise floor" in sub(v, "speed").detail


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
