"""int8_inference's library: torch's dynamic INT8 Linear against an independent integer computation, the fake
quantiser against torch's quantiser, what a quantised copy holds (coverage, bytes, step errors), the probe's
loss against the training loop's, and the recipes end to end on tiny configs."""

import math

import pytest
import torch
from torch import nn

from tfclaims.data.corpus import eval_windows, load_corpus
from tfclaims.device import seed_all
from tfclaims.harness.experiment import RunContext
from tfclaims.harness.registry import load
from tfclaims.nn.config import ConfigError, ModelConfig
from tfclaims.nn.models import LM
from tfclaims.train.loop import evaluate

from experiments.int8_inference import quantize as Q
from experiments.int8_inference.grid import AA, CHANNEL, FP32, INT8, grid_quality, grid_timing, variants
from experiments.int8_inference.recipes import run_quality, run_timing, score

CPU = RunContext(torch.device("cpu"), progress=False)


def _lm(d=32, layers=2, seed=0) -> LM:
    torch.manual_seed(seed)
    return LM(ModelConfig(vocab_size=85, d_model=d, n_layers=layers, n_heads=2, max_seq_len=16)).eval()


def _int8(model, **kw):
    with Q.caught_warnings():
        return Q.int8_dynamic(model, **kw)


def test_the_dynamic_int8_linear_is_integer_arithmetic_on_7_bit_inputs_and_int8_weights():
    """Recomputed without torch's quantised ops: the input quantised per call to 0..127 (reduce_range) over
    its own range with a zero point, the weight to int8 with one scale, products summed and rescaled."""
    torch.manual_seed(0)
    lin = nn.Linear(64, 48)
    x = torch.randn(5, 64) * 2 + 0.3
    q = _int8(nn.Sequential(lin))[0]
    qw = q.weight()
    w = qw.int_repr().double() * qw.q_scale()
    lo, hi = min(float(x.min()), 0.0), max(float(x.max()), 0.0)
    s = (hi - lo) / 127
    zp = min(127, max(0, round(-lo / s)))
    xq = torch.clamp(torch.round(x.double() / s) + zp, 0, 127)
    want = ((xq - zp) * s) @ w.T + lin.bias.detach().double()
    got = q(x).double()
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)
    assert (got - lin(x).detach().double()).abs().max() > 1e-3  # it is not the float layer


def test_fake_quantize_at_8_bits_is_torchs_per_tensor_symmetric_quantiser():
    from torch.ao.quantization.observer import MinMaxObserver

    torch.manual_seed(1)
    w = torch.randn(96, 80) * 0.05
    obs = MinMaxObserver(dtype=torch.qint8, qscheme=torch.per_tensor_symmetric)
    obs(w)
    scale, zp = obs.calculate_qparams()
    with Q.caught_warnings():
        ref = torch.quantize_per_tensor(w, float(scale), int(zp), torch.qint8).dequantize()
    assert torch.equal(Q.fake_quantize(w, 8), ref)
    q = _int8(nn.Sequential(nn.Linear(80, 96)))[0]  # and the dynamic module's own weights
    lin = nn.Linear(80, 96)
    lin.weight.data = w
    assert torch.equal(_int8(nn.Sequential(lin))[0].weight().dequantize(), ref)
    assert q.weight().qscheme() == torch.per_tensor_affine  # torch stores the symmetric rule as zero point 0
    assert q.weight().q_zero_point() == 0


@pytest.mark.parametrize("bits", [2, 4, 5, 8])
def test_fake_quantize_uses_at_most_2_to_the_bits_levels_within_half_a_step(bits):
    torch.manual_seed(bits)
    w = torch.randn(300) * 0.1
    fq = Q.fake_quantize(w, bits)
    step = w.abs().max() / (2**bits - 1) * 2
    assert fq.unique().numel() <= 2**bits
    assert float((fq - w).abs().max() / step) <= 0.5 + 1e-5
    codes = fq / step
    assert torch.allclose(codes, codes.round(), atol=1e-4)  # integer multiples of the step ...
    q_min, q_max = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    assert codes.min() >= q_min - 1e-4 and codes.max() <= q_max + 1e-4  # ... within the code range
    assert torch.equal(Q.fake_quantize(w, bits), Q.fake_quantize(w.clone(), bits))  # deterministic


