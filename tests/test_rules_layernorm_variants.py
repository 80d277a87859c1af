"""The layernorm_variants rule on synthetic records, and the checkpoint swap itself.

The closed forms and the swap's reference evaluation are checks (a failure stops the claim); the unit-scale
and tiny-scale differences and the activations' distance from σ* are reported effects on exact numbers. The
deciding sub-claims are checkpoint swaps: the same trained weights evaluated with another norm formula,
paired by seed, shown inside ±0.01 nats (TOST at Holm's level over the three cells of a family × precision),
the learned-at-all guard; the null pair (seeds + 1000) is reported beside each. The swap tests check that a
swap changes the norm formula and nothing else."""

import math
import sys

import numpy as np
import pytest
import torch

from tfclaims.evidence.evaluate import CheckFailed
from tfclaims.harness.registry import load
from tfclaims.nn.models import LM
from tfclaims.train.loop import evaluate
from tfclaims.train.profiles import model_config

from experiments.layernorm_variants import analysis as view
from experiments.layernorm_variants.recipes import CLASSES, NORM_TYPES, swap_formula, swap_losses
from rules import analyse, comparison, decisions, record, sub, verdicts

EXP = load("layernorm_variants")
P = {**EXP.profiles["quick"], "d_model": 64, "seeds": [0, 1, 2, 3, 4]}  # d = 64: the unit-scale check passes
UNIGRAM = 3.3
SWAP_SUBS = [f"swap-{f}-{p}" for f in ("LN", "RMS") for p in ("fp32", "bf16")]
ALL_SWAPS = {(f, dt): 0.05 for f in ("layer", "rms") for dt in ("float32", "bfloat16")}


def pair(d, sigma=1.0, formula_err=1e-4):
    ln = 1 - np.sqrt((d - 1) / d) if sigma > 1e-2 else 100.0
    rms = 1e-6 if sigma > 1e-2 else 100.0
    return {
        std: {
            "median": v,
            "max": v,
            "max_abs": v,
            "out_rms_torch": 1.0,
            "out_rms_notes": 1.0,
            "formula_err": formula_err,
        }
        for std, v in (("layer", ln), ("rms", rms))
    }


def train_metrics(cfg, final, swap_delta, jitter, rng, q01):
    """One training run's metrics. Its own formula evaluates to `final` (bf16 0.001 higher); every other
    formula adds swap_delta[(family, dtype)] (default 1e-4) plus Gaussian jitter of sd `jitter`."""
    own = "torch" if cfg["formula"] == "torch" else "notes"
    swap = {
        dt: {
            name: final
            + (0.001 if dt == "bfloat16" else 0.0)
            + (
                0.0
                if name == own
                else swap_delta.get((cfg["family"], dt), 1e-4) + jitter * rng.standard_normal()
            )
            for name in cfg["evals"]
        }
        for dt in cfg["dtypes"]
    }
    probes = [{f"stack.blocks.0.norm{i}": {"min": q01 / 2, "q01": q01, "median": 1.0} for i in (1, 2)}] * 3
    return {
        "eval_steps": [0, 6, 12],
        "val_loss": [4.0, 3.5, final],
        "final_val": final,
        "unigram_xent": UNIGRAM,
        "diverged_at": None,
        "probes": probes,
        "swap": swap,
    }


def records(
    swap_delta=None,
    jitter=1e-5,
    base=2.1,
    notes_shift=0.0,
    formula_err=1e-4,
    q01=0.5,
    diverged=(),
    ref_off=0.0,
):
    """swap_delta: (family, dtype) -> mean loss change of a swap; notes_shift: notes-trained minus
    torch-trained final loss; diverged: (family, formula, seed) runs that diverged (no final loss, no swap);
    ref_off: final loss minus the swap's fp32 reference."""
    rng = np.random.default_rng(7)
    out = []
    for i, c in enumerate(EXP.grid(P)):
        if c["part"] == "width":
            m = {"rows": [{"d": d, **pair(d, formula_err=formula_err)} for d in c["widths"]]}
        elif c["part"] == "scale":
            m = {
                "rows": [
                    {"d": d, "sigma": s, **pair(d, s, formula_err)} for d in c["widths"] for s in c["sigmas"]
                ]
            }
        elif (c["family"], c["formula"], c["seed"]) in diverged:
            m = {
                "eval_steps": [0],
                "val_loss": [4.0],
                "final_val": None,
                "unigram_xent": UNIGRAM,
                "diverged_at": 5,
            }
        else:
            final = base + 0.05 * np.sin(c["seed"]) + (notes_shift if c["formula"] == "notes" else 0.0)
            m = train_metrics(c, final, swap_delta or {}, jitter, rng, q01)
            m["final_val"] += ref_off  # a reference evaluation that does not reproduce the training's
        out.append(record(c, m, f"r{i}"))
    return out


