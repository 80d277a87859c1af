"""Post-LN, Pre-LN and DeepNorm: DeepNorm's constants and init, the warmup schedule as trained, divergence
as an outcome, and the init-time probes of the postnorm_warmup experiment (identity share, amplification)."""

import math
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tfclaims.data.corpus import load_corpus, unigram_xent
from tfclaims.harness.registry import load
from tfclaims.nn.blocks import Block, deepnorm_constants
from tfclaims.nn.config import ConfigError, ModelConfig
from tfclaims.nn.models import LM
from tfclaims.train.loop import lr_at, train_lm

from experiments.postnorm_warmup import analysis as view
from experiments.postnorm_warmup import recipes as M
from experiments.postnorm_warmup.grid import model_config, train_config

EXP = load("postnorm_warmup")
M_run_train = sys.modules[type(EXP).__module__].run_train
M_n_params = sys.modules[type(EXP).__module__].n_params


@pytest.fixture(scope="module")
def corpus():
    return load_corpus()


# ---------------------------------------------------------------- DeepNorm
@pytest.mark.parametrize(
    "N, alpha, beta",
    [(1, 1.189207, 0.594604), (6, 1.861210, 0.379918), (18, 2.449490, 0.288675), (100, 3.760603, 0.188030)],
)
def test_deepnorm_constants_decoder_only(N, alpha, beta):
    """Wang et al. 2022, decoder-only: alpha = (2N)^(1/4), beta = (8N)^(-1/4) (values computed by hand)."""
    a, b = deepnorm_constants(N)
    assert a == pytest.approx(alpha, rel=1e-6) and b == pytest.approx(beta, rel=1e-5)


def test_deepnorm_block_is_layernorm_of_alpha_x_plus_branch():
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, n_layers=6, n_heads=4, max_seq_len=16, placement="deepnorm", init="xavier")
    blk = Block(cfg).eval()
    x = torch.randn(2, 16, 32)
    alpha = (2 * 6) ** 0.25
    assert blk.alpha == pytest.approx(alpha)
    with torch.no_grad():
        s = F.layer_norm(alpha * x + blk.attn(x), (32,), blk.norm1.weight, blk.norm1.bias, 1e-5)
        want = F.layer_norm(alpha * s + blk.ffn(s), (32,), blk.norm2.weight, blk.norm2.bias, 1e-5)
        assert torch.allclose(blk(x), want, atol=1e-5)


@pytest.mark.parametrize("placement", ["pre", "post", "deepnorm"])
def test_sublayers_reproduce_the_block(placement):
    torch.manual_seed(1)
    blk = Block(ModelConfig(d_model=32, n_layers=3, n_heads=4, max_seq_len=12, placement=placement)).eval()
    x = torch.randn(3, 12, 32)
    with torch.no_grad():
        (s0, f1, s1), (s1b, f2, s2) = M.sublayers(blk, x)
        assert s0 is x and s1b is s1
        assert torch.allclose(s2, blk(x), atol=1e-6)


def test_deepnorm_init_scales_value_output_and_ffn_by_beta():
    """Xavier-normal std is gain*sqrt(2/(fan_in+fan_out)); DeepNorm uses gain beta for v, o, FFN and 1 for q,
    k."""
    torch.manual_seed(0)
    d, N = 128, 8
    beta = (8 * N) ** -0.25

    def stds(placement):
        m = LM(
            ModelConfig(
                vocab_size=50,
                d_model=d,
                n_layers=N,
                n_heads=4,
                max_seq_len=8,
                placement=placement,
                init="xavier",
            )
        )
        w = {
            k: torch.cat([getattr(b.attn, k).weight.flatten() for b in m.blocks]).std().item()
            for k in ("wq", "wk", "wv", "wo")
        }
        w["w1"] = torch.cat([b.ffn.w1.weight.flatten() for b in m.blocks]).std().item()
        w["w2"] = torch.cat([b.ffn.w2.weight.flatten() for b in m.blocks]).std().item()
        return w

    xav_sq, xav_ff = math.sqrt(2 / (2 * d)), math.sqrt(2 / (5 * d))
    dn, post = stds("deepnorm"), stds("post")
    for k in ("wq", "wk"):
        assert dn[k] == pytest.approx(xav_sq, rel=0.03)
    for k in ("wv", "wo"):
        assert dn[k] == pytest.approx(beta * xav_sq, rel=0.03)
    for k in ("w1", "w2"):
        assert dn[k] == pytest.approx(beta * xav_ff, rel=0.03)
        assert post[k] == pytest.approx(xav_ff, rel=0.03)  # no scaling outside DeepNorm
    assert post["wv"] == pytest.approx(xav_sq, rel=0.03)


