"""Run recipes of `no_position`: whether a model without position information sees word order, exactly
(`permutation_run`: untrained encoders and decoders in float64) and after training (`train_probe`: a character
LM with or without positions, then a linear probe of each token's absolute position on every layer's hidden
states, `measure.position_probe`).

Every model, trained or not, uses Vaswani et al.'s parametrisation (`measure.lengths.match_norms`:
token rows of unit-variance entries as added, learned position rows at the sinusoidal table's scale), so that
no arm starts with its positions drowned by, or drowning, its tokens.
"""

from __future__ import annotations

import torch

from tfclaims.data.corpus import eval_windows, load_corpus
from tfclaims.measure.lengths import match_norms
from tfclaims.measure.residual_stream import stream_states
from tfclaims.nn.config import ModelConfig
from tfclaims.nn.models import LM, Encoder
from tfclaims.train.small_lm import train_small

from .position_probe import fit_gain, permutation_error, position_probe, prefix_change

VOCAB = 96  # the permutation test's token ids are drawn uniformly from 1 .. VOCAB − 1
# (model, position information) pairs of the permutation test: encoders (bidirectional) and causal decoders
PERM_ARMS = (("encoder", "none"), ("encoder", "sinusoidal"), ("encoder", "learned"), ("decoder", "none"),
             ("decoder", "sinusoidal"))  # fmt: skip
# the probe's windows: held-out windows of other draws than each other and than the validation windows
FIT_SEED, SCORE_SEED = 5678, 6789


def _permutation(n: int, g: torch.Generator) -> torch.Tensor:
    """A random permutation of 0 .. n − 1 that moves something (the identity is rolled by one)."""
    perm = torch.randperm(n, generator=g)
    return perm.roll(1) if torch.equal(perm, torch.arange(n)) else perm


def perm_model(kind: str, pos: str, size: list[int], T: int, init: str, backend: str, *, seed: int):
    """An untrained encoder or causal decoder in float64, eval mode, its norms matched as in training."""
    d, L, h = size
    cfg = ModelConfig(
        vocab_size=VOCAB,
        d_model=d,
        n_layers=L,
        n_heads=h,
        max_seq_len=T,
        pos=pos,
        causal=kind == "decoder",
        init=init,
        attn_backend=backend,
        emb_scale=True,
    )
    torch.manual_seed(seed)
    model = LM(cfg) if kind == "decoder" else Encoder(cfg)
    match_norms(model)
    return model.double().eval()


def permutation_run(cfg: dict, ctx) -> dict:
    """Per size, init, backend and arm: the relative equivariance error of the hidden states (B, T, d) under a
    random permutation of the positions, and for decoders how far the last position's state moves when the
    tokens before it are permuted. One draw of tokens and permutations per size, shared by every arm."""
    rows = []
    T, B = cfg["perm_len"], cfg["perm_batch"]
    for i, size in enumerate(cfg["perm_sizes"]):
        g = torch.Generator().manual_seed(cfg["seed"] * 1009 + i)
        idx = torch.randint(1, VOCAB, (B, T), generator=g).to(ctx.device)
        perm, prefix = _permutation(T, g).to(ctx.device), _permutation(T - 1, g).to(ctx.device)
        for init in cfg["inits"]:
            for backend in cfg["backends"]:
                for kind, pos in PERM_ARMS:
                    m = perm_model(kind, pos, size, T, init, backend, seed=cfg["seed"] * 1009 + i).to(
                        ctx.device
                    )
                    base = {
                        "model": kind,
                        "pos": pos,
                        "d_model": size[0],
                        "n_layers": size[1],
                        "init": init,
                        "backend": backend,
                    }
                    rows.append({**base, "measure": "perm", "error": permutation_error(m.stack, idx, perm)})
                    if kind == "decoder":
                        rows.append(
                            {**base, "measure": "prefix", "error": prefix_change(m.stack, idx, prefix)}
                        )
    return {"rows": rows}


@torch.no_grad()
def layer_states(model: LM, windows, device) -> list[torch.Tensor]:
    """Per layer (the input embeddings x_0, then each block's output x_l), every window's hidden states
    stacked: L + 1 tensors of shape (n_windows · B, T, d) on the CPU."""
    per_batch = [[s.cpu() for s in stream_states(model, x.to(device))] for x, _ in windows]
    return [torch.cat(layer) for layer in zip(*per_batch)]


def train_probe(cfg: dict, ctx) -> dict:
    """metrics: the training record (`train.small_lm`), plus the position probe of every layer (0: the input
    embeddings, l: block l's output), fitted on `probe_batches` held-out batches and scored on as many others:
    per layer its gain, its error and chance's (positions), its gain on the fitting windows; `best`, the layer
    whose fitting-window gain is highest, and that layer's error at each position."""
    pos = cfg["pos"]
    res, model = train_small(
        cfg,
        ctx,
        model_kw={"pos": pos, "emb_scale": True},
        prepare=match_norms,
        desc=f"{pos} L{cfg['n_layers']} seed {cfg['seed']}",
    )
    if res.get("diverged_at") is not None:
        return res  # a diverged run is an outcome: nothing to probe
    val, n, B, T = load_corpus().val, cfg["probe_batches"], cfg["batch"], cfg["seq_len"]
    fit = layer_states(model, eval_windows(val, n, B, T, seed=FIT_SEED), ctx.device)
    score = layer_states(model, eval_windows(val, n, B, T, seed=SCORE_SEED), ctx.device)
    probes = [position_probe(f, s) for f, s in zip(fit, score)]
    fits = [fit_gain(pr) for pr in probes]
    res["probe"] = {
        "gain": [pr["gain"] for pr in probes],
        "mae": [pr["mae"] for pr in probes],
        "chance_mae": probes[0]["chance_mae"],
        "fit_gain": fits,
        "best": max(range(len(fits)), key=fits.__getitem__),
    }
    res["probe"]["mae_by_position"] = probes[res["probe"]["best"]]["mae_by_position"]
    return res
