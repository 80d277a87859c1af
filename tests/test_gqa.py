"""MHA -> GQA/MQA conversion, cached decoding of converted models, and the KV-byte counts of the decoding
recipes."""

import pytest
import torch
import torch.nn.functional as F

from tfclaims.measure.counting import kv_cache_bytes
from tfclaims.nn.attention import KVCache
from tfclaims.nn.config import ModelConfig
from tfclaims.nn.models import LM, n_params
from tfclaims.train.decode_configs import kv_list

from experiments.gqa_throughput.decode import filled_decoder, weight_read_bytes
from experiments.gqa_throughput.recipes import convert_kv_heads, pool_heads


def mha(pos="learned", backend="sdpa", **kw):
    cfg = ModelConfig(
        vocab_size=40,
        d_model=48,
        n_layers=2,
        n_heads=8,
        head_dim=6,
        max_seq_len=32,
        pos=pos,
        attn_backend=backend,
        **kw,
    )
    return LM(cfg).eval()


def test_pool_heads_by_hand():
    # 4 heads of size 2 (rows), one input column: heads are [0,1], [2,3], [4,5], [6,7]
    w = torch.arange(8.0).view(8, 1)
    assert pool_heads(w, 4, 2, "mean").flatten().tolist() == [1.0, 2.0, 5.0, 6.0]
    assert pool_heads(w, 4, 2, "first").flatten().tolist() == [0.0, 1.0, 4.0, 5.0]
    assert pool_heads(w, 4, 1, "mean").flatten().tolist() == [3.0, 4.0]
    assert torch.equal(pool_heads(w, 4, 4, "mean"), w)
    with pytest.raises(ValueError, match="must divide"):
        pool_heads(w, 4, 3, "mean")


