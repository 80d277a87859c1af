"""The gqa_throughput rule on synthetic run records: each outcome its declared sub-claims can give.

The quick profile with contexts 16 and 1024, so that the closed-form byte counts put MHA's KV cache above its
weights in the context-1024 cells only (the cells of `kv-bound`). Timings: a drift shared by every variant of
a round, MHA's log time moved by +noise, −noise, ... over the rounds and every other variant's (and the A/A
copy's) by the opposite, so a paired difference has a known spread and no chance result."""

import numpy as np
import pytest

from tfclaims.evidence.evaluate import CheckFailed
from tfclaims.harness.registry import load

from rules import analyse, comparison, decisions, record, sub, verdicts

EXP = load("gqa_throughput")
P = {
    **EXP.profiles["quick"],
    "contexts": [16, 1024],
    "tuned_seeds": [0, 1, 2, 3],
    "selection_seeds": [10, 11],
}
SCALES = [f"d{d}-L{L}" for d, L in P["scales"]]
TUNED = [f"quality/{stage}-{sc}" for stage in ("scratch", "uptrained") for sc in SCALES]
UNIGRAM = 3.3
ROUNDS = 8
CELLS = ("b1-c16", "b1-c1024", "b4-c16", "b4-c1024")


def _z(r, first):
    """±1 by round, opposite for the first variant and the others."""
    return (1 if r % 2 == 0 else -1) * (1 if first else -1)


def decode_metrics(cfg, rng, speedup, noise, explicit, membound, load, aa_drift, cache_off):
    """speedup(cell) is MQA's true speed-up over MHA (GQA gets its root); explicit(kv) the explicit
    backend's time over SDPA's; the A/A copy is MHA at SDPA, its log time moved by aa_drift(cell) in every
    round on top of its own noise."""
    cell, h = f"b{cfg['batch']}-c{cfg['context']}", cfg["kvs"][0]
    drift = rng.normal(0, 0.05, ROUNDS)
    rows = []
    for b in ("sdpa", "explicit"):
        for kv in cfg["kvs"]:
            s = speedup(cell) ** (np.log2(h / kv) / np.log2(h)) if kv != h else 1.0
            f = explicit(kv) if b == "explicit" else 1.0
            ts = [float(0.01 * f / s * np.exp(d + _z(r, kv == h) * noise)) for r, d in enumerate(drift)]
            kvb = 4e6 * kv / h
            per_call, med = 2 * (1e6 + kvb), float(np.median(ts))
            rows.append(
                {
                    "n_kv_heads": kv,
                    "backend": b,
                    "params": 1000 * kv,
                    "kv_cache_bytes": kvb + cache_off,
                    "kv_cache_bytes_closed_form": kvb,
                    "weight_bytes_per_step": 1e6,
                    "kv_bytes_per_step": kvb,
                    "bytes_per_call": per_call,
                    "times": ts,
                    "median_s": med,
                    "tokens_per_s": 1 / med,
                    "achieved_bw": per_call / med,
                }
            )
    bw = rows[0]["achieved_bw"] * (1.5 if membound else 100)  # MHA at SDPA: 2/3 of the read bandwidth, or 1%
    mha = rows[0]["times"]
    aa = [t * float(np.exp(-2 * _z(r, True) * noise + aa_drift(cell))) for r, t in enumerate(mha)]
    return {
        "rows": rows,
        "read_bw": [bw, bw],
        "threads": 1,
        "load": [load, load],
        "cpus": 2,
        "gemm_flops": 1e10,
        "aa": {"n_kv_heads": h, "backend": "sdpa", "times": aa},
    }


