"""`no_position`'s measures and recipes: the permutation measures against closed forms, the position probe
against numpy's least squares, the library's models against Hugging Face's BERT and GPT-2 with their position
tables zeroed, and the recipes' records."""

import numpy as np
import pytest
import torch

from tfclaims.harness.experiment import RunContext
from tfclaims.nn.config import ModelConfig
from tfclaims.nn.models import Encoder
from tfclaims.train.profiles import run_fields, train_profile

from experiments.no_position.position_probe import fit_gain, permutation_error, position_probe, prefix_change
from experiments.no_position.recipes import PERM_ARMS, perm_model, permutation_run, train_probe

CPU = RunContext(torch.device("cpu"), progress=False)
TOL, SEES = 1e-12, 1e-8


def test_permutation_error_is_zero_for_a_set_function_and_the_closed_form_for_a_running_sum():
    x = torch.tensor([[1.0, 2.0, 3.0]])
    perm = torch.tensor([1, 2, 0])  # a 3-cycle: permuting the outputs by its inverse instead would show
    assert permutation_error(lambda t: t, x, perm) == 0.0
    assert permutation_error(lambda t: t - t.mean(1, keepdim=True), x, perm) == pytest.approx(0.0, abs=1e-15)
    # cumsum: f(x) = [1, 3, 6]; f(x[π]) = cumsum([2, 3, 1]) = [2, 5, 6]; f(x)[π] = [3, 6, 1]: max |Δ| = 5, ÷ 6
    assert permutation_error(lambda t: t.cumsum(1), x, perm) == pytest.approx(5 / 6)


def test_prefix_change_is_zero_for_a_bag_and_the_closed_form_for_a_weighted_sum():
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    perm = torch.tensor([2, 0, 1])  # the first three tokens become [3, 1, 2]
    assert prefix_change(lambda t: t.cumsum(1), x, perm) == 0.0  # the last output is the sum: a set function
    weights = torch.arange(1.0, 5.0)  # Σ t·x_t: last 1+4+9+16 = 30, permuted 3+2+6+16 = 27
    assert prefix_change(lambda t: (t * weights).cumsum(1), x, perm) == pytest.approx(3 / 30)


def _lstsq_numpy(fit: np.ndarray, score: np.ndarray) -> tuple[float, float]:
    """The probe's score MAE and gain, independently: numpy least squares with an intercept."""
    T = fit.shape[1]
    X = np.c_[fit.reshape(-1, fit.shape[-1]), np.ones(fit.shape[0] * T)]
    y = np.tile(np.arange(T), fit.shape[0]).astype(float)
    beta = np.linalg.lstsq(X, y, rcond=None)[0]
    ys = np.tile(np.arange(T), score.shape[0]).astype(float)
    pred = np.c_[score.reshape(-1, score.shape[-1]), np.ones(score.shape[0] * T)] @ beta
    mae = np.abs(pred - ys).mean()
    return mae, 1 - mae / np.abs(ys - y.mean()).mean()


def test_position_probe_matches_numpy_least_squares():
    g = torch.Generator().manual_seed(0)
    fit, score = torch.randn(6, 16, 5, generator=g), torch.randn(4, 16, 5, generator=g)
    fit[..., 0] += torch.arange(16) / 8  # some position in one feature
    score[..., 0] += torch.arange(16) / 8
    got = position_probe(fit, score)
    mae, gain = _lstsq_numpy(fit.double().numpy(), score.double().numpy())
    assert got["mae"] == pytest.approx(mae, rel=1e-10) and got["gain"] == pytest.approx(gain, rel=1e-10)
    assert np.mean(got["mae_by_position"]) == pytest.approx(got["mae"], rel=1e-12)
    # positions 0..15 around their mean 7.5: mean |t − 7.5| = 4
    assert got["chance_mae"] == pytest.approx(4.0)


def test_position_probe_reads_a_linear_position_exactly_and_finds_none_in_tokens_alone():
    g = torch.Generator().manual_seed(1)
    T, d = 32, 8
    table = torch.randn(20, d, generator=g)  # 20 "token" vectors, drawn independently of position
    tokens = [table[torch.randint(0, 20, (64, T), generator=g)] for _ in range(2)]
    pos = torch.arange(T, dtype=torch.float32)[None, :, None]
    linear = [torch.cat([t, 0.5 * pos.expand(t.shape[0], T, 1) - 3], dim=-1) for t in tokens]  # one feature
    exact = position_probe(*linear)
    assert exact["gain"] == pytest.approx(1.0, abs=1e-4) and fit_gain(exact) == pytest.approx(1.0, abs=1e-4)
    blind = position_probe(*tokens)
    assert abs(blind["gain"]) < 0.02 and abs(fit_gain(blind)) < 0.02


def _hf_equivalence(model_fn, idx, perm):
    with torch.no_grad():
        return permutation_error(model_fn, idx, perm)


