"""One training loop for language models: AdamW, warm-up then decay, evaluation, gradient norms per
layer, and divergence recorded as an outcome (never raised)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch
from torch import nn
from tqdm.auto import tqdm

from ..data.corpus import Corpus, eval_windows, random_windows, unigram_xent
from ..device import synchronize
from ..nn.config import TrainConfig
from ..nn.models import lm_loss


def lr_at(step: int, t: TrainConfig) -> float:
    """Linear warm-up from lr/warmup to lr over `warmup` steps, then decay to lr*min_lr_ratio at the end."""
    if step < t.warmup:
        return t.lr * (step + 1) / t.warmup
    if t.schedule == "constant":
        return t.lr
    span = max(t.steps - t.warmup, 1)
    frac = min((step - t.warmup) / span, 1.0)
    lo = t.lr * t.min_lr_ratio
    if t.schedule == "linear":
        return t.lr - (t.lr - lo) * frac
    return lo + 0.5 * (t.lr - lo) * (1 + math.cos(math.pi * frac))


def make_optimizer(model: nn.Module, t: TrainConfig) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices (dim >= 2) only, not on norms and biases."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": t.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=t.lr, betas=t.betas)


def layer_grad_norms(model: nn.Module) -> list[float]:
    """L2 norm of the gradient of each block's parameters, in layer order."""
    out = []
    for block in model.blocks:
        sq = sum(
            float(p.grad.detach().double().pow(2).sum()) for p in block.parameters() if p.grad is not None
        )
        out.append(math.sqrt(sq))
    return out


def _forward_loss(model: nn.Module, batch, device, label_smoothing: float = 0.0) -> torch.Tensor:
    """batch is (x, y) or (x, y, pad_mask); targets -1 are ignored. The loss is taken on float32 logits
    whatever the model's dtype (a no-op in float32)."""
    x, y, *rest = batch
    pad = rest[0].to(device) if rest else None
    logits = model(x.to(device), pad_mask=pad) if pad is not None else model(x.to(device))
    return lm_loss(logits.float(), y.to(device), label_smoothing)


@torch.no_grad()
def evaluate(model: nn.Module, batches, device) -> float:
    """Mean loss over fixed batches in eval mode (BatchNorm uses running statistics)."""
    was_training = model.training
    model.eval()
    losses = [float(_forward_loss(model, b, device)) for b in batches]
    model.train(was_training)
    return sum(losses) / len(losses)


def train_lm(
    model: nn.Module,
    t: TrainConfig,
    corpus: Corpus,
    device,
    *,
    label_smoothing: float = 0.0,
    on_eval: Callable[[int, nn.Module], dict] | None = None,
    sample: Callable[[torch.Generator], tuple] | None = None,
    val_batches: list | None = None,
    progress: bool = True,
    desc: str = "train",
) -> dict:
    """Train `model` on random windows of the training text (or on `sample(gen)` batches, e.g. padded
    lines: (x, y) or (x, y, pad_mask)); evaluate on `val_batches` (default: fixed validation windows).

    Returns a JSON-ready dict: train_loss per step, val_loss at eval steps, grad_norms (per layer) at
    step 0 and eval steps, `diverged_at` (first step whose loss or gradient is not finite, else None),
    final/best validation loss, tokens/s, the unigram cross-entropy of the corpus (`unigram_xent`) and
    the intra-op thread count. `on_eval(step, model)` may add probe results to each eval.
    """
    model.to(device).train()
    gen = torch.Generator().manual_seed(t.seed)
    if val_batches is None:
        val_batches = eval_windows(corpus.val, t.eval_batches, t.batch_size, t.seq_len)
    if sample is None:

        def sample(g):
            return random_windows(corpus.train, t.batch_size, t.seq_len, g)

    opt = make_optimizer(model, t)
    out = {
        "train_loss": [],
        "eval_steps": [],
        "val_loss": [],
        "grad_steps": [],
        "grad_norms": [],
        "probes": [],
        "diverged_at": None,
    }
    grad_every = t.log_grad_every or t.eval_every

    def do_eval(step):
        out["eval_steps"].append(step)
        out["val_loss"].append(evaluate(model, val_batches, device))
        if on_eval is not None:
            out["probes"].append(on_eval(step, model))

    synchronize(device)
    t0 = time.perf_counter()
    do_eval(0)
    bar = tqdm(range(t.steps), desc=desc, leave=False, disable=not progress, mininterval=1.0)
    for step in bar:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, t)
        batch = sample(gen)
        loss = _forward_loss(model, batch, device, label_smoothing)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        lv = float(loss.detach())
        if step == 0 or (step + 1) % grad_every == 0:
            out["grad_steps"].append(step)
            out["grad_norms"].append(layer_grad_norms(model))
        if t.grad_clip is not None:
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
        else:
            gnorm = torch.sqrt(
                sum(p.grad.detach().pow(2).sum() for p in model.parameters() if p.grad is not None)
            )
        if not (math.isfinite(lv) and math.isfinite(float(gnorm))):
            out["diverged_at"] = step
            out["train_loss"].append(lv if math.isfinite(lv) else None)
            break
        opt.step()
        out["train_loss"].append(lv)
        if (step + 1) % t.eval_every == 0 or step + 1 == t.steps:
            do_eval(step + 1)
            if not math.isfinite(out["val_loss"][-1]):
                out["diverged_at"] = step + 1
                break
        if progress and step % 10 == 0:
            bar.set_postfix(loss=f"{lv:.3f}")
    synchronize(device)
    seconds = time.perf_counter() - t0
    vals = [v for v in out["val_loss"] if math.isfinite(v)]
    out["val_loss"] = [v if math.isfinite(v) else None for v in out["val_loss"]]
    out["final_val"] = out["val_loss"][-1] if out["diverged_at"] is None else None
    out["best_val"] = min(vals) if vals else None
    out["seconds"] = seconds
    out["steps_per_s"] = len(out["train_loss"]) / seconds
    out["unigram_xent"] = unigram_xent(corpus)  # the learned-at-all guard's baseline
    out["threads"] = torch.get_num_threads()
    return out
