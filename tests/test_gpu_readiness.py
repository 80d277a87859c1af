"""CUDA-only paths, checked without a GPU: synchronised timing, peak memory, the recorded TF32 flags (all
with torch.cuda mocked), and the `full` profiles (sized for one GPU) validated and costed on the CPU; a
decoding step replayed from a CUDA graph where a GPU is present."""

import pytest
import torch

from tfclaims.device import environment
from tfclaims.harness.registry import load_all
from tfclaims.measure.counting import kv_cache_bytes
from tfclaims.measure.graphs import graphed
from tfclaims.measure.timing import time_call
from tfclaims.nn.attention import KVCache
from tfclaims.nn.config import ModelConfig
from tfclaims.nn.models import LM
from tfclaims.train.decode_configs import decode_config

EXPS = load_all()
GPU_BYTES = 79 * 2**30  # the `full` profiles are sized for one 80 GB GPU (A100/H100): about 79 GiB usable


def test_timing_synchronises_before_and_after_every_repeat_on_cuda(monkeypatch):
    events = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda dev=None: events.append("sync"))
    time_call(lambda: events.append("call"), device=torch.device("cuda"), warmup=1, repeats=3)
    # warm-up unsynchronised, then every timed call bracketed: the clock covers the queued kernels
    assert events == ["call"] + ["sync", "call", "sync"] * 3
    events.clear()
    time_call(lambda: events.append("call"), device="cpu", warmup=0, repeats=2)
    assert events == ["call", "call"]  # nothing to wait for on the CPU


def test_environment_records_cuda_and_the_fp32_precision_as_set(monkeypatch):
    from tfclaims.device import fix_precision

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda dev=None: "Fake GPU 80GB")
    prev = torch.backends.fp32_precision
    try:
        torch.backends.fp32_precision = "tf32"  # a process that turned TF32 on before the run
        assert torch.backends.cuda.matmul.fp32_precision == "tf32"
        set_ = fix_precision()
        assert set_["cuda_matmul"] == set_["cudnn_conv"] == set_["fp32"] == "ieee"
        env = environment(torch.device("cuda"))
        assert env["device_name"] == "Fake GPU 80GB" and "cuda" in env
        assert env["precision"] == set_ == environment(torch.device("cpu"))["precision"]
    finally:
        torch.backends.fp32_precision = prev


def test_cuda_peak_memory_is_peak_minus_resident(monkeypatch):
    from experiments.flash_memory.attention_cost import cuda_peak

    calls = []
    for name in ("synchronize", "reset_peak_memory_stats"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, _n=name: calls.append(_n))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a: 1000)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: 5096)
    x = torch.randn(4, requires_grad=True)
    assert cuda_peak(lambda: x * 2) == 4096 and x.grad is not None
    assert calls[:2] == ["synchronize", "reset_peak_memory_stats"] and calls[-1] == "synchronize"


def _training_bytes(p: dict) -> int | None:
    """AdamW training memory of the largest model a profile trains, fp32: weights, grads, two moments
    (16 bytes a parameter) and activations (Korthikanti et al. 2022, per layer s·b·d·(34 + 5·h·s/d)
    bytes in 16-bit, doubled for fp32). A claim with its own `scales` ([d_model, n_layers]) trains those."""
    d = p.get("d_model")
    depth = p.get("n_layers") or max(p.get("depths") or [c[0] for c in p.get("cells", [])] or [0])
    if p.get("scales") and all(isinstance(s, (list, tuple)) and len(s) == 2 for s in p["scales"]):
        d, depth = max(p["scales"], key=lambda s: s[0] * s[0] * s[1])
    if not (d and depth and p.get("batch") and p.get("seq_len")):
        return None
    h, s, b = p.get("n_heads", 8), p["seq_len"], p["batch"]
    params = 12 * depth * d * d + 2 * 256 * d + s * d
    acts = 2 * depth * s * b * d * (34 + 5 * h * s / d)
    return int(16 * params + acts)


