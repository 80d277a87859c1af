"""The paged KV cache against the contiguous one (same logits from generation, same keys and values from every
update), and the serving simulator's allocators against hand-worked traces."""

import pytest
import torch

from tfclaims.nn.attention import KVCache
from tfclaims.nn.config import ModelConfig
from tfclaims.nn.models import LM

from experiments.paged_kv.kv_paging import Request, reservation, simulate, trace
from experiments.paged_kv.paged_cache import PagedKVCache


@pytest.mark.parametrize("block", [1, 3, 16])
def test_paged_update_returns_what_the_contiguous_cache_holds(block):
    g = torch.Generator().manual_seed(0)
    dense, paged = KVCache(2, 3, 2, 20, 4), PagedKVCache(2, 3, 2, 20, 4, block=block, seed=5)
    for t in (5, 1, 1, 7):
        k, v = (torch.randn(3, 2, t, 4, generator=g) for _ in range(2))
        for layer in range(2):
            for a, b in zip(dense.update(layer, k, v), paged.update(layer, k, v)):
                torch.testing.assert_close(a, b, rtol=0, atol=0)
        dense.pos += t
        paged.pos += t
    assert len(set(paged.table.flatten().tolist())) == paged.table.numel()  # every block owned once
    with pytest.raises(ValueError, match="holds 20 positions"):
        paged.update(0, torch.zeros(3, 2, 8, 4), torch.zeros(3, 2, 8, 4))


def test_decoding_with_either_cache_gives_the_same_logits():
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=30, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=40)
    model = LM(cfg).eval()
    idx = torch.randint(0, 30, (2, 6))
    out = []
    for cache in (KVCache.for_model(cfg, 2), PagedKVCache.for_model(cfg, 2, block=4)):
        with torch.no_grad():
            logits = [model(idx, cache=cache)]
            for _ in range(5):
                logits.append(model(logits[-1][:, -1:].argmax(-1), cache=cache))
        out.append(torch.cat(logits, 1))
    torch.testing.assert_close(out[0], out[1])


def test_reservations():
    r = Request(100, 29)  # 129 tokens
    assert reservation("max", r, 2048) == 2048
    assert reservation("pow2", r, 2048) == 256
    assert reservation("oracle", r, 2048) == 129
    assert reservation("pow2", Request(1500, 1000), 2048) == 2048  # capped at the model's maximum


def test_contiguous_max_runs_one_request_at_a_time_when_the_budget_is_one_maximum():
    reqs = [Request(3, 2)] * 4
    out = simulate(reqs, 8, allocator="max", max_len=8)
    assert out["iterations"] == 8 and out["mean_batch"] == 1.0  # 2 iterations each, one after another
    # written while others wait: 4 then 5 of 8 slots, per request: waste 1 − 9/16 over the 6 busy iterations
    assert out["saturated"] == 6
    assert out["waste"] == pytest.approx(1 - (4 + 5) * 3 / (6 * 8))


def test_paging_packs_them_and_preempts_the_newest_when_blocks_run_out():
    """Worked by hand: all four admitted with one block each (prompt + first token = 4 tokens); at the second
    iteration the first two each need a block, taken from the two newest, which are queued again with their
    first token as prompt (Request(4, 1): two blocks each) and finish together at the third."""
    reqs = [Request(3, 2)] * 4
    out = simulate(reqs, 16, allocator="paged", max_len=8, block=4)
    assert out["iterations"] == 3 and out["preempted"] == 2
    assert out["mean_batch"] == pytest.approx((4 + 2 + 2) / 3)
    assert out["tokens_per_iteration"] * out["iterations"] == 8  # every output token produced once
    assert (
        out["mean_batch"] > simulate(reqs, 16, allocator="max", max_len=8)["mean_batch"] == 2.0
    )  # two regions


def test_smaller_blocks_waste_less():
    reqs = trace(200, 0, prompt_mean=40, output_mean=80, sigma=1.0, max_len=512)
    waste = [simulate(reqs, 4096, allocator="paged", max_len=512, block=b)["waste"] for b in (1, 16, 128)]
    assert waste[0] < waste[1] < waste[2]


def test_a_paged_request_short_of_blocks_preempts_the_newest_and_still_finishes():
    reqs = [Request(4, 12), Request(4, 12)]
    out = simulate(reqs, 20, allocator="paged", max_len=16, block=4)
    assert out["preempted"] >= 1
    assert out["tokens_per_iteration"] * out["iterations"] == 24  # every output token produced


def test_traces_are_seeded_and_bounded():
    a = trace(500, 3, prompt_mean=161, output_mean=338, sigma=1.0, max_len=2048)
    assert a == trace(500, 3, prompt_mean=161, output_mean=338, sigma=1.0, max_len=2048)
    assert all(1 <= r.prompt and 1 <= r.output and r.total <= 2048 for r in a)
    assert 250 < sum(r.output for r in a) / len(a) < 400  # the declared mean, up to the cut and sampling


def test_bad_names_are_refused():
    with pytest.raises(ValueError, match="unknown allocator"):
        simulate([Request(1, 1)], 8, allocator="buddy", max_len=8)
    with pytest.raises(ValueError, match="does not fit the paged allocator's budget"):
        simulate([Request(9, 1)], 8, allocator="paged", max_len=16)
    with pytest.raises(ValueError, match="does not fit the max allocator's budget"):  # max_len > budget
        simulate([Request(2, 1)], 8, allocator="max", max_len=16)
    with pytest.raises(ValueError, match="does not fit"):  # 100 slots hold six 16-token blocks: 96 tokens
        simulate([Request(90, 8)], 100, allocator="paged", max_len=128, block=16)
