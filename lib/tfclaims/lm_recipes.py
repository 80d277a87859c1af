"""Run recipes of the claims that train two arms of the small character LM against each other (and the
probes and counts that go with them): `dk_scaling`, `weight_tying`, `label_smoothing`.

Every recipe is `recipe(cfg, ctx) -> metrics`, with `cfg` a run config (the small-LM recipe's fields, the
claim's switches, a seed) and `ctx` the run context. Training goes through `small_lm.train_small`, so the
arms of one claim, and its null pair, are trained alike.
"""

from __future__ import annotations

import math

import torch

from .calibration import calibration_probe
from .config import PRESETS
from .counting import model_params
from .data import eval_windows, load_corpus, random_windows
from .models import LM, n_params
from .small_lm import model_config, train_small

ECE_BINS = 15  # equal-width confidence bins of the expected calibration error


# ------------------------------------------------------------------ dk_scaling
def softmax_stats(logits: torch.Tensor) -> dict:
    """Saturation of softmax rows (..., n): mean max probability, entropy (nats), and the Frobenius norm
    of the softmax Jacobian diag(p) - p p^T, which is what gradients flow through."""
    p = logits.softmax(-1)
    ent = -(p * torch.log(p.clamp_min(1e-30))).sum(-1)
    # ||diag(p) - pp^T||_F^2 = sum p_i^2 - 2 sum p_i^3 + (sum p_i^2)^2
    s2, s3 = (p**2).sum(-1), (p**3).sum(-1)
    jac = (s2 - 2 * s3 + s2**2).clamp_min(0).sqrt()
    return {
        "max_prob": float(p.max(-1).values.mean()),
        "entropy": float(ent.mean()),
        "jacobian_norm": float(jac.mean()),
    }


