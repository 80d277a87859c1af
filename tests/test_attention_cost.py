"""What attention costs: counted FLOPs = closed forms, saved-for-backward bytes = hand-derived counts,
KV-cache size."""

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from tfclaims.measure import attention_units as au
from tfclaims.measure.counters import count_flops, saved_bytes
from tfclaims.measure.counting import (
    attention_flops,
    attention_projection_flops,
    attention_score_flops,
    block_flops,
    ffn_flops,
    kv_cache_bytes,
    lm_forward_flops,
    score_crossover_length,
)
from tfclaims.nn.attention import Attention, KVCache
from tfclaims.nn.blocks import Block
from tfclaims.nn.config import ModelConfig
from tfclaims.nn.models import LM

from experiments.flash_memory import attention_cost as fm


@pytest.mark.parametrize(
    "backend, causal, heads, kv",
    list(itertools.product(["explicit", "sdpa"], [False, True], [1, 4], [None, 1])),
)
def test_counted_attention_and_block_flops_equal_closed_forms(backend, causal, heads, kv):
    B, T, d = 2, 24, 32
    c = ModelConfig(
        d_model=d, n_heads=heads, n_kv_heads=kv, attn_backend=backend, causal=causal, max_seq_len=T
    )
    blk = Block(c)
    x = torch.randn(B, T, d)
    with torch.no_grad():
        assert count_flops(lambda: blk.attn(x)) == attention_flops(c, T, batch=B)
        assert count_flops(lambda: blk(x)) == block_flops(c, T, batch=B)
    # by hand for MHA: 4 projections 2*B*T*d*d each, QK^T and PV 2*B*T*T*d each, FFN 2 * 2*B*T*d*4d
    if kv is None:
        assert attention_flops(c, T, batch=B) == 4 * 2 * B * T * d * d + 2 * 2 * B * T * T * d
        assert block_flops(c, T, batch=B) == attention_flops(c, T, batch=B) + 2 * 2 * B * T * d * 4 * d


def test_swiglu_lm_and_cached_step_flops_equal_closed_forms():
    c = ModelConfig(
        vocab_size=50,
        d_model=32,
        n_heads=4,
        n_kv_heads=2,
        n_layers=2,
        ffn="swiglu",
        d_ff=48,
        max_seq_len=40,
        pos="rope",
    )
    model = LM(c).eval()
    idx = torch.randint(0, 50, (1, 40))
    with torch.no_grad():
        assert count_flops(lambda: model(idx)) == lm_forward_flops(c, 40)
        cache = KVCache.for_model(c, 1, 40)
        model(idx[:, :39], cache=cache)  # 39 positions cached
        assert count_flops(lambda: model(idx[:, 39:], cache=cache)) == lm_forward_flops(c, 1, 40)
    assert ffn_flops(c, 1) == 3 * 2 * 32 * 48


def test_head_count_leaves_flops_unchanged_and_crossover_is_6d():
    d, n = 64, 96
    counts = set()
    for h in (1, 2, 4, 8, 16):
        c = ModelConfig(d_model=d, n_heads=h, causal=False, max_seq_len=n)
        att = Attention(c)
        with torch.no_grad():
            counts.add(count_flops(lambda: att(torch.randn(1, n, d))))  # noqa: B023 (called at once)
    assert len(counts) == 1
    c = ModelConfig(d_model=d, n_heads=4, max_seq_len=n)
    assert score_crossover_length(c) == 6 * d
    # counted: at n = 6d (d = 16, n = 96) QK^T + PV cost exactly as much as the four projections and the FFN
    c16 = ModelConfig(d_model=16, n_heads=2, causal=False, max_seq_len=96)
    q, x = torch.randn(1, 2, 96, 8), torch.randn(1, 96, 16)
    a, ffn = Block(c16).attn, Block(c16).ffn
    with torch.no_grad():
        scores = count_flops(lambda: F.scaled_dot_product_attention(q, q, q))
        dense = count_flops(lambda: (a.wq(x), a.wk(x), a.wv(x), a.wo(x), ffn(x)))
    assert (
        scores
        == attention_score_flops(c16, 96)
        == dense
        == attention_projection_flops(c16, 96) + ffn_flops(c16, 96)
    )


