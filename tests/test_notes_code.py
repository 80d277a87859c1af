"""The restated snippets (`nn.notes_code`) and `notes_code`'s recipes against independent implementations:
PyTorch's SDPA and nn.MultiheadAttention, closed forms of the masks, the sinusoidal table and the FFN; the
failures the notes' code raises; which weights a module registers; and the training arms' changes to the
library LM."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tfclaims.harness.experiment import RunContext
from tfclaims.nn.blocks import FFN
from tfclaims.nn.config import ModelConfig
from tfclaims.nn.models import LM, n_params

from experiments.notes_code import notes_code as nc
from experiments.notes_code.recipes import apply_arm, created_parameters, run_snippets

B, H, T, DK = 2, 4, 7, 8
D = H * DK


def _qkv(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, T, DK, generator=g, dtype=torch.float64) for _ in range(3)]


def _ids():
    ids = torch.arange(1, T + 1).repeat(B, 1)
    ids[1, -3:] = 0  # the second row ends in three pads
    return ids


def _keep():
    """(B, 1, T, T) True = may attend: causal, and no pad key; built independently of the library."""
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    return causal[None, None] & (_ids() != 0)[:, None, None, :]


def _mha_reference(d, h, wq, wk, wv, wo, bias):
    """torch.nn.MultiheadAttention with the given projections (independent of the library)."""
    ref = nn.MultiheadAttention(d, h, bias=bias, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([wq.weight, wk.weight, wv.weight]))
        ref.out_proj.weight.copy_(wo.weight)
        if bias:
            ref.in_proj_bias.copy_(torch.cat([wq.bias, wk.bias, wv.bias]))
            ref.out_proj.bias.copy_(wo.bias)
    return ref.eval()


# ------------------------------------------------------------ the failures, as the notes' code raises them
def test_the_notes_attention_fails_as_written_and_equals_sdpa_once_it_runs():
    q, k, v = _qkv()
    keep = _keep()
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    with pytest.raises(NameError):
        nc.attention_000(q, k, v, keep)
    with pytest.raises(AttributeError, match="mask_fill"):
        nc.attention_002(q, k, v, keep)
    # without a mask it runs
    torch.testing.assert_close(nc.attention_002(q, k, v), F.scaled_dot_product_attention(q, k, v))
    for out in (
        nc.attention_000(q, k, v, keep, mode="runs")[0],
        nc.attention_002(q, k, v, keep, mode="runs"),
        nc.attention_004(q, k, v, ~keep.expand(B, H, T, T).clone(), DK)[0],
    ):
        torch.testing.assert_close(out, want, rtol=0, atol=1e-12)


def test_the_004_scale_follows_its_setting_not_the_tensor():
    q, k, v = _qkv()
    none = torch.zeros(B, H, T, T, dtype=torch.bool)
    wrong = nc.attention_004(q, k, v, none.clone(), 4 * DK)[0]
    torch.testing.assert_close(wrong, F.scaled_dot_product_attention(q, k, v, scale=1 / math.sqrt(4 * DK)))
    assert not torch.allclose(wrong, F.scaled_dot_product_attention(q, k, v))


def test_000_mha_cannot_be_built_as_written_and_its_copies_start_equal():
    with pytest.raises(NameError):
        nc.AnnotatedMHA(H, D, "as_written")
    lins = nc.AnnotatedMHA(H, D, "runs").linears
    assert all(torch.equal(lins[0].weight, m.weight) for m in lins[1:])
    lins = nc.AnnotatedMHA(H, D, "fixed").linears
    assert not torch.equal(lins[0].weight, lins[1].weight)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the .cuda() failure needs a torch without CUDA")
def test_004_mha_as_written_needs_cuda():
    m = nc.NotesMHA(nc.NoteSettings(D, H, DK), "attention", "as_written")
    x = torch.randn(B, T, D)
    with pytest.raises((AssertionError, RuntimeError)):
        m(x, x, x, nc.decoder_mask_004(_ids()))


def test_view_after_transpose_needs_contiguous():
    q = _qkv()[0]
    with pytest.raises(RuntimeError, match="view"):
        nc.merge_heads(q, contiguous=False)
    torch.testing.assert_close(nc.merge_heads(q, contiguous=True), q.transpose(1, 2).reshape(B, T, D))


# ------------------------------------------------------------ multi-head attention vs nn.MultiheadAttention
def test_annotated_mha_equals_torch_multihead_attention():
    torch.manual_seed(0)
    m = nc.AnnotatedMHA(H, D, "fixed").double().eval()
    x = torch.randn(B, T, D, dtype=torch.float64)
    keep = _keep()
    ref = _mha_reference(D, H, *m.linears, bias=True)
    want = ref(x, x, x, attn_mask=~keep.expand(B, H, T, T).reshape(B * H, T, T), need_weights=False)[0]
    torch.testing.assert_close(m(x, x, x, keep[:, 0]), want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("variant", ["attention", "bert"])
def test_notes_mha_fixed_equals_torch_multihead_attention_then_layernorm(variant):
    torch.manual_seed(1)
    m = nc.NotesMHA(nc.NoteSettings(D, H, DK), variant, "fixed").double().eval()
    x = torch.randn(B, T, D, dtype=torch.float64)
    masked = nc.decoder_mask_004(_ids())
    ref = _mha_reference(D, H, m.W_Q, m.W_K, m.W_V, m.out, bias=variant == "bert")
    per_head = masked.unsqueeze(1).expand(B, H, T, T).reshape(B * H, T, T)
    att = ref(x, x, x, attn_mask=per_head, need_weights=False)
    want = F.layer_norm(att[0] + x, (D,), m.norm.weight, m.norm.bias)
    torch.testing.assert_close(m(x, x, x, masked), want, rtol=0, atol=1e-12)


def test_bert_mha_redraws_its_projection_and_registers_neither_it_nor_its_layernorm():
    m = nc.NotesMHA(nc.NoteSettings(D, H, DK), "bert", "runs").double().eval()
    x = torch.randn(B, T, D, dtype=torch.float64)
    masked = nc.decoder_mask_004(_ids())
    assert n_params(m) == 3 * (D * D + D)  # W_Q, W_K, W_V only
    with created_parameters() as made:
        y1 = m(x, x, x, masked)
    assert [(c, n, tuple(p.shape)) for c, n, p in made] == [
        ("Linear", "weight", (D, D)),
        ("Linear", "bias", (D,)),
        ("LayerNorm", "weight", (D,)),
        ("LayerNorm", "bias", (D,)),
    ]
    assert not torch.allclose(y1, m(x, x, x, masked))
    # the projection is a default nn.Linear drawn from the global RNG at each call
    torch.manual_seed(5)
    y = nc.LinearPerCall(D, D)(x)
    torch.manual_seed(5)
    torch.testing.assert_close(y, nn.Linear(D, D, dtype=torch.float64)(x))
    # written as in the note, the layers sit on the CPU in float32: a float64 input cannot pass
    with pytest.raises(RuntimeError):
        nc.NotesMHA(nc.NoteSettings(D, H, DK), "bert", "as_written").double()(x, x, x, masked)


def test_layernorm_per_call_is_an_untrained_unit_gain_layernorm():
    x = torch.randn(B, T, D)
    norm = nc.LayerNormPerCall(D)
    assert list(norm.parameters()) == []
    torch.testing.assert_close(norm(x), F.layer_norm(x, (D,)))


# ---------------------------------------------------------------- masks, positions, FFN
def test_the_004_masks_match_their_closed_forms():
    ids = _ids()
    pad = (ids == 0)[:, None, :].expand(B, T, T)
    later = torch.ones(T, T, dtype=torch.bool).triu(1).expand(B, T, T)
    assert torch.equal(nc.pad_mask_004(ids, ids), pad)
    assert torch.equal(nc.decoder_mask_004(ids), pad | later)
    assert nc.decoder_mask_004(ids).dtype == torch.bool


def test_the_notes_sinusoid_table_matches_the_closed_form():
    d, L = 16, 6000
    pe64 = nc.notes_sinusoid_table(d, L, torch.float64)
    for pos in (0, 1, 17, 4999):
        for i in range(d // 2):
            w = 10000 ** (-2 * i / d)
            assert pe64[pos, 2 * i].item() == pytest.approx(math.sin(pos * w), abs=1e-12)
            assert pe64[pos, 2 * i + 1].item() == pytest.approx(math.cos(pos * w), abs=1e-12)
    err32 = (nc.notes_sinusoid_table(d, L) - pe64).abs().max(dim=1).values
    assert err32[:100].max() < 1e-5 < err32[-100:].max() < 2 * L * 2**-24  # grows with the position


@pytest.mark.parametrize("batch_first", [False, True])
def test_the_notes_positional_encoding_adds_row_t_to_position_t(batch_first):
    pe = nc.NotesPositionalEncoding(D, 50, batch_first=batch_first).eval()
    x = torch.randn(B, T, D)
    y = pe(x) if batch_first else pe(x.transpose(0, 1)).transpose(0, 1)
    torch.testing.assert_close(y, x + nc.notes_sinusoid_table(D, 50)[:T])


def test_the_notes_ffn_is_relu_mlp_of_width_4d_like_the_library():
    f = nc.notes_ffn(D).double()
    x = torch.randn(B, T, D, dtype=torch.float64)
    want = F.linear(torch.relu(F.linear(x, f[0].weight, f[0].bias)), f[2].weight, f[2].bias)
    torch.testing.assert_close(f(x), want)
    assert n_params(f) == n_params(FFN(D, 4 * D, "relu")) == 8 * D * D + 5 * D


# ---------------------------------------------------------------- the recipes
def test_run_snippets_rows_and_determinism():
    cfg = {"snip_batch": 2, "snip_len": 8, "snip_heads": 2, "snip_head_dim": 8, "snip_pads": 3, "pe_len": 100,
           "seed": 3}  # fmt: skip
    ctx = RunContext(torch.device("cpu"), progress=False)
    torch.manual_seed(0)
    a = run_snippets(cfg, ctx)
    torch.manual_seed(0)
    b = run_snippets(cfg, ctx)
    assert a == b
    rows = {r["snippet"]: r for r in a["rows"]}
    assert not rows["000-attention"]["runs"] and rows["000-attention"]["exception"].startswith("NameError")
    assert rows["002-attention-unmasked"]["runs"] and not rows["002-attention"]["runs"]
    assert rows["004-bert-mha"]["repeat_diff"] > 0 and rows["001-mha"]["repeat_diff"] == 0
    assert rows["004-bert-mha"]["unregistered"] == 16 * 16 + 16 + 2 * 16
    assert rows["004-mha"]["unregistered"] == 2 * 16
    assert all(rows[s]["err_sdpa"] < 1e-12 for s in ("000-mha", "001-mha", "004-mha", "004-bert-mha"))


REMOVED = {"fixed": 0, "bert": 64 * 64 + 64 + 2 * 64, "attention_ln": 2 * 64, "no_wo": 64 * 64 + 64}


@pytest.mark.parametrize("arm, removed", list(REMOVED.items()))
def test_apply_arm_removes_exactly_the_defects_weights(arm, removed):
    cfg = ModelConfig(vocab_size=20, d_model=64, n_layers=2, n_heads=4, max_seq_len=16, placement="post")
    torch.manual_seed(0)
    model = LM(cfg)
    before = n_params(model)
    apply_arm(model, arm)
    assert before - n_params(model) == 2 * removed
    idx = torch.randint(0, 20, (2, 16))
    model.eval()
    same = torch.equal(model(idx), model(idx))
    assert same == (arm != "bert")
    with pytest.raises(ValueError):
        apply_arm(LM(cfg), "nothing")
