"""Training loop: schedule, divergence recorded (not raised), determinism, per-layer gradient norms."""

import math

import pytest
import torch

from tfclaims.data.corpus import load_corpus
from tfclaims.nn.config import ModelConfig, TrainConfig
from tfclaims.nn.models import LM
from tfclaims.train.loop import lr_at, train_lm


@pytest.fixture(scope="module")
def corpus():
    return load_corpus()


def tiny(corpus, **kw):
    return LM(
        ModelConfig(vocab_size=corpus.vocab_size, d_model=32, n_layers=2, n_heads=2, max_seq_len=32, **kw)
    )


def test_warmup_then_cosine_decay():
    t = TrainConfig(steps=100, lr=1.0, warmup=10, min_lr_ratio=0.1)
    assert lr_at(0, t) == pytest.approx(0.1) and lr_at(9, t) == pytest.approx(1.0)
    assert lr_at(10, t) == pytest.approx(1.0) and lr_at(55, t) == pytest.approx(0.55)
    assert lr_at(100, t) == pytest.approx(0.1)
    assert all(lr_at(s, t) >= lr_at(s + 1, t) for s in range(10, 100))


def test_no_warmup_and_linear_and_constant():
    t = TrainConfig(steps=10, lr=2.0, warmup=0, schedule="linear", min_lr_ratio=0.0)
    assert lr_at(0, t) == 2.0 and lr_at(5, t) == pytest.approx(1.0) and lr_at(10, t) == 0.0
    assert lr_at(7, t.replace(schedule="constant")) == 2.0


def test_divergence_is_recorded_not_raised(corpus):
    torch.manual_seed(0)
    model = tiny(corpus)
    with torch.no_grad():  # poison one weight after a few steps via a huge learning rate
        model.blocks[0].ffn.w1.weight.mul_(1e30)
    res = train_lm(
        model,
        TrainConfig(steps=20, batch_size=4, seq_len=16, lr=1e3, eval_every=5, eval_batches=1),
        corpus,
        "cpu",
        progress=False,
    )
    assert res["diverged_at"] is not None and res["diverged_at"] < 20
    assert res["final_val"] is None
    assert len(res["train_loss"]) == res["diverged_at"] + 1


def test_training_is_bit_for_bit_repeatable_and_learns(corpus):
    t = TrainConfig(
        steps=30, batch_size=8, seq_len=32, lr=3e-3, warmup=3, eval_every=15, eval_batches=2, seed=5
    )
    outs = []
    for _ in range(2):
        torch.manual_seed(5)
        outs.append(train_lm(tiny(corpus), t, corpus, "cpu", progress=False))
    assert outs[0]["train_loss"] == outs[1]["train_loss"] and outs[0]["val_loss"] == outs[1]["val_loss"]
    assert outs[0]["val_loss"][-1] < outs[0]["val_loss"][0] - 0.5  # it learns
    assert math.isclose(
        outs[0]["val_loss"][0], math.log(corpus.vocab_size), rel_tol=0.05
    )  # near-uniform at init
    assert len(outs[0]["grad_norms"][0]) == 2 and all(g > 0 for g in outs[0]["grad_norms"][0])


def test_grad_clip_is_off_by_default():
    assert TrainConfig().grad_clip is None
