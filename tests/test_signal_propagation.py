"""The init-variance probe and its closed forms: the weights are torch's Xavier and Kaiming draws, the
quadrature equals Monte Carlo, and a wide probe follows the closed form."""

import math

import numpy as np
import pytest
import torch

from experiments.init_variance.mean_field import ACTIVATIONS, GAIN2, backward_factor, forward_map
from experiments.init_variance.signal_propagation import activation, mlp_moments


@pytest.mark.parametrize("init", ["xavier", "kaiming"])
def test_the_weight_variance_is_torchs_init(init):
    """torch's xavier_normal_ (square) and kaiming_normal_(nonlinearity='relu') draw variance g²/n."""
    w = torch.empty(2048, 2048)
    if init == "xavier":
        torch.nn.init.xavier_normal_(w)
    else:
        torch.nn.init.kaiming_normal_(w, nonlinearity="relu")
    assert w.var().item() * 2048 == pytest.approx(GAIN2[init], rel=0.01)


@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("q", [0.01, 1.0, 4.0])
def test_the_closed_forms_equal_monte_carlo(act, q):
    z = torch.randn(4_000_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * math.sqrt(q)
    x = z.clone().requires_grad_()
    y = activation(act)(x)
    y.sum().backward()
    assert forward_map(act, 2.0, q) == pytest.approx(2.0 * y.detach().square().mean().item(), rel=5e-3)
    assert backward_factor(act, 1.0, q) == pytest.approx(x.grad.square().mean().item(), rel=5e-3)


def test_relu_halves_and_identity_keeps_exactly():
    assert forward_map("relu", 1.0, 3.0) == 1.5 and backward_factor("relu", 2.0, 3.0) == 1.0
    assert forward_map("identity", 1.0, 3.0) == 3.0 and backward_factor("identity", 2.0, 0.1) == 2.0


@pytest.mark.parametrize(
    "init,act,bits",
    [
        ("xavier", "identity", 0.0),
        ("xavier", "relu", -1.0),
        ("kaiming", "relu", 0.0),
        ("kaiming", "identity", 1.0),
    ],
)
def test_a_wide_probe_follows_the_closed_form(init, act, bits):
    m = mlp_moments(512, 12, 32, init, act, seed=3)
    q, r = np.array(m["q"]), np.array(m["r"])
    assert q[0] == pytest.approx(GAIN2[init], rel=0.1)  # h₁ = W₁x with x ~ N(0, 1)
    assert np.log2(q[1:] / q[:-1]).mean() == pytest.approx(bits, abs=0.05)
    assert np.log2(r[:-1] / r[1:]).mean() == pytest.approx(bits, abs=0.05)
    assert r[-1] == pytest.approx(1.0, rel=0.1)  # L = Σ h·u, u ~ N(0, 1)


def test_the_probe_is_deterministic_and_refuses_unknown_names():
    assert mlp_moments(32, 3, 4, "xavier", "gelu", 7) == mlp_moments(32, 3, 4, "xavier", "gelu", 7)
    with pytest.raises(ValueError, match="unknown init"):
        mlp_moments(32, 3, 4, "lecun", "relu", 0)
    with pytest.raises(ValueError, match="unknown activation"):
        mlp_moments(32, 3, 4, "xavier", "swish", 0)