def phase_metrics(cfg, rng, ratio, noise):
    drift = rng.normal(0, 0.05, ROUNDS)
    rows = []
    for kv in cfg["kvs"]:
        r = ratio if kv == 1 else 1.0
        pt, tt = (
            [float(base * r * np.exp(d + _z(k, kv == cfg["kvs"][0]) * noise)) for k, d in enumerate(drift)]
            for base in (0.02, 0.05)
        )
        rows.append(
            {
                "n_kv_heads": kv,
                "params": 1000 * kv,
                "prefill_times": pt,
                "train_times": tt,
                "prefill_s": float(np.median(pt)),
                "train_step_s": float(np.median(tt)),
            }
        )
    return {"rows": rows, "threads": 1}


def quality_metrics(cfg, gap, up_gap, q_noise, learned, convert_gap=0.1):
    """gap / up_gap: MQA's loss above MHA's (from scratch / converted and uptrained), each non-MHA arm ±
    q_noise by seed parity; learned=False puts every loss at the unigram level; convert_gap: first-head's loss
    above mean-pooling's right after conversion."""
    s, kv, h = cfg["seed"] % 1000, cfg["kv"], cfg["lm_heads"]
    base = 2.4 + 0.05 * s if learned else UNIGRAM
    jq = (1 if s % 2 == 0 else -1) * q_noise
    loss = (
        base
        + (0 if kv == h else gap * np.log2(h / kv) / np.log2(h))
        + (0.0 if kv == h and not cfg["matched"] else jq)
    )
    if cfg["matched"]:
        loss = base + gap / 2 + jq
    if not learned:
        loss = UNIGRAM + jq
    if cfg["steps"] == P["sweep_steps"] and learned:  # a sweep run: its loss rises away from the best rate
        best = P["lr"] * (1.0 if cfg["lm_d_model"] == P["scales"][0][0] else 0.5)
        bowl = 0.05 * np.log2(cfg["lr"] / best) ** 2
        loss, base = loss + bowl, base + bowl
    m = {
        "final_val": loss,
        "unigram_xent": UNIGRAM,
        "params": 1000,
        "d_ff": 128,
        "diverged_at": None,
        "val_loss": [4.5, loss],
        "eval_steps": [0, P["steps"]],
    }
    conv = []
    if cfg["uptrain_control"]:
        after = base - 0.02 if learned else UNIGRAM
        conv.append({"target_kv": h, "method": "none (MHA)", "before": base, "after": after})
    for t in cfg["convert_to"]:
        for method in ("mean", "first"):
            before = base + 0.4 + (0.0 if method == "mean" else convert_gap) + jq
            a = base - 0.02 + (up_gap if t == 1 else up_gap / 2) if learned else UNIGRAM
            conv.append({"target_kv": t, "method": method, "before": before, "after": a + jq})
    return m | ({"conversion": conv, "uptrain_steps": 1} if conv else {})


def records(
    speedup=lambda cell: 1.35,
    *,
    noise=0.003,
    gap=0.01,
    up_gap=0.01,
    q_noise=0.0005,
    learned=True,
    membound=False,
    phase_ratio=1.0,
    explicit=lambda kv: 1.5,
    load=0.5,
    aa_drift=lambda cell: 0.0,
    cache_off=0.0,
    convert_gap=0.1,
):
    """Synthetic records for every config of the profile P."""
    grid, out = None, []
    while (g := EXP.grid(P, out)) != grid:  # the staged sweep grows as the runner grows it
        rng, grid, out = np.random.default_rng(0), g, []
        for i, cfg in enumerate(g):
            if cfg["part"] == "decode":
                m = decode_metrics(cfg, rng, speedup, noise, explicit, membound, load, aa_drift, cache_off)
            elif cfg["part"] == "phases":
                m = phase_metrics(cfg, rng, phase_ratio, noise)
            else:
                m = quality_metrics(cfg, gap, up_gap, q_noise, learned, convert_gap)
            out.append(record(cfg, m, f"r{i}"))
    return out


