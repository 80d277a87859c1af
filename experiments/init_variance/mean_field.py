"""The closed forms for how the variance of activations and of gradients changes layer by layer through a deep
MLP at init (`measure.signal_propagation` measures it). Torch-free: analyses read them.

The MLP: h₁ = W₁x, h_{l+1} = W_{l+1} φ(h_l), square layers of width n without biases, x ~ N(0, 1). With
weights of variance g²/n (Xavier on square layers: g² = 1; Kaiming for ReLU: g² = 2), the mean-field
recursions (Poole et al. 2016; Schoenholz et al. 2017) give the pre-activation second moment q_l = E[h_l²] and
the gradient second moment r_l = E[(∂L/∂h_l)²]:
    q_{l+1} = g² · E[φ(√q_l · z)²],    r_l = g² · E[φ'(√q_l · z)²] · r_{l+1},    z ~ N(0, 1)
exact as n → ∞. Identity: E[φ²] = q, E[φ'²] = 1; ReLU: q/2 and 1/2 (so Xavier halves both per layer and
Kaiming's factor 2 restores them); tanh and GELU depend on q and are read by Gauss–Hermite quadrature.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import erf

GAIN2 = {"xavier": 1.0, "kaiming": 2.0}  # n·Var(W) for square layers (Kaiming: fan-in, ReLU gain √2)
ACTIVATIONS = ("identity", "tanh", "relu", "gelu")

_Z, _W = np.polynomial.hermite_e.hermegauss(121)  # nodes and weights for E[f(z)], z ~ N(0, 1)
_W = _W / _W.sum()


def _phi(act: str, x: np.ndarray) -> np.ndarray:
    if act == "tanh":
        return np.tanh(x)
    if act == "gelu":  # x·Φ(x), exact (erf) form, as torch's default
        return x * 0.5 * (1.0 + erf(x / math.sqrt(2.0)))
    raise ValueError(f"unknown activation {act!r}; choose one of {ACTIVATIONS}")


def _dphi(act: str, x: np.ndarray) -> np.ndarray:
    if act == "tanh":
        return 1.0 - np.tanh(x) ** 2
    if act == "gelu":
        cdf = 0.5 * (1.0 + erf(x / math.sqrt(2.0)))
        return cdf + x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    raise ValueError(f"unknown activation {act!r}; choose one of {ACTIVATIONS}")


# E[φ(√q·z)²] / q and E[φ'(√q·z)²] where they are constants (ReLU's kink defeats quadrature)
EXACT = {"identity": (1.0, 1.0), "relu": (0.5, 0.5)}


def forward_map(act: str, gain2: float, q: float) -> float:
    """q_{l+1} given q_l: g² · E[φ(√q · z)²]."""
    if act in EXACT:
        return gain2 * EXACT[act][0] * q
    return float(gain2 * (_W * _phi(act, math.sqrt(q) * _Z) ** 2).sum())


def backward_factor(act: str, gain2: float, q: float) -> float:
    """r_l / r_{l+1} at a layer whose pre-activations have second moment q: g² · E[φ'(√q · z)²]."""
    if act in EXACT:
        return gain2 * EXACT[act][1]
    return float(gain2 * (_W * _dphi(act, math.sqrt(q) * _Z) ** 2).sum())
