"""Run recipes of `parallel_decoding`: a causal decoder's teacher-forced pass against step-by-step decoding.

Teacher forcing feeds the whole given sequence x (1, n) once; under the causal mask position t sees x_0..x_t
only, so its logits should be those that decoding computes when it reaches t. Decoding step by step is done
two ways: `prefix` runs the model on x_0..x_t alone for every t (no cache), `cached` feeds one token at a
time through one `KVCache`. `run_exact` compares the logits (every dtype against the float64 one pass) and
the gradient of the mean next-token loss; `run_timing` times a training step obtained each way, and greedy
generation of n tokens against one teacher-forced forward of n tokens, in interleaved rounds.

Errors are relative: max |a − b| over an axis ÷ the largest |reference| of the whole sequence (of all
gradients), so one number reads the same for every model size; a gradient that is zero in exact arithmetic (a
key bias: softmax ignores a shift shared by every score) is rounding noise and must not be divided by itself.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from tfclaims.measure.threads import intra_op_threads
from tfclaims.measure.timing import time_interleaved
from tfclaims.nn.attention import KVCache
from tfclaims.nn.models import LM, lm_loss
from tfclaims.train.decode_configs import AA

from .grid import DTYPES, STEP_PATHS, model_config, timing_config


# ------------------------------------------------------------------ the paths
def prefix_logits(model: LM, x: torch.Tensor) -> Iterator[torch.Tensor]:
    """Position t's logits (1, V) from a forward of the prefix x[:, :t + 1] alone, t = 0 .. n − 1 (lazily:
    one prefix at a time, as decoding without a cache recomputes it)."""
    for t in range(x.shape[1]):
        yield model(x[:, : t + 1])[:, -1]


def cached_logits(model: LM, x: torch.Tensor) -> Iterator[torch.Tensor]:
    """Position t's logits (1, V) from feeding x_t alone after x_0..x_(t−1) went into a KV cache."""
    cache = KVCache.for_model(
        model.cfg, x.shape[0], x.shape[1], dtype=model.head.weight.dtype, device=x.device
    )
    for t in range(x.shape[1]):
        yield model(x[:, t : t + 1], cache=cache)[:, -1]


STEPS = {"prefix": prefix_logits, "cached": cached_logits}


def step_logits(model: LM, x: torch.Tensor, path: str) -> torch.Tensor:
    """All n positions' logits (n, V), decoded step by step along `path`."""
    return torch.cat(list(STEPS[path](model, x)))