def test_saved_bytes_of_attention_on_a_case_computed_by_hand():
    B, h, n, dk = 1, 2, 8, 4
    q, k, v = (torch.randn(B, h, n, dk, requires_grad=True) for _ in range(3))
    # explicit: QK^T keeps q and k (2 * 64 floats), softmax keeps P (2*8*8 = 128 floats), PV keeps P and v
    # (64)
    explicit = saved_bytes(lambda: ((q @ k.transpose(-2, -1)) * dk**-0.5).softmax(-1) @ v)
    assert explicit == 4 * (64 + 64 + 128 + 64) == 1280
    # fused CPU kernel: q, k, v, the output (4 * 64 floats) and one log-sum-exp per row (2 * 8 floats)
    fused = saved_bytes(lambda: F.scaled_dot_product_attention(q, k, v))
    assert fused == 4 * (4 * 64 + 16) == 1088


@pytest.mark.parametrize("n", [64, 128])
def test_fused_kernel_keeps_a_row_statistic_not_the_matrix_and_hand_formulas_hold(n):
    B, h, dk = 1, 2, 8
    q, k, v = (torch.randn(B, h, n, dk, requires_grad=True) for _ in range(3))
    inv = fm.saved_inventory(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    shapes = sorted(tuple(t["shape"]) for t in inv)
    assert shapes == sorted([(B, h, n)] + [(B, h, n, dk)] * 4)  # lse + q, k, v, output; nothing n x n
    assert saved_bytes(lambda: F.scaled_dot_product_attention(q, k, v)) == au.hand_bytes("fused", B, h, n, dk)
    core = Attention(ModelConfig(d_model=h * dk, n_heads=h, attn_backend="explicit"))
    assert saved_bytes(lambda: core._explicit(q, k, v, None)) == au.hand_bytes("explicit", B, h, n, dk)
    mod = Attention(ModelConfig(d_model=h * dk, n_heads=h, max_seq_len=n))  # causal, SDPA backend
    x = torch.randn(B, n, h * dk)
    assert saved_bytes(lambda: mod(x), exclude=tuple(mod.parameters())) == au.hand_bytes(
        "module_sdpa", B, h, n, dk
    )


@pytest.mark.parametrize("kv", [None, 2, 1])
def test_kv_cache_bytes_equal_closed_form(kv):
    c = ModelConfig(d_model=64, n_heads=8, n_kv_heads=kv, n_layers=3, max_seq_len=100)
    cache = KVCache.for_model(c, 5, 100)
    assert cache.nbytes() == kv_cache_bytes(c, 100, batch=5) == 2 * 3 * 5 * c.kv_heads * 100 * 8 * 4


def test_time_sweep_times_every_unit_and_an_a_a_pair_of_one_callable():
    from tfclaims.harness.experiment import RunContext

    from experiments.flash_memory.attention_cost import run_time_sweep

    cfg = {"points": [[16, 2, 8], [16, 2, 16]], "units": ["attention_sdpa", "dense"],
           "aa": ["dense", 16, 2, 16],
           "warmup": 0, "repeats": 2, "threads": 1}  # fmt: skip
    m = run_time_sweep(cfg, RunContext(device=torch.device("cpu")))
    assert [(pt["n"], sorted(pt["times"])) for pt in m["points"]] == [(8, ["attention_sdpa", "dense"])] + [
        (16, ["attention_sdpa", "dense"])
    ]
    aa = m["aa"]
    assert (aa["unit"], aa["n"]) == ("dense", 16) and len(aa["a"]["times"]) == len(aa["b"]["times"]) == 2
    assert (
        aa["a"]["times"] == m["points"][1]["times"]["dense"]["times"]
    )  # the A arm is the sweep's own timing


def test_time_sweep_fills_a_gpu_with_sequences_and_reports_seconds_per_sequence(monkeypatch):
    """With fill_rows, each size runs enough sequences that batch × heads × n reaches that many query rows
    (one head at short n would leave a GPU idle); its times are a call's seconds over its batch, so the
    exponents in n are read per sequence as on the CPU."""
    from tfclaims.harness.experiment import RunContext

    from experiments.flash_memory import attention_cost as ac

    assert (
        au.fill_batch(1, 64, 2**17) == 2048
        and au.fill_batch(8, 2**17, 2**17) == 1
        and au.fill_batch(4, 8, 0) == 1
    )
    shapes = []
    real = ac.unit_fns
    monkeypatch.setattr(
        ac, "unit_fns", lambda d, h, n, dev, batch=1: shapes.append(batch) or real(d, h, n, dev, batch)
    )
    monkeypatch.setattr(
        ac,
        "time_interleaved",
        lambda fns, **kw: {
            k: {
                "median": 6.0,
                "q25": 6.0,
                "q75": 6.0,
                "times": [6.0, 6.0],
                "positions": [0, 1],
                "inner": 1,
                "load": [None, None],
            }
            for k in fns
        },
    )
    cfg = {"points": [[16, 2, 8], [16, 2, 16]], "units": ["attention_sdpa"],
           "aa": ["attention_sdpa", 16, 2, 16],
           "warmup": 0, "repeats": 2, "threads": 1, "fill_rows": 48}  # fmt: skip
    m = ac.run_time_sweep(cfg, RunContext(device=torch.device("cpu")))
    assert shapes == [3, 1]  # 48 rows ÷ (2 heads × 8) = 3 sequences; 48 ÷ (2 × 16) rounds down to 1
    assert [pt["batch"] for pt in m["points"]] == [3, 1]
    assert m["points"][0]["times"]["attention_sdpa"]["times"] == [2.0, 2.0]  # 6 s for 3 sequences
    assert m["points"][1]["times"]["attention_sdpa"]["median"] == 6.0 and m["aa"]["b"]["median"] == 6.0


def test_saved_bytes_in_bfloat16_follow_the_hand_formulas_and_the_kernel_is_recorded():
    """The full profile runs the fused arm in bfloat16 (in float32 CUDA's SDPA picks the memory-efficient
    kernel, not FlashAttention): q, k, v, the output and P in two bytes, the log-sum-exp still float32; the
    recipe records which kernel's backward ran at every n."""
    from tfclaims.harness.experiment import RunContext

    cfg = {"n": 64, "heads": 2, "head_dim": 8, "inventory": False, "grad_check": False, "dtype": "bfloat16"}
    m = fm.run_saved_bytes(cfg, RunContext(device=torch.device("cpu")))["variants"]
    for name in ("explicit", "explicit_causal", "fused", "fused_causal", "module_sdpa"):
        assert m[name]["bytes"] == m[name]["hand"] == au.hand_bytes(name, 1, 2, 64, 8, itemsize=2), name
    assert au.hand_bytes("fused", 1, 2, 64, 8, itemsize=2) == 2 * (4 * 64 * 8 * 2 + 4 * 64)
    assert "ScaledDotProduct" in m["fused"]["kernel"] and m["explicit"]["kernel"] == ""


# Storages each CUDA kernel saved besides q, k, v at B = 1, h = 2, n = 100, d_k = 64, read on an H100 (torch
# 2.11): the log-sum-exp rows (float32), the output, the random-number state.
H100_INVENTORY = {
    ("ScaledDotProductFlashAttentionBackward0", 2): [800, 25600, 16, 8],
    ("ScaledDotProductEfficientAttentionBackward0", 4): [2 * 128 * 4, 51200, 8, 8],  # rows padded to 128
    ("ScaledDotProductEfficientAttentionBackward0", 2): [2 * 128 * 4, 25600, 8, 8],
    ("ScaledDotProductCudnnAttentionBackward0", 2): [800, 25600, 8, 8],
}


@pytest.mark.parametrize(("kernel", "itemsize"), list(H100_INVENTORY))
def test_hand_formula_of_each_cuda_kernel_equals_what_it_saved_on_an_h100(kernel, itemsize):
    qkv = 3 * 2 * 100 * 64 * itemsize
    for name in ("fused", "fused_causal"):
        assert au.hand_bytes(name, 1, 2, 100, 64, itemsize=itemsize, kernel=kernel) == qkv + sum(
            H100_INVENTORY[kernel, itemsize]
        )
    assert au.lse_rows(100, kernel) == (128 if "Efficient" in kernel else 100)
    assert au.classify(2 * au.lse_rows(100, kernel), 1, 2, 100, 64, kernel) == "per row (n)"


def test_math_kernel_saves_in_float32_whatever_the_input_type():
    """SDPA's MATH kernel upcasts half types: it keeps float32 q, k, v and P (what an H100 saved in
    bfloat16)."""
    assert (
        au.hand_bytes("math", 1, 2, 64, 64, itemsize=2)
        == au.hand_bytes("math", 1, 2, 64, 64, itemsize=4)
        == 131072
    )
    with sdpa_kernel(SDPBackend.MATH):
        q, k, v = (torch.randn(1, 2, 64, 64, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        got = saved_bytes(lambda: F.scaled_dot_product_attention(q, k, v))
    assert got == au.hand_bytes("math", 1, 2, 64, 64, itemsize=2)