# ---------------------------------------------------------------- the rule
def test_layernorm_variants_grid_trains_both_formulas_per_family_and_a_null_arm():
    g = [c for c in EXP.grid(EXP.profiles["default"]) if c["part"] in ("train", "null")]
    assert len(EXP.profiles["default"]["seeds"]) >= 5 and len(g) == 30
    notes = {c["family"]: c["eps"] for c in g if c["formula"] == "notes"}
    assert notes == {"layer": 1e-6, "rms": 1e-8}  # the notes' own eps
    assert {c["eps"] for c in g if c["formula"] == "torch"} == {1e-5}
    assert all(set(c["evals"]) == {"torch"} and c["seed"] >= 1000 for c in g if c["part"] == "null")


def test_layernorm_variants_rule_supported_when_every_swap_is_within_the_margin(tmp_path):
    v = analyse(EXP, records(), P, tmp_path)
    swaps = [c for c in v.comparisons if c.id.startswith("swap-")]
    assert len(swaps) == 12 and all(c.p_equiv <= 0.05 and c.decision == "equivalent" for c in swaps)
    assert all(verdicts(v)[s] == "supported" for s in SWAP_SUBS)
    assert v.verdict == "supported"
    assert {s.id for s in v.sub_verdicts if s.kind == "effect" and s.counts} == set(SWAP_SUBS)
    assert {s.id for s in v.sub_verdicts if s.kind == "check"} == {"formula", "reference"}
    assert {f.id for f in v.noise_floor} == {"null/LN-fp32", "null/LN-bf16", "null/RMS-fp32", "null/RMS-bf16"}
    assert all(c.noise is None and (c.lo, c.hi) == (-0.01, 0.01) and c.n == 5 for c in swaps)  # same weights
    assert all(
        c.p >= c.p_raw and c.p_equiv >= c.p_equiv_raw for c in swaps
    )  # Holm over each sub-claim's cells
    assert comparison(v, "swap-LN-fp32/t2n-same-eps").arm_a == "as trained"
    d = decisions(v)
    assert d["formula/LN"] == d["reference/RMS"] == d["unit/RMS"] == d["tiny/LN"] == "equivalent"
    assert verdicts(v)["unit"] == verdicts(v)["tiny"] == verdicts(v)["activations"] == "supported"


def test_layernorm_variants_rule_a_significant_change_inside_the_margin_is_still_equivalent(tmp_path):
    # 0.003 nats with almost no spread: p ≈ 0, yet the whole interval sits inside ±0.01, so interchangeable
    v = analyse(
        EXP,
        records({(f, dt): 0.003 for f in ("layer", "rms") for dt in ("float32", "bfloat16")}),
        P,
        tmp_path,
    )
    c = comparison(v, "swap-LN-fp32/t2n-same-eps")
    assert (
        c.p < 0.05 and c.p_equiv < 0.05 and c.decision == "equivalent"
    )  # significant, and inside the margin
    assert v.verdict == "supported"


def test_layernorm_variants_rule_the_training_noise_floor_gates_training_not_the_swap(tmp_path):
    """The null pair measures what retraining changes (±0.01 here). A swap evaluates the same weights under
    two formulas, with no retraining in it, so no floor gates it: it is still shown within the margin. The
    context comparison trains twice, so the floor is named beside it."""
    recs = records()
    wobble = {1000: 0.01, 1001: -0.008, 1002: 0.006, 1003: -0.01, 1004: 0.004}
    for r in recs:
        if r["config"]["part"] == "null":
            for losses in r["metrics"]["swap"].values():
                losses["torch"] += wobble[r["config"]["seed"]]
            r["metrics"]["final_val"] = r["metrics"]["swap"]["float32"]["torch"]  # the reference check holds
    v = analyse(EXP, recs, P, tmp_path)
    c = comparison(v, "swap-RMS-fp32/n2t")
    assert c.noise is None and c.decision == "equivalent" and verdicts(v)["swap-RMS-fp32"] == "supported"
    assert comparison(v, "context-RMS").noise is not None


def test_layernorm_variants_rule_mixed_when_only_the_bf16_swap_exceeds_the_margin(tmp_path):
    v = analyse(EXP, records({("layer", "bfloat16"): 0.05}), P, tmp_path)
    d = decisions(v, "swap-LN-bf16/")
    assert set(d.values()) == {"a_better"}  # shown above +0.01: as trained (arm a) is better, lower loss
    assert verdicts(v)["swap-LN-bf16"] == "refuted"
    assert verdicts(v)["swap-LN-fp32"] == "supported"
    assert v.verdict == "mixed"


