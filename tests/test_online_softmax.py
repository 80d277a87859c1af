"""The blockwise (online-softmax) attention against torch's SDPA and a float64 reference: block sizes that do
and do not divide the length, causal masks with queries shorter than keys, dtypes, and the overflow of a sum
without the running maximum at its closed-form threshold."""

import math

import pytest
import torch
import torch.nn.functional as F

from experiments.online_softmax.online_softmax import blockwise_attention, overflow_logit, reference_attention


def qkv(n=48, m=None, d=16, h=2, dtype=torch.float64, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    m = n if m is None else m
    q = torch.randn(1, h, n, d, generator=g, dtype=torch.float64) * scale
    k, v = (torch.randn(1, h, m, d, generator=g, dtype=torch.float64) for _ in range(2))
    return q.to(dtype), k.to(dtype), v.to(dtype)


@pytest.mark.parametrize("block", [1, 5, 16, 48, 100])
@pytest.mark.parametrize("causal", [False, True])
def test_equals_sdpa_in_float64_for_any_block(block, causal):
    q, k, v = qkv()
    got = blockwise_attention(q, k, v, block, causal=causal)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_causal_with_fewer_queries_than_keys_sees_the_prefix():
    """Decoding-style: 5 new queries over 20 keys, each query sees the keys up to its own position."""
    q, k, v = qkv(n=5, m=20)
    mask = torch.ones(5, 20, dtype=torch.bool).tril(15)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(blockwise_attention(q, k, v, 3, causal=True), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(reference_attention(q, k, v, causal=True), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_low_precision_error_is_the_fused_kernels_size(dtype):
    """Against float64: the blockwise error stays within a few times SDPA's own, in its dtype."""
    q, k, v = qkv(n=256, d=32, dtype=dtype, scale=3.0)
    ref = reference_attention(q, k, v)
    err = lambda o: ((o.double() - ref).abs().max() / ref.abs().max()).item()  # noqa: E731
    sdpa = err(F.scaled_dot_product_attention(q, k, v))
    for block in (1, 32, 256):
        assert err(blockwise_attention(q, k, v, block)) < 2 * sdpa
    assert blockwise_attention(q, k, v, 32).dtype == dtype


def test_without_the_running_max_the_sum_overflows_exactly_past_ln_max():
    """One logit just below ln(float32 max) stays finite without the max (values below 1/8, so that the
    weighted sum cannot overflow first); just above it does not; the running max is finite and still exact."""
    threshold = overflow_logit(torch.float32)
    assert threshold == pytest.approx(88.7228, abs=1e-4)
    d = 4
    k = torch.zeros(1, 1, 8, d)
    v = torch.rand(1, 1, 8, d, generator=torch.Generator().manual_seed(1)) / 8
    for logit, finite in ((threshold - 0.5, True), (threshold + 0.5, False), (1000.0, False)):
        k[..., 3, 0] = 1.0
        q = torch.zeros(1, 1, 1, d)
        q[..., 0] = logit * math.sqrt(d)  # so that the one nonzero score is `logit`
        naive = blockwise_attention(q, k, v, 2, running_max=False)
        assert bool(torch.isfinite(naive).all()) == finite, logit
        safe = blockwise_attention(q, k, v, 2)
        torch.testing.assert_close(safe.double(), reference_attention(q, k, v), rtol=1e-6, atol=1e-6)


def test_a_fully_masked_prefix_block_gives_no_nan():
    """Causal with block 1: the first query's later blocks are all masked; its running max stays finite."""
    q, k, v = qkv(n=6, d=8)
    got = blockwise_attention(q, k, v, 1, causal=True)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, reference_attention(q, k, v, causal=True), rtol=1e-12, atol=1e-12)


def test_block_must_be_positive():
    q, k, v = qkv(n=4)
    with pytest.raises(ValueError, match="block must be >= 1"):
        blockwise_attention(q, k, v, 0)