def test_deepnorm_stack_has_no_final_norm_and_pre_has_one():
    assert ModelConfig(placement="deepnorm").use_final_norm is False
    assert ModelConfig(placement="post").use_final_norm is False
    assert ModelConfig(placement="pre").use_final_norm is True


# ---------------------------------------------------------------- warmup as trained
def _first_step_size(corpus, warmup, lr=0.01):
    """Largest |change| of a weight matrix after the first optimiser step. Adam's first step is lr_t *
    g/|g|."""
    torch.manual_seed(0)
    p = {**EXP.profiles["quick"], "weight_decay": 0.0}
    cfg = {
        "d_model": p["d_model"],
        "n_heads": p["n_heads"],
        "seq_len": p["seq_len"],
        "emb_scale": True,
        "batch": 4,
        "steps": 4,
        "warmup": warmup,
        "lr": lr,
        "betas": [0.9, 0.98],
        "weight_decay": 0.0,
        "eval_every": 1,
        "eval_batches": 1,
        "seed": 0,
    }
    t = train_config(cfg)
    model = LM(model_config(cfg, "post", 2, "xavier", corpus.vocab_size))
    before = model.blocks[0].ffn.w1.weight.detach().clone()
    seen = {}

    def snap(step, m):
        if step == 1:
            seen["after"] = m.blocks[0].ffn.w1.weight.detach().clone()
        return {}

    train_lm(model, t, corpus, "cpu", on_eval=snap, progress=False)
    return float((seen["after"] - before).abs().max()), t


def test_warmup_schedule_is_what_the_optimiser_uses(corpus):
    step0, t = _first_step_size(corpus, warmup=4)
    assert t.warmup == 4 and lr_at(0, t) == pytest.approx(0.01 / 4) and lr_at(3, t) == pytest.approx(0.01)
    assert step0 == pytest.approx(0.01 / 4, rel=1e-3)
    step0, t = _first_step_size(corpus, warmup=0)
    assert t.warmup == 0 and lr_at(0, t) == pytest.approx(0.01)
    assert step0 == pytest.approx(0.01, rel=1e-3)


