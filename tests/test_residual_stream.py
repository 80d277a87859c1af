"""measure.residual_stream: the stream read between blocks is the forward pass's own, its readings follow
their closed forms, and a deleted or reordered block runs as the same blocks composed by hand."""

import pytest
import torch
import torch.nn.functional as F

from tfclaims.measure.residual_stream import (
    ablation_losses,
    consecutive_cosines,
    layer_order,
    relative_updates,
    stream_states,
)
from tfclaims.nn.config import ModelConfig
from tfclaims.nn.models import LM
from tfclaims.train.loop import evaluate


def _model(placement: str, L: int = 4) -> LM:
    torch.manual_seed(0)
    return LM(
        ModelConfig(vocab_size=40, d_model=32, n_layers=L, n_heads=4, max_seq_len=16, placement=placement)
    )


def _by_hand(model: LM, idx, order) -> torch.Tensor:
    """Logits of the blocks run in `order`, composed by hand."""
    x = model.stack.embed(idx)
    for i in order:
        x = model.stack.blocks[i](x)
    if model.stack.final_norm is not None:
        x = model.stack.final_norm(x)
    return model.head(x)


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_the_states_are_the_forward_passs_own(placement):
    model, idx = _model(placement), torch.randint(0, 40, (2, 16))
    states = stream_states(model, idx)
    assert len(states) == 5 and all(s.shape == (2, 16, 32) for s in states)
    with torch.no_grad():
        torch.testing.assert_close(states[0], model.stack.embed(idx), rtol=0, atol=0)
        torch.testing.assert_close(_by_hand(model, idx, range(4)), model(idx), rtol=0, atol=0)
        x = states[-1] if model.stack.final_norm is None else model.stack.final_norm(states[-1])
        torch.testing.assert_close(model.head(x), model(idx), rtol=0, atol=0)
    assert not model.stack.blocks[0]._forward_pre_hooks and not model.stack.blocks[0]._forward_hooks


def test_relative_updates_and_cosines_follow_their_closed_forms():
    a = torch.randn(2, 3, 8)
    assert relative_updates([a, 3 * a, 3 * a]) == pytest.approx([2.0, 0.0])
    assert consecutive_cosines([a, -2 * a, -a]) == pytest.approx([-1.0, 1.0])


@torch.no_grad()
def test_a_deleted_or_swapped_block_is_the_blocks_composed_by_hand_and_the_order_comes_back():
    model, idx = _model("post"), torch.randint(0, 40, (2, 16))
    blocks = list(model.stack.blocks)
    for order in ([0, 1, 3], [0, 2, 1, 3], [3, 2, 1, 0]):
        with layer_order(model, order):
            got = model(idx)
        torch.testing.assert_close(got, _by_hand(model, idx, order), rtol=0, atol=0)
    assert list(model.stack.blocks) == blocks
    with pytest.raises(RuntimeError), layer_order(model, [1]):
        raise RuntimeError("a probe failed")
    assert list(model.stack.blocks) == blocks  # restored on an exception too


def test_deleting_a_pre_ln_block_whose_branches_add_nothing_costs_nothing():
    """A Pre-LN block with zeroed output projections is the identity: deleting it, or swapping it with a
    neighbour that is also the identity, leaves the loss exactly as it was; a live block's deletion does
    not."""
    model = _model("pre")
    for b in (1, 2):
        for lin in (model.stack.blocks[b].attn.wo, model.stack.blocks[b].ffn.w2):
            torch.nn.init.zeros_(lin.weight)
            if lin.bias is not None:
                torch.nn.init.zeros_(lin.bias)
    x = torch.randint(0, 40, (4, 17))
    batches = [(x[:, :-1], x[:, 1:])]
    out = ablation_losses(model, lambda m: evaluate(m, batches, "cpu"))
    assert len(out["deleted"]) == 4 and len(out["swapped"]) == 3
    assert out["deleted"][1] == out["deleted"][2] == out["swapped"][1] == 0.0
    assert out["deleted"][0] != 0.0 and out["deleted"][3] != 0.0
    with torch.no_grad():
        assert out["loss"] == pytest.approx(
            float(F.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten()))
        )
