"""The modern configurations' closed forms (experiments.ffn_share.recipes, experiments.ffn_share.recipes)
against instantiated
modules: the library's own (scaled down, and full size on the meta device), Hugging Face `transformers` models
built from configs, and torch's FLOP counter."""

import dataclasses

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from tfclaims.measure import counting
from tfclaims.nn.models import n_params

from experiments.ffn_share import recipes as fs

NEW = ("llama3-8b", "mistral-7b", "gemma-7b", "falcon-7b", "t5-v1.1-base", "parallel-generic")

# Scaled-down versions keeping what makes each one distinct: K/V sharing, attention width vs d, FFN kind and
# width, layout, tying, biases, the encoder–decoder structure.
TINY = {
    "llama3-8b": dict(
        vocab_size=97, d_model=64, n_layers=2, n_heads=8, n_kv_heads=2, d_ff=224, max_seq_len=64
    ),
    "mistral-7b": dict(
        vocab_size=89, d_model=64, n_layers=2, n_heads=8, n_kv_heads=2, d_ff=224, max_seq_len=64
    ),
    "gemma-7b": dict(
        vocab_size=101, d_model=48, n_layers=2, n_heads=4, head_dim=16, d_ff=384, max_seq_len=64
    ),
    "falcon-7b": dict(
        vocab_size=83, d_model=40, n_layers=2, n_heads=5, n_kv_heads=1, d_ff=160, max_seq_len=64
    ),
    "t5-v1.1-base": dict(vocab_size=79, d_model=32, n_layers=2, n_heads=4, d_ff=96, max_seq_len=64),
    "parallel-generic": dict(vocab_size=71, d_model=64, n_layers=2, n_heads=4, d_ff=256, max_seq_len=64),
}


def tiny(name: str) -> fs.Published:
    a = fs.MODERN[name]
    extra = {"window": 8} if a.window else {}
    extra |= {"decoder_layers": 2, "rel_pos_buckets": 8} if a.encoder_decoder else {}
    return dataclasses.replace(a, config=a.config.replace(**TINY[name]), **extra)


def test_every_new_configuration_has_a_scaled_down_version():
    assert set(TINY) == set(NEW) == set(fs.MODERN)


# ------------------------------------------------------------------ the library's own modules
@pytest.mark.parametrize("name", NEW)
def test_closed_forms_match_the_librarys_modules_scaled_down(name):
    a = tiny(name)
    c = a.config
    torch.manual_seed(0)
    model = fs.build(a)
    blk = model.blocks[0]
    assert n_params(blk.attn) == counting.attention_params(c)
    assert n_params(blk.ffn) == counting.ffn_params(c)
    assert n_params(blk) == fs.block_params(a)
    assert n_params(model) == fs.built_params(a)
    out = model(torch.randint(0, c.vocab_size, (2, 7)))  # the built model runs: (B, T, vocab) or (B, T, d)
    assert out.shape == (2, 7, c.d_model if a.encoder_decoder else c.vocab_size)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", NEW)
def test_closed_forms_match_the_librarys_modules_full_size(name):
    a = fs.MODERN[name]
    with torch.device("meta"):
        model = fs.build(a)
    assert n_params(model.blocks[0]) == fs.block_params(a)
    assert n_params(model) == fs.built_params(a)


def test_a_parallel_block_has_a_sequential_blocks_matrices_and_one_norm_fewer():
    a = tiny("parallel-generic")
    seq = dataclasses.replace(a, layout="sequential")
    d = a.config.d_model
    assert fs.block_params(seq) - fs.block_params(a) == counting.norm_params("layer", d) == 2 * d
    assert fs.block_params(seq) == counting.block_params(a.config)


def test_parallel_block_adds_both_branches_to_the_residual():
    a = tiny("parallel-generic")
    torch.manual_seed(0)
    blk = fs.ParallelBlock(a.config)
    x = torch.randn(2, 5, a.config.d_model)
    h = blk.norm(x)
    assert torch.allclose(blk(x), x + blk.attn(h) + blk.ffn(h), atol=1e-6)


def test_sequential_decoders_agree_with_the_librarys_own_whole_model_count():
    for name in ("llama3-8b", "mistral-7b", "gemma-7b"):
        a = fs.MODERN[name]
        assert fs.model_params(a) == counting.model_params(a.config)


# ------------------------------------------------------------------ Hugging Face transformers
transformers = pytest.importorskip("transformers", reason="transformers is a test extra")


def _meta(cls, config):
    with torch.device("meta"):
        return cls(config)


