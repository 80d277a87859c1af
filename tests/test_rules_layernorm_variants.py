"""The layernorm_variants rule on synthetic records. The formula comparisons are exact/tolerance checks; the
training pairs go through the paired test with the ±0.05-nat margin, the learned-at-all guard and Holm. Without
a positive control the rule cannot support interchangeability: it refutes (a significant difference) or stays
inconclusive."""

import numpy as np

from tfclaims.registry import load

from rules import analyse, decisions, record, subs

EXP = load("layernorm_variants")
P = {**EXP.profiles["quick"], "d_model": 64, "seeds": [0, 1, 2, 3, 4]}  # d = 64: the unit-scale check passes
UNIGRAM = 3.3


def pair(d, sigma=1.0, formula_err=1e-4):
    ln = 1 - np.sqrt((d - 1) / d) if sigma > 1e-2 else 100.0
    rms = 1e-6 if sigma > 1e-2 else 100.0
    return {
        std: {"median": v, "max": v, "max_abs": v, "out_rms_torch": 1.0, "out_rms_notes": 1.0, "formula_err": formula_err}
        for std, v in (("layer", ln), ("rms", rms))
    }  # fmt: skip


def train_metrics(final, q01=0.5):
    probes = [{f"stack.blocks.0.norm{i}": {"min": q01 / 2, "q01": q01, "median": 1.0} for i in (1, 2)}] * 3
    return {"eval_steps": [0, 6, 12], "val_loss": [4.0, 3.5, final], "final_val": final, "unigram_xent": UNIGRAM,
            "diverged_at": None, "probes": probes}  # fmt: skip


def records(delta=(0.0, 0.0), noise=0.003, base=2.6, base_notes=None, formula_err=1e-4, q01=0.5):
    """delta: notes' minus torch's final loss per norm (LN, RMS); noise: per-seed jitter of the difference."""
    rng = np.random.default_rng(7)
    out = []
    for i, c in enumerate(EXP.grid(P)):
        part = c["part"]
        if part == "width":
            m = {"rows": [{"d": d, **pair(d, formula_err=formula_err)} for d in c["widths"]]}
        elif part == "scale":
            m = {
                "rows": [
                    {"d": d, "sigma": s, **pair(d, s, formula_err)} for d in c["widths"] for s in c["sigmas"]
                ]
            }
        else:
            v = c["variant"]
            std = v.removeprefix("notes_")
            seed_effect = 0.05 * np.sin(c["seed"])  # shared by both arms of a seed: pairing removes it
            final = (base_notes if v.startswith("notes") and base_notes is not None else base) + seed_effect
            if v.startswith("notes"):
                final += delta[0 if std == "layer" else 1] + noise * rng.standard_normal()
            m = train_metrics(final, q01)
        out.append(record(c, m, f"r{i}"))
    return out


def test_layernorm_variants_rule_refuted_when_a_notes_variant_trains_differently(tmp_path):
    v = analyse(EXP, records(delta=(0.2, 0.0)), P, tmp_path)
    assert v.verdict == "refuted"
    d = decisions(v)
    assert d["train:LayerNorm"] == "a_better"  # torch's (arm a) is better: lower loss
    assert subs(v)["Training: notes LayerNorm = torch LayerNorm"] == "refuted"
    assert {f.id for f in v.noise_floor} == {"null:LayerNorm", "null:RMSNorm"}
    assert all(c.noise is not None for c in v.comparisons if c.id.startswith("train:"))


def test_layernorm_variants_rule_equivalence_within_the_margin_supports_interchangeability(tmp_path):
    v = analyse(EXP, records(delta=(0.0, 0.0)), P, tmp_path)
    d = decisions(v)
    assert d["train:LayerNorm"] == "equivalent" and d["train:RMSNorm"] == "equivalent"
    assert d["formula:LN"] == d["unit:LN"] == d["tiny:RMS"] == d["sigma-star:LN"] == "equivalent"
    assert v.verdict == "supported"
    assert subs(v)["Training: notes RMSNorm = torch RMSNorm"] == "supported"
    assert "TOST" in v.sub_verdicts[-1].detail


def test_layernorm_variants_rule_one_equivalent_pair_beside_an_undecided_one_is_inconclusive(tmp_path):
    v = analyse(EXP, records(delta=(0.0, 0.03), noise=0.3), P, tmp_path)
    assert v.verdict == "inconclusive"


def test_layernorm_variants_rule_underpowered_null_is_inconclusive(tmp_path):
    v = analyse(EXP, records(delta=(0.03, -0.03), noise=0.3), P, tmp_path)
    d = decisions(v)
    assert d["train:LayerNorm"] == "undecided" and d["train:RMSNorm"] == "undecided"
    assert v.verdict == "inconclusive"
    assert "detectable" in v.sub_verdicts[-2].detail


def test_layernorm_variants_rule_inconclusive_when_a_closed_form_check_fails(tmp_path):
    v = analyse(EXP, records(delta=(0.2, 0.0), formula_err=5e-3), P, tmp_path)
    assert decisions(v)["formula:LN"] == "undecided"
    assert subs(v)["Closed forms match the measured outputs"] == "refuted"
    assert v.verdict == "inconclusive"


def test_layernorm_variants_rule_pairs_that_never_learned_are_excluded_not_counted(tmp_path):
    # every run within 0.10 nats of the unigram loss: the notes' LN 'worse' by 0.2 must not refute
    v = analyse(EXP, records(delta=(0.2, 0.0), base=UNIGRAM - 0.02), P, tmp_path)
    d = decisions(v)
    assert d["train:LayerNorm"] == "excluded" and d["train:RMSNorm"] == "excluded"
    assert v.verdict == "inconclusive"


def test_layernorm_variants_rule_one_learned_arm_still_counts(tmp_path):
    # torch's arms learned (2.6), the notes' arms sat at the unigram level: a real difference, counted
    v = analyse(EXP, records(base_notes=UNIGRAM - 0.02), P, tmp_path)
    c = next(c for c in v.comparisons if c.id == "train:LayerNorm")
    assert c.decision == "a_better" and c.learned_a == 5 and c.learned_b == 0
    assert v.verdict == "refuted"


def test_layernorm_variants_rule_activations_below_sigma_star(tmp_path):
    v = analyse(EXP, records(q01=1e-3), P, tmp_path)
    assert decisions(v)["sigma-star:RMS"] == "undecided"
    assert subs(v)["Real activations stay above σ*"] == "refuted"
