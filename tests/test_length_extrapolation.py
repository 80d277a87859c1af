"""length_extrapolation's library code against independent implementations: ALiBi's slopes against Press et
al.'s definition (written out, and as Hugging Face's BLOOM builds them), its attention against a hand-written
softmax and against SDPA given an explicit bias tensor (BLOOM's, which differs by a constant per row), the
swap into a built LM (weights kept, nothing else changed), the learned table's extensions, and the recipe end
to end at a tiny size (each arm, determinism)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tfclaims.harness.experiment import RunContext
from tfclaims.harness.registry import load
from tfclaims.measure.lengths import match_norms
from tfclaims.nn.config import ModelConfig
from tfclaims.nn.models import LM

from experiments.length_extrapolation.alibi import ALiBiAttention, alibi_bias, alibi_slopes, use_alibi
from experiments.length_extrapolation.recipes import (
    extended_lm,
    extrapolation_run,
    longest_window,
    stored_table,
)

CPU = RunContext(torch.device("cpu"), progress=False)


# ---------------------------------------------------------------------------- slopes
def press_slopes(n: int) -> list[float]:
    """Press et al.'s rule as their paper states it: for n a power of two, the geometric sequence that starts
    at 2^(−8/n) and has that ratio; otherwise the closest power of two below n, then every other slope of
    twice that power, as many as needed."""
    if math.log2(n).is_integer():
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]
    p = 2 ** math.floor(math.log2(n))
    return press_slopes(p) + press_slopes(2 * p)[0::2][: n - p]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 8, 12, 16, 20, 32])
def test_slopes_follow_press_et_al(n):
    assert alibi_slopes(n).tolist() == pytest.approx(press_slopes(n), rel=1e-12)


def test_slopes_written_out():
    assert alibi_slopes(8).tolist() == [2.0**-i for i in range(1, 9)]  # the paper's 1/2, 1/4, ..., 1/256
    assert alibi_slopes(4).tolist() == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]
    assert alibi_slopes(6).tolist() == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]
    with pytest.raises(ValueError):
        alibi_slopes(0)


@pytest.mark.parametrize("n", [4, 6, 8, 12, 16])
def test_slopes_match_bloom(n):
    bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom")
    t = bloom.build_alibi_tensor(torch.ones(1, 3, dtype=torch.long), n, torch.float64)  # (n, 1, 3): m·j
    assert t[:, 0, 1].tolist() == pytest.approx(alibi_slopes(n).tolist(), rel=1e-6)


def test_bias_is_minus_slope_times_distance_below_the_diagonal():
    m = alibi_slopes(4)
    b = alibi_bias(m, 5, dtype=torch.float64)
    for h in range(4):
        for i in range(5):
            for j in range(5):
                want = -m[h].item() * (i - j) if j <= i else -math.inf
                assert b[h, i, j].item() == want


# ---------------------------------------------------------------------------- attention
def _cfg(**kw) -> ModelConfig:
    base = dict(vocab_size=17, d_model=32, n_layers=2, n_heads=4, max_seq_len=64, pos="none")
    return ModelConfig(**{**base, **kw})


def reference_attention(attn, x: torch.Tensor) -> torch.Tensor:
    """Softmax attention by hand, head by head and query by query, in float64: logit(i, j) = q_i·k_j·scale −
    m_h·(i − j) over keys j ≤ i."""
    B, T, _ = x.shape
    h, kv, dk = attn.h, attn.kv, attn.dk
    q = attn.wq(x).double().view(B, T, h, dk)
    k = attn.wk(x).double().view(B, T, kv, dk)
    v = attn.wv(x).double().view(B, T, kv, dk)
    m = alibi_slopes(h)
    out = torch.zeros(B, T, h, dk, dtype=torch.float64)
    for b in range(B):
        for head in range(h):
            g = head // (h // kv)  # the K/V head this query head shares
            for i in range(T):
                logits = torch.stack(
                    [q[b, i, head] @ k[b, j, g] * attn.scale - m[head] * (i - j) for j in range(i + 1)]
                )
                w = torch.softmax(logits, 0)
                out[b, i, head] = (w[:, None] * v[b, : i + 1, g]).sum(0)
    return F.linear(out.reshape(B, T, h * dk), attn.wo.weight.double(), attn.wo.bias.double()).float()


@pytest.mark.parametrize("kv", [None, 2, 1])
def test_attention_matches_a_hand_written_softmax(kv):
    torch.manual_seed(0)
    attn = ALiBiAttention(_cfg(n_kv_heads=kv))
    x = torch.randn(2, 9, 32)
    want = reference_attention(attn, x)
    assert torch.allclose(attn(x), want, atol=1e-5)


def bloom_style_mask(h: int, T: int) -> torch.Tensor:
    """(h, T, T): +m·j on every key (a constant per query row less than −m·(i − j), which softmax ignores) and
    −inf on future keys; built from BLOOM's tensor where transformers is present, else from the slopes."""
    try:
        from transformers.models.bloom.modeling_bloom import build_alibi_tensor

        rows = build_alibi_tensor(torch.ones(1, T, dtype=torch.long), h, torch.float32)  # (h, 1, T)
    except ImportError:
        rows = alibi_slopes(h).float()[:, None, None] * torch.arange(T).float()
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    return rows.expand(h, T, T).masked_fill(future, -math.inf)