def test_gqa_throughput_rule_supported_when_speedups_sit_inside_the_band_and_quality_holds(tmp_path):
    v = analyse(EXP, records(), P, tmp_path)
    assert v.verdict == "supported"
    got = verdicts(v)
    assert {k: got[k] for k in ("band", "quality", "faster", "kv-bound", "phases")} == dict.fromkeys(
        ("band", "quality", "faster", "kv-bound", "phases"), "supported"
    )
    assert decisions(v, "band/") == {f"band/{c}": "equivalent" for c in CELLS}  # shown inside [1.30, 1.40]
    assert [c.id for c in v.comparisons if c.id.startswith("kv-bound/")] == [
        "kv-bound/b1-c1024",
        "kv-bound/b4-c1024",
    ]
    assert all(comparison(v, c).decision == "equivalent" for c in TUNED)  # non-inferior at +0.05
    assert comparison(v, "quality-fixed/scratch").decision == "equivalent"
    assert comparison(v, "quality-fixed/uptrained").decision == "equivalent"
    choices = {(c["scale"], c["arm"]): c["chosen_lr"] for c in v.evidence["lr_choices"]}
    assert choices == {(sc, m): P["lr"] * f for sc, f in zip(SCALES, (1.0, 0.5)) for m in ("MHA", "MQA")}
    kinds = {s.id: (s.kind, s.counts) for s in v.sub_verdicts}
    assert kinds["bytes"][0] == "check" and kinds["band"] == kinds["quality"] == ("effect", True)
    assert not any(counts for sid, (_, counts) in kinds.items() if sid not in ("bytes", "band", "quality"))
    # every sdpa timing comparison carries its cell's A/A pair; none was timed at explicit
    assert comparison(v, "faster/b4-c16-kv1").noise is not None
    assert comparison(v, "faster-explicit/b4-c16-kv1").noise is None
    ids = {c.id for c in v.noise_floor}
    assert {"aa/b4-c16/log_time", "null/scratch", "null/uptrained", "null-convert/kv1"} <= ids
    assert verdicts(v)["convert"] == "supported"  # mean-pooling 0.1 nats better right after conversion


def test_gqa_throughput_rule_refuted_when_the_speedup_is_far_above_the_band_and_quality_drops(tmp_path):
    v = analyse(EXP, records(lambda cell: 2.0, gap=0.3, up_gap=0.3), P, tmp_path)
    assert verdicts(v)["band"] == "refuted"
    assert comparison(v, "band/b1-c16").decision == "b_better"  # shown faster than 1.40×
    assert verdicts(v)["quality"] == "refuted"
    assert comparison(v, TUNED[0]).decision == "a_better"  # shown above MHA + 0.05
    assert v.verdict == "refuted"
    # a faster MQA is still faster: the band fails because the figure understates it
    assert verdicts(v)["faster"] == "supported"


def test_gqa_throughput_rule_band_refuted_once_three_quarters_are_out_of_reach(tmp_path):
    """Inside in half the cells and outside in the other half: 75% can no longer hold, so the band fails
    (the claim's number is "30–40%" in typical serving, not in some cells)."""
    v = analyse(EXP, records(lambda cell: 1.35 if cell.startswith("b1-") else 1.1), P, tmp_path)
    assert decisions(v, "band/") == {
        "band/b1-c16": "equivalent",
        "band/b1-c1024": "equivalent",
        "band/b4-c16": "a_better",
        "band/b4-c1024": "a_better",
    }
    assert "holds in b1-c16, b1-c1024" in sub(v, "band").detail and "fails in b4-c16" in sub(v, "band").detail
    assert verdicts(v)["band"] == "refuted" and "out of reach" in sub(v, "band").detail
    assert verdicts(v)["kv-bound"] == "mixed"  # above 1.30 in b1-c1024, below it in b4-c1024


