"""Measurement tools on cases computed by hand."""

import torch

from tfclaims.measure.counters import copy_bandwidth, count_flops, read_bandwidth, saved_bytes
from tfclaims.measure.counting import matmul_flops
from tfclaims.measure.timing import time_call, time_interleaved, time_probed
from tfclaims.nn.attention import Attention
from tfclaims.nn.config import ModelConfig


def test_saved_bytes_on_a_hand_computed_case():
    x = torch.randn(1000, requires_grad=True)
    assert saved_bytes(lambda: x.exp().sum()) == 4000  # exp saves its output: 1000 float32
    assert saved_bytes(lambda: (x * x).sum()) == 4000  # both operands are x: one storage, counted once
    w = torch.randn(1000, requires_grad=True)
    assert saved_bytes(lambda: (x * w).sum()) == 8000
    assert saved_bytes(lambda: (x * w).sum(), exclude=(w,)) == 4000


def test_counted_attention_flops_equal_closed_form():
    B, T, d, h = 2, 16, 32, 4
    for backend in ("explicit", "sdpa"):
        att = Attention(ModelConfig(d_model=d, n_heads=h, attn_backend=backend, bias=False))
        x = torch.randn(B, T, d)
        with torch.no_grad():
            flops = count_flops(lambda att=att, x=x: att(x))
        proj = 4 * matmul_flops(B * T, d, d)
        scores = 2 * matmul_flops(B * h * T, d // h, T)  # QK^T and PV
        assert flops == proj + scores, backend


def test_time_call_and_bandwidth_return_sane_numbers():
    t = time_call(lambda: torch.ones(1000).sum(), repeats=3)
    assert 0 < t["q25"] <= t["median"] <= t["q75"] and len(t["times"]) == 3
    assert copy_bandwidth(1 << 20, repeats=2) > 1e6
    assert read_bandwidth(1 << 20, repeats=2) > 1e6


def test_interleaved_rounds_run_in_a_seeded_permutation_so_no_callable_keeps_one_neighbour():
    ran = []
    fns = {k: (lambda k=k: ran.append(k)) for k in "abcd"}
    t = time_interleaved(fns, repeats=24, warmup=0, min_sample=0, seed=3)
    rounds = [ran[4 * r : 4 * r + 4] for r in range(24)]
    # what ran is what was recorded: each round a permutation, every name's place in it
    assert all(sorted(r) == list("abcd") for r in rounds)
    assert all(r.index(k) == t[k]["positions"][i] for i, r in enumerate(rounds) for k in "abcd")
    # seeded: the same orders again; another seed, other orders
    again = time_interleaved(fns, repeats=24, warmup=0, min_sample=0, seed=3)
    assert all(again[k]["positions"] == t[k]["positions"] for k in "abcd")
    other = time_interleaved(fns, repeats=24, warmup=0, min_sample=0, seed=4)
    assert any(other[k]["positions"] != t[k]["positions"] for k in "abcd")
    # a rotation would give "b" the same predecessor in 3 rounds of 4; here it varies, and every name
    # both opens and closes some round
    before_b = {r[r.index("b") - 1] for r in rounds if r.index("b") > 0}
    assert len(before_b) >= 2
    assert {r[0] for r in rounds} == {r[-1] for r in rounds} == set("abcd")


def test_probed_rounds_take_the_probe_before_each_round_and_refill_what_it_evicted():
    ran = []
    fns = {k: (lambda k=k: ran.append(k)) for k in "abc"}
    probes = iter(range(100, 200))

    def probe():
        ran.append("P")
        return next(probes)

    t = time_probed(fns, probe, repeats=5, warmup=1, min_sample=0, seed=2)
    assert ran[:3] == list("abc")  # the warm-up
    rounds = "".join(ran[3:]).split("P")[1:]
    # per round: the probe, then one untimed call of every callable (min_sample 0 skips the calibration
    # call, so here each round is the timed permutation alone), every name once
    assert len(rounds) == 5 and all(sorted(r) == list("abc") for r in rounds)
    assert all(t[k]["probe"] == [100, 101, 102, 103, 104] for k in "abc")
    assert all(r.index(k) == t[k]["positions"][i] for i, r in enumerate(rounds) for k in "abc")
    assert all(len(t[k]["times"]) == 5 and t[k]["q25"] <= t[k]["median"] <= t[k]["q75"] for k in "abc")
    # seeded: the same orders again, and not the same order every round
    again = time_probed(fns, probe, repeats=5, warmup=0, min_sample=0, seed=2)
    assert all(again[k]["positions"] == t[k]["positions"] for k in "abc")
    assert len({tuple(t[k]["positions"][i] for k in "abc") for i in range(5)}) > 1


def test_probed_rounds_recalibrate_with_an_untimed_call_after_the_probe():
    calls = []
    t = time_probed(
        {"a": lambda: calls.append("a")},
        lambda: calls.append("P") or 1.0,
        repeats=3,
        warmup=0,
        min_sample=1e-3,
    )
    # after each probe: one untimed calibration call, then the timed sample of `inner` calls
    chunks = "".join(calls).split("P")[1:]
    assert [len(c) for c in chunks] == [1 + n for n in t["a"]["inner"]] and min(t["a"]["inner"]) > 1


def test_uncontended_keeps_the_rounds_whose_probe_reached_the_share_of_the_median():
    from tfclaims.evidence.tables import timing_rows, uncontended

    probe = [10.0, 9.0, 7.9, 10.5, 8.0]  # median 9: at 0.9 the bar is 8.1 (7.9, 8.0 drop), at 0.8 it is 7.2
    assert uncontended(probe, 0.9) == {0, 1, 3}
    assert uncontended(probe, 0.8) == {0, 1, 2, 3, 4}
    assert uncontended(None, 0.8) is None and uncontended([], 0.8) is None
    rows = timing_rows([1.0, 2.0, 3.0, 4.0, 5.0], {0, 3}, d=8)
    assert [(r["unit"], r["seconds"], r["d"]) for r in rows] == [(0, 1.0, 8), (3, 4.0, 8)]
    assert len(timing_rows([1.0, 2.0], None)) == 2


def test_stats_against_scipy_and_closed_forms():
    import numpy as np
    from scipy import stats as sps

    from tfclaims.evidence.stats import cohens_d, loglog_fit, mean_ci, welch

    x = [1.0, 2.0, 3.0, 4.0]
    ci = mean_ci(x)
    h = sps.t.ppf(0.975, 3) * np.std(x, ddof=1) / 2
    assert ci.mean == 2.5 and abs(ci.hi - 2.5 - h) < 1e-12 and ci.n == 4
    assert abs(cohens_d([2, 3, 4], [1, 2, 3]) - 1.0) < 1e-12
    assert (
        abs(
            welch([1, 2, 3, 4], [2, 3, 4, 9])
            - sps.ttest_ind([1, 2, 3, 4], [2, 3, 4, 9], equal_var=False).pvalue
        )
        < 1e-12
    )
    n = np.array([64, 128, 256, 512])
    fit = loglog_fit(n, 3 * n**2.0)
    assert abs(fit.slope - 2) < 1e-9 and fit.r2 > 0.999999


def test_cpu_peak_follows_allocations_and_frees():
    """The profiler-based peak is the most bytes held at once: two 4 MB tensors alive together, one freed, a
    2 MB one allocated after -> 8 MB, not the 10 MB ever allocated nor the 6 MB held at the end."""
    from tfclaims.measure.memory import cpu_peak

    def alloc():
        a = torch.empty(1_000_000)
        b = torch.empty(1_000_000)
        del a
        c = torch.empty(500_000)
        return b, c

    assert cpu_peak(alloc) == 8_000_000
    assert cpu_peak(lambda: None) == 0


def test_bench_flags_a_loaded_machine_and_pairs_ratios():
    from tfclaims.harness.bench import _loaded, _ratio

    assert not _loaded([1.9, 2.3], threads=2)  # the bench's own two threads
    assert _loaded([0.4, 2.8], threads=2)  # and more than half a core of something else
    assert _loaded([1.6], threads=1) and not _loaded([None, 1.2], threads=1)
    assert _ratio([1.0, 2.0, 4.0], [2.0, 4.0, 8.0]).split()[0] == "2.00"  # paired per round


def test_last_level_cache_is_the_highest_data_or_unified_level_sysfs_describes(tmp_path):
    from tfclaims.measure.hardware import cpu_last_level_cache

    for name, (kind, level, size) in {
        "index0": ("Data", 1, "48K"),
        "index1": ("Instruction", 1, "32K"),
        "index2": ("Unified", 2, "2048K"),
        "index3": ("Unified", 3, "32768K"),
        "index4": ("Instruction", 4, "1G"),  # an instruction cache never counts, whatever its level
    }.items():
        d = tmp_path / name
        d.mkdir()
        (d / "type").write_text(kind + "\n")
        (d / "level").write_text(f"{level}\n")
        (d / "size").write_text(size + "\n")
    (tmp_path / "index5").mkdir()  # unreadable entries are skipped, not guessed
    assert cpu_last_level_cache(tmp_path) == {"level": 3, "bytes": 32 * 2**20, "source": "sysfs index3"}
    assert cpu_last_level_cache(tmp_path / "missing") is None
