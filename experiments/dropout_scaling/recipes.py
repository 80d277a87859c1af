"""Run recipes of `dropout_scaling`: what torch's dropout does to a tensor (`run_masks`), and, on a small LM
trained with it, how train mode and eval mode compare (`run_train`).

The trained model's probe, on fixed held-out batches:
- eval mode's loss; the loss of the probabilities averaged over K dropout masks (MC dropout) for K = 1, 2,
  4, …;
- at every dropout site (`sites.Sites`: the embedding and each sublayer's output, or each block's mixed
  values), the mean over the K masks of the train-mode value projected on the eval-mode value
  (⟨mean, eval⟩ / ⟨eval, eval⟩: 1 when eval mode is the expectation);
- the loss without the 1/(1−p) scaling: eval mode with every site's value multiplied by 1/(1−p). A model
  trained with unscaled dropout (whose sites a weight scaling maps onto this one's exactly) sees, uncorrected
  at inference, values 1/(1−p) times larger than in training on average; this is that model.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F

from tfclaims.data.corpus import eval_windows, load_corpus
from tfclaims.nn.models import lm_loss
from tfclaims.train.small_lm import train_small

from .sites import Sites, add_site_dropout


def run_masks(cfg: dict, ctx) -> dict:
    """Per drop probability and draw: the kept share of a float32 tensor, and the largest relative error of a
    kept value against x/(1−p) computed in float64."""
    g = torch.Generator().manual_seed(cfg["seed"])
    x = torch.randn(cfg["size"], generator=g).to(ctx.device)
    torch.manual_seed(cfg["seed"])
    rows = []
    for p in cfg["ps"]:
        for draw in range(cfg["draws"]):
            out = F.dropout(x, p, training=True)
            kept = out != 0  # x is nonzero almost surely
            want = x.double() / (1.0 - p)
            rel = ((out.double() - want).abs() / want.abs())[kept].max().item()
            rows.append({"p": p, "draw": draw, "kept": kept.double().mean().item(), "max_rel_error": rel})
    return {"rows": rows}


@torch.no_grad()
def dropout_probe(model, batches, p: float, samples: int, device, site: str = "residual") -> dict:
    """The losses and per-site projections described in the module docstring, over `batches`."""
    sites = Sites(model, site)
    n_sites, ks = len(sites), [2**j for j in range(samples.bit_length()) if 2**j <= samples]
    total = {"eval": 0.0, "unscaled": 0.0, "single": 0.0, **{k: 0.0 for k in ks}}
    dot_mean, dot_eval = [0.0] * n_sites, [0.0] * n_sites
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        model.eval()
        total["eval"] += float(lm_loss(model(x).float(), y))
        ref = list(sites.out)  # (B, T, d) per site
        sites.scale = 1.0 / (1.0 - p)
        total["unscaled"] += float(lm_loss(model(x).float(), y))
        sites.scale = None
        model.train()
        probs = torch.zeros(())
        means = [torch.zeros_like(r) for r in ref]
        for k in range(1, samples + 1):
            logits = model(x).float()  # (B, T, V), one dropout mask per call
            total["single"] += float(lm_loss(logits, y)) / samples
            probs = probs + (logits.softmax(-1) - probs) / k  # running mean of the masks' probabilities
            means = [m + (o - m) / k for m, o in zip(means, sites.out)]
            if k in ks:
                total[k] += float(F.nll_loss(probs.clamp_min(1e-30).log().flatten(0, 1), y.flatten()))
        for i in range(n_sites):
            dot_mean[i] += float((means[i] * ref[i]).sum())
            dot_eval[i] += float((ref[i] * ref[i]).sum())
    sites.remove()
    model.eval()
    n = len(batches)
    return {
        "eval_loss": total["eval"] / n,
        "unscaled_loss": total["unscaled"] / n,
        "single_mask_loss": total["single"] / n,
        "mc_loss": {str(k): total[k] / n for k in ks},
        "projection": [dm / de for dm, de in zip(dot_mean, dot_eval)],
    }


def run_train(cfg: dict, ctx) -> dict:
    """Train the small LM with inverted dropout p at the config's `site` (`sites`), then probe it."""
    prepare = partial(add_site_dropout, p=cfg["dropout"], site=cfg["site"])
    metrics, model = train_small(cfg, ctx, prepare=prepare)
    if metrics.get("diverged_at") is not None:
        return metrics  # a diverged run is an outcome: nothing to probe
    corpus = load_corpus()
    batches = eval_windows(corpus.val, cfg["probe_batches"], cfg["batch"], cfg["seq_len"], seed=4321)
    metrics["probe"] = dropout_probe(
        model, batches, cfg["dropout"], cfg["mc_samples"], ctx.device, cfg["site"]
    )
    return metrics
