"""attention_vs_lstm's pieces: the recall-k targets, the matched parameter counts (against PyTorch's own
LSTM), and a sanity check that the task is learnable by attention and not by a model that cannot look back."""

import torch

from tfclaims.nn.models import n_params

from experiments.attention_vs_lstm.recipes import layer_pair, recall_batch, recall_model
from experiments.attention_vs_lstm.recurrent import lstm_params, matched_hidden


def test_recall_targets_are_the_token_k_back_and_earlier_positions_are_not_scored():
    x, y = recall_batch(torch.Generator().manual_seed(0), 4, 20, 10, k=3)
    assert (y[:, :3] == -1).all()
    assert torch.equal(y[:, 3:], x[:, :-3])
    assert x.max() < 10 and x.min() >= 0


def test_lstm_parameter_count_is_pytorchs_and_the_pair_is_matched():
    for d, h in ((16, 7), (64, 40)):
        assert lstm_params(d, h) == n_params(torch.nn.LSTM(d, h))
    attn, lstm = layer_pair(64, 4, 32)
    assert abs(n_params(lstm) - n_params(attn)) <= lstm_params(64, matched_hidden(64, n_params(attn)) + 1) - (
        lstm_params(64, matched_hidden(64, n_params(attn)))
    )
    cfg = {"vocab": 16, "d_model": 32, "n_heads": 2, "seq_len": 24}
    a, r = recall_model({**cfg, "arch": "attention"}), recall_model({**cfg, "arch": "lstm"})
    assert abs(n_params(a) - n_params(r)) / n_params(a) < 0.03


def test_both_recall_models_are_causal():
    """Changing a later token leaves earlier positions' logits unchanged (the target at t is never visible
    through the future)."""
    cfg = {"vocab": 16, "d_model": 32, "n_heads": 2, "seq_len": 24}
    for arch in ("attention", "lstm"):
        torch.manual_seed(0)
        m = recall_model({**cfg, "arch": arch}).eval()
        x = torch.randint(0, 16, (2, 24))
        x2 = x.clone()
        x2[:, 15] = (x2[:, 15] + 1) % 16
        with torch.no_grad():
            torch.testing.assert_close(m(x)[:, :15], m(x2)[:, :15], rtol=0, atol=0)
            assert not torch.equal(m(x)[:, 15:], m(x2)[:, 15:])
