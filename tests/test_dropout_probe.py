"""The dropout probe on a small untrained LM, at both placements: without dropout every inference mode is the
same function; with it, the first site's masks average to eval mode's value and the unscaled variant differs.
The attention-weight kernel against SDPA, and the embedding site dropping token and position together."""

import pytest
import torch

from tfclaims.nn.config import ModelConfig
from tfclaims.nn.models import LM

from experiments.dropout_scaling.recipes import dropout_probe
from experiments.dropout_scaling.sites import add_site_dropout

N_SITES = {"residual": 5, "attention": 2}  # 2 blocks: embedding + attention and FFN each; one per block
CFG = ModelConfig(vocab_size=20, d_model=32, n_layers=2, n_heads=2, max_seq_len=16)


def model_and_batches(p, site="residual", seed=0):
    torch.manual_seed(seed)
    model = LM(CFG)
    add_site_dropout(model, p, site)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, 20, (4, 16), generator=g), torch.randint(0, 20, (4, 16), generator=g))]
    return model, batches


@pytest.mark.parametrize("site", list(N_SITES))
def test_without_dropout_every_mode_is_eval_mode(site):
    model, batches = model_and_batches(0.0, site)
    out = dropout_probe(model, batches, 0.0, 8, "cpu", site)
    for v in (out["single_mask_loss"], *out["mc_loss"].values()):
        assert v == pytest.approx(out["eval_loss"], abs=1e-6)
    assert out["projection"] == pytest.approx([1.0] * N_SITES[site], abs=1e-6)
    assert list(out["mc_loss"]) == ["1", "2", "4", "8"]


@pytest.mark.parametrize("site", list(N_SITES))
def test_with_dropout_the_first_site_averages_to_eval_mode(site):
    torch.manual_seed(0)
    model, batches = model_and_batches(0.5, site)
    out = dropout_probe(model, batches, 0.5, 256, "cpu", site)
    assert out["projection"][0] == pytest.approx(1.0, abs=0.03)
    if site == "residual":  # the whole Pre-LN stream scaled by 1/(1−p): every LayerNorm removes it
        assert out["unscaled_loss"] == pytest.approx(out["eval_loss"], abs=1e-3)
    else:  # the attention weights summing to 1/(1−p): nothing renormalises them
        assert out["unscaled_loss"] != pytest.approx(out["eval_loss"], abs=1e-3)
    assert not model.training  # left in eval mode
    # the probe's hooks are gone: eval mode gives the same logits as before it ran
    x = batches[0][0]
    ref = model(x)
    dropout_probe(model, batches, 0.5, 2, "cpu", site)
    torch.testing.assert_close(model(x), ref)


def test_the_attention_weight_kernel_is_sdpa_without_dropout():
    """In eval mode, and in train mode at p = 0, the dropped kernel gives the unpatched model's (SDPA)
    hidden states."""
    torch.manual_seed(3)
    ref = LM(CFG)
    x = torch.randint(0, 20, (3, 16))
    want = ref.eval()(x)
    for p, train in ((0.3, False), (0.0, True)):
        model = LM(CFG)
        model.load_state_dict(ref.state_dict())
        add_site_dropout(model, p, "attention")
        torch.testing.assert_close(model.train(train)(x), want, atol=1e-5, rtol=1e-5)


def test_attention_weight_dropout_keeps_the_weights_expectation_and_drops_a_share_p():
    """One block's weights, many masks: each kept weight is w/(1−p), a share p is zero, and the mean over
    masks of the mixed values is eval mode's."""
    torch.manual_seed(4)
    model = LM(CFG)
    add_site_dropout(model, 0.4, "attention")
    attn = model.stack.blocks[0].attn.train()
    q, k, v = (torch.randn(2, 2, 16, 16) for _ in range(3))
    mask = torch.ones(16, 16, dtype=torch.bool).tril()[None, None]
    probs = (q @ k.transpose(-2, -1) * attn.scale).masked_fill(~mask, float("-inf")).softmax(-1)
    eye = torch.eye(16).expand(2, 2, 16, 16)  # v = I: the kernel returns the dropped weights themselves
    dropped = attn._explicit(q, k, eye, mask)
    kept = dropped != 0
    torch.testing.assert_close(dropped[kept], (probs / 0.6)[kept])
    assert (~kept & mask).sum() / mask.expand_as(kept).sum() == pytest.approx(0.4, abs=0.03)
    mean = torch.stack([attn._explicit(q, k, v, mask) for _ in range(4000)]).mean(0)
    # about 4 standard errors of 4000 masks; without the 1/(1−p) the mean would sit 40% below
    torch.testing.assert_close(mean, attn.eval()._explicit(q, k, v, mask), atol=0.06, rtol=0.0)


def test_the_embedding_site_drops_token_and_position_together():
    """The first block receives (token + position) with whole elements zeroed: a share p of exact zeros, the
    rest (token + position)/(1−p). Dropping the token alone would leave the position where it fell."""
    torch.manual_seed(5)
    model = LM(CFG).train()
    add_site_dropout(model, 0.3, "residual")
    seen = {}
    model.stack.blocks[0].register_forward_pre_hook(lambda m, a: seen.setdefault("x", a[0]))
    x = torch.randint(0, 20, (8, 16))
    model(x)
    emb = model.stack.embed(x)
    got, kept = seen["x"], seen["x"] != 0
    assert (~kept).float().mean().item() == pytest.approx(0.3, abs=0.03)
    torch.testing.assert_close(got[kept], (emb / 0.7)[kept])
