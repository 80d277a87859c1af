"""Parameter counts: closed forms (tfclaims.measure.counting) = instantiated modules = independent
implementations."""

import itertools

import pytest
import torch
from torch import nn

from tfclaims.measure.counting import (
    attention_params,
    block_params,
    cross_attention_block_params,
    ffn_params,
    model_params,
)
from tfclaims.nn.config import PRESETS, ModelConfig
from tfclaims.nn.models import LM, Encoder, n_params

GRID = [
    dict(norm=norm, ffn=ffn, bias=bias, n_kv_heads=kv, tie_weights=tie, pos=pos, n_experts=ne)
    for norm, ffn, bias, kv, tie, pos, ne in itertools.product(
        ["layer", "rms", "batch", "none"],
        ["gelu", "swiglu"],
        [True, False],
        [8, 2, 1],
        [True, False],
        ["learned", "rope"],
        [0, 4],
    )
][::7]  # a spread of combinations, kept small


@pytest.mark.parametrize("kw", GRID)
def test_closed_forms_match_modules(kw):
    cfg = ModelConfig(vocab_size=71, d_model=64, n_layers=3, n_heads=8, max_seq_len=33, **kw)
    model = LM(cfg)
    blk = model.blocks[0]
    assert n_params(blk.attn) == attention_params(cfg)
    assert n_params(blk.ffn) == ffn_params(cfg)
    assert n_params(blk) == block_params(cfg)
    assert n_params(model) == model_params(cfg)


def test_gpt2_small_published_count():
    with torch.device("meta"):
        m = LM(PRESETS["gpt2-small"])
    assert n_params(m) == model_params(PRESETS["gpt2-small"]) == 124_439_808
    assert n_params(m.blocks[0]) == 7_087_872 and n_params(m.blocks[0].ffn) == 4_722_432


def test_original_transformer_layers_match_torch():
    for name in ("transformer-base", "transformer-big"):
        c = PRESETS[name]
        with torch.device("meta"):
            enc = nn.TransformerEncoderLayer(c.d_model, c.n_heads, c.ff)
            dec = nn.TransformerDecoderLayer(c.d_model, c.n_heads, c.ff)
            ours = Encoder(c).blocks[0]
        assert n_params(enc) == block_params(c) == n_params(ours)
        assert n_params(dec) == cross_attention_block_params(c)


transformers = pytest.importorskip("transformers", reason="transformers is a test extra")


def _hf_count(model_cls, config):
    with torch.device("meta"):
        return n_params(model_cls(config))


@pytest.mark.parametrize(
    "name, n_embd, n_layer, n_head",
    [
        ("gpt2-small", 768, 12, 12),
        ("gpt2-medium", 1024, 24, 16),
        ("gpt2-large", 1280, 36, 20),
        ("gpt2-xl", 1600, 48, 25),
    ],
)
def test_gpt2_matches_transformers(name, n_embd, n_layer, n_head):
    cfg = transformers.GPT2Config(n_embd=n_embd, n_layer=n_layer, n_head=n_head)
    assert _hf_count(transformers.GPT2LMHeadModel, cfg) == model_params(PRESETS[name])


@pytest.mark.parametrize(
    "name, hidden, layers, heads", [("bert-base", 768, 12, 12), ("bert-large", 1024, 24, 16)]
)
def test_bert_matches_transformers(name, hidden, layers, heads):
    cfg = transformers.BertConfig(
        hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=4 * hidden
    )
    with torch.device("meta"):
        hf = transformers.BertModel(cfg, add_pooling_layer=False)
    assert n_params(hf) == model_params(PRESETS[name])


def test_llama_and_gqa_and_moe_match_transformers():
    c = PRESETS["llama-7b"]
    cfg = transformers.LlamaConfig(
        hidden_size=c.d_model,
        intermediate_size=c.ff,
        num_hidden_layers=c.n_layers,
        num_attention_heads=c.n_heads,
        vocab_size=c.vocab_size,
    )
    assert _hf_count(transformers.LlamaForCausalLM, cfg) == model_params(c) == 6_738_415_616
    c = PRESETS["llama2-70b"]
    cfg = transformers.LlamaConfig(
        hidden_size=c.d_model,
        intermediate_size=c.ff,
        num_hidden_layers=c.n_layers,
        num_attention_heads=c.n_heads,
        num_key_value_heads=c.kv_heads,
        vocab_size=c.vocab_size,
    )
    assert _hf_count(transformers.LlamaForCausalLM, cfg) == model_params(c)
    c = PRESETS["mixtral-8x7b"]
    cfg = transformers.MixtralConfig(
        hidden_size=c.d_model,
        intermediate_size=c.ff,
        num_hidden_layers=c.n_layers,
        num_attention_heads=c.n_heads,
        num_key_value_heads=c.kv_heads,
        num_local_experts=c.n_experts,
        num_experts_per_tok=c.moe_top_k,
        vocab_size=c.vocab_size,
    )
    assert _hf_count(transformers.MixtralForCausalLM, cfg) == model_params(c)