def test_the_int8_copy_quantises_every_linear_and_leaves_the_rest_and_the_original_alone():
    m = _lm()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    q = _int8(m)
    cov = Q.coverage(m, q)
    n_linear = sum(isinstance(x, nn.Linear) for x in m.modules())
    assert cov == {"quantised": n_linear, "float_linear_left": 0, "changed": 0} and n_linear == 6 * 2 + 1
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())  # the float model is untouched
    assert all(type(x) is nn.Linear for x in m.modules() if isinstance(x, nn.Linear))
    assert Q.coverage(_lm(seed=1), q)["changed"] > 0  # against another model the embeddings differ
    x = torch.randint(0, 85, (2, 16))
    with torch.no_grad():
        ref, got = m(x), q(x)
    assert 0 < float((ref - got).abs().max()) < 0.05 * float(ref.abs().max())


def test_step_error_is_half_a_step_for_either_scale_and_large_against_other_weights():
    m = _lm()
    for per_channel in (False, True):
        err = Q.step_error(m, _int8(m, per_channel=per_channel))
        assert 0.45 < err <= 0.5 + 1e-3
    assert Q.step_error(_lm(seed=3), _int8(m)) > 5  # a test that can fail: the wrong float weights


def test_a_fake_quantised_copy_unties_the_head_and_keeps_the_embedding():
    m = _lm()
    assert m.head.weight is m.stack.tok.weight
    f = Q.fake_quantize_linears(m, 4)
    assert torch.equal(f.stack.tok.weight, m.stack.tok.weight)
    assert f.head.weight.unique().numel() <= 16 and not torch.equal(f.head.weight, m.head.weight)
    inner = [p for n, p in f.named_parameters() if n.endswith(("wq.weight", "w1.weight"))]
    assert inner and all(p.unique().numel() <= 16 for p in inner)


def test_linear_bytes_shrink_about_fourfold_and_the_whole_model_less():
    m = LM(ModelConfig(vocab_size=85, d_model=256, n_layers=2, n_heads=4, max_seq_len=64)).eval()
    q = _int8(m)
    lin = Q.linear_bytes(m) / Q.linear_bytes(q)
    whole = Q.state_bytes(m) / Q.state_bytes(q)
    assert 3.8 < lin < 4.0  # float32 biases and the serialisation's own bytes keep it under 4
    assert whole < lin  # embeddings and norms stay float32
    params = sum(p.numel() for n, p in m.named_parameters() if n.endswith("weight") and ".w" in n)
    assert Q.linear_bytes(q) > params  # at least one byte per quantised weight


def test_score_is_the_training_loops_loss_and_the_argmax_accuracy():
    m = _lm()
    batches = eval_windows(load_corpus().val, 2, 4, 16, seed=7)
    s = score(m, batches)
    assert math.isclose(s["loss"], evaluate(m, batches, "cpu"), rel_tol=1e-6)
    with torch.no_grad():
        hits = [(m(x).argmax(-1) == y).double().mean().item() for x, y in batches]
    assert math.isclose(s["acc"], sum(hits) / 2, rel_tol=1e-9)


def _seeded_quality(cfg: dict) -> dict:
    seed_all(cfg["seed"])  # as the runner does before every run
    return run_quality(cfg, CPU)


def test_run_quality_trains_then_reads_every_copy_deterministically():
    p = load("int8_inference").profiles["quick"]
    cfg = {**grid_quality(p)[0], "steps": 3, "eval_every": 3}
    a, b = _seeded_quality(cfg), _seeded_quality(cfg)
    assert set(a["probe"]) == set(variants(cfg["bits"])) and a["probe"] == b["probe"]
    assert a["coverage"]["float_linear_left"] == 0 and a["size"]["linear_fp32"] > a["size"]["linear_int8"]
    assert set(a["step_error"]) == {INT8, CHANNEL} and a["quantization"]["engine"]
    assert a["probe"][FP32]["loss"] != a["probe"][INT8]["loss"]


def test_run_timing_times_float32_int8_and_the_aa_pair_per_size_and_batch():
    cfg = {**grid_timing(load("int8_inference").profiles["quick"])[0], "repeats": 2, "min_sample": 0.0}
    m = run_timing(cfg, CPU)
    assert len(m["rows"]) == len(cfg["sizes"]) * len(cfg["batches"]) and m["threads"] == 1
    for r in m["rows"]:
        assert set(r["times"]) == {FP32, INT8, AA} and all(len(v) == 2 for v in r["times"].values())


@pytest.mark.parametrize(
    "override, fault",
    [
        ({"lr_factors": [1.0]}, "lr_factors"),
        ({"bits": [8, 6]}, "bits"),
        ({"timed": [[30, 1, 4]]}, "timed"),
    ],
)
def test_a_malformed_profile_is_a_configuration_error(override, fault):
    exp = load("int8_inference")
    p = {**exp.profiles["quick"], **override}
    with pytest.raises(ConfigError, match=fault):
        exp.grid(p)
