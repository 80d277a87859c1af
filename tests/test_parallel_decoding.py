"""The paths `parallel_decoding` compares: a causal LM's one teacher-forced pass against step-by-step decoding
(growing prefixes, one KV cache), their gradients, the bidirectional control, and the recipes' records."""

import copy

import pytest
import torch
import torch.nn.functional as F

from tfclaims.harness.experiment import RunContext
from tfclaims.nn.attention import KVCache
from tfclaims.nn.models import LM

from experiments.parallel_decoding import recipes as pd
from experiments.parallel_decoding.grid import model_config, timing_config

CTX = RunContext(torch.device("cpu"))


def lm(pos="learned", n=24, layers=2, **kw):
    """A float64 decoder (d = 32, 4 heads) with room for n inputs; kw changes its config."""
    torch.manual_seed(0)
    return LM(model_config(32, 4, layers, n + 1, pos).replace(**kw)).double()


def tokens(n=24, seed=0):
    return pd._sequence(n, seed, 96)


@pytest.mark.parametrize(
    "kw", [{}, {"pos": "rope"}, {"pos": "sinusoidal"}, {"n_kv_heads": 1}, {"attn_backend": "explicit"}]
)
@pytest.mark.parametrize("path", ["prefix", "cached"])
def test_step_by_step_equals_the_one_pass_in_float64(kw, path):
    """Positions (learned, rotary, sinusoidal), GQA and the explicit backend: every position's logits."""
    m, (x, _) = lm(**kw), tokens()
    with torch.no_grad():
        torch.testing.assert_close(pd.step_logits(m, x, path), m(x)[0], rtol=0, atol=1e-13)


def test_step_by_step_on_one_backend_equals_the_one_pass_on_the_other():
    """An independent path: the explicit backend (materialised scores, boolean mask) decoding step by step
    against the fused kernel's one pass (is_causal), the same weights."""
    sdpa, (x, _) = lm(), tokens()
    explicit = copy.deepcopy(sdpa)
    for b in explicit.blocks:
        b.attn.backend = "explicit"
    with torch.no_grad():
        for path in ("prefix", "cached"):
            torch.testing.assert_close(pd.step_logits(explicit, x, path), sdpa(x)[0], rtol=0, atol=1e-13)


def test_prefix_path_is_a_forward_of_each_prefix_alone():
    m, (x, _) = lm(), tokens(8)
    with torch.no_grad():
        want = torch.stack([m(x[:, : t + 1].clone())[0, -1] for t in range(8)])
        assert torch.equal(pd.step_logits(m, x, "prefix"), want)


def test_cached_path_feeds_one_token_per_call_and_fills_the_cache():
    m, (x, _) = lm(), tokens(8)
    seen = []
    m.stack.blocks[0].attn.register_forward_hook(lambda mod, args, out: seen.append(args[0].shape[1]))
    with torch.no_grad():
        out = pd.step_logits(m, x, "cached")
    assert seen == [1] * 8 and out.shape == (8, 96)


def test_without_the_mask_the_one_pass_sees_the_future():
    """The control can fail the identity: bidirectional attention changes every position but, in one layer,
    the last (which sees every key either way)."""
    m, (x, _) = lm(layers=1), tokens()
    bidir = copy.deepcopy(m)
    for b in bidir.blocks:
        b.attn.causal = False
    with torch.no_grad():
        steps, leak = pd.step_logits(m, x, "prefix"), bidir(x)[0]
    diff = (leak - steps).abs().amax(-1)
    assert (diff[:-1] > 1e-6).all()
    assert diff[-1] < 1e-14


@pytest.mark.parametrize("path", ["prefix", "cached"])
def test_step_by_step_gradients_equal_the_one_pass_gradient(path):
    m, (x, y) = lm(pos="rope"), tokens()
    one, step = pd.onepass_grad(m, x, y), pd.GRADS[path](m, x, y)
    assert pd.grad_error(step, one) < 1e-13
    # the one pass differentiates the mean of the per-position losses, as the step paths sum them
    loss = sum(F.cross_entropy(m(x[:, : t + 1])[:, -1], y[:, t]) for t in range(x.shape[1])) / x.shape[1]
    ref = torch.autograd.grad(loss, list(m.parameters()))
    assert pd.grad_error(one, ref) < 1e-13


def test_the_in_place_cache_needs_its_saved_views_kept_for_a_backward():
    """Without torch's context the cache's next write invalidates what earlier steps saved."""
    m, (x, y) = lm(), tokens(4)
    cache = KVCache.for_model(m.cfg, 1, 4, dtype=torch.float64)
    loss = sum(F.cross_entropy(m(x[:, t : t + 1], cache=cache)[:, -1], y[:, t]) for t in range(4))
    with pytest.raises(RuntimeError, match="inplace"):
        loss.backward()


def test_a_gradient_zero_in_exact_arithmetic_is_not_its_own_scale():
    """The key bias gets rounding noise only (softmax ignores a shift shared by every score): the error is
    relative to the largest gradient of any parameter, so it stays at rounding."""
    m, (x, y) = lm(), tokens()
    one, step = pd.onepass_grad(m, x, y), pd.prefix_grad(m, x, y)
    names = [n for n, _ in m.named_parameters()]
    kb = one[names.index("stack.blocks.0.attn.wk.bias")]
    assert kb.abs().max() < 1e-15 * max(float(g.abs().max()) for g in one)
    assert pd.grad_error(step, one) < 1e-13


def test_relative_error_per_position():
    ref = torch.tensor([[1.0, -4.0], [2.0, 0.0]])
    a = ref + torch.tensor([[0.5, 0.0], [0.0, -1.0]])
    assert pd.relative_error(a, ref, 4.0) == [0.125, 0.25]


def test_run_exact_records_every_dtype_and_is_deterministic():
    cfg = {"pos": "rope", "n": 12, "seed": 3, "d_model": 32, "n_heads": 2, "n_layers": 2, "threads": 1}
    a, b = pd.run_exact(cfg, CTX), pd.run_exact(cfg, CTX)
    assert a == b
    assert set(a["errors"]) == {"float64", "float32", "bfloat16"}
    assert all(len(v) == 12 for by in a["errors"].values() for v in by.values())
    assert a["errors"]["float64"]["onepass"] == [0.0] * 12
    assert max(a["errors"]["float64"]["cached"]) < 1e-14 < max(a["errors"]["float32"]["cached"]) < 1e-5
    assert max(a["leak"]) > 1e-3 and max(a["grad_errors"].values()) < 1e-13


def test_run_timing_times_every_path_and_its_gradients_agree():
    cfg = {"timing_model": [16, 2, 1], "ns": [4, 8], "warmup": 0, "repeats": 2, "threads": 1, "seed": 0}
    m = pd.run_timing(cfg, CTX)
    assert set(m["times"]) == {
        f"{p}|{n}" for p in ("onepass", "prefix", "cached", "forward", "generate") for n in (4, 8)
    } | {"A/A"}
    assert all(len(t) == 2 for t in m["times"].values())
    assert max(m["grad_errors"].values()) < 1e-5 and m["aa_n"] == 8
    assert timing_config(cfg).max_seq_len == 9  # n inputs and the n-th target


def test_generation_of_n_tokens_runs_n_tokens_through_the_model():
    m, (x, _) = lm(), tokens(10)
    fed = []
    m.stack.register_forward_hook(lambda mod, args, out: fed.append(args[0].shape[1]))
    out = m.generate(x[:, :1], 9)
    assert out.shape == (1, 10) and sum(fed) == 10