@pytest.mark.parametrize("claim", list(EXPS))
def test_full_profile_is_valid_and_fits_one_gpu(claim):
    exp = EXPS[claim]
    p = exp.profiles["full"]
    configs = exp.grid(dict(p))  # raises on an invalid configuration
    assert configs and set(exp.profiles["full"]) == set(exp.profiles["default"])
    for dk, hk in (("d_model", "n_heads"), ("lm_d_model", "lm_heads")):
        if dk in p and hk in p:
            assert p[dk] % p[hk] == 0
    est = _estimates(claim, exp, p)
    assert est, f"{claim}: no memory estimate for its full grid"
    for what, need in est.items():
        assert need < GPU_BYTES, f"{claim} {what}: needs ~{need / 2**30:.1f} GiB"


F32 = 4


def _scores(h: int, t: int, s: int, batch: int = 1) -> int:
    """An explicit attention's n×n tensors in fp32: logits, probabilities and, with autograd, the gradient of
    the probabilities (3 of them alive at the peak of a backward)."""
    return 3 * batch * h * t * s * F32


def _memory_claims(claim, exp, p) -> dict:
    """Claims that measure or count rather than train a language model: their largest allocation."""
    if claim == "postln_quality":  # scales are [d_model, n_layers]: each trains
        return {"training": max(_training_bytes({**p, "d_model": d, "n_layers": L}) for d, L in p["scales"])}
    if claim == "int8_inference":  # trains on the device; INT8 copies and timing stay on the CPU
        return {"training": max(_training_bytes({**p, "d_model": d, "n_layers": L}) for d, L in p["scales"])}
    if claim == "length_extrapolation":  # trains at T and (the extension) at 2T; reads 8T with ALiBi's mask
        n, at2 = max(p["mults"]) * p["seq_len"], 2 * p["seq_len"]
        train = max(
            _training_bytes({**p, "d_model": d, "n_layers": L, "seq_len": at2}) for d, L in p["scales"]
        )
        return {"training at 2T": train, "ALiBi scores at 8T": _scores(p["n_heads"], n, n, p["batch"])}
    if claim == "no_position":  # each [d_model, n_layers] scale trains (the permutations are small)
        return {"training": max(_training_bytes({**p, "d_model": d, "n_layers": L}) for d, L in p["scales"])}
    if claim == "parallel_decoding":  # the cached gradient path: at worst a copy of the whole cache per step
        (d, _, layers), n, m = p["timing_model"], max(p["ns"]), max(p["exact_ns"])
        return {
            "timed cached gradient, float32": n * 2 * layers * n * d * F32,
            "exact cached gradient, float64": m * 2 * p["n_layers"] * m * p["d_model"] * 8,
        }
    if claim == "masking":  # (4, h, n, n): float64 reference, weights, identity values, scores at once
        n = max(p["fill_n"], max(p["lens"]) + max(p["pads"]))
        return {"attention weights at the largest n": 6 * 4 * max(p["heads"], p["n_heads"]) * n * n * 8}
    if claim == "subword_oov":  # tokenizers trained and counted on the CPU: no tensor on the device
        return {"tokenizer counts (CPU only)": 0}
    if claim == "flash_speed":  # explicit and MATH n×n tensors at the largest n, the float64 check's
        from experiments.flash_speed.grid import peak_bytes

        return peak_bytes(p)
    if claim in ("prenorm_effective_depth", "albert_sharing"):  # scales are [d_model, n_layers]: each trains
        out = {"training": max(_training_bytes({**p, "d_model": d, "n_layers": L}) for d, L in p["scales"])}
        if claim == "albert_sharing":  # three encoders of the largest timed size at once, inference
            d, L = max(p["timed"])
            out["timing"] = 3 * 12 * L * d * d * F32 + 40 * p["batch_timing"] * p["seq_timing"] * d * F32
        return out
    if claim == "attention_vs_lstm":  # one layer's step at the longest n (fused attention: no n² term)
        d, n, b = p["timing_d"], max(p["ns"]), p["batch_timing"]
        return {
            "throughput step": 12 * b * n * d * F32 + 8 * d * d * F32,
            "recall training": _training_bytes({**p, "n_layers": 1}),
        }
    if claim == "flash_memory":  # explicit attention forward+backward at the longest n, batch 1
        return {"explicit attention at max n": _scores(p["heads"], max(p["ns"]), max(p["ns"]))}
    if claim == "attention_complexity":  # every size runs fill_batch sequences at once
        from tfclaims.measure.attention_units import fill_batch

        def scores(h, n):
            return _scores(h, n, n, fill_batch(h, n, p["fill_rows"]))

        pts = [(d, n) for d in p["sweep_ds"] for n in p["ns"] if n * n * d <= p["max_n2d"]]
        return {
            "n sweep": max(scores(d // p["head_dim"], n) for d, n in pts),
            "d sweep": scores(max(p["d_sweep_ds"]) // p["d_sweep_head_dim"], p["d_sweep_n"]),
            "heads sweep": max(scores(h, p["heads_n"]) for h in p["heads_hs"]),
        }
    if claim == "additive_vs_dot":  # additive scores build (B, T, S, d_h): 3 copies with autograd
        n, d = max(p["ns"]), max(p["ds"])
        return {
            "timing (no grad)": n * n * d * F32,
            "task training": 3 * p["batch"] * p["pairs"] * max(p["task_dims"]) * F32,
            "task evaluation": p["eval_size"] * p["pairs"] * max(p["task_dims"]) * F32,
        }
    if claim == "kv_cache":
        d, layers, _ = p["linear_model"]
        lin = ModelConfig(
            vocab_size=96, d_model=d, n_layers=layers, n_heads=p["linear_model"][2], max_seq_len=1
        )
        small = ModelConfig(
            vocab_size=96, d_model=p["d_model"], n_layers=p["n_layers"], n_heads=p["n_heads"], max_seq_len=1
        )
        return {  # every length's cache is held at once while they are timed interleaved
            "linear part caches + weights": sum(kv_cache_bytes(lin, n) for n in p["linear_ns"])
            + 12 * layers * d * d * F32,
            "steps part caches": sum(kv_cache_bytes(small, n) for n in p["ns"]),
            "uncached forward at max n (fused attention)": 40 * max(p["ns"]) * p["d_model"] * F32,
        }
    if claim == "online_softmax":  # the float64 reference materialises scores and probabilities at the max n
        h, n = p["heads"], max(max(p["ns"]), max(p["mem_ns"]))
        return {
            "float64 reference at max n": 2 * h * n * n * 8,
            "explicit float32 at max n": 2 * h * n * n * F32,
        }
    if claim == "init_variance":  # every layer's weights and activations (with their gradients) at once
        w, depth, batch = p["width"], p["depth"], p["batch"]
        return {"MLP weights and activations": depth * (w * w + 3 * batch * w) * F32}
    if claim == "paged_kv":  # the decode part holds both caches of every context at once while it times them
        c = decode_config(p, None, max(p["ns"]) + 1)
        caches = sum(2 * kv_cache_bytes(c, n, p["batch"]) for n in p["ns"])
        return {"contiguous + paged caches": caches + 12 * c.n_layers * c.d_model**2 * F32}
    if claim == "ffn_share":  # counts on the meta device: no memory is allocated
        return {"meta-device instantiation": 0}
    if claim == "rmsnorm":
        x = p["tokens"] * max(p["widths"]) * F32  # x, y, output grad, input grad per implementation
        step = max(
            _training_bytes(
                {
                    "d_model": d,
                    "n_layers": L,
                    "n_heads": h,
                    "batch": p["step_batch"],
                    "seq_len": p["step_seq"],
                }
            )
            for d, L, h in p["step_models"]
        )
        return {"norm alone": 4 * x * 7, "training": _training_bytes(p), "timed training step": step}
    if claim == "sinusoidal_relative":
        return {"training": _training_bytes(p), "PE tables": max(p["d_models"]) * p["max_len"] * F32 * 4}
    if claim == "norm_padding":  # a batch of the longest lines, every norm arm trains on its own
        return {
            "training": _training_bytes(
                {**p, "batch": max(a[1] for a in p["line_arms"]), "seq_len": p["max_len"]}
            )
        }
    return {}


def _estimates(claim, exp, p) -> dict:
    if claim != "gqa_throughput":
        found = {k: v for k, v in _memory_claims(claim, exp, p).items() if v is not None}
        need = _training_bytes(p)
        if need is not None and "training" not in found:
            found["training"] = need
        return found
    from experiments.gqa_throughput.decode import RESIDENT_SHARE, decoder_set
    from experiments.gqa_throughput.recipes import BACKENDS

    lm = {"d_model": p["lm_d_model"], "n_layers": p["lm_layers"], "n_heads": p["lm_heads"]}
    kvs = exp.grid(dict(p))[0]["kvs"]
    n_kv = len(kvs)
    c = decode_config(p, p["n_heads"], max(p["contexts"]) + p["decode_steps"])
    params = 12 * c.n_layers * c.d_model**2  # MHA: an upper bound for every variant
    # the largest cell's decoders as the recipe builds them, counted from the tensors of a meta-device build:
    # every K/V head count at once where that fits the device's share, else the largest one alone
    cell = {**p, "batch": max(p["batches"]), "context": max(p["contexts"])}
    meta, bf16 = torch.device("meta"), getattr(torch, p["dtype"])
    together = decoder_set(kvs, BACKENDS, cell, meta, bf16)[1]
    alone = max(decoder_set([kv], BACKENDS, cell, meta, bf16)[1] for kv in kvs)
    resident = together if together <= RESIDENT_SHARE * GPU_BYTES else alone
    # phases: every variant resident at once (bf16 for prefill, fp32 weights + AdamW moments for the training
    # step), gradients and activations of one step at a time (fused attention: no s^2 term)
    acts = 2 * p["train_len"] * p["train_batch"] * c.d_model * c.n_layers * 34
    return {
        "lm training": _training_bytes({**p, **lm}),
        "decoding (the decoders resident at once, from their tensors)": resident,
        "phases": n_kv * (2 + 12) * params + 4 * params + acts,
    }


def test_bandwidth_and_gemm_ceilings_batch_calls_between_syncs_and_reach_tensor_cores_on_cuda(monkeypatch):
    """On CUDA a sample repeats calls for GPU_SAMPLE seconds between two synchronisations (a single call
    would time launch and sync overhead), and the GEMM ceiling is taken in bfloat16 at 8192³, where a
    data-centre GPU's tensor cores run; on the CPU one call is one sample, in float32 at 1024³."""
    from tfclaims.measure import counters

    seen = []
    monkeypatch.setattr(
        counters, "time_interleaved", lambda fns, **kw: seen.append(kw) or {"fn": {"times": [2.0]}}
    )
    shapes = []
    real_randn = torch.randn

    def randn(*size, device=None, dtype=None):
        shapes.append((size, dtype))
        return real_randn(2, 2)

    monkeypatch.setattr(counters.torch, "randn", randn)
    assert counters.gemm_peak("cuda") == 2 * 8192**3 / 2.0
    assert shapes[-1] == ((8192, 8192), torch.bfloat16) and seen[-1]["min_sample"] == counters.GPU_SAMPLE
    assert counters.gemm_peak("cpu") == 2 * 1024**3 / 2.0
    assert shapes[-1] == ((1024, 1024), torch.float32) and seen[-1]["min_sample"] == 0
    assert counters.read_bandwidth(1 << 12, device="cpu") == (1 << 12) / 2.0
    assert counters.copy_bandwidth(1 << 12, device="cpu") == 2 * (1 << 12) / 2.0


def _model_shapes(exp) -> set[tuple[int, int, int, int]]:
    """(d_model, n_layers, n_heads, seq_len) of every model a claim's full grid trains with the small-LM
    recipe (configs that carry all four; the staged grids' first stage)."""
    keys = ("d_model", "n_layers", "n_heads", "seq_len")
    return {
        tuple(c[k] for k in keys) for c in exp.grid(dict(exp.profiles["full"])) if all(k in c for k in keys)
    }


@pytest.mark.parametrize("claim", [c for c in EXPS if _model_shapes(EXPS[c])])
def test_full_profile_models_build_and_run_at_their_shapes_on_the_meta_device(claim):
    """Every model a full grid trains is built and run forward on the meta device (shapes only, nothing
    allocated): a width that its heads do not divide, or a sequence past the model's table, fails here
    rather than on the GPU."""
    from tfclaims.nn.models import LM
    from tfclaims.train.profiles import model_config

    for d, L, h, s in sorted(_model_shapes(EXPS[claim])):
        cfg = {"d_model": d, "n_layers": L, "n_heads": h, "seq_len": s}
        with torch.device("meta"):
            logits = LM(model_config(cfg, 96))(torch.zeros(2, s, dtype=torch.long))
        assert logits.shape == (2, s, 96) and logits.device.type == "meta", (claim, cfg)


def test_a_graphed_callable_is_the_callable_itself_on_the_cpu():
    fn = lambda: None  # noqa: E731
    assert graphed(fn, "cpu") is fn


def test_a_cuda_replay_keeps_the_captured_callable_and_its_tensors_alive(monkeypatch):
    """A CUDA graph reads its tensors at the addresses they had at capture without holding them: the replay
    must keep the callable (and what its closure holds) alive, else the next allocation reuses that memory
    while the graph still reads it. CUDA's stream and graph calls are faked; the lifetime is what is
    tested."""
    import gc
    import weakref
    from contextlib import nullcontext

    import tfclaims.measure.graphs as graphs

    class FakeStream:
        def __init__(self, *a):
            pass

        def wait_stream(self, other):
            pass

    replays = []

    class FakeGraph:
        def replay(self):
            replays.append(1)

    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda dev=None: FakeStream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", lambda g: nullcontext())
    calls = []

    def step_on(cache):  # a decoding step's closure: it alone holds the cache
        return lambda: calls.append(cache.sum())

    cache = torch.zeros(8)
    alive = weakref.ref(cache)
    replay = graphs.graphed(step_on(cache), "cuda")
    del cache
    gc.collect()
    assert alive() is not None and len(calls) == 2  # warm-up and capture ran the callable, eagerly
    replay()
    assert replays == [1] and len(calls) == 2  # the replay runs the graph, not the callable
    del replay
    gc.collect()
    assert alive() is None  # and the tensors live exactly as long as the replay


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_decoding_step_replayed_from_a_cuda_graph_writes_what_the_eager_step_writes():
    """The replay runs the captured kernels on the same tensors: the K/V written at the step's position and
    the logits equal an eager step's (the step resets its cache position, so every call does the same
    work)."""
    cfg = {"d_model": 64, "n_layers": 2, "n_heads": 4, "batch": 2, "context": 16, "decode_steps": 1}
    dev = torch.device("cuda")
    model = LM(decode_config(cfg, 2, 17)).to(dev).eval()
    cache = KVCache.for_model(model.cfg, 2, 17, device=dev)
    tok = torch.randint(1, 96, (2, 1), device=dev)
    out = torch.empty(2, 1, 96, device=dev)

    @torch.no_grad()
    def step():
        cache.pos = 16
        out.copy_(model(tok, cache=cache))

    step()
    eager_out, eager_k = out.clone(), cache.k[1][:, :, 16].clone()
    out.zero_()
    cache.k[1].zero_()
    graphed(step, dev)()
    torch.cuda.synchronize()
    assert torch.equal(out, eager_out) and torch.equal(cache.k[1][:, :, 16], eager_k)
