"""The recipe helpers of sinusoidal_relative: the copy task's batches and accuracy, and the matched norms
(Vaswani et al.'s ‖position‖/‖token‖ = 1/√2 at init in both additive arms, the learned table stored as θ and
used as √d·θ)."""

import math

import pytest
import torch
from torch import nn

from tfclaims.harness.experiment import RunContext
from tfclaims.nn.models import LM, lm_loss
from tfclaims.train.profiles import model_config

from experiments.sinusoidal_relative.recipes import (
    copy_accuracy,
    copy_batch,
    copy_run,
    match_norms,
    norm_ratio,
)

V, T = 85, 32  # the character corpus's vocabulary, a training length


def _model(pos, d=64, emb_scale=True, seed=0):
    torch.manual_seed(seed)
    cfg = {"d_model": d, "n_layers": 1, "n_heads": 2, "seq_len": T}
    return LM(
        model_config(cfg, V, pos=pos, max_seq_len=T if pos == "learned" else 4 * T, emb_scale=emb_scale)
    )


# ---------------------------------------------------------------------------- the copy task
@pytest.mark.parametrize("k", [1, 3, 7])
def test_copy_batch_targets_are_the_input_k_back(k):
    x, y = copy_batch(torch.Generator().manual_seed(0), 6, 16, k, 5)
    assert x.shape == y.shape == (6, 16) and x.dtype == y.dtype == torch.long
    assert int(x.min()) >= 0 and int(x.max()) < 5 and len(x.unique()) == 5
    assert (y[:, :k] == -1).all()  # no target before k: ignored by the loss
    assert torch.equal(y[:, k:], x[:, : 16 - k])
    x2, y2 = copy_batch(torch.Generator().manual_seed(0), 6, 16, k, 5)
    assert torch.equal(x, x2) and torch.equal(y, y2)  # the generator alone decides the batch


class _Copier(nn.Module):
    """Predicts the token k back by construction (a one-hot logit); records the starts and modes it ran in."""

    def __init__(self, k, vocab, echo=False):
        super().__init__()
        self.k, self.vocab, self.echo, self.calls = k, vocab, echo, []

    def forward(self, x, start=0):
        self.calls.append((start, self.training))
        B, n = x.shape
        logits = torch.zeros(B, n, self.vocab)
        if self.echo:  # the current token: right only by chance
            return logits.scatter_(-1, x[..., None], 1.0)
        logits[:, self.k :].scatter_(-1, x[:, : n - self.k, None], 1.0)
        return logits


def test_copy_accuracy_of_a_perfect_copier_is_one_and_nan_where_there_is_no_target():
    k, n = 3, 12
    gen = torch.Generator().manual_seed(1)
    batches = [copy_batch(gen, 8, n, k, 6) for _ in range(2)]
    model = _Copier(k, 6).train()
    acc = copy_accuracy(model, batches, "cpu", start=5)
    assert len(acc) == n
    assert all(math.isnan(a) for a in acc[:k]) and acc[k:] == [1.0] * (n - k)
    assert model.calls == [(5, False), (5, False)]  # placed at `start`, evaluated in eval mode
    assert model.training  # and left as it was
    echo = copy_accuracy(_Copier(k, 6, echo=True), batches, "cpu")
    assert all(math.isnan(a) for a in echo[:k])
    assert sum(echo[k:]) / (n - k) < 0.4  # about 1/6: x_i = x_(i−k) by chance only


def test_copy_run_records_what_the_analysis_reads():
    cfg = {"d_model": 16, "n_layers": 1, "n_heads": 2, "seq_len": 8, "batch": 4, "steps": 4, "lr": 3e-3,
           "eval_every": 2, "eval_batches": 1, "seed": 0, "k": 2, "symbols": 5, "mults": [1, 2, 4],
           "shift_mults": [1, 3]}  # fmt: skip
    ctx = RunContext(torch.device("cpu"), progress=False)
    m = copy_run({**cfg, "pos": "sinusoidal"}, ctx)
    assert m["chance_xent"] == pytest.approx(math.log(5)) and m["diverged_at"] is None
    assert len(m["acc_by_position"]) == 4 * 8 and len(m["acc_at_0"]) == 8
    assert sorted(m["acc_moved"]) == ["1", "3"] and all(len(a) == 8 for a in m["acc_moved"].values())
    assert all(math.isnan(a) for a in m["acc_by_position"][:2]) and 0 <= m["acc_by_position"][2] <= 1
    assert len(m["val_loss"]) == len(m["eval_steps"]) == 3 and len(m["probes"]) == 3
    m = copy_run({**cfg, "pos": "learned"}, ctx)  # no rows beyond T: its T positions only
    assert len(m["acc_by_position"]) == 8 and "acc_at_0" not in m and "acc_moved" not in m


# ---------------------------------------------------------------------------- matched norms
@pytest.mark.parametrize("pos", ["sinusoidal", "learned"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matched_norms_give_vaswani_et_al_ratio_at_init(pos, seed):
    m = _model(pos, seed=seed)
    # the recipe's own init (every table N(0, 0.02), tokens ×√d) is far from it: the sinusoidal table swamps
    # the tokens (about 4.4), a learned table is swamped by them (about 1/8)
    assert not 0.35 < norm_ratio(m, T) < 1.4
    match_norms(m)
    assert norm_ratio(m, T) == pytest.approx(2**-0.5, rel=0.03)
    assert m.stack.tok.weight.var().item() == pytest.approx(1 / 64, rel=0.1)  # tokens N(0, 1/d)


@pytest.mark.parametrize("pos", ["rope", "none"])
def test_norm_ratio_is_none_without_an_additive_position_encoding(pos):
    m = _model(pos)
    match_norms(m)
    assert norm_ratio(m, T) is None
    assert m.stack.tok.weight.var().item() == pytest.approx(1 / 64, rel=0.1)


def test_match_norms_needs_scaled_token_embeddings():
    with pytest.raises(ValueError, match="emb_scale"):
        match_norms(_model("sinusoidal", emb_scale=False))


def test_the_learned_table_is_used_as_sqrt_d_times_its_stored_parameter_and_trains():
    d = 64
    m = _model("learned", d=d)
    match_norms(m)
    pos = m.stack.pos
    theta = pos.parametrizations.weight.original
    assert torch.equal(pos.weight, theta * math.sqrt(d))
    assert theta.std().item() == pytest.approx((2 * d) ** -0.5, rel=0.05)  # θ ~ N(0, 1/(2d))
    names = dict(m.named_parameters())
    assert "stack.pos.parametrizations.weight.original" in names and "stack.pos.weight" not in names
    before = theta.detach().clone()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    x, y = copy_batch(torch.Generator().manual_seed(0), 4, T, 1, 10)
    for _ in range(2):
        opt.zero_grad()
        lm_loss(m(x), y).backward()
        opt.step()
    assert not torch.equal(theta, before)  # the stored parameter is what the optimiser moves
    assert torch.allclose(pos.weight, theta * math.sqrt(d))  # and the table used stays √d·θ
    emb = m.stack.embed(x[:, :4])
    expect = m.stack.tok(x[:, :4]) * math.sqrt(d) + theta[:4] * math.sqrt(d)
    assert torch.allclose(emb, expect, atol=1e-6)
