"""The rmsnorm rule on synthetic run records: every outcome it can give.

The quick profile's grid with four seeds (the paired quality test needs a few to decide) and the fused family
switched on (the default profile's shape). Timings are built as
per-round times sharing a round-to-round load factor (so the pairing over rounds matters); the training runs'
final losses share a seed-to-seed spread between the arms."""

import numpy as np
import pytest

from tfclaims.claims.rmsnorm import AA, FUSED, IMPLS
from tfclaims.harness.registry import load

from rules import analyse, decisions, record, sub_verdict, timed

EXP = load("rmsnorm")
P = {**EXP.profiles["quick"], "seeds": [0, 1, 2, 3], "fused": True}
P_NO_FUSED = {**P, "fused": False}
UNIGRAM = 3.30
JITTER = np.array([0.00, 0.03, -0.02, 0.01])  # seed-to-seed spread shared by both arms (paired)


def timing_cell(speed, base, fused=True):
    """speed: log(t_RMS / t_LN) for the built-in, eager and fused pairs (negative: RMSNorm faster)."""
    b, e, f = speed
    cell = {"layer": timed(base), "rms": timed(base, b, 1), "eager_layer": timed(3 * base, 0, 2),
            "eager_rms": timed(3 * base, e, 3), AA: timed(base, 0, 4)}  # fmt: skip
    if fused:
        cell |= {"fused_layer": timed(0.8 * base, 0, 5), "fused_rms": timed(0.8 * base, f, 6)}
    return cell


def kernels():
    k = {"top": [], "kernels": {"aten::native_layer_norm": 1}}
    return {i: {"forward": k, "backward": k} for i in IMPLS}


def records(*, alone, step, quality, learned=True, p=P):
    """alone(d) / step() -> (built-in, eager, fused) log time ratios RMS/LN; quality(norm, seed) -> final val loss."""
    recs = []
    for i, c in enumerate(EXP.grid(p)):
        if c["part"] == "norm_alone":
            impls = list(IMPLS) + (list(FUSED) if c["fused"] else [])
            rows = [{"d": d, "bytes": 5 * 256 * d * 4, **timing_cell(alone(d), 1e-4 * d / 64, c["fused"])} for d in c["widths"]]  # fmt: skip
            m = {"rows": rows, "impls": impls, "copy_bw": [2e10, 2.2e10], "kernels": kernels(),
                 "kernel_width": c["widths"][0], "threads": 1}  # fmt: skip
        elif c["part"] == "step":
            cell = timing_cell(step(), 0.02, fused=False)
            m = {"step": {k: {"median": v["median"], "times": v["times"]} for k, v in cell.items()},
                 "norm": {k: {"median": 1e-4} for k in IMPLS}, "n_norms": 3, "threads": 1}  # fmt: skip
        else:
            s = c["seed"] % 1000
            v = float(quality(c["norm"], s) + JITTER[s] + (0.002 * (s - 1.5) if c["norm"] == "rms" else 0.0))
            if not learned:
                v = UNIGRAM + 0.02 * (s % 2)
            m = {"final_val": v, "best_val": v, "val_loss": [4.4, v + 0.2, v], "eval_steps": [0, 6, 12],
                 "unigram_xent": UNIGRAM, "steps_per_s": 30.0, "diverged_at": None}  # fmt: skip
        recs.append(record(c, m, f"r{i}"))
    return recs


FASTER = (-0.2, -0.3, -0.15)  # RMSNorm 18% / 26% / 14% faster (built-in, eager, fused)
SLOWER = (0.5, -0.3, -0.15)  # the built-in RMSNorm slower (composite kernels), eager and fused faster
ALL_SLOWER = (0.5, 0.3, 0.2)  # LayerNorm faster like with like too
NONE = (0.0, 0.0, 0.0)
SAME = lambda norm, s: 2.50  # noqa: E731


def test_rmsnorm_rule_supported_when_faster_everywhere_and_quality_equivalent(tmp_path):
    v = analyse(EXP, records(alone=lambda d: FASTER, step=lambda: FASTER, quality=SAME), P, tmp_path)
    assert v.verdict == "supported"
    d = decisions(v)
    assert d["alone-built-in:d64"] == d["alone-built-in:d128"] == "b_better"  # b = RMSNorm, lower time
    assert d["step-built-in:d32-L1"] == "b_better"
    assert d["quality:rms-vs-ln"] == "equivalent"
    q = next(c for c in v.comparisons if c.id == "quality:rms-vs-ln")
    assert q.paired and q.n == 4 and q.margin == 0.05 and q.learned_a == 4 and q.noise is not None
    assert sub_verdict(v, "Same validation loss") == "supported"
    aa = {c.id for c in v.noise_floor}
    assert {"aa:alone-d64", "aa:alone-d128", "aa:step-d32-L1", "null:layernorm-seed-offset"} <= aa
    assert all(
        c.decision != "b_better" or c.noise is not None for c in v.comparisons if c.id.startswith("alone")
    )


def test_rmsnorm_builtin_layernorm_faster_is_a_finding_not_the_verdict(tmp_path):
    # the committed CPU shape: PyTorch's fused LayerNorm beats its composite built-in RMSNorm, while the
    # formulas compared like with like (eager vs eager, fused vs fused) favour RMSNorm: the verdict follows them
    v = analyse(EXP, records(alone=lambda d: SLOWER, step=lambda: SLOWER, quality=SAME), P, tmp_path)
    d = decisions(v)
    assert d["alone-built-in:d64"] == "a_better" and d["step-built-in:d32-L1"] == "a_better"
    assert d["alone-eager:d64"] == d["alone-fused:d64"] == "b_better"
    assert sub_verdict(v, "Norm alone, built-in") == "refuted"  # reported beside, marked not counted
    assert "not counted" in next(s.name for s in v.sub_verdicts if s.name.startswith("Norm alone, built-in"))
    assert sub_verdict(v, "Norm alone, eager") == sub_verdict(v, "Norm alone, fused") == "supported"
    assert v.evidence["speed"] == "supported" and v.verdict == "supported"
    assert v.evidence["speed_from"] == ["alone eager", "alone fused", "step eager"]