def _hf(name: str, a: fs.Published):
    """The transformers model for `a` (meta device) and its first-but-one block: (model, attention, FFN,
    block)."""
    c, t = a.config, transformers
    common = dict(vocab_size=c.vocab_size, hidden_size=c.d_model, num_hidden_layers=c.n_layers)
    heads = dict(num_attention_heads=c.n_heads, num_key_value_heads=c.kv_heads)
    if name in ("llama3-8b", "mistral-7b", "gemma-7b"):
        cls, cfg_cls = {
            "llama3-8b": (t.LlamaForCausalLM, t.LlamaConfig),
            "mistral-7b": (t.MistralForCausalLM, t.MistralConfig),
            "gemma-7b": (t.GemmaForCausalLM, t.GemmaConfig),
        }[name]
        kw = dict(**common, **heads, intermediate_size=c.ff, head_dim=c.dk, tie_word_embeddings=c.tie_weights)
        if name == "mistral-7b":
            kw["sliding_window"] = a.window
        m = _meta(cls, cfg_cls(**kw))
        layer = m.model.layers[1]
        return m, layer.self_attn, layer.mlp, layer
    if name in ("falcon-7b", "parallel-generic"):
        cfg = t.FalconConfig(
            **common,
            num_attention_heads=c.n_heads,
            multi_query=c.kv_heads == 1,
            parallel_attn=True,
            new_decoder_architecture=False,
            bias=False,
            ffn_hidden_size=c.ff,
            tie_word_embeddings=c.tie_weights,
        )
        m = _meta(t.FalconForCausalLM, cfg)
        layer = m.transformer.h[1]
        return m, layer.self_attention, layer.mlp, layer
    raise KeyError(name)


@pytest.mark.parametrize("name", ["llama3-8b", "mistral-7b", "gemma-7b", "falcon-7b", "parallel-generic"])
@pytest.mark.parametrize("size", ["tiny", "published"])
def test_decoders_match_transformers(name, size):
    a = tiny(name) if size == "tiny" else fs.MODERN[name]
    m, attn, mlp, layer = _hf(name, a)
    assert n_params(attn) == counting.attention_params(a.config)
    assert n_params(mlp) == counting.ffn_params(a.config)  # GeGLU: SwiGLU's three matrices
    assert n_params(layer) == fs.block_params(a)  # a parallel block: one LayerNorm
    assert n_params(m) == fs.model_params(a)


PUBLISHED = {
    "llama3-8b": 8_030_261_248,
    "mistral-7b": 7_241_732_096,
    "gemma-7b": 8_537_680_896,
    "falcon-7b": 6_921_720_704,
    "t5-v1.1-base": 247_577_856,
}


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_totals(name):
    assert fs.model_params(fs.MODERN[name]) == PUBLISHED[name]


def test_transformers_defaults_are_the_published_gemma_and_falcon():
    for cls, cfg, name in [
        (transformers.GemmaForCausalLM, transformers.GemmaConfig(), "gemma-7b"),
        (transformers.FalconForCausalLM, transformers.FalconConfig(), "falcon-7b"),
    ]:
        assert n_params(_meta(cls, cfg)) == fs.model_params(fs.MODERN[name])


@pytest.mark.parametrize("size", ["tiny", "published"])
def test_t5_matches_transformers(size):
    a = tiny("t5-v1.1-base") if size == "tiny" else fs.MODERN["t5-v1.1-base"]
    c = a.config
    cfg = transformers.T5Config(
        vocab_size=c.vocab_size,
        d_model=c.d_model,
        d_kv=c.dk,
        d_ff=c.ff,
        num_layers=c.n_layers,
        num_decoder_layers=a.decoder_layers,
        num_heads=c.n_heads,
        relative_attention_num_buckets=a.rel_pos_buckets,
        feed_forward_proj="gated-gelu",
        tie_word_embeddings=False,
    )
    m = _meta(transformers.T5ForConditionalGeneration, cfg)
    enc, dec = m.encoder.block[1], m.decoder.block[1]  # block 0 of each stack also holds the bucket table
    assert n_params(enc.layer[0].SelfAttention) == counting.attention_params(c)
    assert n_params(enc.layer[1].DenseReluDense) == counting.ffn_params(c)  # gated-gelu: three matrices
    assert n_params(enc) == fs.block_params(a)
    assert n_params(dec) == fs.decoder_block_params(a)
    assert n_params(m.encoder.block[0]) - n_params(enc) == a.rel_pos_buckets * c.n_heads
    # transformers 5 ties T5's output head to the shared embedding whatever the config says; the v1.1
    # checkpoints ship their own head, which the published total (and the closed form) count
    tied = m.lm_head.weight is m.shared.weight
    assert n_params(m) + (c.vocab_size * c.d_model if tied else 0) == fs.model_params(a)


