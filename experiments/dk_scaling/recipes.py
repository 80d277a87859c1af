"""Run recipes of `dk_scaling`: the variance law by Monte Carlo, q and k as initialised, and training the
small character LM with and without the 1/sqrt(d_k) factor.

The claim's premise is q and k with independent unit-variance components. A library init does not give that
(with Xavier or N(0, 0.02) projections the component variance depends on d_model and falls as the attention
width grows), so training re-initialises W_q and W_k to give components of a declared standard deviation
(`qk_std`; 1 = the premise) and only d_k, or only the logit scale, varies between arms.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from tfclaims.data.corpus import eval_windows, load_corpus
from tfclaims.nn.models import LM, lm_loss
from tfclaims.train.profiles import model_config
from tfclaims.train.small_lm import train_small

from .grid import dk_overrides

PROBE_SEED = 99  # the fixed validation batch the training probes read


def jacobian_norms(logits: torch.Tensor) -> torch.Tensor:
    """Frobenius norm of the softmax Jacobian diag(p) - p p^T of every row of logits (..., n) -> (...),
    float64.

    ||J||_F^2 = sum_i p_i^2 (1 - p_i)^2 + sum_{i != j} p_i^2 p_j^2. For a nearly one-hot row the textbook form
    sum p^2 - 2 sum p^3 + (sum p^2)^2 cancels to 0 in float32; here the top probability's 1 - p_max is the sum
    of the others (q), never a difference: diag = (p_max eps)^2 + sum q^2 (1 - q)^2 with eps = sum q, and
    off-diagonal = 2 p_max^2 sum q^2 + (sum q^2)^2 - sum q^4."""
    p = logits.double().softmax(-1)
    top = torch.nn.functional.one_hot(p.argmax(-1), p.shape[-1]).bool()
    pm = p.masked_fill(~top, 0).sum(-1)  # (...)
    q = p.masked_fill(top, 0)  # the other probabilities, (..., n)
    eps, q2 = q.sum(-1), q**2
    diag = (pm * eps) ** 2 + (q2 * (1 - q) ** 2).sum(-1)
    off = 2 * pm**2 * q2.sum(-1) + q2.sum(-1) ** 2 - (q2**2).sum(-1)
    return (diag + off).clamp_min(0).sqrt()


def softmax_stats(logits: torch.Tensor) -> dict:
    """Saturation of softmax rows (..., n): mean max probability, entropy (nats), and the mean Frobenius norm
    of the softmax Jacobian, which is what gradients flow through."""
    p = logits.softmax(-1)
    ent = -(p * torch.log(p.clamp_min(1e-30))).sum(-1)
    return {
        "max_prob": float(p.max(-1).values.mean()),
        "entropy": float(ent.mean()),
        "jacobian_norm": float(jacobian_norms(logits).mean()),
    }


def additive_scores(q: torch.Tensor, k: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Bahdanau scores v . tanh(W q + U k) with PyTorch's default Linear init (hidden size = d)."""
    d = q.shape[-1]
    bound = 1 / math.sqrt(d)
    W, U = (torch.empty(d, d).uniform_(-bound, bound, generator=gen) for _ in range(2))
    v = torch.empty(d).uniform_(-bound, bound, generator=gen)
    return torch.tanh(q @ W.T + k @ U.T) @ v


def init_qk(model: LM, std: float) -> None:
    """W_q, W_k ~ N(0, std^2 / d_model) and zero biases: for unit-variance inputs (LayerNorm's output at init)
    every q and k component then has standard deviation `std`."""
    d = model.cfg.d_model
    with torch.no_grad():
        for block in model.blocks:
            for lin in (block.attn.wq, block.attn.wk):
                nn.init.normal_(lin.weight, 0.0, std / math.sqrt(d))
                if lin.bias is not None:
                    lin.bias.zero_()


def dk_monte_carlo(cfg: dict, ctx) -> dict:
    """i.i.d. N(0,1) q and k: Var(q·k) and Var(q·k/sqrt d_k) per d_k, softmax saturation over 64 keys scaled
    vs unscaled (with the per-query Jacobian norms, for a trend test in d_k), and additive scores'
    variance."""
    gen = torch.Generator().manual_seed(cfg["seed"])
    rows = []
    for dk in cfg["dks"]:
        q = torch.randn(cfg["samples"], dk, generator=gen)
        k = torch.randn(cfg["samples"], dk, generator=gen)
        dot = (q * k).sum(-1)
        Q = torch.randn(256, 1, dk, generator=gen)  # 256 queries
        K = torch.randn(256, 64, dk, generator=gen)  # 64 keys each
        logits = (Q * K).sum(-1)  # (256, 64)
        add = additive_scores(q[:4096], k[:4096], gen)
        rows.append(
            {
                "dk": dk,
                "var_dot": float(dot.var()),
                "var_scaled": float((dot / math.sqrt(dk)).var()),
                "var_additive": float(add.var()),
                "unscaled": softmax_stats(logits),
                "scaled": softmax_stats(logits / math.sqrt(dk)),
                "jac_unscaled": jacobian_norms(logits).tolist(),
                "jac_scaled": jacobian_norms(logits / math.sqrt(dk)).tolist(),
            }
        )
    return {"rows": rows}


