"""`make bench`: the library LM's speed against an independent implementation of the same maths, and
training throughput on the corpus at the sizes the experiments use. Ratios are measured in one run,
alternating the two implementations so that machine noise hits both alike."""

from __future__ import annotations

import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..data.corpus import load_corpus, random_windows
from ..device import resolve_device
from ..measure.timing import time_interleaved
from ..nn.config import ModelConfig, TrainConfig
from ..nn.models import LM, lm_loss
from ..train.loop import make_optimizer


def reference_model(cfg: ModelConfig) -> tuple[nn.Module, str]:
    """Hugging Face GPT-2 built from a config (no weights downloaded), else torch's TransformerEncoder as a
    causal LM."""
    try:
        import transformers

        hf = transformers.GPT2Config(
            vocab_size=cfg.vocab_size,
            n_positions=cfg.max_seq_len,
            n_embd=cfg.d_model,
            n_layer=cfg.n_layers,
            n_head=cfg.n_heads,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            layer_norm_epsilon=cfg.norm_eps,
            bos_token_id=0,
            eos_token_id=0,
        )
        model = transformers.GPT2LMHeadModel(hf)
        model.config._attn_implementation = "sdpa"
        return _HF(model), f"transformers {transformers.__version__} GPT2LMHeadModel (sdpa)"
    except ImportError:
        return _TorchEncoderLM(cfg), "torch.nn.TransformerEncoder (norm_first, causal mask)"


class _HF(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, idx):
        return self.model(idx).logits


class _TorchEncoderLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_seq_len, cfg.d_model)
        layer = nn.TransformerEncoderLayer(
            cfg.d_model,
            cfg.n_heads,
            cfg.ff,
            dropout=0.0,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
        self.enc = nn.TransformerEncoder(
            layer, cfg.n_layers, norm=nn.LayerNorm(cfg.d_model), enable_nested_tensor=False
        )
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx):
        T = idx.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(T, device=idx.device)
        return self.head(self.enc(self.tok(idx) + self.pos.weight[:T], mask=mask, is_causal=True))


def _step_fn(model, opt, x, y):
    def step():
        loss = lm_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def _alternating(fns: dict, device, rounds: int) -> dict:
    """Per fn: the times of interleaved rounds (all fns see the same machine state), and the load average."""
    return time_interleaved(fns, device=device, repeats=rounds, warmup=2, min_sample=0)


def _spread(times) -> str:
    q25, q50, q75 = np.quantile(times, [0.25, 0.5, 0.75])
    return f"{q50 * 1e3:8.2f} [{q25 * 1e3:.2f}, {q75 * 1e3:.2f}]"


def _ratio(a, b) -> str:
    """Paired per-round ratio b/a: median [quartiles]."""
    r = np.asarray(b) / np.asarray(a)
    q25, q50, q75 = np.quantile(r, [0.25, 0.5, 0.75])
    return f"{q50:6.2f} [{q25:.2f}, {q75:.2f}]"


def _loaded(load: list, threads: int) -> bool:
    """Another process busy beside the timing threads: the 1-minute load average (which counts this process's
    own threads) above those threads by more than half a core."""
    return max(x or 0 for x in load) > threads + 0.5


def decode_attention(device, rounds: int) -> list[dict]:
    """One decoding step's attention (one query per sequence over a filled cache) at long contexts, for MHA
    and MQA with both backends: compulsory bytes (K and V read once) per second against a large copy's, and
    the roofline (bytes ÷ copy bandwidth against FLOPs ÷ a measured GEMM peak) that says which of the two
    binds."""
    from ..measure.counters import copy_bandwidth, gemm_peak
    from ..nn.attention import Attention

    bw, peak = copy_bandwidth(1 << 28, device=device), gemm_peak(device)
    rows = []
    for B, S in ((16, 2048), (32, 2048)):
        for kv in (8, 1):
            c = ModelConfig(d_model=512, n_heads=8, n_kv_heads=kv, max_seq_len=S)
            att = Attention(c).to(device)
            q = torch.randn(B, 8, 1, 64, device=device)
            k, v = (torch.randn(B, kv, S, 64, device=device) for _ in range(2))
            fns = {  # called at once, inside this iteration: the loop variables are the current ones
                "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=kv != 8),  # noqa: B023
                "explicit": lambda: att._explicit(q, k, v, None),  # noqa: B023
            }
            with torch.no_grad():
                t = _alternating(fns, device, rounds)
            nbytes, flops = 2 * B * kv * S * 64 * 4, 4 * B * 8 * S * 64  # QK^T and PV for 8 query heads
            t_mem, t_cmp = nbytes / bw, flops / peak
            for name, r in t.items():
                rows.append(
                    {
                        "B": B,
                        "S": S,
                        "kv": kv,
                        "backend": name,
                        "median": r["median"],
                        "of_bw": t_mem / r["median"],
                        "bound": "memory" if t_mem >= t_cmp else "compute",
                        "of_roofline": max(t_mem, t_cmp) / r["median"],
                    }
                )
    return rows, bw, peak