def test_layernorm_variants_rule_refuted_when_every_swap_exceeds_the_margin(tmp_path):
    v = analyse(EXP, records(ALL_SWAPS), P, tmp_path)
    assert all(verdicts(v)[s] == "refuted" for s in SWAP_SUBS)
    assert v.verdict == "refuted"


def test_layernorm_variants_rule_underpowered_swap_is_inconclusive_never_refuted(tmp_path):
    v = analyse(EXP, records({("rms", "float32"): 0.005}, jitter=0.02), P, tmp_path)
    assert decisions(v, "swap-RMS-fp32/")["swap-RMS-fp32/n2t"] == "undecided"
    s = sub(v, "swap-RMS-fp32")
    assert s.verdict == "inconclusive" and "detectable" in s.detail
    assert v.verdict == "inconclusive"


def test_layernorm_variants_rule_a_failing_closed_form_check_stops_the_claim(tmp_path):
    """A closed form that misses the measured outputs is a bug in the measurement, not evidence."""
    with pytest.raises(CheckFailed, match="formula"):
        analyse(EXP, records(formula_err=5e-3), P, tmp_path)


def test_layernorm_variants_rule_a_swap_reference_that_misses_the_final_loss_stops_the_claim(tmp_path):
    with pytest.raises(CheckFailed, match=r"reference.*reference/LN"):
        analyse(EXP, records(ref_off=1e-7), P, tmp_path)
    assert decisions(analyse(EXP, records(), P, tmp_path), "reference/")["reference/LN"] == "equivalent"


def test_layernorm_variants_rule_models_that_never_learned_are_excluded_not_counted(tmp_path):
    # every run within 0.10 nats of the unigram loss: a 0.05-nat swap effect must not refute
    v = analyse(EXP, records({("layer", "float32"): 0.05}, base=UNIGRAM - 0.02), P, tmp_path)
    assert set(decisions(v, "swap-").values()) == {"excluded"}
    assert all(verdicts(v)[s] == "inconclusive" for s in SWAP_SUBS)
    assert v.verdict == "inconclusive"


def test_layernorm_variants_rule_a_diverged_run_drops_its_seed_from_the_pair(tmp_path):
    v = analyse(EXP, records(diverged={("layer", "torch", 3)}), P, tmp_path)
    c = comparison(v, "swap-LN-fp32/t2n-same-eps")
    assert c.n == 4 and "3" in c.note
    assert comparison(v, "swap-LN-fp32/n2t").n == 5  # the notes-trained seed 3 is still there


def test_layernorm_variants_rule_retraining_is_context_not_verdict(tmp_path):
    # training with the notes' formula ends 0.2 nats worse, but every swap is within the margin: the verdict
    # stands
    v = analyse(EXP, records(notes_shift=0.2), P, tmp_path)
    assert decisions(v, "context-") == {"context-LN": "a_better", "context-RMS": "a_better"}  # torch's lower
    assert verdicts(v)["context-LN"] == "refuted" and not sub(v, "context-LN").counts
    assert v.verdict == "supported"


def test_layernorm_variants_rule_activations_below_sigma_star(tmp_path):
    v = analyse(EXP, records(q01=1e-3), P, tmp_path)
    assert decisions(v, "activations/") == {"activations/LN": "b_better", "activations/RMS": "b_better"}
    assert verdicts(v)["activations"] == verdicts(v)["activations-init"] == "refuted"
    assert v.verdict == "supported"  # reported beside the swap, not part of the verdict
    # one family's trained inputs dip below σ*, the other's do not
    recs = records()
    for r in recs:
        if r["config"].get("family") == "rms" and r["config"]["part"] == "train":
            r["metrics"]["probes"] = [
                {k: {**q, "q01": 1e-3} for k, q in pr.items()} for pr in r["metrics"]["probes"]
            ]
    v = analyse(EXP, recs, P, tmp_path)
    assert decisions(v, "activations/") == {"activations/LN": "equivalent", "activations/RMS": "b_better"}
    assert verdicts(v)["activations"] == "mixed"


def test_layernorm_variants_rule_activations_read_trained_probes_apart_from_the_init(tmp_path):
    """Inputs below σ* at step 0 only (the committed runs: RMSNorm, 2 probes, both at init): the trained
    activations stay above σ*; the init's dip is its own reported line, not evidence about trained models."""
    recs = records()
    for r in recs:
        if r["config"].get("family") == "rms" and r["config"]["part"] == "train":
            first, *rest = r["metrics"]["probes"]
            r["metrics"]["probes"] = [{k: {**q, "q01": 1e-3} for k, q in first.items()}, *rest]
    v = analyse(EXP, recs, P, tmp_path)
    assert verdicts(v)["activations"] == "supported"
    assert decisions(v, "activations-init/") == {
        "activations-init/LN": "equivalent",
        "activations-init/RMS": "b_better",
    }
    fam = {s.id: s for s in v.sub_verdicts}
    assert not fam["activations"].counts and not fam["activations-init"].counts


