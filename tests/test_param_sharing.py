"""ALBERT's counts and sharing: the closed forms equal Hugging Face's BertModel and AlbertModel built from
their configs (on the meta device, at Lan et al.'s sizes), and a shared stack is the unshared one with every
block holding the first block's weights, trained through one set of weights."""

import copy

import pytest
import torch

from tfclaims.measure.counting import model_params
from tfclaims.nn.config import ModelConfig
from tfclaims.nn.models import LM, n_params

from experiments.albert_sharing.param_sharing import SIZES, albert_params, bert_params, shared_stack_params
from experiments.albert_sharing.sharing import share_blocks

transformers = pytest.importorskip("transformers")


def _hf_count(model) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("size", SIZES, ids=lambda s: s.name)
def test_closed_forms_equal_hugging_faces_models_at_the_published_sizes(size):
    common = dict(
        vocab_size=size.V,
        hidden_size=size.H,
        num_hidden_layers=size.L,
        num_attention_heads=size.H // 64,
        intermediate_size=size.I,
        max_position_embeddings=512,
        type_vocab_size=2,
    )
    with torch.device("meta"):
        bert = transformers.BertModel(transformers.BertConfig(**common))
        albert = transformers.AlbertModel(transformers.AlbertConfig(embedding_size=size.E, **common))
        unshared = transformers.AlbertModel(
            transformers.AlbertConfig(embedding_size=size.E, num_hidden_groups=size.L, **common)
        )
    assert _hf_count(bert) == bert_params(size.V, size.H, size.L, size.I)
    assert _hf_count(albert) == albert_params(size.V, size.E, size.H, size.L, size.I)
    assert _hf_count(unshared) == albert_params(size.V, size.E, size.H, size.L, size.I, shared=False)


def test_published_ratios_are_reproduced():
    base = SIZES[0]
    assert bert_params(base.V, base.H, base.L, base.I) == pytest.approx(108e6, rel=0.02)
    assert albert_params(base.V, base.E, base.H, base.L, base.I) == pytest.approx(12e6, rel=0.03)


def test_a_shared_stack_is_the_unshared_one_with_the_first_blocks_weights_everywhere():
    torch.manual_seed(0)
    c = ModelConfig(vocab_size=50, d_model=32, n_layers=4, n_heads=4, max_seq_len=16)
    shared = share_blocks(LM(c))
    assert n_params(shared) == shared_stack_params(c) < model_params(c)
    assert len({id(b) for b in shared.stack.blocks}) == 1 and len(shared.stack.blocks) == 4
    copied = copy.deepcopy(shared)
    copied.stack.blocks = torch.nn.ModuleList(copy.deepcopy(shared.stack.blocks[0]) for _ in range(4))
    assert n_params(copied) == model_params(c)
    x = torch.randint(0, 50, (2, 16))
    torch.testing.assert_close(shared(x), copied(x), rtol=0, atol=0)
    # one set of weights: its gradient is the sum of the four copies' gradients
    shared(x).square().mean().backward()
    copied(x).square().mean().backward()
    w = "attn.wq.weight"
    summed = sum(dict(b.named_parameters())[w].grad for b in copied.stack.blocks)
    torch.testing.assert_close(dict(shared.stack.blocks[0].named_parameters())[w].grad, summed)