@pytest.mark.parametrize("method", ["mean", "first"])
@pytest.mark.parametrize("kv", [4, 2, 1])
def test_conversion_matches_grouped_attention_computed_by_hand(method, kv):
    """Every K/V head of a converted model is the pool of its group: compare layer 0 with an independent
    attention that pools the source's per-head keys and values (linear maps commute with pooling)."""
    src = mha(pos="none")
    dst = convert_kv_heads(src, kv, method)
    assert dst.cfg.kv_heads == kv and dst.blocks[0].attn.wk.out_features == kv * 6
    x = torch.randn(3, 10, 48)
    a = src.blocks[0].attn
    B, T, _ = x.shape
    q = a.wq(x).view(B, T, 8, 6).transpose(1, 2)
    k = a.wk(x).view(B, T, kv, 8 // kv, 6)  # source heads in groups of 8 // kv
    v = a.wv(x).view(B, T, kv, 8 // kv, 6)
    k, v = (k.mean(3), v.mean(3)) if method == "mean" else (k[:, :, :, 0], v[:, :, :, 0])
    k = k.transpose(1, 2).repeat_interleave(8 // kv, dim=1)  # (B, 8, T, 6)
    v = v.transpose(1, 2).repeat_interleave(8 // kv, dim=1)
    y = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True).float()
    ref = a.wo(y.transpose(1, 2).reshape(B, T, 48))
    with torch.no_grad():
        torch.testing.assert_close(dst.blocks[0].attn(x), ref, atol=1e-5, rtol=1e-4)
    # everything but the K/V projections is copied unchanged
    s, d = src.state_dict(), dst.state_dict()
    assert all(torch.equal(s[n], d[n]) for n in s if ".wk." not in n and ".wv." not in n)
    assert n_params(src) - n_params(dst) == 2 * 2 * (8 - kv) * 6 * (
        48 + 1
    )  # 2 layers, K and V, weights + biases


@pytest.mark.parametrize("method", ["mean", "first"])
@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_identical_heads_convert_exactly(method, pos):
    """A model whose K/V heads are all equal gives the same outputs after conversion, for every target."""
    src = mha(pos=pos)
    with torch.no_grad():
        for blk in src.blocks:
            for lin in (blk.attn.wk, blk.attn.wv):
                lin.weight.copy_(lin.weight[:6].repeat(8, 1))
                lin.bias.copy_(lin.bias[:6].repeat(8))
    idx = torch.randint(0, 40, (2, 17))
    with torch.no_grad():
        ref = src(idx)
        for kv in (4, 2, 1):
            torch.testing.assert_close(convert_kv_heads(src, kv, method)(idx), ref, atol=1e-5, rtol=1e-5)
    # and with distinct heads the conversion does change the outputs (the test above can fail)
    other = mha(pos=pos)
    with torch.no_grad():
        assert (convert_kv_heads(other, 1, method)(idx) - other(idx)).abs().max() > 1e-3


@pytest.mark.parametrize("backend", ["sdpa", "explicit"])
@pytest.mark.parametrize("kv", [8, 4, 2, 1])
def test_converted_model_decodes_with_cache_like_full_forward(backend, kv):
    model = convert_kv_heads(mha(pos="rope", backend=backend), kv, "mean")
    idx = torch.randint(0, 40, (2, 20))
    with torch.no_grad():
        full = model(idx)
        cache = KVCache.for_model(model.cfg, 2, 20)
        parts = [model(idx[:, :7], cache=cache)] + [
            model(idx[:, t : t + 1], cache=cache) for t in range(7, 20)
        ]
    torch.testing.assert_close(torch.cat(parts, 1), full, atol=1e-5, rtol=1e-4)
    assert cache.k[0].shape == (2, kv, 20, 6)


def test_conversion_keeps_dtype_device_and_mode():
    src = mha().double().train()
    dst = convert_kv_heads(src, 2)
    assert dst.head.weight.dtype == torch.float64 and dst.training
    assert dst.head.weight.data_ptr() == dst.stack.tok.weight.data_ptr()  # tied weights stay tied


@pytest.mark.parametrize("kv", [8, 4, 2, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kv_cache_bytes_closed_form_matches_allocated_tensors(kv, dtype):
    cfg = ModelConfig(d_model=64, n_layers=3, n_heads=8, n_kv_heads=kv)
    cache = KVCache.for_model(cfg, batch=5, max_len=19, dtype=dtype)
    allocated = sum(t.untyped_storage().nbytes() for t in cache.k + cache.v)
    elt = torch.finfo(dtype).bits // 8
    assert kv_cache_bytes(cfg, 19, 5, elt) == cache.nbytes() == allocated == 2 * 3 * 5 * kv * 19 * 8 * elt


def test_weight_bytes_read_per_step_count_every_matrix_once():
    cfg = ModelConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=64)
    model = LM(cfg)
    # all parameters (the tied embedding/head matrix once) except the positional table, of which only B rows
    # are read
    expect = 4 * (n_params(model) - 64 * 32 + 3 * 32)
    assert weight_read_bytes(model, batch=3) == expect


def test_kv_list_halves_down_to_one():
    assert (
        kv_list(8) == [8, 4, 2, 1]
        and kv_list(4) == [4, 2, 1]
        and kv_list(6) == [6, 3, 1]
        and kv_list(1) == [1]
    )


@pytest.mark.parametrize("kv", [4, 1])
def test_filled_decoder_counts_the_bytes_one_call_reads(kv):
    """The decoding recipe's byte counts: the allocated cache equals the closed form, and a call of n steps
    reads the weights n times plus the cache filled to S + 1, ..., S + n positions."""
    cfg = {"d_model": 32, "n_layers": 2, "n_heads": 4, "batch": 3, "context": 10, "decode_steps": 2}
    fn, info = filled_decoder(cfg, kv, "sdpa", torch.device("cpu"), torch.float32)
    fn()  # runs: the cache holds S + n positions
    mc = ModelConfig(vocab_size=96, d_model=32, n_layers=2, n_heads=4, n_kv_heads=kv, max_seq_len=12)
    assert info["kv_cache_bytes"] == info["kv_cache_bytes_closed_form"] == kv_cache_bytes(mc, 12, 3)
    kv_read = kv_cache_bytes(mc, 11, 3) + kv_cache_bytes(mc, 12, 3)
    assert info["bytes_per_call"] == 2 * info["weight_bytes_per_step"] + kv_read
    assert info["kv_bytes_per_step"] == kv_read / 2


@pytest.mark.parametrize("kv", [4, 1])
def test_explicit_gqa_never_materialises_repeated_keys_or_values(kv):
    """A decoding step reads each K/V head in place: no tensor of the repeated (B, h, S, dk) size appears."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from tfclaims.nn.attention import Attention

    class Sizes(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(t, torch.Tensor):
                    self.seen.append((str(func), t.numel()))
            return out

    cfg = ModelConfig(
        d_model=64, n_heads=8, n_kv_heads=kv, head_dim=8, max_seq_len=32, attn_backend="explicit"
    )
    attn, B, S = Attention(cfg).eval(), 4, 24  # repeated K (6144 values) outsizes every weight (4096)
    ref = Attention(cfg.replace(attn_backend="sdpa")).eval()
    ref.load_state_dict(attn.state_dict())
    cache, ref_cache = KVCache.for_model(cfg, B, 32), KVCache.for_model(cfg, B, 32)
    with torch.no_grad():
        attn(torch.randn(B, S - 1, 64), cache=cache)
        cache.pos = S - 1
        ref(torch.randn(B, S - 1, 64), cache=ref_cache)
        step = torch.randn(B, 1, 64)
        with Sizes() as rec:
            y = attn(step, cache=cache)
    repeated = B * 8 * S * 8
    assert not [op for op, n in rec.seen if n >= repeated], rec.seen
    ref_cache.k[0].copy_(cache.k[0])
    ref_cache.v[0].copy_(cache.v[0])
    ref_cache.pos = S - 1
    with torch.no_grad():
        torch.testing.assert_close(y, ref(step, cache=ref_cache), atol=1e-5, rtol=1e-4)


def test_decoders_of_one_kv_head_count_share_weights_and_cache_and_the_meta_count_is_what_they_hold():
    """Both backends of a K/V head count read one copy of the weights and one cache (a backend changes how
    attention is computed, not what is stored); the bytes a meta-device build counts are exactly what the
    real build holds, so the memory check on a GPU needs no allocation."""
    from experiments.gqa_throughput.decode import decoder_set

    cfg = {"d_model": 32, "n_layers": 2, "n_heads": 4, "batch": 2, "context": 12, "decode_steps": 2}
    built, held = decoder_set([4, 1], ["sdpa", "explicit"], cfg, torch.device("cpu"), torch.float32)
    _, counted = decoder_set([4, 1], ["sdpa", "explicit"], cfg, torch.device("meta"), torch.float32)
    assert counted == held > 0
    for kv in (4, 1):
        a, b = (built[f"{kv}|{be}"][1] for be in ("sdpa", "explicit"))
        assert a["kv_cache_bytes"] == b["kv_cache_bytes"]
        built[f"{kv}|sdpa"][0]()  # both still decode after sharing
        built[f"{kv}|explicit"][0]()
    mc = ModelConfig(vocab_size=96, d_model=32, n_layers=2, n_heads=4, n_kv_heads=4, max_seq_len=14)
    one = kv_cache_bytes(mc, 14, 2) + kv_cache_bytes(mc.replace(n_kv_heads=1), 14, 2)
    assert one < held < 2 * one + 2 * 4 * 40_000  # one cache per head count, not one per backend


def test_decoding_builds_one_kv_head_count_at_a_time_where_the_gpu_cannot_hold_them_all(monkeypatch):
    """On a GPU too small for every variant's cache (its capacity read from the device), the decoders are
    built one K/V head count at a time; their rows come back in the order asked, with the A/A copy timed
    beside the variant it copies."""
    from types import SimpleNamespace

    from experiments.gqa_throughput import decode

    cfg = {"d_model": 32, "n_layers": 1, "n_heads": 4, "batch": 1, "context": 8, "decode_steps": 1,
           "dtype": "float32", "threads": 1, "bw_bytes": 1 << 16, "warmup": 0, "repeats": 2}  # fmt: skip
    ctx = SimpleNamespace(device=torch.device("cpu"))
    cpu = decode.resident_groups([4, 2, 1], ["sdpa"], cfg, ctx.device, torch.float32)
    assert cpu[0] == [[4, 2, 1]] and cpu[1]["together"] and cpu[1]["device_bytes"] is None
    monkeypatch.setattr(
        decode.torch.cuda, "get_device_properties", lambda dev: SimpleNamespace(total_memory=1)
    )
    groups, info = decode.resident_groups([4, 2, 1], ["sdpa"], cfg, torch.device("cuda"), torch.float32)
    assert (
        groups == [[4], [2], [1]]
        and not info["together"]
        and info["resident_bytes"] == cpu[1]["resident_bytes"]
    )
    built = []
    monkeypatch.setattr(decode, "resident_groups", lambda *a: (groups, info))
    real = decode.decoder_set
    monkeypatch.setattr(decode, "decoder_set", lambda kvs, *a: built.append(list(kvs)) or real(kvs, *a))
    variants = [(kv, b) for b in ("sdpa", "explicit") for kv in (4, 2, 1)]
    out = decode._time_decoders(variants, cfg, ctx, aa=(4, "sdpa"))
    assert built == [[4], [2], [1]]
    assert [(r["n_kv_heads"], r["backend"]) for r in out["rows"]] == variants
    assert len(out["aa"]["times"]) == 2 and out["memory"] == info
