"""The masks, fills and weights `masking` runs on, against independent implementations: SDPA in float64, the
library's own mask, Hugging Face's mask builders and torch.nn.MultiheadAttention's convention; padding
invariance of the library's models in float64; and the torch behaviours the recipes read (masked_fill refusing
an overflowing fill, SDPA's zero rows)."""

import math

import pytest
import torch
import torch.nn.functional as F

from tfclaims.nn.attention import build_mask
from tfclaims.nn.config import ModelConfig
from tfclaims.nn.models import LM, Encoder

from experiments.masking.masking import (
    additive_bias,
    additive_weights,
    fill_attention,
    fill_weights,
    future_masked,
    notes_mask,
    past_kept,
    sdpa_weights,
    with_fill,
)
from experiments.masking.recipes import run_conventions, run_fill, run_padding


class Ctx:
    device = torch.device("cpu")


def padded_ids(lens=(7, 5, 2, 1), vocab=20, seed=0, left=False):
    g = torch.Generator().manual_seed(seed)
    L = max(lens)
    idx = torch.randint(1, vocab, (len(lens), L), generator=g)
    pos = torch.arange(L)[None]
    lens = torch.tensor(lens)[:, None]
    return idx * (pos >= L - lens if left else pos < lens)


def qkv(B, T, h=2, d=8, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, h, T, d, generator=g, dtype=torch.float64).to(dtype) for _ in range(3))


@pytest.mark.parametrize("causal", [False, True])
def test_the_notes_masks_are_the_complement_of_the_librarys(causal):
    idx = padded_ids()
    T = idx.shape[1]
    keep = build_mask(T, T, causal=causal, pad_mask=idx != 0)
    assert torch.equal(notes_mask(idx, causal).expand(-1, 1, T, T), ~keep.expand(-1, 1, T, T))
    assert torch.equal(past_kept(T), ~future_masked(T))
    assert torch.equal(past_kept(T), build_mask(T, T, causal=True)[0, 0])


@pytest.mark.parametrize("fill", [-1e9, -(2.0**32) + 1, float("-inf")])
@pytest.mark.parametrize("causal", [False, True])
def test_fill_attention_equals_sdpa_with_a_boolean_mask(fill, causal):
    """In float64 every real query row has a kept key, so any of these fills gives SDPA's output."""
    idx = padded_ids()
    B, T = idx.shape
    q, k, v = qkv(B, T)
    keep = build_mask(T, T, causal=causal, pad_mask=idx != 0)
    out, w = fill_attention(q, k, v, notes_mask(idx, causal), fill)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    real = idx != 0
    torch.testing.assert_close(out.transpose(1, 2)[real], want.transpose(1, 2)[real], rtol=1e-12, atol=1e-12)
    assert w[~keep.expand_as(w) & real[:, None, :, None]].abs().max() == 0  # masked keys: exactly no weight


def test_sdpa_weights_are_the_softmax_weights():
    idx = padded_ids()
    B, T = idx.shape
    q, k, _ = qkv(B, T)
    keep = build_mask(T, T, causal=True, pad_mask=idx != 0)
    got = sdpa_weights(q, k, keep)
    want = fill_weights(q, k, ~keep, float("-inf"))
    rows = (idx != 0)[:, None, :].expand(B, 2, T)
    torch.testing.assert_close(got[rows], want[rows], rtol=1e-12, atol=1e-12)


def test_an_additive_fill_beyond_float16_becomes_minus_inf_and_masked_fill_refuses_it():
    keep = torch.tensor([True, False])
    assert torch.isinf(additive_bias(keep, -1e9, torch.float16)[1])
    assert additive_bias(keep, torch.finfo(torch.float16).min, torch.float16)[1] == -65504
    assert additive_bias(keep, -1e9, torch.bfloat16)[1] == -998244352  # held, rounded
    with pytest.raises(RuntimeError, match="overflow"):
        torch.zeros(2, dtype=torch.float16).masked_fill(~keep, -1e9)


def test_a_fully_masked_row_uniform_nan_zero_or_its_own_softmax():
    q, k, _ = qkv(1, 4)
    none = torch.zeros(1, 1, 4, 4, dtype=torch.bool)
    assert torch.allclose(
        fill_weights(q, k, ~none, -1e9), torch.full((1, 2, 4, 4), 0.25, dtype=torch.float64)
    )
    assert torch.isnan(fill_weights(q, k, ~none, float("-inf"))).all()
    assert (sdpa_weights(q, k, none) == 0).all()  # SDPA's safe softmax
    # a finite fill added exactly shifts every score alike: the row is the unmasked softmax
    own = fill_weights(q, k, None, 0.0)
    torch.testing.assert_close(additive_weights(q, k, additive_bias(none, -1e3, q.dtype)), own)


def _model(cls, causal, backend="sdpa", pos="rope"):
    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size=20,
        d_model=16,
        n_layers=2,
        n_heads=2,
        max_seq_len=40,
        causal=causal,
        pos=pos,
        attn_backend=backend,
    )
    return cls(cfg).double().eval()


