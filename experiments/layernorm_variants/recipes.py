"""Checkpoint swap between normalisation formulas: train the small LM with one formula, then evaluate the
same trained weights with another.

Every norm of the LM (norm1 and norm2 of each block, the final norm) returns g * (x - mean) * s + b
(LayerNorm family) or g * x * s (RMSNorm family), with a per-token scale s that is all the formulas
differ in. `swap_formula` replaces each norm module by one of another formula that holds the very same
gain (and bias) Parameter objects, so a swap changes s and nothing else; evaluating the swapped model on
fixed validation batches gives the loss change the formula alone causes, a deterministic number per
trained model (no retraining, no training noise). The same swap is evaluated with the whole model cast
to bfloat16, where rounding interacts with eps and with the d/(d-1) factor of the unbiased std.

`measure_pair`: the two formulas of a family side by side on the same inputs, measured against the closed
form (the experiment's width and scale parts).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from tfclaims.data.corpus import eval_windows, load_corpus
from tfclaims.nn.norm_variants import NotesLayerNorm, NotesRMSNorm, relative_difference
from tfclaims.nn.norms import LayerNorm, RMSNorm
from tfclaims.train.loop import evaluate
from tfclaims.train.small_lm import train_small

from .grid import PAIRS

# family -> formula -> class; "torch": the library layers (F.layer_norm / F.rms_norm, what torch.nn.LayerNorm
# and torch.nn.RMSNorm compute), "notes": unbiased std or plain RMS with eps added outside the root
CLASSES: dict[str, dict[str, type[nn.Module]]] = {
    "layer": {"torch": LayerNorm, "notes": NotesLayerNorm},
    "rms": {"torch": RMSNorm, "notes": NotesRMSNorm},
}
NORM_TYPES = (LayerNorm, RMSNorm, NotesLayerNorm, NotesRMSNorm)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
PROBE_SEED = 99  # the fixed validation batch whose norm inputs are probed during training


def family_of(m: nn.Module) -> str:
    return "layer" if isinstance(m, (LayerNorm, NotesLayerNorm)) else "rms"


def swap_formula(model: nn.Module, family: str, formula: str, eps: float) -> int:
    """Replace every LayerNorm/RMSNorm-family module of `model` by `formula` at `eps`, in place, handing the
    new module the old one's gain and bias Parameters (the same objects: optimiser state and weights are
    kept). Returns how many were replaced; a norm of the other family is an error (a swap never changes
    family)."""
    cls = CLASSES[family][formula]
    targets = [(n, m) for n, m in model.named_modules() if isinstance(m, NORM_TYPES)]
    for name, m in targets:
        if family_of(m) != family:
            raise ValueError(f"{name} is a {family_of(m)} norm, not {family}")
        new = cls(m.weight.numel(), eps)
        new.weight = m.weight
        if getattr(m, "bias", None) is not None:
            new.bias = m.bias
        parent_name, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, attr, new)
    return len(targets)


def swap_losses(model: nn.Module, family: str, evals: dict, dtypes, batches, device) -> dict:
    """dtype name -> eval name -> validation loss of `model` (untouched) with every norm swapped to that
    eval's [formula, eps], the whole model cast to the dtype."""
    out = {}
    for dt in dtypes:
        m = copy.deepcopy(model).to(DTYPES[dt])
        out[dt] = {}
        for name, (formula, eps) in evals.items():
            swap_formula(m, family, formula, eps)
            out[dt][name] = evaluate(m, batches, device)
    return out


@torch.no_grad()
def norm_input_scales(model: nn.Module, x: torch.Tensor) -> dict:
    """Per norm of `model`: quantiles of the per-token scale of its input on the batch x (B, T) — the biased
    std for the LayerNorm family, the RMS for the RMSNorm family (what the formulas divide by, without
    eps)."""
    seen = {}

    def grab(name, fam):
        def hook(mod, args):
            h = args[0].detach().double()  # (B, T, d)
            s = h.std(-1, correction=0) if fam == "layer" else h.pow(2).mean(-1).sqrt()  # (B, T)
            seen[name] = s.flatten()

        return hook

    hooks = [
        m.register_forward_pre_hook(grab(n, family_of(m)))
        for n, m in model.named_modules()
        if isinstance(m, NORM_TYPES)
    ]
    was = model.training
    model.eval()
    model(x)
    model.train(was)
    for h in hooks:
        h.remove()
    return {
        n: {"min": float(s.min()), "q01": float(s.quantile(0.01)), "median": float(s.median())}
        for n, s in seen.items()
    }


def swap_run(cfg: dict, ctx) -> dict:
    """Train the small LM with cfg's family/formula/eps in every norm (norm-input scales probed at each
    evaluation), then evaluate the trained weights with each of cfg['evals'] (name -> [formula, eps]) in each
    of cfg['dtypes']. Metrics: train_lm's, plus `swap` (dtype -> eval name -> loss)."""
    family, formula, eps = cfg["family"], cfg["formula"], cfg["eps"]
    corpus = load_corpus()
    probe_x = eval_windows(corpus.val, 1, 16, cfg["seq_len"], seed=PROBE_SEED)[0][0].to(ctx.device)
    res, model = train_small(
        cfg,
        ctx,
        model_kw={"norm": family, "norm_eps": eps},
        prepare=lambda m: swap_formula(m, family, formula, eps),
        on_eval=lambda step, m: norm_input_scales(m, probe_x),
        desc=f"{family} {formula} seed {cfg['seed']}",
    )
    if res["diverged_at"] is None:
        batches = eval_windows(corpus.val, cfg["eval_batches"], cfg["batch"], cfg["seq_len"])
        res["swap"] = swap_losses(model, family, cfg["evals"], cfg["dtypes"], batches, ctx.device)
    return res


# ---------------------------------------------------------------- the formulas' outputs side by side
def pair_modules(std: str, d: int, eps: float) -> tuple[nn.Module, nn.Module]:
    """(torch's own layer, the notes' variant), both at gain 1 and bias 0."""
    if std == "layer":
        return nn.LayerNorm(d, eps=eps), NotesLayerNorm(d, eps)
    return nn.RMSNorm(d, eps=eps), NotesRMSNorm(d, eps)


def token_scale(x: torch.Tensor, std: str) -> torch.Tensor:
    """The per-token statistic the norm divides by (no eps): biased std for LayerNorm, RMS for RMSNorm."""
    return x.std(-1, correction=0) if std == "layer" else x.pow(2).mean(-1).sqrt()


@torch.no_grad()
def measure_pair(std: str, x: torch.Tensor, eps: float) -> dict:
    """Relative output difference per token ||y_notes - y_torch|| / ||y_torch|| and its closed form."""
    d = x.shape[-1]
    ref, notes = pair_modules(std, d, eps)
    y_ref, y_notes = ref(x), notes(x)
    rel = (torch.linalg.norm(y_notes - y_ref, dim=-1) / torch.linalg.norm(y_ref, dim=-1)).double()
    closed = relative_difference(PAIRS[std][0], std, token_scale(x.double(), std), d, eps)
    return {
        "median": float(rel.median()),
        "max": float(rel.max()),
        "max_abs": float((y_notes - y_ref).abs().max()),
        "out_rms_torch": float(y_ref.pow(2).mean().sqrt()),
        "out_rms_notes": float(y_notes.pow(2).mean().sqrt()),
        # relative error of the closed form, absolute floor (1e-3 * 1e-3) for float32 rounding where Δ ≈ 0
        "formula_err": float(((rel - closed).abs() / closed.clamp_min(1e-3)).max()),
    }
