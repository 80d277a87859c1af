"""The sinusoidal_relative rule on synthetic records: the identity's tolerance checks decide the verdict; the
learned-table sub-verdict passes the learned-at-all guard, then the convergence gate (TOST), then the thresholds."""

import numpy as np

from tfclaims.registry import load

from rules import analyse, decisions, find_sub, record

EXP = load("sinusoidal_relative")
P = {**EXP.profiles["quick"], "seeds": [0, 1, 2, 3, 4]}  # five seeds: enough power for the synthetic effects
UNIGRAM = 3.3
SUB_LEARNED = "Learned absolute embeddings share the property (comparison)"


def identity_metrics(err32=1.2e-7, dot_spread=1e-8):
    rows = [
        {"d": d, "k": k, "err32": err32 if (d, k) == (16, 3) else 1e-7, "err64": 5e-8, "orth_err": 2e-16,
         "compose_err": 1e-15, "dot_mean": 1.0, "dot_spread": dot_spread * d / 2, "dot_closed": 1.0,
         "dot_closed_err": 1e-8}
        for d in P["d_models"] for k in P["offsets"]
    ]  # fmt: skip
    return {"rows": rows, "curve_ks": [0, 1, 2], "curves": {"0": [8.0, 7.9, 7.7]}, "curve_d": 16}


def stats(r2, res):
    return {"toeplitz_r2": r2, "shift_residual": {"1": res, "4": res}}


def learned_metrics(seed, r2_path, res_path, final_val=2.6):
    """r2_path / res_path: the measures at each probe; the last is the trained table."""
    rng = np.random.default_rng(seed)
    jit = 0.004 * rng.standard_normal()  # seed-to-seed differences, the same at every probe
    wob = 0.002 * rng.standard_normal(len(r2_path))  # and probe-to-probe wobble
    probes = [stats(r + jit + w, s - jit - w) for r, s, w in zip(r2_path, res_path, wob)]
    return {
        "eval_steps": [6 * i for i in range(len(probes))], "val_loss": [3.5] * len(probes), "final_val": final_val,
        "unigram_xent": UNIGRAM, "probes": probes, "final_table": probes[-1],
        "sinusoidal_table": stats(1.0, 1e-8), "gram_learned": np.eye(4).tolist(),
        "gram_sinusoidal": np.eye(4).tolist(), "gram_stride": 12, "norms": [1.0] * 48,
    }  # fmt: skip


def records(ident=None, r2_path=(0.02, 0.5, 0.95, 0.951), res_path=(0.7, 0.1, 0.02, 0.021), final_val=2.6):
    out = []
    for i, c in enumerate(EXP.grid(P)):
        if c["part"] == "identity":
            m = ident or identity_metrics()
        else:
            m = learned_metrics(c["seed"], r2_path, res_path, final_val)
        out.append(record(c, m, f"r{i}"))
    return out


def test_sinusoidal_relative_rule_supported_and_learned_table_shares_the_property(tmp_path):
    v = analyse(EXP, records(), P, tmp_path)
    assert v.verdict == "supported"
    d = decisions(v)
    assert d["identity:d16"] == d["identity:d64"] == d["dots:d16"] == "equivalent"
    assert d["learned:converged"] == "equivalent"
    assert d["learned:R2-vs-0.9"] == "b_better" and d["learned:res1-vs-0.05"] == "b_better"
    assert find_sub(v, SUB_LEARNED, exact=True).verdict == "supported"
    assert {f.id for f in v.noise_floor} == {"null:R2", "null:res1"}


def test_sinusoidal_relative_rule_refuted_when_the_identity_misses_the_tolerance(tmp_path):
    v = analyse(EXP, records(ident=identity_metrics(err32=2e-6)), P, tmp_path)
    assert v.verdict == "refuted"
    assert decisions(v)["identity:d16"] == "undecided" and decisions(v)["identity:d64"] == "equivalent"
    assert v.sub_verdicts[0].verdict == "refuted" and v.sub_verdicts[1].verdict == "supported"


def test_sinusoidal_relative_rule_refuted_when_dot_products_depend_on_position(tmp_path):
    v = analyse(EXP, records(ident=identity_metrics(dot_spread=1e-3)), P, tmp_path)
    assert v.verdict == "refuted"
    assert v.sub_verdicts[1].verdict == "refuted"


def test_sinusoidal_relative_rule_learned_table_lacks_the_property_once_converged(tmp_path):
    v = analyse(EXP, records(r2_path=(0.02, 0.15, 0.2, 0.2), res_path=(0.7, 0.6, 0.58, 0.58)), P, tmp_path)
    assert v.verdict == "supported"  # the learned table is a comparison beside the verdict
    assert decisions(v)["learned:converged"] == "equivalent"
    assert decisions(v)["learned:R2-vs-0.5"] == "a_better"
    assert find_sub(v, SUB_LEARNED, exact=True).verdict == "refuted"


def test_sinusoidal_relative_rule_still_rising_is_inconclusive_not_refuted(tmp_path):
    # a naive rule would call R² 0.2 "lacks the property"; R² rose by 0.08 over the last interval
    v = analyse(EXP, records(r2_path=(0.02, 0.05, 0.12, 0.2), res_path=(0.7, 0.65, 0.6, 0.58)), P, tmp_path)
    assert decisions(v)["learned:converged"] != "equivalent"
    assert decisions(v)["learned:R2-vs-0.5"] == "a_better"
    assert find_sub(v, SUB_LEARNED, exact=True).verdict == "inconclusive"
    assert "not shown converged" in find_sub(v, SUB_LEARNED, exact=True).detail


def test_sinusoidal_relative_rule_between_thresholds_is_inconclusive(tmp_path):
    v = analyse(EXP, records(r2_path=(0.02, 0.6, 0.7, 0.7), res_path=(0.7, 0.12, 0.1, 0.1)), P, tmp_path)
    assert decisions(v)["learned:converged"] == "equivalent"
    assert find_sub(v, SUB_LEARNED, exact=True).verdict == "inconclusive"


def test_sinusoidal_relative_rule_runs_that_never_learned_are_excluded(tmp_path):
    v = analyse(
        EXP,
        records(r2_path=(0.02, 0.03, 0.2, 0.2), res_path=(0.7, 0.6, 0.58, 0.58), final_val=3.28),
        P,
        tmp_path,
    )
    d = decisions(v)
    assert all(d[i] == "excluded" for i in d if i.startswith("learned:"))
    assert find_sub(v, SUB_LEARNED, exact=True).verdict == "inconclusive"
    assert v.verdict == "supported"