def test_rmsnorm_rule_refuted_when_layernorm_is_faster_like_with_like(tmp_path):
    v = analyse(EXP, records(alone=lambda d: ALL_SLOWER, step=lambda: ALL_SLOWER, quality=SAME), P, tmp_path)
    assert decisions(v)["alone-fused:d128"] == "a_better"
    assert v.evidence["speed"] == "refuted" and v.verdict == "refuted"


def test_rmsnorm_rule_without_the_fused_family(tmp_path):
    # the quick profile's shape: no fused runs, so speed is eager alone and the eager step
    recs = records(alone=lambda d: SLOWER, step=lambda: SLOWER, quality=SAME, p=P_NO_FUSED)
    v = analyse(EXP, recs, P_NO_FUSED, tmp_path)
    assert not any(c.id.startswith("alone-fused") for c in v.comparisons)
    assert v.evidence["speed_from"] == ["alone eager", "step eager"] and v.verdict == "supported"


def test_rmsnorm_bandwidth_share_in_the_table(tmp_path):
    v = analyse(EXP, records(alone=lambda d: FASTER, step=lambda: FASTER, quality=SAME), P, tmp_path)
    assert v.evidence["copy_bandwidth"] == 2.1e10
    import pandas as pd

    t = pd.read_csv(tmp_path / "norm_alone.csv")
    # 5 x 256 tokens x 64 x 4 bytes in the built-in LN's median time, over 21 GB/s
    row = t[t["width d"] == 64].iloc[0]
    assert row["built-in LN % of copy bandwidth"] == pytest.approx(
        100 * 5 * 256 * 64 * 4 / (row["layer (µs)"] * 1e-6) / 2.1e10, rel=1e-6
    )


def test_rmsnorm_rule_refuted_when_rmsnorm_trains_worse(tmp_path):
    v = analyse(EXP, records(alone=lambda d: FASTER, step=lambda: FASTER,
                        quality=lambda n, s: 2.50 + (0.2 if n == "rms" else 0.0)), P, tmp_path)  # fmt: skip
    assert decisions(v)["quality:rms-vs-ln"] == "a_better"  # a = LayerNorm, lower loss
    assert sub_verdict(v, "Same validation loss") == "refuted"
    assert v.verdict == "refuted"


def test_rmsnorm_rule_mixed_when_faster_at_one_width_only(tmp_path):
    v = analyse(
        EXP,
        records(alone=lambda d: FASTER if d == 64 else ALL_SLOWER, step=lambda: FASTER, quality=SAME),
        P,
        tmp_path,
    )
    d = decisions(v)
    assert d["alone-eager:d64"] == "b_better" and d["alone-eager:d128"] == "a_better"
    assert sub_verdict(v, "Norm alone, eager") == "mixed"
    assert v.verdict == "mixed"


def test_rmsnorm_rule_underpowered_null_is_inconclusive_not_refuted(tmp_path):
    # no timing difference, and a quality difference (+0.03) inside the seed noise: a naive "CI contains 0,
    # so they are equal / not faster" rule would refute; the ladder leaves it undecided
    noisy = lambda n, s: 2.5 + (np.array([0.3, -0.25, 0.2, -0.2])[s] if n == "rms" else 0.0)  # noqa: E731
    v = analyse(EXP, records(alone=lambda d: NONE, step=lambda: NONE, quality=noisy), P, tmp_path)
    d = decisions(v)
    assert d["quality:rms-vs-ln"] == "undecided"
    assert d["alone-built-in:d64"] in ("undecided", "equivalent")
    assert sub_verdict(v, "Same validation loss") == "inconclusive"
    assert sub_verdict(v, "Norm alone, built-in") == "inconclusive"
    assert v.verdict == "inconclusive"
    assert "detectable" in next(s for s in v.sub_verdicts if s.name == "Same validation loss").detail


def test_rmsnorm_rule_excludes_quality_when_neither_norm_learned(tmp_path):
    v = analyse(
        EXP, records(alone=lambda d: FASTER, step=lambda: FASTER, quality=SAME, learned=False), P, tmp_path
    )
    q = next(c for c in v.comparisons if c.id == "quality:rms-vs-ln")
    assert q.decision == "excluded" and q.learned_a == 0 and q.learned_b == 0
    assert sub_verdict(v, "Same validation loss") == "inconclusive"
    assert v.verdict == "inconclusive"  # speed supported, quality not counted either way


def test_rmsnorm_rule_requires_every_width(tmp_path):
    # faster at d = 64, no difference at d = 128: the claim is "faster at every width", so not supported
    v = analyse(
        EXP,
        records(alone=lambda d: FASTER if d == 64 else NONE, step=lambda: FASTER, quality=SAME),
        P,
        tmp_path,
    )
    d = decisions(v)
    assert d["alone-eager:d64"] == "b_better" and d["alone-eager:d128"] == "undecided"
    assert sub_verdict(v, "Norm alone, eager") == "inconclusive"
    assert v.verdict == "inconclusive"
