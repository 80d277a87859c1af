"""The gqa_throughput rule on synthetic run records: each outcome it can give, and excluded quality cells."""

from functools import partial

import numpy as np
import pytest

from tfclaims.harness.registry import load

import rules
from rules import analyse, comparison, find_sub, record

EXP = load("gqa_throughput")
P = EXP.profiles["quick"]
UNIGRAM = 3.3
ROUNDS = 8
# a quoted claim's sub-verdict under its quotation, the others under their name
subs = partial(rules.subs, key=lambda name: name.split(" ")[0] if name.startswith('"') else name)


def _z(r, first):
    """±1 by round, opposite for the first variant and the others."""
    return (1 if r % 2 == 0 else -1) * (1 if first else -1)


def records(
    speedup=lambda cell: 1.35,
    *,
    noise=0.003,
    gap=0.01,
    up_gap=0.01,
    q_noise=0.0005,
    mha_loss=2.4,
    learned=True,
    membound=False,
    phase_ratio=1.0,
    explicit=lambda kv: 1.5,
    load=0.5,
):
    """Synthetic records for every config of the quick grid. speedup(cell) is MQA's true speed-up over MHA in
        that cell (GQA gets its square root); on top of a drift shared by all variants of a round, MHA's log time
        moves by +noise, −noise, ... over the rounds and every other variant's (and the A/A copy's) by the opposite,
        so a paired difference has a known spread and no chance result. gap / up_gap: MQA's loss above MHA's (from
        scratch / converted and uptrained), each non-MHA arm ± q_noise by seed parity; learned=False puts every loss
        at the unigram level. explicit(kv): the explicit backend's time over SDPA's for that variant (each variant is
    read at its faster backend); load: the 1-minute load average recorded in every decode cell."""
    rng = np.random.default_rng(0)
    out = []
    for i, cfg in enumerate(EXP.grid(P)):
        part, m = cfg["part"], {}
        if part == "decode":
            cell = f"{cfg['batch']}×{cfg['context']}"
            drift = rng.normal(0, 0.05, ROUNDS)
            h = cfg["kvs"][0]
            rows = []
            for b in ("sdpa", "explicit"):
                for kv in cfg["kvs"]:
                    s = speedup(cell) ** (np.log2(h / kv) / np.log2(h)) if kv != h else 1.0
                    f = explicit(kv) if b == "explicit" else 1.0
                    ts = [
                        float(0.01 * f / s * np.exp(d + _z(r, kv == h) * noise)) for r, d in enumerate(drift)
                    ]
                    kvb = 4e6 * kv / h  # MHA's KV bytes exceed its weight bytes (1e6) in every cell
                    per_call = 2 * (1e6 + kvb)
                    rows.append({
                        "n_kv_heads": kv, "backend": b, "params": 1000 * kv, "kv_cache_bytes": kvb, "kv_cache_bytes_closed_form": kvb,
                        "weight_bytes_per_step": 1e6, "kv_bytes_per_step": kvb, "bytes_per_call": per_call, "times": ts,
                        "median_s": float(np.median(ts)), "tokens_per_s": 1 / float(np.median(ts)), "achieved_bw": per_call / float(np.median(ts)),
                    })  # fmt: skip
            bw = rows[0]["achieved_bw"] * (1.5 if membound else 100)
            m = {
                "rows": rows,
                "copy_bw": [bw, bw],
                "threads": 1,
                "load": [load, load],
                "cpus": 2,
                "gemm_flops": 1e10,
            }
            mha = rows[0]["times"]  # MHA with SDPA, timed again as the A/A pair
            m["aa"] = {
                "n_kv_heads": h,
                "backend": "sdpa",
                "times": [t * float(np.exp(-2 * _z(r, True) * noise)) for r, t in enumerate(mha)],
            }
        elif part == "phases":
            drift = rng.normal(0, 0.05, ROUNDS)
            rows = []
            for kv in cfg["kvs"]:
                r = phase_ratio if kv == 1 else 1.0
                pt = [
                    float(0.02 * r * np.exp(d + _z(k, kv == cfg["kvs"][0]) * noise))
                    for k, d in enumerate(drift)
                ]
                tt = [
                    float(0.05 * r * np.exp(d + _z(k, kv == cfg["kvs"][0]) * noise))
                    for k, d in enumerate(drift)
                ]
                rows.append({"n_kv_heads": kv, "params": 1000 * kv, "prefill_times": pt, "train_times": tt,
                             "prefill_s": float(np.median(pt)), "train_step_s": float(np.median(tt))})  # fmt: skip
            m = {"rows": rows, "threads": 1}
        else:  # quality
            s = cfg["seed"] % 1000
            base = mha_loss + 0.05 * s if learned else UNIGRAM
            kv, h = cfg["kv"], cfg["lm_heads"]
            jq = (1 if s % 2 == 0 else -1) * q_noise  # a non-MHA arm's seed-parity jitter

            loss = (
                base
                + (0 if kv == h else gap * np.log2(h / kv) / np.log2(h))
                + (0.0 if kv == h and not cfg["matched"] else jq)
            )
            if cfg["matched"]:
                loss = base + gap / 2 + jq
            if not learned:
                loss = UNIGRAM + jq
            m = {"final_val": loss, "unigram_xent": UNIGRAM, "params": 1000, "d_ff": 128, "diverged_at": None,
                 "val_loss": [4.5, loss], "eval_steps": [0, P["steps"]]}  # fmt: skip
            conv = []
            if cfg["uptrain_control"]:
                after = base - 0.02 if learned else UNIGRAM
                conv.append({"target_kv": h, "method": "none (MHA)", "before": base, "after": after})
            for t in cfg["convert_to"]:
                for method in ("mean", "first"):
                    before = base + 0.4 + (0.0 if method == "mean" else 0.1) + jq
                    a = base - 0.02 + (up_gap if t == 1 else up_gap / 2) if learned else UNIGRAM
                    conv.append({"target_kv": t, "method": method, "before": before, "after": a + jq})
            if conv:
                m |= {"conversion": conv, "uptrain_steps": 1}
        out.append(record(cfg, m, f"r{i}"))
    return out