def test_grid_has_four_arms_in_every_fixed_cell_a_sweep_and_an_untied_head():
    p = EXP.profiles["default"]
    grid = EXP.grid(p)  # the first round: the fixed-rate cells and the first width's sweep
    main = [c for c in grid if c["part"] == "train" and c["steps"] == p["steps"]]
    fresh = [c for c in main if c["seed"] in p["seeds"]]
    sweep = [c for c in main if c["seed"] in p["selection_seeds"]]
    null = [c for c in grid if c["part"] == "null"]
    cells = {(c["depth"], c["lr"]) for c in fresh}
    assert cells == {(d, lr) for d, lr in p["cells"]} and len(p["seeds"]) >= 5 and p["steps"] >= 400
    assert p["warmup"] == p["steps"] // 4
    arms = {(c["placement"], c["warmup"]) for c in fresh if c["depth"] == p["sweep_depth"]}
    assert arms == {("post", 0), ("post", p["warmup"]), ("pre", 0), ("deepnorm", 0)}
    deep = {(c["placement"], c["warmup"]) for c in fresh if c["depth"] > p["sweep_depth"]}
    assert deep == {("post", p["warmup"]), ("pre", 0)}  # C's arms
    # the sweep: 1.5 decades, ×2 apart, three swept arms, three selection seeds, at the sweep depth
    rates = sorted({c["lr"] for c in sweep})
    assert rates == sorted(p["rates"]) and np.log10(rates[-1] / rates[0]) >= 1.5 - 1e-9
    assert np.allclose(np.diff(np.log2(rates)), 1.0) and len(p["selection_seeds"]) >= 3
    assert len(sweep) == 3 * len(rates) * len(p["selection_seeds"])
    assert {c["depth"] for c in sweep} == {p["sweep_depth"]} and {c["d_model"] for c in sweep} == {
        p["d_model"]
    }
    assert not set(p["selection_seeds"]) & set(p["seeds"]) and p["scales"][1] >= 2 * p["scales"][0]
    assert all(c["tie"] is False for c in grid if c["part"] != "probe") and p["init_seeds"] >= 10
    assert all("kind" not in c for c in grid)
    # C at depth: only warmed-up Post-LN sweeps (the same rates, seeds), over a longer run with the same
    # warmup share; Pre-LN runs C-fixed's rate on the fresh seeds
    deep = [c for c in grid if c["part"] == "train" and c["steps"] == p["deep_steps"] > p["steps"]]
    assert {c["depth"] for c in deep} == {p["deep_depth"]} == {max(d for d, _ in p["cells"])}
    post = [c for c in deep if c["placement"] == "post"]
    assert {c["warmup"] for c in post} == {p["deep_steps"] // 4} and sorted({c["lr"] for c in post}) == p[
        "rates"
    ]
    assert len(post) == len(p["deep_rates"]) * len(p["selection_seeds"])
    pre = sorted((c["seed"], c["lr"], c["warmup"]) for c in deep if c["placement"] == "pre")
    assert (
        pre == [(s, p["deep_control_lr"], 0) for s in p["seeds"]] and [12, p["deep_control_lr"]] in p["cells"]
    )
    # the null pair: the Pre-LN control of one training cell, at seeds s + 1000
    assert sorted(c["seed"] for c in null) == [s + 1000 for s in p["seeds"]]
    twin = {k: v for k, v in null[0].items() if k not in ("part", "seed")}
    assert any({k: v for k, v in c.items() if k not in ("part", "seed")} == twin for c in fresh)


def test_the_second_width_has_at_least_four_times_the_parameters():
    p = EXP.profiles["default"]
    small, large = (M_n_params(p, d) for d in p["scales"])
    assert large >= 4 * small


def test_grid_rejects_a_malformed_or_repeated_cell():
    for cells in ([[3, 2e-3], [3, 2e-3]], [[0, 2e-3]], [[3]], []):
        with pytest.raises(ConfigError, match="cells"):
            EXP.grid({**EXP.profiles["quick"], "cells": cells})


def test_training_run_logs_block_gradients_every_grad_every_steps(corpus):
    from tfclaims.harness.experiment import RunContext

    cfg = {c["part"]: c for c in EXP.grid(EXP.profiles["quick"])}["train"]
    m = M_run_train(cfg, RunContext(device=torch.device("cpu"), progress=False))
    assert m["grad_steps"][:3] == [0, cfg["grad_every"] - 1, 2 * cfg["grad_every"] - 1]
    assert all(len(g) == cfg["depth"] for g in m["grad_norms"])


# ---------------------------------------------------------------- divergence and failure
def test_divergence_is_recorded_and_counts_as_failure(corpus):
    torch.manual_seed(0)
    model = LM(
        ModelConfig(
            vocab_size=corpus.vocab_size, d_model=16, n_layers=2, n_heads=2, max_seq_len=16, placement="post"
        )
    )
    with torch.no_grad():
        model.blocks[0].ffn.w1.weight.mul_(1e30)
    t = train_config(
        {
            "steps": 10,
            "batch": 2,
            "seq_len": 16,
            "lr": 1e3,
            "warmup": 0,
            "betas": [0.9, 0.98],
            "weight_decay": 0.1,
            "eval_every": 5,
            "eval_batches": 1,
            "seed": 0,
        }
    )
    res = train_lm(model, t, corpus, "cpu", progress=False)
    assert res["diverged_at"] is not None and res["final_val"] is None
    # a diverged run did not learn, whatever its unigram level; it has no final loss to pair
    mod = sys.modules[type(EXP).__module__]
    learned, final = mod.LEARNED.fn, mod.FINAL.fn  # the readouts the claim declares
    assert not learned({**res, "unigram_xent": 10.0}) and final(res) is None
    assert learned({"diverged_at": None, "final_val": 2.5, "unigram_xent": 3.3})
    assert not learned({"diverged_at": None, "final_val": 3.25, "unigram_xent": 3.3})