@pytest.mark.parametrize("kv", [None, 2])
def test_attention_matches_sdpa_with_an_explicit_bias_and_its_gradients(kv):
    torch.manual_seed(1)
    attn = ALiBiAttention(_cfg(n_kv_heads=kv))
    x = torch.randn(3, 24, 32, requires_grad=True)
    B, T, _ = x.shape
    q = attn.wq(x).view(B, T, attn.h, attn.dk).transpose(1, 2)
    k = attn.wk(x).view(B, T, attn.kv, attn.dk).transpose(1, 2).repeat_interleave(attn.h // attn.kv, 1)
    v = attn.wv(x).view(B, T, attn.kv, attn.dk).transpose(1, 2).repeat_interleave(attn.h // attn.kv, 1)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=bloom_style_mask(attn.h, T), scale=attn.scale)
    want = attn.wo(y.transpose(1, 2).reshape(B, T, -1))
    got = attn(x)
    assert torch.allclose(got, want, atol=1e-5)
    g_want = torch.autograd.grad(want.square().sum(), (x, attn.wq.weight))
    g_got = torch.autograd.grad(got.square().sum(), (x, attn.wq.weight))
    for a, b in zip(g_got, g_want):
        assert torch.allclose(a, b, atol=1e-4)


def test_attention_refuses_what_it_does_not_support():
    attn = ALiBiAttention(_cfg())
    x = torch.randn(1, 4, 32)
    with pytest.raises(ValueError):
        attn(x, pad_mask=torch.ones(1, 4, dtype=torch.bool))
    with pytest.raises(ValueError):
        ALiBiAttention(_cfg(causal=False))


def test_use_alibi_keeps_every_weight_and_only_adds_the_bias():
    torch.manual_seed(2)
    plain = LM(_cfg())
    model = LM(_cfg())
    model.load_state_dict(plain.state_dict())
    use_alibi(model)
    assert all(isinstance(b.attn, ALiBiAttention) for b in model.blocks)
    a, b = plain.state_dict(), model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # slopes are not saved
    x = torch.randint(0, 17, (2, 12))
    assert not torch.allclose(model(x), plain(x), atol=1e-4)  # the bias changes the output
    for blk in model.blocks:
        blk.attn.slopes.zero_()
    assert torch.allclose(model(x), plain(x), atol=1e-5)  # with zero slopes: the causal LM without positions
    with pytest.raises(ValueError):
        use_alibi(LM(_cfg(pos="learned")))


def test_alibi_lm_runs_past_any_length_it_was_built_for():
    model = use_alibi(LM(_cfg(max_seq_len=40)))
    x = torch.randint(0, 17, (1, 40))
    assert longest_window(model, x, [8, 16, 40]) == 40
    y = model(x)
    assert torch.allclose(y[:, :8], model(x[:, :8]), atol=1e-5)  # causal: a prefix sees only itself


# ---------------------------------------------------------------------------- the learned table's extension
def _learned_lm(T=8) -> LM:
    torch.manual_seed(3)
    model = LM(_cfg(pos="learned", max_seq_len=T, emb_scale=True))
    match_norms(model)
    with torch.no_grad():
        stored_table(model).normal_(0.0, 1.0)  # a "trained" table, far from the initial draw
    return model


@pytest.mark.parametrize("how", ["copy", "random"])
def test_extension_keeps_rows_below_t_and_every_other_weight(how):
    model, T, n = _learned_lm(), 8, 32
    ext = extended_lm(model, n, how, torch.Generator().manual_seed(0))
    old, new = stored_table(model), stored_table(ext)
    assert new.shape == (n, old.shape[1]) and torch.equal(new[:T], old)
    a, b = model.state_dict(), ext.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a if not k.startswith("stack.pos."))
    if how == "copy":
        assert torch.equal(new, old.repeat(n // T, 1))
    else:  # drawn as match_norms draws a table: N(0, 1/(2d))
        assert abs(new[T:].std().item() * math.sqrt(2 * 32) - 1) < 0.15
    x = torch.randint(0, 17, (2, n))
    assert torch.allclose(ext(x)[:, :T], model(x[:, :T]), atol=1e-5)  # positions < T see rows < T only
    assert longest_window(model, x, [T, T + 1, 2 * T]) == T
    assert longest_window(ext, x, [T, T + 1, 2 * T, n]) == n


def test_extension_rows_are_the_scaled_table_as_used():
    """The model adds √d × the stored table: a copied position reads exactly the row it copies."""
    model = _learned_lm()
    ext = extended_lm(model, 16, "copy", torch.Generator())
    assert torch.equal(ext.stack.pos.weight[8:], model.stack.pos.weight)
    with pytest.raises(ValueError):
        extended_lm(model, 16, "zeros", torch.Generator())


# ---------------------------------------------------------------------------- the recipe
EXP = load("length_extrapolation")


def _config(pos: str, extend: bool = False) -> dict:
    p = {**EXP.profiles["quick"], "steps": 3, "eval_every": 3, "seq_len": 8, "ft_steps": 2}
    c = next(c for c in EXP.grid(p) if c["pos"] == pos)
    return {**c, "extend": extend, "seed": 0}


@pytest.mark.parametrize("pos", ["sinusoidal", "rope", "alibi"])
def test_recipe_reads_every_position_of_the_longest_window(pos):
    m = extrapolation_run(_config(pos), CPU)
    n = 8 * max(_config(pos)["mults"])
    assert len(m["position_loss"]["at_0"]) == n and m["longest_window"] == n
    assert all(math.isfinite(v) for v in m["position_loss"]["at_0"])


def test_recipe_learned_stops_at_t_and_extends_both_ways():
    m = extrapolation_run(_config("learned", extend=True), CPU)
    T = 8
    assert m["longest_window"] == T and len(m["position_loss"]["at_0"]) == T
    for how in ("copy", "random"):
        e = m["extended"][how]
        assert len(e["position_loss"]["at_0"]) == 8 * T and e["kept_change"] < 1e-5
        assert len(e["trained"]["position_loss"]["at_0"]) == 8 * T
    assert m["extended"]["copy"]["tile_error"] == 0.0 and m["extended"]["random"]["tile_error"] > 0
    assert "extended" not in extrapolation_run(_config("learned"), CPU)


def test_recipe_is_deterministic():
    """Seeded as the runner seeds a run (`device.seed_all`), the same config gives the same numbers."""
    from tfclaims.device import seed_all

    def run():
        seed_all(0)
        return extrapolation_run(_config("alibi"), CPU)

    a, b = run(), run()
    assert a["position_loss"] == b["position_loss"] and a["val_loss"] == b["val_loss"]


def test_alibi_arm_starts_from_the_same_weights_as_a_model_without_positions():
    """The ALiBi arm's prepare step draws nothing after match_norms: same seed, same weights as NoPE."""
    from tfclaims.train.profiles import model_config

    def build(alibi: bool):
        torch.manual_seed(5)
        model = LM(
            model_config(
                {"d_model": 32, "n_layers": 1, "n_heads": 2, "seq_len": 8}, 17, pos="none", emb_scale=True
            )
        )
        match_norms(model)
        return use_alibi(model) if alibi else model

    a, b = build(False).state_dict(), build(True).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