def _print_decode(device, rounds: int) -> None:
    """Decode attention's bytes/s against a copy's and its place on the roofline."""
    print(
        "\ndecode attention (one query per sequence over a filled cache, float32), compulsory bytes/s "
        "vs a copy:"
    )
    rows, bw, peak = decode_attention(device, rounds)
    print(
        f"  copy bandwidth {bw / 1e9:.1f} GB/s (read + write), GEMM peak {peak / 1e9:.1f} GFLOP/s (1024³ "
        "fp32 matmul)"
    )
    for r in rows:
        print(
            f"  B={r['B']:3d} S={r['S']:5d} {'MHA' if r['kv'] == 8 else 'MQA'} "
            f"{r['backend']:9s}{r['median'] * 1e3:9.3f} ms  "
            f"{r['of_bw']:6.0%} of copy bandwidth; {r['bound']}-bound, {r['of_roofline']:4.0%} of the "
            "roofline"
        )


def _print_throughput(corpus, t, device) -> list:
    """Training tokens/s of the library LM at a few shapes; the load averages seen while timing."""
    loads: list = []
    print("\ntraining throughput on the corpus (library LM, sdpa backend):")
    for d, L, T, B in ((64, 2, 64, 32), (128, 4, 64, 32), (128, 4, 128, 16), (128, 16, 64, 32)):
        c = ModelConfig(vocab_size=corpus.vocab_size, d_model=d, n_layers=L, n_heads=4, max_seq_len=T)
        m = LM(c).to(device)
        opt = make_optimizer(m, t)
        xb, yb = (a.to(device) for a in random_windows(corpus.train, B, T, torch.Generator().manual_seed(1)))
        r = _alternating({"step": _step_fn(m, opt, xb, yb)}, device, 8)["step"]
        loads += r["load"]
        print(
            f"  d={d:4d} L={L:3d} T={T:4d} B={B:3d}: {_spread(r['times'])} ms/step, "
            f"{B * T / r['median']:9.0f} tokens/s"
        )
    return loads


def main(rounds: int = 21) -> int:
    device = resolve_device("auto")
    corpus = load_corpus()
    cfg = ModelConfig(
        vocab_size=corpus.vocab_size, d_model=128, n_layers=4, n_heads=4, max_seq_len=128, ffn="gelu_tanh"
    )
    torch.manual_seed(0)
    ours = LM(cfg).to(device)
    ref, ref_name = reference_model(cfg)
    ref = ref.to(device)
    t = TrainConfig(batch_size=16, seq_len=128)
    x, y = (
        a.to(device)
        for a in random_windows(corpus.train, t.batch_size, t.seq_len, torch.Generator().manual_seed(0))
    )
    n_ours, n_ref = sum(p.numel() for p in ours.parameters()), sum(p.numel() for p in ref.parameters())
    threads = torch.get_num_threads()
    print(
        f"device {device}, threads {threads}, OMP_WAIT_POLICY {os.environ.get('OMP_WAIT_POLICY')}, torch "
        f"{torch.__version__}"
    )
    print(
        f"config: d_model {cfg.d_model}, {cfg.n_layers} layers, {cfg.n_heads} heads, batch {t.batch_size} x "
        f"{t.seq_len} tokens"
    )
    print(f"reference: {ref_name}; parameters: library {n_ours:,}, reference {n_ref:,}")

    def fwd(m):
        def f():
            with torch.no_grad():
                m(x)

        return f

    fw = _alternating({"library": fwd(ours), "reference": fwd(ref)}, device, rounds)
    st = _alternating(
        {
            "library": _step_fn(ours, make_optimizer(ours, t), x, y),
            "reference": _step_fn(ref, make_optimizer(ref, t), x, y),
        },
        device,
        rounds,
    )
    print(f"\nmedian [quartiles] over {rounds} interleaved rounds")
    print(f"{'':18s}{'library (ms)':>24s}{'reference (ms)':>24s}{'ratio ref/lib, paired':>26s}")
    loads = []
    for name, d in (("forward", fw), ("train step", st)):
        lib, ref_t = d["library"]["times"], d["reference"]["times"]
        loads += d["library"]["load"]
        print(f"{name:18s}{_spread(lib):>24s}{_spread(ref_t):>24s}{_ratio(lib, ref_t):>26s}")
    print("ratio >= 1.0 means the library is at least as fast as the reference at the same maths")

    _print_decode(device, rounds)
    loads += _print_throughput(corpus, t, device)
    if _loaded(loads, threads):
        print(
            "\nWARNING: the machine was loaded (1-minute load average up to "
            f"{max(x or 0 for x in loads):.2f} on {os.cpu_count()} cores with "
            f"{threads} timing thread(s)): another process shared the cores, so these times and ratios are "
            "not reliable; rerun on a quiet machine."
        )
    else:
        print(
            f"\nload average stayed at most {max(x or 0 for x in loads):.2f} on {os.cpu_count()} cores: no "
            "other busy process seen"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
