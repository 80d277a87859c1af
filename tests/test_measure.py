"""Measurement tools on cases computed by hand."""

import torch

from tfclaims.measure.counters import copy_bandwidth, count_flops, read_bandwidth, saved_bytes
from tfclaims.measure.counting import matmul_flops
from tfclaims.measure.timing import time_call, time_interleaved
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
    from tfclaims.claims.flash_memory import cpu_peak

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