def additive_scores(q: torch.Tensor, k: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Bahdanau scores v . tanh(W q + U k) with PyTorch's default Linear init (hidden size = d)."""
    d = q.shape[-1]
    bound = 1 / math.sqrt(d)
    W, U = (torch.empty(d, d).uniform_(-bound, bound, generator=gen) for _ in range(2))
    v = torch.empty(d).uniform_(-bound, bound, generator=gen)
    return torch.tanh(q @ W.T + k @ U.T) @ v


def dk_overrides(cfg: dict) -> dict:
    """The ModelConfig overrides of one dk_scaling arm: head size, init, scaled or not (explicit attention,
    so the score hook sees the logits)."""
    return {
        "head_dim": cfg["dk"],
        "init": cfg["init"],
        "attn_scale": None if cfg["scaled"] else 1.0,
        "attn_backend": "explicit",
    }


def dk_monte_carlo(cfg: dict, ctx) -> dict:
    """i.i.d. N(0,1) q and k: Var(q·k) and Var(q·k/sqrt d_k) per d_k, softmax saturation over 64 keys scaled
    vs unscaled, and additive scores' variance."""
    gen = torch.Generator().manual_seed(cfg["seed"])
    rows = []
    for dk in cfg["dks"]:
        q = torch.randn(cfg["samples"], dk, generator=gen)
        k = torch.randn(cfg["samples"], dk, generator=gen)
        dot = (q * k).sum(-1)
        # softmax over 64 keys per query: (256 queries, 64 keys)
        Q = torch.randn(256, 1, dk, generator=gen)
        K = torch.randn(256, 64, dk, generator=gen)
        logits = (Q * K).sum(-1)
        add = additive_scores(q[:4096], k[:4096], gen)
        rows.append(
            {
                "dk": dk,
                "var_dot": float(dot.var()),
                "var_scaled": float((dot / math.sqrt(dk)).var()),
                "var_additive": float(add.var()),
                "unscaled": softmax_stats(logits),
                "scaled": softmax_stats(logits / math.sqrt(dk)),
            }
        )
    return {"rows": rows}


def dk_init_probe(cfg: dict, ctx) -> dict:
    """The first layer's q and k of the LM as initialised, on real text: component variances, Var(q·k),
    the law's prediction d_k·Var(q)·Var(k), and softmax saturation scaled vs unscaled."""
    corpus = load_corpus()
    mc = model_config({**cfg, "n_layers": 1}, corpus.vocab_size, head_dim=cfg["dk"], init=cfg["init"])
    model = LM(mc).eval()
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


def attention_probe(x: torch.Tensor):
    """An on_eval probe: the first layer's attention-logit variance and mean max probability on batch x."""

    def probe(step, model):
        seen = {}

        def hook(logits, probs, mask):
            finite = logits[torch.isfinite(logits)]
            seen["logit_var"] = float(finite.var())
            seen["max_prob"] = float(probs.max(-1).values.mean())

        attn = model.blocks[0].attn
        attn.score_hook = hook
        was = model.training
        model.eval()
        with torch.no_grad():
            model(x)
        model.train(was)
        attn.score_hook = None
        return seen

    return probe


def dk_train(cfg: dict, ctx) -> dict:
    """One dk_scaling training arm: the small LM with head size d_k, scaled or not, probed on a fixed batch."""
    corpus = load_corpus()
    probe_x = eval_windows(corpus.val, 1, 8, cfg["seq_len"], seed=99)[0][0].to(ctx.device)
    res, _ = train_small(
        cfg,
        ctx,
        model_kw=dk_overrides(cfg),
        on_eval=attention_probe(probe_x),
        desc=f"dk={cfg['dk']} {cfg['init']} {'scaled' if cfg['scaled'] else 'unscaled'} seed {cfg['seed']}",
    )
    return res


# ------------------------------------------------------------------ weight_tying
def tying_counts(cfg: dict, ctx) -> dict:
    """Parameters tied vs untied: closed form and instantiated for the character LM, closed form for presets."""
    corpus = load_corpus()
    rows = []
    for tie in (True, False):
        mc = model_config(cfg, corpus.vocab_size, tie_weights=tie)
        rows.append(
            {
                "model": f"char LM (this project), d = {mc.d_model}",
                "tie": tie,
                "V": mc.vocab_size,
                "d": mc.d_model,
                "closed_form": model_params(mc),
                "instantiated": n_params(LM(mc)),
            }
        )
    for name in cfg["presets"]:
        for tie in (True, False):
            mc = PRESETS[name].replace(tie_weights=tie)
            rows.append(
                {
                    "model": name,
                    "tie": tie,
                    "V": mc.vocab_size,
                    "d": mc.d_model,
                    "closed_form": model_params(mc),
                    "instantiated": None,
                }
            )
    return {"rows": rows}


def tying_train(cfg: dict, ctx) -> dict:
    """One weight_tying arm: the small LM with the output projection tied to the embedding or not."""
    res, _ = train_small(
        cfg,
        ctx,
        model_kw={"tie_weights": cfg["tie"]},
        desc=f"{'tied' if cfg['tie'] else 'untied'} seed {cfg['seed']}",
    )
    return res


# ------------------------------------------------------------------ label_smoothing
def smoothing_train(cfg: dict, ctx) -> dict:
    """One label_smoothing arm: the small LM trained with smoothing ε on the whole training text ('full') or
    on its first `subset_chars` characters ('subset'); every evaluation measures, unsmoothed, the training
    and validation loss, top-1 accuracy, ECE and mean confidence, and the last the reliability diagram."""
    corpus = load_corpus()
    data = corpus.train if cfg["regime"] == "full" else corpus.train[: cfg["subset_chars"]]
    train_eval = eval_windows(data, cfg["eval_batches"], cfg["batch"], cfg["seq_len"], seed=4321)
    val_eval = eval_windows(corpus.val, cfg["eval_batches"], cfg["batch"], cfg["seq_len"])
    probe, last = calibration_probe({"train": train_eval, "val": val_eval}, ctx.device, ECE_BINS)

    def sample(gen):
        return random_windows(data, cfg["batch"], cfg["seq_len"], gen)

    res, _ = train_small(
        cfg,
        ctx,
        label_smoothing=cfg["eps"],
        on_eval=probe,
        sample=sample,
        val_batches=val_eval,
        desc=f"{cfg['regime']} ε={cfg['eps']} seed {cfg['seed']}",
    )
    res["reliability"] = last["val"]
    res["final"] = res["probes"][-1]
    return res