def test_layernorm_variants_sigma_star_moves_with_sqrt_eps():
    notes_eps = sys.modules[type(EXP).__module__].NOTES_EPS
    for std, orders in (("layer", 0.5), ("rms", 1.5)):
        same = view.sigma_star(std, 64, 1e-5)
        # both layers at the notes' eps: σ* ∝ √eps, so 0.5 and 1.5 decades lower (not 3 and 6)
        assert math.log10(same / view.sigma_star(std, 64, notes_eps[std])) == pytest.approx(orders, abs=0.05)
        # the notes' layer at its eps against torch's at 1e-5 inside the root: the larger eps sets σ*
        assert view.sigma_star(std, 64, 1e-5, notes_eps[std]) == pytest.approx(same, rel=0.1)


# ---------------------------------------------------------------- the swap changes the norm formula only
def tiny_lm(family: str, seed: int = 0) -> LM:
    torch.manual_seed(seed)
    cfg = {"d_model": 16, "n_layers": 2, "n_heads": 2, "seq_len": 12}
    model = LM(model_config(cfg, 20, norm=family, norm_eps=1e-5))
    with torch.no_grad():  # trained-looking gains and biases, so the swap has something to carry over
        for m in model.modules():
            if isinstance(m, NORM_TYPES):
                m.weight.uniform_(0.5, 1.5)
                if getattr(m, "bias", None) is not None:
                    m.bias.normal_(0, 0.1)
    return model


def batches(n=3):
    g = torch.Generator().manual_seed(1)
    return [
        (torch.randint(1, 20, (4, 12), generator=g), torch.randint(1, 20, (4, 12), generator=g))
        for _ in range(n)
    ]


@pytest.mark.parametrize("family", ["layer", "rms"])
def test_swap_to_the_same_formula_leaves_the_loss_bit_identical(family):
    model, bs = tiny_lm(family), batches()
    for formula, eps in (("torch", 1e-5), ("notes", 1e-6)):
        swap_formula(model, family, formula, eps)
        before = evaluate(model, bs, "cpu")
        swap_formula(model, family, formula, eps)  # fresh modules of the same formula, same tensors
        assert evaluate(model, bs, "cpu") == before
    # a round trip through the other formula comes back to the very same number, in both precisions
    ref = swap_losses(model, family, {"own": ["notes", 1e-6]}, ["float32", "bfloat16"], bs, "cpu")
    trip = swap_losses(
        model, family, {"torch": ["torch", 1e-5], "own": ["notes", 1e-6]}, ["float32", "bfloat16"], bs, "cpu"
    )
    assert (
        trip["float32"]["own"] == ref["float32"]["own"] and trip["bfloat16"]["own"] == ref["bfloat16"]["own"]
    )
    assert trip["float32"]["torch"] != ref["float32"]["own"]  # the other formula does change the loss


@pytest.mark.parametrize("family", ["layer", "rms"])
def test_swap_keeps_every_parameter_and_changes_only_the_norm_modules(family):
    model = tiny_lm(family)
    params = {k: v for k, v in model.named_parameters()}
    others = {n: type(m) for n, m in model.named_modules() if not isinstance(m, NORM_TYPES) and n}
    assert swap_formula(model, family, "notes", 1e-8) == 2 * 2 + 1  # norm1, norm2 per block, final norm
    after = dict(model.named_parameters())
    assert list(after) == list(params) and all(
        after[k] is params[k] for k in params
    )  # same Parameter objects
    assert {n: type(m) for n, m in model.named_modules() if not isinstance(m, NORM_TYPES) and n} == others
    norms = [m for m in model.modules() if isinstance(m, NORM_TYPES)]
    assert all(type(m) is CLASSES[family]["notes"] and m.eps == 1e-8 for m in norms)
    with pytest.raises(ValueError):
        swap_formula(model, "rms" if family == "layer" else "layer", "torch", 1e-5)  # never across families


def test_swap_reference_reproduces_the_training_evaluation_and_leaves_the_model_alone():
    model, bs = tiny_lm("layer"), batches()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    out = swap_losses(
        model,
        "layer",
        {"torch": ["torch", 1e-5], "notes": ["notes", 1e-6]},
        ["float32", "bfloat16"],
        bs,
        "cpu",
    )
    assert out["float32"]["torch"] == evaluate(
        model, bs, "cpu"
    )  # the run's final validation loss, bit for bit
    assert all(isinstance(m, CLASSES["layer"]["torch"]) for m in model.modules() if isinstance(m, NORM_TYPES))
    assert all(torch.equal(state[k], v) and v.dtype == torch.float32 for k, v in model.state_dict().items())