def test_gqa_throughput_rule_supported_when_speedups_sit_inside_the_band_and_quality_holds(tmp_path):
    v = analyse(EXP, records(), P, tmp_path)
    assert find_sub(v, '"30–40%"').verdict == "supported"
    assert find_sub(v, "Small quality cost").verdict == "supported"
    assert find_sub(v, "MQA and GQA decode faster").verdict == "supported"
    assert find_sub(v, "MQA speed-up ≥ 1.30×").verdict == "supported"
    assert v.verdict == "supported"
    assert comparison(v, "4×64:mqa-vs-mha/1.30").decision == "b_better"  # faster than MHA / 1.30
    assert comparison(v, "4×64:mqa-vs-mha/1.40").decision == "a_better"  # slower than MHA / 1.40
    assert comparison(v, "quality:scratch:mqa-vs-mha+margin").decision == "b_better"
    gap = comparison(
        v, "quality:scratch:mqa-vs-mha"
    )  # a real but small gap: significant, and within the margin (TOST)
    assert gap.decision == "a_better" and gap.p_equiv <= 0.05
    # every timing comparison carries its cell's A/A floor; the noise floor holds the A/A pairs and null pairs
    assert comparison(v, "4×64:kv1-vs-mha").noise is not None
    ids = {c.id for c in v.noise_floor}
    assert {"4×64:aa", "null:mha-final-val", "null:mha-uptrained", "null:mqa-converted"} <= ids


def test_gqa_throughput_rule_refuted_when_the_speedup_is_far_above_the_band_and_quality_drops(tmp_path):
    v = analyse(EXP, records(lambda cell: 2.0, gap=0.3, up_gap=0.3), P, tmp_path)
    assert find_sub(v, '"30–40%"').verdict == "refuted"
    assert comparison(v, "1×16:mqa-vs-mha/1.40").decision == "b_better"  # significantly above 1.40
    assert find_sub(v, "Small quality cost").verdict == "refuted"
    assert comparison(v, "quality:scratch:mqa-vs-mha+margin").decision == "a_better"
    assert v.verdict == "refuted"
    # a faster MQA is still faster: the band fails because the figure understates it
    assert find_sub(v, "MQA and GQA decode faster").verdict == "supported"