def test_hugging_face_bert_without_positions_is_equivariant_and_gpt2_without_positions_is_not():
    """The same identities on independent implementations: BERT (bidirectional) and GPT-2 (causal) with their
    position tables zeroed, float64."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    common = dict(
        vocab_size=50,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        attn_implementation="eager",
    )
    bert = transformers.BertModel(transformers.BertConfig(**common)).double().eval()
    cfg = transformers.GPT2Config(vocab_size=50, n_embd=32, n_layer=2, n_head=4, attn_implementation="eager")
    gpt2 = transformers.GPT2Model(cfg).double().eval()
    idx, perm = torch.randint(0, 50, (3, 12)), torch.randperm(12, generator=torch.Generator().manual_seed(3))

    def bert_states(x):
        return bert(x).last_hidden_state

    def gpt2_states(x):
        return gpt2(x).last_hidden_state

    assert _hf_equivalence(bert_states, idx, perm) > SEES  # with its position table: sees the permutation
    assert _hf_equivalence(gpt2_states, idx, perm) > SEES
    with torch.no_grad():
        bert.embeddings.position_embeddings.weight.zero_()
        gpt2.wpe.weight.zero_()
    assert _hf_equivalence(bert_states, idx, perm) < TOL
    assert _hf_equivalence(gpt2_states, idx, perm) > SEES  # the causal mask alone breaks the symmetry


def test_none_means_no_position_term_a_zeroed_learned_table_gives_the_same_encoder():
    cfg = ModelConfig(d_model=32, n_layers=2, n_heads=4, max_seq_len=16, causal=False)
    torch.manual_seed(0)
    with_table, without = Encoder(cfg), Encoder(cfg.replace(pos="none"))
    state = {k: v for k, v in with_table.state_dict().items() if not k.startswith("stack.pos.")}
    without.load_state_dict(state)
    with torch.no_grad():
        with_table.stack.pos.weight.zero_()
    idx = torch.randint(1, 96, (2, 16))
    assert torch.equal(with_table.eval()(idx), without.eval()(idx))


def _perm_cfg(**kw):
    return {
        "perm_sizes": [[16, 1, 2], [16, 2, 2]],
        "perm_len": 8,
        "perm_batch": 2,
        "inits": ["normal", "torch"],
        "backends": ["sdpa", "explicit"],
        "seed": 0,
        **kw,
    }


def test_permutation_run_measures_every_arm_and_reproduces():
    rows = permutation_run(_perm_cfg(), CPU)["rows"]
    assert rows == permutation_run(_perm_cfg(), CPU)["rows"]  # seeded: the same numbers twice
    assert len(rows) == 2 * 2 * 2 * (len(PERM_ARMS) + 2)  # sizes × inits × backends × (arms + 2 prefix rows)

    def errors(**where):
        return [r["error"] for r in rows if all(r[k] == v for k, v in where.items())]

    assert max(errors(model="encoder", pos="none")) < TOL
    assert (
        min(errors(model="encoder", pos="learned")) > SEES
        and min(errors(model="encoder", pos="sinusoidal")) > SEES
    )
    assert min(errors(model="decoder", pos="none", measure="perm")) > SEES
    assert max(errors(model="decoder", pos="none", measure="prefix", n_layers=1)) < TOL
    assert min(errors(model="decoder", pos="none", measure="prefix", n_layers=2)) > SEES


def test_perm_models_are_float64_with_matched_norms_and_no_position_parameters_without_positions():
    m = perm_model("encoder", "none", [16, 1, 2], 8, "normal", "sdpa", seed=0)
    assert all(p.dtype == torch.float64 for p in m.parameters()) and not m.training
    assert m.stack.pos is None and m.cfg.emb_scale
    # N(0, 1/d) token rows, scaled by √d as they are added
    assert m.stack.tok.weight.std().item() == pytest.approx(16**-0.5, rel=0.2)


def test_train_probe_records_every_layer_and_its_choice():
    p = train_profile("quick")
    cfg = {**run_fields(p), "d_model": 16, "n_layers": 2, "pos": "none", "lr": 8e-3, "probe_batches": 2,
           "seed": 0}  # fmt: skip
    m = train_probe(cfg, CPU)
    pr = m["probe"]
    assert len(pr["gain"]) == len(pr["mae"]) == len(pr["fit_gain"]) == 3  # input, block 1, block 2
    assert pr["best"] == int(np.argmax(pr["fit_gain"])) and len(pr["mae_by_position"]) == cfg["seq_len"]
    assert pr["chance_mae"] == pytest.approx(8.0)  # positions 0..31 around 15.5
    assert abs(pr["gain"][0]) < 0.1  # NoPE's input embeddings: tokens alone, no position
    assert m["final_val"] is not None and "n_params" in m