def dk_init_probe(cfg: dict, ctx) -> dict:
    """The first layer's q and k of the LM as initialised, on real text: component variances, Var(q·k), the
    law's prediction d_k·Var(q)·Var(k), and softmax saturation scaled vs unscaled. init 'unit' is the
    library's normal init with W_q, W_k re-initialised for unit-variance components (what training uses)."""
    corpus = load_corpus()
    base = "normal" if cfg["init"] == "unit" else cfg["init"]
    mc = model_config({**cfg, "n_layers": 1}, corpus.vocab_size, head_dim=cfg["dk"], init=base)
    model = LM(mc).eval()
    if cfg["init"] == "unit":
        init_qk(model, 1.0)
    x, _ = eval_windows(corpus.val, 1, 16, cfg["seq_len"])[0]
    blk = model.blocks[0]
    with torch.no_grad():
        h = blk.norm1(model.stack.embed(x))  # what the first attention sees: (B, T, d)
        B, T, _ = h.shape
        q = blk.attn.wq(h).view(B, T, mc.n_heads, mc.dk).transpose(1, 2)
        k = blk.attn.wk(h).view(B, T, mc.n_heads, mc.dk).transpose(1, 2)
        raw = q @ k.transpose(-2, -1)  # (B, h, T, T), unscaled q.k over all pairs (causality aside)
    return {
        "var_q": float(q.var()),
        "var_k": float(k.var()),
        "var_dot": float(raw.var()),
        "law_prediction": cfg["dk"] * float(q.var()) * float(k.var()),
        "unscaled": softmax_stats(raw),
        "scaled": softmax_stats(raw / math.sqrt(cfg["dk"])),
    }


def attention_probe(x: torch.Tensor, y: torch.Tensor):
    """An on_eval probe on a fixed batch (x, y): the first layer's attention-logit variance and mean max
    probability, and the gradient norm of the loss with respect to every layer's W_q (read with autograd.grad,
    so the optimiser's gradients are untouched)."""

    def probe(step, model):
        seen = {}

        def hook(logits, probs, mask):
            finite = logits.detach()[torch.isfinite(logits.detach())]
            seen["logit_var"] = float(finite.var())
            seen["max_prob"] = float(probs.detach().max(-1).values.mean())

        attn = model.blocks[0].attn
        attn.score_hook = hook
        was = model.training
        model.eval()
        wq = [b.attn.wq.weight for b in model.blocks]
        loss = lm_loss(model(x), y)
        grads = torch.autograd.grad(loss, wq)
        seen["wq_grad"] = [float(g.norm()) for g in grads]
        model.train(was)
        attn.score_hook = None
        return seen

    return probe


def dk_train(cfg: dict, ctx) -> dict:
    """One training arm: the small LM with head size d_k, scaled or not, W_q and W_k re-initialised for q/k
    components of standard deviation cfg['qk_std'], probed on a fixed validation batch at every evaluation."""
    corpus = load_corpus()
    x, y = eval_windows(corpus.val, 1, 8, cfg["seq_len"], seed=PROBE_SEED)[0]
    res, _ = train_small(
        cfg,
        ctx,
        model_kw=dk_overrides(cfg),
        prepare=lambda model: init_qk(model, cfg["qk_std"]),
        on_eval=attention_probe(x.to(ctx.device), y.to(ctx.device)),
        desc=f"dk={cfg['dk']} qk_std={cfg['qk_std']:g} {'scaled' if cfg['scaled'] else 'unscaled'} seed "
        f"{cfg['seed']}",
    )
    return res


class QKNorm(nn.Module):
    """A query or key projection followed by LayerNorm over each head's d_k components (qk-layernorm, as
    Wortsman et al. 2023 measured it): (B, T, d_model) -> (B, T, heads·d_k). The logits stay bounded by the
    learned gains whatever the projection's weights grow to; `weight` is the projection's (for the probes)."""

    def __init__(self, lin: nn.Linear, heads: int, dk: int):
        super().__init__()
        self.lin, self.heads, self.norm = lin, heads, nn.LayerNorm(dk)

    @property
    def weight(self) -> torch.Tensor:
        return self.lin.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        return self.norm(y.view(*y.shape[:-1], self.heads, -1)).flatten(-2)


def add_qk_norm(model: LM) -> None:
    """Wrap every layer's W_q and W_k in a per-head LayerNorm (unit-variance components at init, as the
    premise's q and k have, so the unscaled logits still start with standard deviation sqrt(d_k))."""
    for block in model.blocks:
        a = block.attn
        a.wq, a.wk = QKNorm(a.wq, a.h, a.dk), QKNorm(a.wk, a.kv, a.dk)


def dk_train_qknorm(cfg: dict, ctx) -> dict:
    """`dk_train` with qk-layernorm: the positive control for the logit-growth mechanism."""
    corpus = load_corpus()
    x, y = eval_windows(corpus.val, 1, 8, cfg["seq_len"], seed=PROBE_SEED)[0]

    def prepare(model):
        init_qk(model, cfg["qk_std"])
        add_qk_norm(model)

    res, _ = train_small(
        cfg,
        ctx,
        model_kw=dk_overrides(cfg),
        prepare=prepare,
        on_eval=attention_probe(x.to(ctx.device), y.to(ctx.device)),
        desc=f"dk={cfg['dk']} qk-norm {'scaled' if cfg['scaled'] else 'unscaled'} seed {cfg['seed']}",
    )
    return res