@pytest.mark.parametrize("cls, causal, left", [(Encoder, False, False), (LM, True, False), (LM, True, True)])
def test_real_tokens_ignore_added_pads_through_the_library_models_in_float64(cls, causal, left):
    m = _model(cls, causal)
    idx = padded_ids(left=left)
    L = idx.shape[1]
    with torch.no_grad():
        base = m(idx, pad_mask=idx != 0)
        for k in (1, 9):
            pads = torch.zeros(idx.shape[0], k, dtype=idx.dtype)
            more = torch.cat([pads, idx] if left else [idx, pads], 1)
            out = m(more, pad_mask=more != 0)
            out = out[:, k:] if left else out[:, :L]
            real = idx != 0
            # pads before the tokens move them to other rotary angles, whose tables hold float32 precision
            tol = 1e-8 if left else 1e-12
            torch.testing.assert_close(out[real], base[real], rtol=tol, atol=tol)
            unmasked = m(more)
            unmasked = unmasked[:, k:] if left else unmasked[:, :L]
            moved = (unmasked[real] - m(idx)[real]).abs().max()
            assert (moved > 1e-3) == (cls is Encoder or left)  # trailing pads: the causal mask hides them


def test_with_fill_keeps_the_weights_and_the_outputs_and_fixes_the_nan_of_minus_inf():
    """A left-padded decoder: the first pad rows see no key. The library's explicit path (−inf) is NaN at real
    tokens; the same weights with −1e9 give SDPA's outputs."""
    sdpa = _model(LM, True)
    explicit = _model(LM, True, backend="explicit")
    notes = with_fill(_model(LM, True), -1e9)
    assert sum(p.numel() for p in notes.parameters()) == sum(p.numel() for p in sdpa.parameters())
    idx = padded_ids(left=True)
    real = idx != 0
    with torch.no_grad():
        want = sdpa(idx, pad_mask=real)[real]
        assert torch.isnan(explicit(idx, pad_mask=real)[real]).any()
        torch.testing.assert_close(notes(idx, pad_mask=real)[real], want, rtol=1e-10, atol=1e-10)
        right = padded_ids()
        torch.testing.assert_close(explicit(right, pad_mask=right != 0), sdpa(right, pad_mask=right != 0))


def test_multihead_attention_reads_true_as_ignored():
    """torch.nn.MultiheadAttention's key_padding_mask: True = ignored, the notes' convention, not SDPA's."""
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).double().eval()
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    pads = torch.tensor([[False] * 4 + [True] * 2])
    with torch.no_grad():
        short = mha(x[:, :4], x[:, :4], x[:, :4], need_weights=False)[0]
        masked = mha(x, x, x, key_padding_mask=pads, need_weights=False)[0][:, :4]
        swapped = mha(x, x, x, key_padding_mask=~pads, need_weights=False)[0][:, :4]
    torch.testing.assert_close(masked, short, rtol=1e-12, atol=1e-12)
    assert (swapped - short).abs().max() > 1e-3


def test_hugging_faces_masks_are_the_librarys_with_the_dtypes_minimum():
    masking_utils = pytest.importorskip("transformers.masking_utils", reason="transformers is a test extra")
    eager_mask, sdpa_mask = masking_utils.eager_mask, masking_utils.sdpa_mask

    idx = padded_ids()
    B, T = idx.shape
    pad = idx != 0
    want = build_mask(T, T, causal=True, pad_mask=pad).expand(B, 1, T, T)
    got = sdpa_mask(batch_size=B, q_length=T, kv_length=T, attention_mask=pad, allow_is_causal_skip=False)
    assert torch.equal(got, want)  # True = attend
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        add = eager_mask(batch_size=B, q_length=T, kv_length=T, attention_mask=pad, dtype=dt)
        assert add.dtype == dt and torch.equal(add == 0, want)
        assert add[~want].unique().tolist() == [torch.finfo(dt).min]


def test_the_recipes_are_deterministic_and_hold_their_claims_at_a_small_size():
    cfg = {
        "vocab": 16,
        "lens": [6, 3, 1],
        "heads": 2,
        "head_dim": 8,
        "pads": [1, 5],
        "d_model": 16,
        "n_layers": 1,
        "n_heads": 2,
        "seed": 0,
    }
    for level in ("attention", "model"):
        a = run_padding({**cfg, "level": level, "kind": "encoder"}, Ctx)
        assert a == run_padding({**cfg, "level": level, "kind": "encoder"}, Ctx)
        for row in a["rows"]:
            assert (row["drift"] < 2**-20) == (row["variant"] == "pad"), row
    c = run_conventions({**cfg, "kind": "decoder"}, Ctx)
    assert c["mismatch"] == 0
    swapped = [r for r in c["rows"] if r["convention"] == "swapped"]
    assert all(r["allowed_max"] == 0 and r["change_min"] > 1e-3 for r in swapped)
    f = run_fill(
        {"dtype": "float16", "fill_n": 8, "heads": 1, "head_dim": 4, "scales": [1.0], "seed": 0}, Ctx
    )
    rows = {(r["fill"], r["path"]): r for r in f["rows"]}
    assert rows["-1e9", "masked_fill"]["raises"] and math.isinf(rows["-1e9", "masked_fill"]["cast"])
    assert rows["-1e9", "additive"]["full_nan"] and rows["bool", "sdpa_bool"]["full_zero"]
    assert rows["finfo.min", "masked_fill"]["full_uniform_dev"] == 0
