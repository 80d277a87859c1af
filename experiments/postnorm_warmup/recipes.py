"""Probes of a Transformer stack at initialisation: per-layer gradient norms (Xiong et al.'s Theorem 1),
amplification of a small weight perturbation (Liu et al.), and the input embedding's share of the residual
stream through depth (the "identity path").

`run_probe(cfg, ctx)` is the recipe of one probe run (a placement, a depth, an init): for every init seed it
builds the model, takes one backward pass on a fixed validation batch and measures all three. Its model
is `experiments.postnorm_warmup.grid.model_config`'s, as the training runs' is, so the probes and the training
runs build the same model.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from tfclaims.data.corpus import eval_windows, load_corpus
from tfclaims.nn.models import LM, lm_loss
from tfclaims.train.loop import layer_grad_norms

from .grid import model_config

PROBE_SEED = 77  # the fixed validation batch used by every init-time probe
AMP_SEED_OFFSET = 10_000  # the perturbation noise of init seed s is drawn from seed s + this


def sublayers(block: nn.Module, x: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The block's two sublayers (attention, FFN) as (stream in, branch output, stream out), each (B, T, d).

    Mirrors Block.forward: pre: s + F(LN(s)); post: LN(s + F(s)); deepnorm: LN(alpha*s + F(s)).
    """
    if block.placement == "pre":
        f1 = block.attn(block.norm1(x))
        s1 = x + f1
        f2 = block.ffn(block.norm2(s1))
        return [(x, f1, s1), (s1, f2, s1 + f2)]
    a = block.alpha
    f1 = block.attn(x)
    s1 = block.norm1(a * x + f1)
    f2 = block.ffn(s1)
    return [(x, f1, s1), (s1, f2, block.norm2(a * s1 + f2))]


def _centred(x: torch.Tensor) -> torch.Tensor:
    return x - x.mean(-1, keepdim=True)


def token_cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean over tokens of the cosine between feature-centred vectors a and b (..., d)."""
    return float(torch.nn.functional.cosine_similarity(_centred(a), _centred(b), dim=-1).mean())


@torch.no_grad()
def identity_trace(model: LM, x: torch.Tensor) -> dict:
    """Through every sublayer n = 1..2L: the input embedding's share of the stream (token cosine with x0),
    the branch-to-stream energy ratio r_n = |F|^2 / |alpha*s|^2, and the branch's cosine with its input.

    If every branch were independent of the stream and of x0, the share would follow
    prod_n 1/sqrt(1 + r_n) (returned as `predicted`); with r_n = 1 that is 2^(-n/2).
    """
    x0 = model.stack.embed(x)  # (B, T, d)
    h, share, ratio, corr, pred, c = x0, [], [], [], [], 1.0
    for block in model.blocks:
        for s, f, out in sublayers(block, h):
            a = block.alpha if block.placement != "pre" else 1.0
            r = float(f.pow(2).sum() / (a * s).pow(2).sum())
            c /= math.sqrt(1 + r)
            share.append(token_cosine(out, x0))
            ratio.append(r)
            corr.append(token_cosine(f, s))
            pred.append(c)
            h = out
    return {"share": share, "ratio": ratio, "branch_cos": corr, "predicted": pred}


@torch.no_grad()
def output_change(model: LM, x: torch.Tensor, eps: float, gen: torch.Generator) -> float:
    """Relative squared change of the final hidden state, |h(W + eps*Z) - h(W)|^2 / |h(W)|^2, when every
    block weight matrix W gets i.i.d. N(0, eps^2) noise Z (about the size of one Adam step at lr = eps)."""
    h = model.stack(x)
    params = [p for p in model.blocks.parameters() if p.dim() >= 2]
    saved = [p.detach().clone() for p in params]
    for p in params:
        p.add_(eps * torch.randn(p.shape, generator=gen).to(p.device))
    h2 = model.stack(x)
    for p, s in zip(params, saved):
        p.copy_(s)
    return float((h2 - h).pow(2).sum() / h.pow(2).sum())


def ffn_out_grad_norms(model: LM) -> list[float]:
    """Frobenius norm of the gradient of each layer's second FFN matrix W^{2,l} (Xiong et al.'s Theorem 1)."""
    return [float(b.ffn.w2.weight.grad.norm()) for b in model.blocks]


def run_probe(cfg: dict, ctx) -> dict:
    """All init-time probes of one (placement, depth, init), for init seeds 0..init_seeds-1 (the same seeds at
    every placement and depth, so per-seed fits across depth are paired). Lists are indexed by init seed."""
    corpus = load_corpus()
    mc = model_config(cfg, cfg["placement"], cfg["depth"], cfg["init"], corpus.vocab_size)
    x, y = eval_windows(corpus.val, 1, cfg["probe_batch"], cfg["seq_len"], seed=PROBE_SEED)[0]
    x, y = x.to(ctx.device), y.to(ctx.device)
    keys = ("block_grad", "w2_grad", "amplification", "share", "ratio", "branch_cos", "predicted")
    out = {k: [] for k in keys}
    for s in range(cfg["init_seeds"]):
        torch.manual_seed(s)
        model = LM(mc).to(ctx.device)
        lm_loss(model(x), y).backward()
        out["block_grad"].append(layer_grad_norms(model))
        out["w2_grad"].append(ffn_out_grad_norms(model))
        model.zero_grad(set_to_none=True)
        gen = torch.Generator().manual_seed(AMP_SEED_OFFSET + s)
        out["amplification"].append(output_change(model, x, cfg["eps"], gen))
        tr = identity_trace(model, x)
        for k in ("share", "ratio", "branch_cos", "predicted"):
            out[k].append(tr[k])
    return out