def test_gqa_throughput_rule_band_refuted_when_three_quarters_are_outside_and_none_inside(tmp_path):
    v = analyse(EXP, records(lambda cell: 1.35 if cell == "b1-c16" else 1.1, noise=0.05), P, tmp_path)
    d = decisions(v, "band/")
    assert d["band/b4-c16"] == d["band/b4-c1024"] == d["band/b1-c1024"] == "a_better"
    assert d["band/b1-c16"] == "undecided"
    assert verdicts(v)["band"] == "refuted"


@pytest.mark.parametrize(
    "inside, verdict",
    [(("b1-c16", "b1-c1024", "b4-c16"), "supported"), (("b1-c16", "b1-c1024"), "inconclusive")],
)
def test_gqa_throughput_rule_band_needs_three_quarters_of_the_cells_inside(tmp_path, inside, verdict):
    # the other cells sit on the band's edge (1.30×): undecided, neither inside nor outside
    v = analyse(EXP, records(lambda cell: 1.35 if cell in inside else 1.30), P, tmp_path)
    d = decisions(v, "band/")
    assert {c for c in CELLS if d[f"band/{c}"] == "equivalent"} == set(inside)
    assert {d[f"band/{c}"] for c in CELLS if c not in inside} == {"undecided"}
    assert verdicts(v)["band"] == verdict


def test_gqa_throughput_rule_inconclusive_when_timing_is_too_noisy(tmp_path):
    # a naive rule on medians would put cells inside or outside the band; with this noise nothing is shown
    v = analyse(EXP, records(lambda cell: 1.1, noise=0.5, q_noise=0.2, gap=0.0, up_gap=0.0), P, tmp_path)
    assert verdicts(v)["band"] == "inconclusive"
    assert set(decisions(v, "band/").values()) == {"undecided"}
    assert verdicts(v)["quality"] == "inconclusive"
    assert v.verdict == "inconclusive"


def test_gqa_throughput_rule_excludes_quality_cells_where_nothing_learned(tmp_path):
    v = analyse(EXP, records(learned=False, gap=0.3), P, tmp_path)
    assert decisions(v, "quality/") == dict.fromkeys(TUNED, "excluded")
    assert comparison(v, "matched").decision == "excluded"
    q = sub(v, "quality")
    assert q.verdict == "inconclusive" and "excluded" in q.detail
    # the band alone supported, quality undecided: the conjunction is not supported
    assert verdicts(v)["band"] == "supported" and v.verdict == "inconclusive"


def test_gqa_throughput_rule_slower_mqa_is_reported_not_hidden(tmp_path):
    v = analyse(EXP, records(lambda cell: 0.8), P, tmp_path)
    assert verdicts(v)["faster"] == "refuted"
    assert verdicts(v)["band"] == "refuted"
    assert verdicts(v)["kv-bound"] == "refuted"


@pytest.mark.parametrize("ratio,expect", [(1.0, "supported"), (1.5, "refuted")])
def test_gqa_throughput_rule_phases_interval_check(tmp_path, ratio, expect):
    v = analyse(EXP, records(phase_ratio=ratio), P, tmp_path)
    assert verdicts(v)["phases"] == expect


@pytest.mark.parametrize("speedup,expect", [(2.5, "supported"), (1.35, "refuted")])
def test_gqa_throughput_rule_tracking_where_memory_bound(tmp_path, speedup, expect):
    # bytes: MHA reads 2·(1e6 + 4e6), MQA 2·(1e6 + 1e6): predicted 2.5×; 2.5 tracks it, 1.35 falls short
    v = analyse(EXP, records(lambda cell: speedup, membound=True), P, tmp_path)
    assert verdicts(v)["tracks"] == expect
    assert len(sub(v, "tracks").comparisons) == len(CELLS)
    # MHA at explicit is 1.5× slower, so below half the read bandwidth: every cell left out there
    assert not sub(v, "tracks-explicit").comparisons and "Left out" in sub(v, "tracks-explicit").detail
    assert verdicts(v)["tracks-explicit"] == "inconclusive"


