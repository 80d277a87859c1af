"""The further claims' shared code: the sinusoidal shift identity, the notes' norm formulas against explicit
formulas and torch's layers, additive attention, calibration error and the seed-comparison rule."""

import math

import numpy as np
import pytest
import torch

from tfclaims.measure.timing import grad_call, kernels, time_interleaved
from tfclaims.nn.config import ModelConfig
from tfclaims.nn.models import LM
from tfclaims.nn.norm_variants import (
    EagerLayerNorm,
    EagerRMSNorm,
    NotesLayerNorm,
    NotesRMSNorm,
    gain,
    relative_difference,
    swap_norms,
)
from tfclaims.nn.norms import LayerNorm, RMSNorm
from tfclaims.nn.positions import sinusoidal_table

from experiments.additive_vs_dot.recipes import AdditiveAttention, DotAttention, make_attention
from experiments.label_smoothing.calibration import ece, reliability, top1
from experiments.sinusoidal_relative.recipes import offset_dot, shift_fit_residual, shift_matrix, toeplitz_r2


# ---------------------------------------------------------------- sinusoidal shift identity
def pe_direct(pos: float, d: int) -> np.ndarray:
    """PE(pos) from the definition, one component at a time (float64)."""
    out = np.zeros(d)
    for i in range(d // 2):
        w = 10000.0 ** (-2 * i / d)
        out[2 * i], out[2 * i + 1] = math.sin(pos * w), math.cos(pos * w)
    return out


@pytest.mark.parametrize("d", [2, 8, 64])
def test_shift_matrix_maps_pe_p_to_pe_p_plus_k_from_the_definition(d):
    for k in (1, 3, 17, 250):
        m = shift_matrix(k, d).numpy()
        for p in (0, 1, 5, 123, 999.5):  # any real position, not only the table's integers
            np.testing.assert_allclose(m @ pe_direct(p, d), pe_direct(p + k, d), atol=1e-12)


def test_shift_identity_on_the_library_table_to_float32_precision():
    pe = sinusoidal_table(1024, 128)
    for k in (1, 7, 100, 700):
        err = (pe[:-k].double() @ shift_matrix(k, 128).T - pe[k:].double()).abs().max()
        assert err < 3e-7, (k, float(err))  # the table's own float32 rounding, nothing more
        wrong = (
            (pe[:-k].double() @ shift_matrix(k, 128) - pe[k:].double()).abs().max()
        )  # the transpose rotates backwards
        assert wrong > 1e-2


def test_shift_matrices_are_rotations_that_compose():
    a, b = shift_matrix(5, 32), shift_matrix(11, 32)
    torch.testing.assert_close(a.T @ a, torch.eye(32, dtype=torch.float64))
    torch.testing.assert_close(a @ b, shift_matrix(16, 32))
    assert torch.count_nonzero(a) == 2 * 32  # block-diagonal 2x2 blocks


def test_dot_products_depend_only_on_the_offset():
    pe = sinusoidal_table(512, 64).double()
    for k in (0, 1, 9, 200):
        dots = (pe[: 512 - k] * pe[k:]).sum(-1)
        assert float(dots.max() - dots.min()) < 1e-5
        assert abs(float(dots.mean()) - float(offset_dot(k, 64))) < 1e-5
    assert abs(float(offset_dot(0, 64)) - 32) < 1e-12  # |PE(p)|^2 = d/2


def test_relative_structure_measures_separate_sinusoids_from_noise():
    pe = sinusoidal_table(128, 32)
    noise = torch.randn(128, 32)
    assert toeplitz_r2(pe) > 0.999999 and toeplitz_r2(noise) < 0.1
    assert shift_fit_residual(pe, 1) < 1e-6 and shift_fit_residual(noise, 1) > 0.5


# ---------------------------------------------------------------- the notes' norm formulas
def _affine(m, d):
    with torch.no_grad():
        m.weight.copy_(torch.linspace(0.5, 2.0, d, dtype=m.weight.dtype))
        if getattr(m, "bias", None) is not None:
            m.bias.copy_(torch.linspace(-1.0, 1.0, d, dtype=m.bias.dtype))
    return m


def test_notes_layernorm_is_unbiased_std_with_eps_outside_the_root():
    d, eps = 12, 1e-3
    x = torch.randn(5, 7, d, dtype=torch.float64) * 0.05 + 2
    m = _affine(NotesLayerNorm(d, eps).double(), d)
    xn = x.numpy()
    mean = xn.mean(-1, keepdims=True)
    std = np.sqrt(((xn - mean) ** 2).sum(-1, keepdims=True) / (d - 1))
    expected = np.linspace(0.5, 2.0, d) * (xn - mean) / (std + eps) + np.linspace(-1.0, 1.0, d)
    np.testing.assert_allclose(m(x).detach().numpy(), expected, rtol=1e-12, atol=1e-12)


def test_notes_rmsnorm_has_eps_outside_the_root():
    d, eps = 10, 1e-2
    x = torch.randn(6, d, dtype=torch.float64) * 0.03
    m = _affine(NotesRMSNorm(d, eps).double(), d)
    xn = x.numpy()
    expected = np.linspace(0.5, 2.0, d) * xn / (np.sqrt((xn**2).mean(-1, keepdims=True)) + eps)
    np.testing.assert_allclose(m(x).detach().numpy(), expected, rtol=1e-12, atol=1e-12)


def test_eager_formulas_equal_torch_layers():
    d = 24
    x = torch.randn(4, 9, d) * 3 + 1
    ln, ref_ln = _affine(EagerLayerNorm(d, 1e-5), d), _affine(torch.nn.LayerNorm(d, eps=1e-5), d)
    rms, ref_rms = _affine(EagerRMSNorm(d, 1e-6), d), _affine(torch.nn.RMSNorm(d, eps=1e-6), d)
    torch.testing.assert_close(ln(x), ref_ln(x))
    torch.testing.assert_close(rms(x), ref_rms(x))


def test_where_the_notes_variants_agree_with_torch_and_where_not():
    d = 16
    x = torch.randn(200, d, dtype=torch.float64)
    # eps = 0: the RMSNorms are the same formula; the LayerNorms differ by exactly sqrt((d-1)/d)
    torch.testing.assert_close(NotesRMSNorm(d, 0.0).double()(x), torch.nn.RMSNorm(d, eps=0.0).double()(x))
    ratio = NotesLayerNorm(d, 0.0).double()(x) / torch.nn.LayerNorm(d, eps=0.0).double()(x)
    torch.testing.assert_close(ratio, torch.full_like(ratio, math.sqrt((d - 1) / d)))
    # tiny-variance inputs: eps placement dominates; torch shrinks the output, the notes' variant does not
    tiny = torch.randn(50, d, dtype=torch.float64) * 1e-4
    ours, ref = NotesLayerNorm(d, 1e-5).double()(tiny), torch.nn.LayerNorm(d, eps=1e-5).double()(tiny)
    assert float(ref.detach().pow(2).mean().sqrt()) < 0.05 < 0.8 < float(ours.detach().pow(2).mean().sqrt())


@pytest.mark.parametrize("kind", ["layer", "notes_layer", "rms", "notes_rms", "eager_layer", "eager_rms"])
@pytest.mark.parametrize("scale", [1e-6, 3e-3, 1.0, 50.0])
def test_closed_form_gain_matches_every_variant(kind, scale):
    from tfclaims.nn.norm_variants import make_variant

    d, eps = 32, 1e-5
    x = torch.randn(64, d, dtype=torch.float64) * scale + (0.0 if "rms" in kind else 3 * scale)
    y = make_variant(kind, d, eps).double()(x).detach()
    centred = x - x.mean(-1, keepdim=True) if "layer" in kind else x
    sigma = centred.pow(2).mean(-1).sqrt()  # biased std, or RMS
    measured = y.norm(dim=-1) / centred.norm(dim=-1)
    torch.testing.assert_close(measured, gain(kind, sigma, d, eps), rtol=1e-9, atol=0)


def test_relative_difference_at_unit_scale_is_the_unbiased_factor():
    assert abs(relative_difference("notes_layer", "layer", 1e6, 64, 1e-5) - (1 - math.sqrt(63 / 64))) < 1e-9
    assert relative_difference("notes_rms", "rms", 1.0, 64, 1e-5) < 1e-5


def test_swap_norms_replaces_every_norm():
    cfg = ModelConfig(vocab_size=20, d_model=16, n_layers=3, n_heads=2, max_seq_len=8)
    x = torch.randint(0, 20, (2, 8))
    torch.manual_seed(0)
    model = LM(cfg).eval()
    before = model(x)
    assert swap_norms(model, "eager_layer") == 2 * 3 + 1
    assert not any(isinstance(m, (LayerNorm, RMSNorm)) for m in model.modules())
    torch.testing.assert_close(model(x), before)  # the same formula, so the same function
    swap_norms(torch.nn.Module(), "notes_layer")  # nothing to swap is fine
    torch.manual_seed(0)
    notes = LM(cfg).eval()
    swap_norms(notes, "notes_layer")
    assert not torch.allclose(notes(x), before)


def test_layernorm_runs_one_fused_kernel_and_the_eager_formula_many():
    x = torch.randn(64, 32, requires_grad=True)
    fused = kernels(lambda: LayerNorm(32)(x))["kernels"]
    eager = kernels(lambda: EagerLayerNorm(32)(x))["kernels"]
    assert fused == {"aten::native_layer_norm": 1}
    assert sum(eager.values()) >= 5 and "aten::native_layer_norm" not in eager
    t = time_interleaved(
        {"a": grad_call(LayerNorm(32), x, torch.ones(64, 32)), "b": lambda: None}, repeats=3, warmup=1
    )
    assert len(t["a"]["times"]) == 3 and t["a"]["median"] > 0


# ---------------------------------------------------------------- additive attention
def test_additive_scores_match_the_formula_with_unequal_sizes():
    torch.manual_seed(0)
    att = AdditiveAttention(d_q=5, d_kv=9, d_h=7)
    q, k = torch.randn(2, 3, 5), torch.randn(2, 4, 9)
    s = att.scores(q, k)
    assert s.shape == (2, 3, 4)
    Wq, Wk, w = att.wq.weight, att.wk.weight, att.w.weight[0]
    for b in range(2):
        for i in range(3):
            for j in range(4):
                torch.testing.assert_close(s[b, i, j], w @ torch.tanh(Wq @ q[b, i] + Wk @ k[b, j]))
    out = att(q, k)
    torch.testing.assert_close(out, s.softmax(-1) @ att.wv(k))


def test_dot_attention_scaling_and_the_variance_laws():
    torch.manual_seed(0)
    q, k = torch.randn(2, 3, 8), torch.randn(2, 4, 8)
    scaled, unscaled = DotAttention(8, 8, 8, scaled=True), DotAttention(8, 8, 8, scaled=False)
    unscaled.load_state_dict(scaled.state_dict())
    torch.testing.assert_close(scaled.scores(q, k) * math.sqrt(8), unscaled.scores(q, k))
    with torch.no_grad():  # Xavier projections keep unit variance: unscaled Var ~ d, additive stays O(1)
        for d in (16, 256):
            qq, kk = torch.randn(4000, 1, d), torch.randn(4000, 1, d)
            v_dot = float(make_attention("dot_unscaled", d, d, d, init="xavier").scores(qq, kk).var())
            v_add = float(make_attention("additive", d, d, d, init="xavier").scores(qq, kk).var())
            assert 0.6 * d < v_dot < 1.5 * d and 0.3 < v_add < 3


# ---------------------------------------------------------------- calibration and comparison
def test_ece_of_a_calibrated_and_an_overconfident_predictor():
    g = torch.Generator().manual_seed(0)
    conf = torch.rand(200_000, generator=g) * 0.9 + 0.1
    correct = (torch.rand(200_000, generator=g) < conf).float()
    assert ece(conf, correct) < 0.01
    conf2 = torch.full((1000,), 0.95)
    correct2 = torch.zeros(1000)
    correct2[:600] = 1  # accuracy 0.6 at confidence 0.95
    assert abs(ece(conf2, correct2) - 0.35) < 1e-6
    r = reliability(conf2, correct2, 10)
    assert r["count"][9] == 1000 and abs(r["accuracy"][9] - 0.6) < 1e-12


def test_top1_drops_padding_targets():
    logits = torch.tensor([[[2.0, 0.0], [0.0, 3.0], [1.0, 1.0]]])
    conf, correct = top1(logits, torch.tensor([[0, 0, -1]]))
    assert conf.shape == (2,) and correct.tolist() == [1.0, 0.0]


def test_additive_scores_chunked_over_queries_equal_the_whole_tensor(monkeypatch):
    """The additive score is built one query chunk at a time (cache-sized); the result is the (B, T, S, d_h)
    formula's (up to float rounding: the head's matmul sees differently shaped blocks), whatever the chunk
    size."""
    from experiments.additive_vs_dot import recipes as additive

    torch.manual_seed(0)
    m = additive.make_attention("additive", 16, 24, 32)
    q, k = torch.randn(3, 37, 16), torch.randn(3, 11, 24)
    whole = m.w(torch.tanh(m.wq(q).unsqueeze(2) + m.wk(k).unsqueeze(1))).squeeze(-1)  # (B, T, S)
    for chunk in (1, 3 * 11 * 32 * 4 * 5, 1 << 30):  # 1 query, 5 queries, all at once
        monkeypatch.setattr(additive, "CHUNK_BYTES", chunk)
        torch.testing.assert_close(m.scores(q, k), whole, atol=1e-6, rtol=1e-6)


def test_retrieval_recipe_records_held_out_loss_beside_accuracy_and_learns():
    """The quality readout: held-out cross-entropy at every evaluation, starting near the loss of guessing
    (ln n_values) and falling once the task is learned; the same seed gives the same record (the runner seeds
    every generator with the config's seed before a run)."""
    import math

    from tfclaims.device import seed_all
    from tfclaims.harness.experiment import RunContext

    from experiments.additive_vs_dot.recipes import retrieval_task

    cfg = {"attn": "dot_scaled", "d": 16, "pairs": 4, "n_keys": 16, "n_values": 4, "steps": 300, "batch": 32,
           "lr": 1e-2, "eval_every": 100, "eval_size": 256, "seed": 3}  # fmt: skip
    ctx = RunContext(device=torch.device("cpu"), progress=False)
    seed_all(3)
    m = retrieval_task(cfg, ctx)
    assert m["eval_steps"] == [0, 100, 200, 300] and len(m["val_loss"]) == len(m["accuracy"]) == 4
    assert abs(m["val_loss"][0] - math.log(4)) < 0.3 and m["final_val"] == m["val_loss"][-1]
    assert m["final_val"] < m["val_loss"][0] - 0.5 and m["final_acc"] > 0.6
    seed_all(3)
    assert retrieval_task(cfg, ctx) == m
