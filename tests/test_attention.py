"""Attention against torch's scaled_dot_product_attention, across backends, masks, K/V head counts and the
cache."""

import math

import pytest
import torch
import torch.nn.functional as F

from tfclaims.nn.attention import Attention, KVCache, build_mask
from tfclaims.nn.config import ModelConfig
from tfclaims.nn.models import LM


def reference(att: Attention, x, *, causal, pad_mask=None):
    """Independent path: torch SDPA (math) on K/V heads repeated to h heads."""
    B, T, _ = x.shape
    q = att.wq(x).view(B, T, att.h, att.dk).transpose(1, 2)
    k = att.wk(x).view(B, T, att.kv, att.dk).transpose(1, 2).repeat_interleave(att.h // att.kv, dim=1)
    v = att.wv(x).view(B, T, att.kv, att.dk).transpose(1, 2).repeat_interleave(att.h // att.kv, dim=1)
    mask = torch.ones(T, T, dtype=torch.bool).tril() if causal else torch.ones(T, T, dtype=torch.bool)
    mask = mask[None, None].expand(B, 1, T, T)
    if pad_mask is not None:
        mask = mask & pad_mask[:, None, None, :]
    y = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask, scale=att.scale)
    return att.wo(y.float().transpose(1, 2).reshape(B, T, -1))


@pytest.mark.parametrize("backend", ["sdpa", "explicit"])
@pytest.mark.parametrize("kv", [8, 4, 2, 1])
@pytest.mark.parametrize("causal", [True, False])
def test_matches_sdpa(backend, kv, causal):
    cfg = ModelConfig(d_model=64, n_heads=8, n_kv_heads=kv, attn_backend=backend, causal=causal)
    att = Attention(cfg)
    x = torch.randn(3, 11, 64)
    torch.testing.assert_close(att(x), reference(att, x, causal=causal), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("backend", ["sdpa", "explicit"])
@pytest.mark.parametrize("causal", [True, False])
def test_padding_mask(backend, causal):
    cfg = ModelConfig(d_model=32, n_heads=4, n_kv_heads=2, attn_backend=backend, causal=causal)
    att = Attention(cfg)
    x = torch.randn(2, 9, 32)
    pad = torch.tensor([[1] * 9, [1] * 5 + [0] * 4], dtype=torch.bool)
    got = att(x, pad_mask=pad)
    torch.testing.assert_close(got, reference(att, x, causal=causal, pad_mask=pad), atol=1e-5, rtol=1e-4)
    # real tokens do not see what sits in the padding
    x2 = x.clone()
    x2[1, 5:] = torch.randn(4, 32) * 10
    torch.testing.assert_close(att(x2, pad_mask=pad)[1, :5], got[1, :5], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("scale", [None, 1.0, 0.37])
def test_scale_options(scale):
    cfg = ModelConfig(d_model=32, n_heads=2, attn_scale=scale, attn_backend="explicit")
    att = Attention(cfg)
    assert att.scale == (1 / math.sqrt(16) if scale is None else scale)
    x = torch.randn(2, 6, 32)
    torch.testing.assert_close(att(x), reference(att, x, causal=True), atol=1e-5, rtol=1e-4)


def test_backends_agree_with_head_dim_override():
    base = ModelConfig(d_model=48, n_heads=3, head_dim=40, n_kv_heads=1)
    a, b = Attention(base), Attention(base.replace(attn_backend="explicit"))
    b.load_state_dict(a.state_dict())
    x = torch.randn(2, 7, 48)
    torch.testing.assert_close(a(x), b(x), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("backend", ["sdpa", "explicit"])
@pytest.mark.parametrize("kv", [4, 2, 1])
@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_kv_cache_decode_equals_full_forward(backend, kv, pos):
    cfg = ModelConfig(
        vocab_size=40,
        d_model=32,
        n_layers=3,
        n_heads=4,
        n_kv_heads=kv,
        attn_backend=backend,
        pos=pos,
        max_seq_len=32,
    )
    model = LM(cfg).eval()
    idx = torch.randint(0, 40, (2, 20))
    with torch.no_grad():
        full = model(idx)
        cache = KVCache.for_model(cfg, 2, 20)
        parts = [model(idx[:, :6], cache=cache), model(idx[:, 6:9], cache=cache)]  # prefill, then a chunk
        parts += [model(idx[:, t : t + 1], cache=cache) for t in range(9, 20)]  # then one token at a time
    torch.testing.assert_close(torch.cat(parts, 1), full, atol=1e-5, rtol=1e-4)
    assert cache.pos == 20


def test_generate_with_and_without_cache_agree():
    cfg = ModelConfig(vocab_size=30, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=40)
    model = LM(cfg).eval()
    prompt = torch.randint(0, 30, (2, 5))
    assert torch.equal(
        model.generate(prompt, 12, use_cache=True), model.generate(prompt, 12, use_cache=False)
    )


def test_kv_cache_bytes_match_allocated_tensors():
    cfg = ModelConfig(d_model=64, n_layers=3, n_heads=8, n_kv_heads=2)
    cache = KVCache.for_model(cfg, batch=5, max_len=17)
    # closed form: 2 (K and V) * layers * batch * kv heads * positions * head size * 4 bytes
    assert cache.nbytes() == 2 * 3 * 5 * 2 * 17 * 8 * 4
    assert cache.nbytes() == sum(t.untyped_storage().nbytes() for t in cache.k + cache.v)


def test_cache_overflow_is_an_error():
    cfg = ModelConfig(vocab_size=10, d_model=16, n_layers=1, n_heads=2)
    model = LM(cfg).eval()
    cache = KVCache.for_model(cfg, 1, 4)
    with pytest.raises(ValueError, match="KV cache holds 4"):
        model(torch.zeros(1, 5, dtype=torch.long), cache=cache)


def test_build_mask_offsets():
    m = build_mask(2, 5, causal=True, offset=3)
    assert m[0, 0].tolist() == [[True, True, True, True, False], [True, True, True, True, True]]
    assert build_mask(1, 5, causal=True, offset=4) is None