def onepass_grad(model: LM, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The gradient of the mean next-token loss over all n positions, from one teacher-forced pass."""
    return torch.autograd.grad(lm_loss(model(x), y), list(model.parameters()))


def prefix_grad(model: LM, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    """The same gradient from n prefix passes: each position's loss ÷ n is differentiated as soon as its
    prefix ran, and the gradients summed (the gradient of the summed loss, holding one prefix's activations at
    a time)."""
    params, n = list(model.parameters()), x.shape[1]
    total = [torch.zeros_like(p) for p in params]
    for t, logits in enumerate(prefix_logits(model, x)):
        for g, d in zip(total, torch.autograd.grad(F.cross_entropy(logits, y[:, t]) / n, params)):
            g += d
    return total


def cached_grad(model: LM, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The same gradient through n cached steps: the summed loss of every step, then one backward. The cache
    is written in place and every step saves a view of it for the backward; torch's context keeps what a step
    saved as it was (a copy on the next write), which is what a differentiable cache must do."""
    with torch.autograd.graph.allow_mutation_on_saved_tensors():
        loss = sum(F.cross_entropy(lg, y[:, t]) for t, lg in enumerate(cached_logits(model, x))) / x.shape[1]
        return torch.autograd.grad(loss, list(model.parameters()))


GRADS = {"onepass": onepass_grad, "prefix": prefix_grad, "cached": cached_grad}


def relative_error(a: torch.Tensor, ref: torch.Tensor, scale: float) -> list[float]:
    """Per row (position): max |a − ref| over the last axis ÷ scale, in float64."""
    return ((a.double() - ref.double()).abs().amax(-1) / scale).tolist()


def grad_error(gs, ref) -> float:
    """max |g − g_ref| over every parameter ÷ the largest |g_ref| of any parameter."""
    scale = max(float(r.abs().max()) for r in ref)
    return max(float((g.double() - r.double()).abs().max()) for g, r in zip(gs, ref)) / scale


def _sequence(n: int, seed: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs x (1, n) and next-token targets y (1, n) from one random sequence of n + 1 tokens."""
    s = torch.randint(0, vocab, (1, n + 1), generator=torch.Generator().manual_seed(seed))
    return s[:, :n], s[:, 1:]


# ------------------------------------------------------------------ recipes
def run_exact(cfg: dict, ctx) -> dict:
    """One model (random init from the seed) in float64, float32 and bfloat16 (the same weights, rounded):
    per dtype the per-position error of the one-pass, prefix and cached logits against the float64 one-pass
    logits, and of each step path against the one pass in its own dtype; the float64 gradients of the mean
    loss each way; and the positive control, the same float64 model with its attention made bidirectional."""
    n, dev = cfg["n"], ctx.device
    mc = model_config(cfg["d_model"], cfg["n_heads"], cfg["n_layers"], n + 1, cfg["pos"])
    torch.manual_seed(cfg["seed"])
    base = LM(mc)
    x, y = (t.to(dev) for t in _sequence(n, cfg["seed"], mc.vocab_size))
    models = {dt: copy.deepcopy(base).to(device=dev, dtype=getattr(torch, dt)) for dt in DTYPES}
    errors, same = {}, {}
    with intra_op_threads(cfg["threads"]) as n_threads:
        with torch.no_grad():
            ref = models["float64"](x)[0]  # (n, V)
            scale = float(ref.abs().max())
            for dt, m in models.items():
                one = m(x)[0]
                errors[dt] = {"onepass": relative_error(one, ref, scale)}
                for path in STEP_PATHS:
                    steps = step_logits(m, x, path)
                    errors[dt][path] = relative_error(steps, ref, scale)
                    same[f"{dt}|{path}"] = relative_error(steps, one, scale)
            steps64 = step_logits(models["float64"], x, "prefix")
            bidir = copy.deepcopy(models["float64"])
            for block in bidir.blocks:
                block.attn.causal = False  # no causal mask: position t also sees x_(t+1)..x_(n−1)
            leak = relative_error(bidir(x)[0], steps64, scale)
        grads = {p: fn(models["float64"], x, y) for p, fn in GRADS.items()}
    return {
        "errors": errors,
        "same_dtype": same,
        "leak": leak,
        "grad_errors": {p: grad_error(grads[p], grads["onepass"]) for p in STEP_PATHS},
        "logit_scale": scale,
        "threads": n_threads,
    }


def run_timing(cfg: dict, ctx) -> dict:
    """Per length n, all in one interleaved call: a training step's gradient obtained in one teacher-forced
    pass (`onepass`), from n prefix passes (`prefix`) and through n cached steps (`cached`); one
    teacher-forced forward of n tokens (`forward`) and greedy generation of n tokens with the cache
    (`generate`: one prompt token, n − 1 new ones, n tokens through the model); the forward at the largest n
    timed twice (A/A). Before timing, the float32 gradients of the step paths against the one pass's."""
    dev = ctx.device
    mc = timing_config(cfg)
    torch.manual_seed(cfg["seed"])
    with torch.device(dev):
        model = LM(mc)
    x_all, y_all = (t.to(dev) for t in _sequence(max(cfg["ns"]), cfg["seed"], mc.vocab_size))
    fns, grad_diff = {}, {}
    with intra_op_threads(cfg["threads"]) as n_threads:
        for n in cfg["ns"]:
            x, y = x_all[:, :n], y_all[:, :n]
            ref = onepass_grad(model, x, y)
            for path in STEP_PATHS:
                grad_diff[f"{path}|{n}"] = grad_error(GRADS[path](model, x, y), ref)
            fns |= {f"{p}|{n}": functools.partial(fn, model, x, y) for p, fn in GRADS.items()}
            fns[f"forward|{n}"] = torch.no_grad()(functools.partial(model, x))
            fns[f"generate|{n}"] = functools.partial(model.generate, x[:, :1], n - 1)
        fns[AA] = fns[f"forward|{max(cfg['ns'])}"]
        t = time_interleaved(fns, device=dev, warmup=cfg["warmup"], repeats=cfg["repeats"], min_sample=0)
    return {
        "times": {k: v["times"] for k, v in t.items()},
        "load": t[AA]["load"],
        "grad_errors": grad_diff,
        "threads": n_threads,
        "aa_n": max(cfg["ns"]),
    }
