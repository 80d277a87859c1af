"""The declared rule of `init_variance`, fed synthetic per-layer second moments: geometric sequences with a
known per-layer factor and seed-to-seed jitter, so each sub-claim's interval test can be steered either
way."""

import numpy as np
import pytest

from tfclaims.harness.registry import load

from experiments.init_variance.mean_field import GAIN2, backward_factor, forward_map
from rules import analyse, record, sub, verdicts

CLAIM = "init_variance"


@pytest.fixture(scope="module")
def exp():
    return load(CLAIM)


def moments(init, act, depth, seed, bits=None, jitter=0.004):
    """q_l from the mean-field map (or a constant factor 2^bits), r_l back from 1 with the closed-form
    factors; each seed's per-layer log2 factors shifted by a small seed-dependent amount."""
    g2 = GAIN2[init]
    shift = jitter * ((seed % 3) - 1)
    q = [g2]
    for _ in range(depth - 1):
        nxt = q[-1] * 2.0**bits if bits is not None else forward_map(act, g2, q[-1])
        q.append(nxt * 2.0**shift)
    r = [1.0]
    for x in reversed(q[:-1]):
        r.append(r[-1] * (2.0**bits if bits is not None else backward_factor(act, g2, x)) * 2.0**shift)
    return {"q": q, "r": r[::-1]}


def records(exp, params="default", bits=None):
    """bits(init, act) -> a constant per-layer factor for that combination (None: the closed form)."""
    p = exp.profiles[params]
    out = []
    for i, cfg in enumerate(exp.grid(p)):
        b = bits(cfg["init"], cfg["act"]) if bits else None
        out.append(record(cfg, moments(cfg["init"], cfg["act"], cfg["depth"], cfg["seed"], b), f"r{i}"))
    return out


def test_the_closed_form_supports_every_part(exp, tmp_path):
    v = analyse(exp, records(exp), "default", tmp_path)
    assert verdicts(v) == {
        "xavier-keeps": "supported",
        "relu-halves": "supported",
        "kaiming-restores": "supported",
        "control": "supported",
        "closed-form": "supported",
    }
    assert v.verdict == "supported"


def test_a_relu_factor_of_three_quarters_refutes_halving(exp, tmp_path):
    bits = lambda i, a: np.log2(0.75) if (i, a) == ("xavier", "relu") else None  # noqa: E731
    v = analyse(exp, records(exp, bits=bits), "default", tmp_path)
    assert sub(v, "relu-halves").verdict == "refuted"
    assert sub(v, "xavier-keeps").verdict == "supported"
    assert v.verdict == "mixed"


def test_a_slow_drift_beyond_the_margin_refutes_keeping(exp, tmp_path):
    bits = lambda i, a: -0.05 if (i, a) == ("xavier", "identity") else None  # noqa: E731
    assert (
        sub(analyse(exp, records(exp, bits=bits), "default", tmp_path), "xavier-keeps").verdict == "refuted"
    )


def test_a_drift_inside_the_margin_still_keeps(exp, tmp_path):
    bits = lambda i, a: 0.01 if (i, a) == ("xavier", "identity") else None  # noqa: E731
    assert (
        sub(analyse(exp, records(exp, bits=bits), "default", tmp_path), "xavier-keeps").verdict == "supported"
    )


def test_two_seeds_cannot_show_equivalence(exp, tmp_path):
    """The quick profile's two seeds: the interval is too wide to lie inside ±0.02 bit, so undecided."""
    assert (
        sub(analyse(exp, records(exp, "quick"), "quick", tmp_path), "xavier-keeps").verdict == "inconclusive"
    )


def test_the_closed_form_is_reported_not_counted(exp, tmp_path):
    """A tanh that misses the closed form by 0.1 bit per layer fails only the reported sub-claim."""

    def bits(i, a):
        return np.log2(forward_map("tanh", GAIN2[i], 1.0)) + 0.1 if a == "tanh" else None

    v = analyse(exp, records(exp, bits=bits), "default", tmp_path)
    assert sub(v, "closed-form").verdict in ("refuted", "mixed") and v.verdict == "supported"