def test_gptj_is_the_generic_parallel_block_plus_its_biases():
    a = tiny("parallel-generic")
    c = a.config
    cfg = transformers.GPTJConfig(
        vocab_size=c.vocab_size,
        n_embd=c.d_model,
        n_layer=c.n_layers,
        n_head=c.n_heads,
        n_inner=c.ff,
        rotary_dim=c.dk // 2,
        n_positions=c.max_seq_len,
    )
    m = _meta(transformers.GPTJForCausalLM, cfg)
    ffn_biases = c.n_layers * (c.ff + c.d_model)  # GPT-J's FFN keeps its biases, its attention has none
    assert n_params(m.transformer.h[0]) == fs.block_params(a) + c.ff + c.d_model
    assert n_params(m) == fs.model_params(a) + ffn_biases + c.vocab_size  # and the output head's bias


# ------------------------------------------------------------------ FLOPs
@pytest.mark.parametrize("window", [None, 1, 4, 16, 500])
@pytest.mark.parametrize("n", [1, 5, 17, 100])
def test_mean_keys_is_the_brute_force_mean(n, window):
    w = n if window is None else window
    assert fs.mean_keys(n, causal=True, window=window) == pytest.approx(
        sum(min(i, w) for i in range(1, n + 1)) / n
    )
    assert fs.mean_keys(n, causal=False, window=window) == min(n, w)


@pytest.mark.parametrize("name", ["llama3-8b", "gemma-7b", "falcon-7b", "parallel-generic"])
def test_token_flops_match_torchs_flop_counter(name):
    """The explicit backend materialises every query's scores against all T keys (masked, not skipped): the
    'all keys' convention. Per block and token: FFN + projections + 4·h·dk·T; plus the output head."""
    a = tiny(name)
    c = a.config.replace(attn_backend="explicit")
    a = dataclasses.replace(a, config=c)
    model = fs.build(a)
    T = 12
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        model(torch.randint(0, c.vocab_size, (1, T)))
    per_token = fs.token_flops(c, T, causal=False)
    expected = c.n_layers * T * (per_token["ffn"] + per_token["attention"]) + 2 * T * c.d_model * c.vocab_size
    assert fc.get_total_flops() == pytest.approx(expected)
    assert per_token["ffn"] == counting.ffn_flops(c, 1)
    assert per_token["scores"] == 4 * c.n_heads * c.dk * T


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("window", [None, 3000, 6000])
def test_crossover_is_where_attention_equals_the_ffn(causal, window):
    c = fs.MODERN["llama3-8b"].config  # needs k = 16384 keys on average: a window below that never gets there
    n = fs.crossover(c, causal=causal, window=window)
    if window is not None:
        assert n is None
        return
    t = fs.token_flops(c, n, causal=causal)
    assert t["attention"] == pytest.approx(t["ffn"]) and t["ffn_share"] == pytest.approx(0.5)


def test_crossover_beyond_the_window():
    c = fs.CATALOGUE[
        "gpt2-small"
    ].config  # k = 2d = 1536 keys: a window of 2000 binds before (n + 1)/2 gets there
    n = fs.crossover(c, causal=True, window=2000)
    assert n > 2000
    t = fs.token_flops(c, n, causal=True, window=2000)
    assert t["ffn_share"] == pytest.approx(0.5)
    assert fs.crossover(c, causal=True, window=4000) == pytest.approx(2 * 1536 - 1)  # reached inside it
    assert fs.crossover(c, causal=False, window=1536) == pytest.approx(1536)


def test_crossover_is_zero_when_the_projections_alone_match_the_ffn():
    c = fs.CATALOGUE["gpt2-small"].config.replace(d_ff=768)  # FFN 2·2d² = 4d²: no more than the projections
    assert fs.crossover(c) == 0.0


def test_gpt2_crossover_in_closed_form():
    """MHA, d_ff = 4d: FFN 16d², projections 8d², scores 4d per key → k = 2d: n = 4d − 1 causal, 2d full."""
    c = fs.CATALOGUE["gpt2-small"].config
    d = c.d_model
    assert fs.crossover(c, causal=True) == pytest.approx(4 * d - 1)
    assert fs.crossover(c, causal=False) == pytest.approx(2 * d)
