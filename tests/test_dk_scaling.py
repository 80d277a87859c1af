"""dk_scaling's recipes beyond the rule: qk-layernorm against a per-head torch LayerNorm, the sweep's grid,
and the second width's size."""

import numpy as np
import pytest
import torch
from torch import nn

from tfclaims.harness.experiment import RunContext
from tfclaims.harness.registry import load
from tfclaims.nn.models import LM
from tfclaims.train.profiles import model_config

from experiments.dk_scaling import grid as G
from experiments.dk_scaling.grid import dk_overrides
from experiments.dk_scaling.recipes import QKNorm, add_qk_norm, dk_train_qknorm, init_qk

EXP = load("dk_scaling")


def test_qk_norm_is_a_layernorm_over_each_head_of_the_projection():
    torch.manual_seed(0)
    lin = nn.Linear(16, 3 * 8)
    qk = QKNorm(lin, heads=3, dk=8)
    x = torch.randn(2, 5, 16)
    ref = nn.functional.layer_norm(lin(x).view(2, 5, 3, 8), (8,)).view(2, 5, 24)
    assert torch.allclose(qk(x), ref, atol=1e-6) and qk.weight is lin.weight
    heads = qk(x).view(2, 5, 3, 8)
    assert torch.allclose(heads.mean(-1), torch.zeros(2, 5, 3), atol=1e-5)


def test_qk_norm_keeps_unscaled_logits_at_sqrt_dk_and_trains_through_the_recipe():
    p = EXP.profiles["quick"]
    cfg = {**G._train_cfg(p, 8, False), "seed": 0}
    model = LM(model_config(cfg, 85, **dk_overrides(cfg)))
    init_qk(model, 1.0)
    add_qk_norm(model)
    seen = {}

    def hook(logits, probs, mask):
        finite = logits.detach()[torch.isfinite(logits.detach())]
        seen["v"] = float(finite.var())

    model.blocks[0].attn.score_hook = hook
    model(torch.randint(0, 85, (4, p["seq_len"])))
    assert seen["v"] == pytest.approx(8, rel=0.5)  # unit-variance q, k components: Var(q·k) ≈ d_k
    m = dk_train_qknorm({**cfg, "part": "qknorm"}, RunContext(torch.device("cpu"), progress=False))
    assert np.isfinite(m["final_val"]) and len(m["probes"]) == len(m["eval_steps"])


def test_the_sweep_spans_a_decade_and_a_half_and_the_second_width_has_four_times_the_parameters():
    p = EXP.profiles["default"]
    grid = EXP.grid(p)
    sweep = [c for c in grid if c["seed"] in p["selection_seeds"] and c.get("dk") == p["sweep_dk"]]
    rates = sorted({c["lr"] for c in sweep})
    assert rates == sorted(p["rates"]) and np.log10(rates[-1] / rates[0]) >= 1.5 - 1e-9
    assert np.allclose(np.diff(np.log2(rates)), 1.0) and p["lr"] in rates
    assert {c["part"] for c in sweep} == {"train", "qknorm"} and len(sweep) == 3 * len(rates) * 3

    def n(d, h):
        c = {**G._train_cfg(p, p["sweep_dk"], True), "d_model": d, "n_heads": h}
        return sum(x.numel() for x in LM(model_config(c, 85, **dk_overrides(c))).parameters())

    (d0, h0), (d1, h1) = p["scales"]
    assert n(d1, h1) >= 4 * n(d0, h0)
