"""label_smoothing's tuned scoring: every test token once, and the streamed scores equal the scores of the
whole set's logits (`measure.calibration.scores`, an independent path)."""

import pytest
import torch

from experiments.label_smoothing.calibration import reliability, scores, top1
from experiments.label_smoothing.grid import ECE_BINS
from experiments.label_smoothing.recipes import _stream_scores, tiled_windows


class Bigram(torch.nn.Module):
    """A stand-in LM: logits (B, T, V) from a fixed random table of the current token."""

    def __init__(self, vocab: int = 37, seed: int = 0):
        super().__init__()
        self.table = torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(seed)) * 3

    def forward(self, x):
        return self.table[x]


@pytest.mark.parametrize("n, seq_len, batch", [(1000, 16, 7), (17, 4, 2), (65, 64, 32)])
def test_tiled_windows_target_every_token_but_a_remainder_once_in_order(n, seq_len, batch):
    data = torch.arange(n, dtype=torch.int32)
    bs = tiled_windows(data, seq_len, batch)
    x = torch.cat([b[0] for b in bs]).flatten()
    y = torch.cat([b[1] for b in bs]).flatten()
    full = (n - 1) // seq_len * seq_len
    assert torch.equal(y, torch.arange(1, full + 1)) and torch.equal(x, y - 1)  # next-token pairs
    assert all(b[0].shape[0] <= batch and b[0].shape[1] == seq_len for b in bs)
    assert x.dtype == torch.long


@pytest.mark.parametrize("temperature", [1.0, 0.7, 2.5])
def test_streamed_scores_equal_the_scores_of_all_logits_at_once(temperature):
    model = Bigram()
    data = torch.randint(0, 37, (3000,), generator=torch.Generator().manual_seed(1))
    bs = tiled_windows(data, 20, 8)
    out = _stream_scores(model, bs, "cpu", temperature)
    lg = torch.cat([model(x) for x, _ in bs]).flatten(0, 1)
    y = torch.cat([y for _, y in bs]).flatten()
    assert out["test_tokens"] == y.numel()
    for tag, t in (("", 1.0), ("_ts", temperature)):
        ref = scores(lg, y, t, ECE_BINS)
        assert out[f"test_nll{tag}"] == pytest.approx(ref["nll"], rel=1e-5)
        assert out["test_acc"] == pytest.approx(ref["acc"])
        assert out[f"test_ece{tag}"] == pytest.approx(ref["ece"], abs=1e-5)
        assert out[f"test_conf{tag}"] == pytest.approx(ref["conf"], rel=1e-5)
        want = reliability(*top1(lg / t, y), ECE_BINS)
        assert out[f"reliability{tag}"]["count"] == want["count"]