def test_unigram_cross_entropy_is_below_uniform(corpus):
    U = unigram_xent(corpus)
    assert 2.5 < U < math.log(corpus.vocab_size)


# ---------------------------------------------------------------- init-time probes
class _Noise(nn.Module):
    """A branch independent of its input: fresh Gaussian noise with the input's per-token RMS (so r = 1)."""

    def forward(self, x, **kw):
        return torch.randn_like(x) * x.pow(2).mean(-1, keepdim=True).sqrt()


def test_identity_share_follows_two_to_minus_half_n_for_independent_unit_branches():
    """Under note 002's own assumption, LN(x + F) with independent equal-variance x and F keeps x/sqrt(2) per
    sublayer: the share is 2^(-n/2), not 2^-n; the probe and its independence prediction both find that."""
    torch.manual_seed(0)
    d, L = 512, 4
    model = LM(
        ModelConfig(
            vocab_size=50, d_model=d, n_layers=L, n_heads=4, max_seq_len=32, placement="post", init="xavier"
        )
    )
    for b in model.blocks:
        b.attn, b.ffn = _Noise(), _Noise()
    tr = M.identity_trace(model, torch.randint(1, 50, (8, 32)))
    n = np.arange(1, 2 * L + 1)
    assert np.allclose(tr["ratio"], 1.0, atol=0.05)
    assert np.allclose(tr["share"], 2.0 ** (-n / 2), atol=0.02)
    assert np.allclose(tr["predicted"], 2.0 ** (-n / 2), rtol=0.05)
    assert view.share_factor(tr["share"]) == pytest.approx(2**-0.5, abs=0.02)


def test_share_factor_fits_geometric_decay_above_the_floor():
    n = np.arange(1, 21)
    assert view.share_factor(0.5**n) == pytest.approx(0.5)
    assert view.share_factor(0.8**n) == pytest.approx(0.8)
    assert math.isnan(view.share_factor(np.full(5, 0.01)))


def test_output_change_is_quadratic_in_eps_and_restores_weights():
    torch.manual_seed(0)
    model = LM(
        ModelConfig(
            vocab_size=50, d_model=32, n_layers=3, n_heads=4, max_seq_len=16, placement="post", init="xavier"
        )
    ).eval()
    x = torch.randint(1, 50, (4, 16))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    small = M.output_change(model, x, 1e-4, torch.Generator().manual_seed(3))
    double = M.output_change(model, x, 2e-4, torch.Generator().manual_seed(3))
    assert small > 0 and double / small == pytest.approx(4.0, rel=0.02)
    assert M.output_change(model, x, 0.0, torch.Generator().manual_seed(3)) == 0.0
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())


def test_ffn_gradient_norms_match_autograd(corpus):
    torch.manual_seed(0)
    model = LM(
        ModelConfig(
            vocab_size=corpus.vocab_size,
            d_model=16,
            n_layers=3,
            n_heads=2,
            max_seq_len=16,
            placement="pre",
            init="xavier",
        )
    )
    x = torch.randint(1, corpus.vocab_size, (2, 16))
    loss = model(x).logsumexp(-1).mean()
    g = torch.autograd.grad(loss, [b.ffn.w2.weight for b in model.blocks], retain_graph=True)
    loss.backward()
    assert M.ffn_out_grad_norms(model) == pytest.approx([float(t.norm()) for t in g], rel=1e-6)
