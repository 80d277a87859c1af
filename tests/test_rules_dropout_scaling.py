"""The declared rule of `dropout_scaling`, fed synthetic mask draws and probes of trained models: exact
scaling and keep rates, per-site projections, and held-out losses by inference mode, each steered either way;
a run that did not learn is excluded, not counted."""

import pytest

from tfclaims.harness.registry import load

from rules import analyse, record, sub, verdicts

CLAIM = "dropout_scaling"


@pytest.fixture(scope="module")
def exp():
    return load(CLAIM)


def probe(
    p, seed, site, *, eval_loss=1.6, unscaled=None, mc_gap=0.005, first=1.0, deeper=0.98, layers=4, k=64
):
    """A trained model's probe: MC-averaged losses fall from one mask's towards eval's + mc_gap; unscaled
    (a value, or site -> value) the loss without the scaling (default: 0.5·p above eval on the attention
    weights, ±0.0003 around it on the residual branches, where the LayerNorms remove it)."""
    jitter = 0.002 * ((seed % 3) - 1)
    if unscaled is None:
        unscaled = {"attention": eval_loss + 0.5 * p, "residual": eval_loss + 3e-4 * (seed % 2 * 2 - 1)}
    unscaled = unscaled[site] if isinstance(unscaled, dict) else unscaled
    n_sites = {"residual": 1 + 2 * layers, "attention": layers}[site]
    ks = [2**j for j in range(k.bit_length()) if 2**j <= k]
    single = eval_loss + 0.2 * p
    return {
        "eval_loss": eval_loss + jitter,
        "unscaled_loss": unscaled + jitter,
        "single_mask_loss": single + jitter,
        "mc_loss": {str(n): eval_loss + mc_gap + (single - eval_loss) / n + jitter for n in ks},
        "projection": [first + jitter / 10] + [deeper + jitter / 10] * (n_sites - 1),
    }


def records(exp, params="default", *, learned=True, keep_dev=0.0, rel=1e-7, **kw):
    p = exp.profiles[params]
    out = []
    for i, cfg in enumerate(exp.grid(p)):
        if cfg["part"] == "masks":
            rows = [
                {"p": q, "draw": d, "kept": 1 - q + keep_dev + 1e-5 * ((d % 3) - 1), "max_rel_error": rel}
                for q in cfg["ps"]
                for d in range(cfg["draws"])
            ]
            out.append(record(cfg, {"rows": rows}, f"m{i}"))
            continue
        m = {
            "final_val": 1.6 if learned else 3.2,
            "unigram_xent": 3.3,
            "diverged_at": None,
            "probe": probe(
                cfg["dropout"], cfg["seed"], cfg["site"], layers=cfg["n_layers"], k=cfg["mc_samples"], **kw
            ),
        }
        out.append(record(cfg, m, f"t{i}"))
    return out


def test_exact_scaling_a_mismatch_without_it_and_an_ensemble_support_the_claim(exp, tmp_path):
    v = analyse(exp, records(exp), "default", tmp_path)
    assert verdicts(v) == {
        "scale": "supported",
        "keep-rate": "supported",
        "expectation": "supported",
        "deeper": "supported",
        "mismatch": "supported",
        "mismatch-residual": "refuted",  # reported: the LayerNorms remove the factor there
        "ensemble": "supported",
        "single": "supported",
    }
    assert v.verdict == "supported"


def test_the_mismatch_counts_the_attention_weights_only(exp, tmp_path):
    """A cost on the residual branches alone decides nothing counted; the attention weights' decide."""
    v = analyse(exp, records(exp, unscaled={"attention": 1.6, "residual": 1.9}), "default", tmp_path)
    assert sub(v, "mismatch").verdict == "refuted" and sub(v, "mismatch-residual").verdict == "supported"
    assert not sub(v, "mismatch-residual").counts and sub(v, "mismatch").counts
    ids = {c.id for c in v.comparisons if c.id.startswith("mismatch/")}
    assert ids == {f"mismatch/attention-p{p:g}" for p in exp.profiles["default"]["dropouts"]}


def test_a_kept_value_off_by_more_than_two_roundings_refutes_the_scaling(exp, tmp_path):
    assert sub(analyse(exp, records(exp, rel=1e-6), "default", tmp_path), "scale").verdict == "refuted"


def test_a_biased_keep_rate_is_refuted(exp, tmp_path):
    assert (
        sub(analyse(exp, records(exp, keep_dev=0.005), "default", tmp_path), "keep-rate").verdict == "refuted"
    )


def test_a_first_site_off_by_the_keep_probability_refutes_the_expectation(exp, tmp_path):
    """Unscaled dropout: the masks' mean is (1 − p) times eval mode's output."""
    v = analyse(exp, records(exp, first=0.8), "default", tmp_path)
    assert sub(v, "expectation").verdict == "refuted"


def test_a_scaling_that_changes_nothing_refutes_the_mismatch(exp, tmp_path):
    """The loss without the scaling below eval mode's: the opposite effect, significant."""
    v = analyse(exp, records(exp, unscaled=1.5), "default", tmp_path)
    assert sub(v, "mismatch").verdict == "refuted"


def test_an_ensemble_far_from_eval_mode_refutes_the_explanation(exp, tmp_path):
    v = analyse(exp, records(exp, mc_gap=-0.08), "default", tmp_path)
    assert sub(v, "ensemble").verdict == "refuted"
    assert v.verdict == "mixed"


def test_runs_that_did_not_learn_are_excluded(exp, tmp_path):
    v = analyse(exp, records(exp, learned=False), "default", tmp_path)
    for sid in ("mismatch", "ensemble"):
        assert sub(v, sid).verdict == "inconclusive" and "excluded" in sub(v, sid).detail