def test_gqa_throughput_rule_mixed_when_the_band_holds_in_some_cells_only(tmp_path):
    v = analyse(EXP, records(lambda cell: 1.35 if cell.startswith("1×") else 1.1), P, tmp_path)
    band = find_sub(v, '"30–40%"')
    assert band.verdict == "mixed"
    assert "inside: 1×16" in band.detail and "below: 4×16" in band.detail
    assert v.verdict == "mixed"
    assert (
        find_sub(v, "MQA speed-up ≥ 1.30×").verdict == "mixed"
    )  # ≥ 1.30 in the batch-1 cells, below elsewhere


def test_gqa_throughput_rule_inconclusive_when_timing_is_too_noisy(tmp_path):
    # a naive rule on medians would put cells inside or outside the band; with this noise nothing is shown
    v = analyse(EXP, records(lambda cell: 1.1, noise=0.5, q_noise=0.2, gap=0.0, up_gap=0.0), P, tmp_path)
    assert find_sub(v, '"30–40%"').verdict == "inconclusive"
    assert all(c.decision == "undecided" for c in v.comparisons if ":mqa-vs-mha/" in c.id)
    assert find_sub(v, "Small quality cost").verdict == "inconclusive"
    assert v.verdict == "inconclusive"


def test_gqa_throughput_rule_excludes_quality_cells_where_nothing_learned(tmp_path):
    v = analyse(EXP, records(learned=False, gap=0.3), P, tmp_path)
    for cid in (
        "quality:scratch:mqa-vs-mha+margin",
        "quality:uptrained:mqa-vs-mha+margin",
        "quality:scratch:mqa-vs-mha",
    ):
        assert comparison(v, cid).decision == "excluded"
    q = find_sub(v, "Small quality cost")
    assert q.verdict == "inconclusive" and "excluded" in q.detail
    # the band alone supported, quality undecided: the conjunction is not supported
    assert v.verdict == "inconclusive"


def test_gqa_throughput_rule_slower_mqa_is_reported_not_hidden(tmp_path):
    v = analyse(EXP, records(lambda cell: 0.8), P, tmp_path)
    assert find_sub(v, "MQA and GQA decode faster").verdict == "refuted"
    assert find_sub(v, '"30–40%"').verdict == "refuted"
    assert find_sub(v, "MQA speed-up ≥ 1.30×").verdict == "refuted"


@pytest.mark.parametrize("ratio,expect", [(1.0, "supported"), (1.5, "refuted")])
def test_gqa_throughput_rule_phases_interval_check(tmp_path, ratio, expect):
    v = analyse(EXP, records(phase_ratio=ratio), P, tmp_path)
    assert find_sub(v, "Prefill and training step").verdict == expect


@pytest.mark.parametrize("speedup,expect", [(2.5, "supported"), (1.35, "refuted")])
def test_gqa_throughput_rule_tracking_where_memory_bound(tmp_path, speedup, expect):
    # bytes: MHA reads 2·(1e6 + 4e6), MQA 2·(1e6 + 1e6): predicted 2.5×; 2.5 tracks it, 1.35 falls short
    v = analyse(EXP, records(lambda cell: speedup, membound=True), P, tmp_path)
    assert find_sub(v, "The speed-up tracks").verdict == expect


def test_gqa_throughput_reads_each_variant_at_its_faster_backend(tmp_path):
    # SDPA's MQA twice as slow as the grouped matmul (the CPU finding), MHA faster with SDPA: the speed-up is
    # explicit MQA against SDPA MHA, and the A/A pair still compares SDPA MHA with itself
    v = analyse(EXP, records(lambda cell: 1.35, explicit=lambda kv: 0.5 if kv == 1 else 1.5), P, tmp_path)
    band = find_sub(v, '"30–40%"')
    assert band.verdict == "refuted" and "above" in band.detail  # 1.35 / 0.5 = 2.7× with the faster backend
    aa = next(c for c in v.noise_floor if c.id == "4×64:aa")
    assert abs(aa.diff) < 0.05  # SDPA MHA against itself, not against the explicit MQA or MHA
    summary = (tmp_path / "decode_summary.csv").read_text()
    assert "sdpa / explicit" in summary


def test_gqa_throughput_flags_cells_measured_under_load(tmp_path):
    v = analyse(EXP, records(load=1.8), P, tmp_path)  # 2 cores, 1 timing thread: more than 1.5 is another job
    assert "measured under load" in v.summary
    assert "measured under load" not in analyse(EXP, records(), P, tmp_path / "quiet").summary
