"""The dropout probe on a small untrained LM: without dropout every inference mode is the same function; with
it, the first site's masks average to eval mode's output and the unscaled variant differs."""

import pytest
import torch

from tfclaims.nn.config import ModelConfig
from tfclaims.nn.dropout import add_dropout
from tfclaims.nn.models import LM

from experiments.dropout_scaling.recipes import dropout_probe


def model_and_batches(p, seed=0):
    torch.manual_seed(seed)
    model = LM(ModelConfig(vocab_size=20, d_model=32, n_layers=2, n_heads=2, max_seq_len=16))
    add_dropout(model, p)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, 20, (4, 16), generator=g), torch.randint(0, 20, (4, 16), generator=g))]
    return model, batches


def test_without_dropout_every_mode_is_eval_mode():
    model, batches = model_and_batches(0.0)
    out = dropout_probe(model, batches, 0.0, 8, "cpu")
    for v in (out["unscaled_loss"], out["single_mask_loss"], *out["mc_loss"].values()):
        assert v == pytest.approx(out["eval_loss"], abs=1e-6)
    assert out["projection"] == pytest.approx([1.0] * 5, abs=1e-6)
    assert list(out["mc_loss"]) == ["1", "2", "4", "8"]


def test_with_dropout_the_first_site_averages_to_eval_mode():
    torch.manual_seed(0)
    model, batches = model_and_batches(0.5)
    out = dropout_probe(model, batches, 0.5, 256, "cpu")
    assert out["projection"][0] == pytest.approx(1.0, abs=0.03)
    assert out["unscaled_loss"] != pytest.approx(out["eval_loss"], abs=1e-3)
    assert not model.training  # left in eval mode
    # the probe's hooks are gone: eval mode gives the same logits as before it ran
    x = batches[0][0]
    ref = model(x)
    dropout_probe(model, batches, 0.5, 2, "cpu")
    torch.testing.assert_close(model(x), ref)
