"""The variance of activations and gradients layer by layer through a deep MLP at init, measured (the closed
forms that predict it are `measure.mean_field`)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .mean_field import ACTIVATIONS, GAIN2


def activation(act: str):
    if act not in ACTIVATIONS:
        raise ValueError(f"unknown activation {act!r}; choose one of {ACTIVATIONS}")
    return {"identity": lambda x: x, "tanh": torch.tanh, "relu": F.relu, "gelu": F.gelu}[act]


def mlp_moments(width: int, depth: int, batch: int, init: str, act: str, seed: int, *, device="cpu") -> dict:
    """One draw of the MLP and its input: per layer l = 1..depth, q_l = mean of h_l² and r_l = mean of
    (∂L/∂h_l)² over the batch and units, for L = Σ h_depth · u with u ~ N(0, 1) (so r_depth ≈ 1).
    Weights N(0, g²/n) as `torch.nn.init.xavier_normal_` and `kaiming_normal_(nonlinearity='relu')` draw
    them."""
    if init not in GAIN2:
        raise ValueError(f"unknown init {init!r}; choose one of {tuple(GAIN2)}")
    phi = activation(act)
    g = torch.Generator(device="cpu").manual_seed(seed)
    std = math.sqrt(GAIN2[init] / width)
    ws = [(torch.randn(width, width, generator=g) * std).to(device) for _ in range(depth)]
    x = (
        torch.randn(batch, width, generator=g).to(device).requires_grad_()
    )  # so that every h_l is in the graph
    u = torch.randn(batch, width, generator=g).to(device)
    hs = []
    a = x
    for i, w in enumerate(ws):
        h = a @ w.T  # (batch, width)
        h.retain_grad()
        hs.append(h)
        a = phi(h) if i < depth - 1 else h
    (hs[-1] * u).sum().backward()
    return {
        "q": [h.detach().square().mean().item() for h in hs],
        "r": [h.grad.square().mean().item() for h in hs],
    }