def test_gqa_throughput_rule_tracking_leaves_out_cells_below_half_the_read_bandwidth(tmp_path):
    v = analyse(EXP, records(lambda cell: 2.5), P, tmp_path)
    assert not sub(v, "tracks").comparisons and verdicts(v)["tracks"] == "inconclusive"


def test_gqa_throughput_compares_both_arms_at_one_declared_backend(tmp_path):
    # explicit MQA twice as fast as SDPA's, explicit MHA 1.5× slower: the counted band reads SDPA against SDPA
    # (1.35×, inside), the reported one explicit against explicit (1.35 · 1.5 / 0.5 = 4×, above the band); a
    # faster-of-two reading would have set SDPA MHA against explicit MQA (2.7×)
    v = analyse(EXP, records(lambda cell: 1.35, explicit=lambda kv: 0.5 if kv == 1 else 1.5), P, tmp_path)
    assert verdicts(v)["band"] == "supported" and verdicts(v)["band-explicit"] == "refuted"
    c = comparison(v, "band-explicit/b4-c16")
    assert c.decision == "b_better" and np.exp(-c.diff) == pytest.approx(1.35 * 3, rel=0.01)
    assert np.exp(-comparison(v, "band/b4-c16").diff) == pytest.approx(1.35, rel=0.01)
    aa = next(c for c in v.noise_floor if c.id == "aa/b4-c16/log_time")
    assert abs(aa.diff) < 0.05  # SDPA MHA against itself
    decl = EXP.declare(P)  # the A/A copy was timed at SDPA: no null pair is declared for the explicit set
    assert decl.sub("band").noise == "aa" and decl.sub("band-explicit").noise is None
    assert v.verdict == "supported"
    summary = (tmp_path / "decode_summary.csv").read_text()
    assert "MQA band (sdpa)" in summary and "MQA band (explicit)" in summary


def test_gqa_throughput_rule_a_significant_aa_pair_leaves_its_cell_undecided(tmp_path):
    # MQA and GQA faster in every round (p tiny) in every cell, but at b4-c16 the A/A copy runs 5% slower in
    # every round: that null pair is significant, so that cell's comparisons are undecided whatever their p;
    # the other cells, and the explicit backend's comparisons (no A/A copy timed there), still decide
    v = analyse(EXP, records(aa_drift=lambda cell: 0.05 if cell == "b4-c16" else 0.0), P, tmp_path)
    for cell in CELLS:
        c = comparison(v, f"faster/{cell}-kv1")
        assert c.p < 0.05 and c.null_significant == (cell == "b4-c16")
        assert c.decision == ("undecided" if cell == "b4-c16" else "b_better")
    assert comparison(v, "faster-explicit/b4-c16-kv1").decision == "b_better"
    assert "the null pair in the cell is significant" in sub(v, "faster").detail
    assert verdicts(v)["faster"] == "inconclusive"  # supported beside an undecided cell: not every cell
    assert verdicts(analyse(EXP, records(), P, tmp_path / "quiet"))["faster"] == "supported"


def test_gqa_throughput_rule_conversion(tmp_path):
    v = analyse(EXP, records(convert_gap=-0.1), P, tmp_path)  # first-head better right after conversion
    assert set(decisions(v, "convert/").values()) == {"a_better"} and verdicts(v)["convert"] == "refuted"
    assert v.verdict == "supported"  # reported beside the verdict


def test_gqa_throughput_rule_a_cache_off_its_closed_form_stops_the_claim(tmp_path):
    with pytest.raises(CheckFailed, match="bytes"):
        analyse(EXP, records(cache_off=64.0), P, tmp_path)


def test_gqa_throughput_flags_cells_measured_under_load(tmp_path):
    v = analyse(EXP, records(load=1.8), P, tmp_path)  # 2 cores, 1 timing thread: more than 1.5 is another job
    assert "measured under load" in v.summary
    assert "measured under load" not in analyse(EXP, records(), P, tmp_path / "quiet").summary
