"""Norms against torch's own layers and hand formulas; padding (in)variance."""

import pytest
import torch

from tfclaims.nn.norms import LayerNorm, RMSNorm, TokenBatchNorm, make_norm


def test_layernorm_matches_torch_and_formula():
    x = torch.randn(4, 7, 24) * 3 + 1
    ours, ref = LayerNorm(24, eps=1e-5), torch.nn.LayerNorm(24, eps=1e-5)
    with torch.no_grad():
        for m in (ours, ref):
            m.weight.copy_(torch.linspace(0.5, 2, 24))
            m.bias.copy_(torch.linspace(-1, 1, 24))
    torch.testing.assert_close(ours(x), ref(x))
    mu, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    torch.testing.assert_close(ours(x), (x - mu) / torch.sqrt(var + 1e-5) * ours.weight + ours.bias)


def test_rmsnorm_matches_torch_and_formula():
    x = torch.randn(3, 5, 16) * 2
    ours, ref = RMSNorm(16, eps=1e-6), torch.nn.RMSNorm(16, eps=1e-6)
    with torch.no_grad():
        ours.weight.copy_(torch.linspace(0.5, 2, 16))
        ref.weight.copy_(ours.weight)
    torch.testing.assert_close(ours(x), ref(x))
    torch.testing.assert_close(ours(x), x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * ours.weight)


def test_batchnorm_counting_pads_matches_torch_batchnorm1d():
    x = torch.randn(4, 6, 8)
    ours, ref = TokenBatchNorm(8, masked=False), torch.nn.BatchNorm1d(8)
    for _ in range(3):  # train mode, running statistics updated alike
        torch.testing.assert_close(ours(x), ref(x.reshape(-1, 8)).view_as(x))
        x = torch.randn(4, 6, 8) * 2 + 0.5
    torch.testing.assert_close(ours.running_mean, ref.running_mean)
    torch.testing.assert_close(ours.running_var, ref.running_var)
    ours.eval(), ref.eval()
    torch.testing.assert_close(ours(x), ref(x.reshape(-1, 8)).view_as(x))


def test_masked_batchnorm_statistics_ignore_pads_exactly():
    x = torch.randn(3, 10, 8)
    mask = torch.ones(3, 10, dtype=torch.bool)
    mask[1, 6:] = False
    mask[2, 3:] = False
    bn = TokenBatchNorm(8, masked=True)
    y = bn(x, mask)
    # the same as torch's BatchNorm1d over the real tokens only
    ref = torch.nn.BatchNorm1d(8)
    torch.testing.assert_close(y[mask], ref(x[mask]))
    torch.testing.assert_close(bn.running_var, ref.running_var)
    # whatever sits in the pads changes nothing at real tokens
    x2 = x.clone()
    x2[~mask] = torch.randn(int((~mask).sum()), 8) * 100
    bn2 = TokenBatchNorm(8, masked=True)
    assert torch.equal(bn2(x2, mask)[mask], y[mask])


def test_unmasked_batchnorm_depends_on_pads():
    x = torch.randn(2, 8, 4)
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[1, 4:] = False
    x2 = x.clone()
    x2[1, 4:] = 5.0
    bn = TokenBatchNorm(4, masked=False)
    assert not torch.allclose(bn(x, mask)[0], bn(x2, mask)[0])


@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_per_token_norms_are_invariant_to_padding_and_neighbours(kind):
    norm = make_norm(kind, 16)
    seq = torch.randn(1, 5, 16)
    alone = norm(seq)
    batch = torch.cat([torch.cat([seq, torch.zeros(1, 7, 16)], 1), torch.randn(1, 12, 16) * 9])
    assert torch.equal(norm(batch)[0, :5], alone[0])


def test_fused_norms_match_the_builtins():
    """rmsnorm's fused family (the eager formulas under torch.compile) computes what F.layer_norm / F.rms_norm
    compute, forward and backward."""
    import torch.nn.functional as F

    from experiments.rmsnorm.recipes import build_norm

    torch.manual_seed(0)
    x = torch.randn(64, 48, requires_grad=True)
    gy = torch.randn(64, 48)
    for impl, ref in (
        ("fused_layer", lambda t: F.layer_norm(t, (48,))),
        ("fused_rms", lambda t: F.rms_norm(t, (48,), eps=1e-5)),
    ):
        m = build_norm(impl, 48, "cpu")
        (g,) = torch.autograd.grad(m(x), [x], gy)
        (g_ref,) = torch.autograd.grad(ref(x), [x], gy)
        torch.testing.assert_close(m(x), ref(x), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(g, g_ref, atol=1e-4, rtol=1e-4)
