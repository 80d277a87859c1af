"""`make bench`: the library LM's speed against an independent implementation of the same maths, and
training throughput on the corpus at the sizes the experiments use. Ratios are measured in one run,
alternating the two implementations so that machine noise hits both alike."""

from __future__ import annotations

import torch
from torch import nn

from .config import ModelConfig, TrainConfig
from .data import load_corpus, random_windows
from .device import resolve_device
from .models import LM, lm_loss
from .timing import time_interleaved
from .train import make_optimizer


def reference_model(cfg: ModelConfig) -> tuple[nn.Module, str]:
    """Hugging Face GPT-2 built from a config (no weights downloaded), else torch's TransformerEncoder as a causal LM."""
    try:
        import transformers

        hf = transformers.GPT2Config(
            vocab_size=cfg.vocab_size, n_positions=cfg.max_seq_len, n_embd=cfg.d_model, n_layer=cfg.n_layers, n_head=cfg.n_heads,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=cfg.norm_eps, bos_token_id=0, eos_token_id=0,
        )  # fmt: skip
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
    """Median seconds per call of each fn, timed in interleaved rounds so all see the same machine state."""
    t = time_interleaved(fns, device=device, repeats=rounds, warmup=2, min_sample=0)
    return {k: v["median"] for k, v in t.items()}


def main(rounds: int = 15) -> int:
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
    print(f"device {device}, threads {torch.get_num_threads()}, torch {torch.__version__}")
    print(
        f"config: d_model {cfg.d_model}, {cfg.n_layers} layers, {cfg.n_heads} heads, batch {t.batch_size} x {t.seq_len} tokens"
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
    print(f"{'':24s}{'library':>12s}{'reference':>12s}{'ratio ref/lib':>15s}")
    for name, d in (("forward (ms)", fw), ("train step (ms)", st)):
        print(
            f"{name:24s}{d['library'] * 1e3:12.2f}{d['reference'] * 1e3:12.2f}{d['reference'] / d['library']:15.2f}"
        )
    print("ratio >= 1.0 means the library is at least as fast as the reference at the same maths")

    print("\ntraining throughput on the corpus (library LM, sdpa backend):")
    for d, L, T, B in ((64, 2, 64, 32), (128, 4, 64, 32), (128, 4, 128, 16), (128, 16, 64, 32)):
        c = ModelConfig(vocab_size=corpus.vocab_size, d_model=d, n_layers=L, n_heads=4, max_seq_len=T)
        m = LM(c).to(device)
        opt = make_optimizer(m, t)
        xb, yb = (a.to(device) for a in random_windows(corpus.train, B, T, torch.Generator().manual_seed(1)))
        s = _alternating({"step": _step_fn(m, opt, xb, yb)}, device, 8)["step"]
        print(f"  d={d:4d} L={L:3d} T={T:4d} B={B:3d}: {s * 1e3:7.1f} ms/step, {B * T / s:9.0f} tokens/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
