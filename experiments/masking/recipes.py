"""Run recipes of `masking`: whether real tokens' outputs depend on how many pads there are (`run_padding`),
what swapping the two boolean conventions does (`run_conventions`), and what each fill value becomes in each
dtype (`run_fill`).

A batch holds sequences of the lengths `lens` (one of full length), token ids in [1, vocab) and the pad id 0
elsewhere. Attention alone reads q, k and v from fixed random tables indexed by token id (no positions), so a
pad's content is the pad token's, as in a model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tfclaims.nn.attention import build_mask
from tfclaims.nn.models import LM, Encoder

from .grid import FILL_VALUES, FILLS, model_config
from .masking import (
    PAD_ID,
    additive_bias,
    additive_weights,
    fill_attention,
    fill_weights,
    future_masked,
    notes_mask,
    past_kept,
    sdpa_weights,
    with_fill,
)

NOTES_FILL = -1e9  # note 004's fill, the one the padding and convention parts run


def _ids(cfg: dict, gen: torch.Generator, left: bool = False) -> torch.Tensor:
    """(B, L) token ids, L = max(lens): each sequence's tokens, then pads (before them where `left`)."""
    lens = torch.tensor(cfg["lens"])
    L = int(lens.max())
    idx = torch.randint(1, cfg["vocab"], (len(lens), L), generator=gen)
    pos = torch.arange(L)[None]
    real = pos >= L - lens[:, None] if left else pos < lens[:, None]
    return idx * real


def _add_pads(idx: torch.Tensor, k: int, left: bool) -> torch.Tensor:
    pads = torch.full((idx.shape[0], k), PAD_ID, dtype=idx.dtype, device=idx.device)
    return torch.cat([pads, idx] if left else [idx, pads], dim=1)


def _tables(cfg: dict, gen: torch.Generator, dtype=torch.float32) -> tuple[torch.Tensor, ...]:
    """q, k, v tables: (vocab, h, d) each, N(0, 1)."""
    shape = (cfg["vocab"], cfg["heads"], cfg["head_dim"])
    return tuple(torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype) for _ in range(3))


def _lookup(tables, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(B, T) ids -> q, k, v (B, h, T, d)."""
    return tuple(t[idx].transpose(1, 2) for t in tables)


def _attention_out(tables, idx, path: str, causal: bool, pad: bool) -> torch.Tensor:
    """Attention alone over the batch idx: (B, T, h·d). `notes`: masked_fill with −1e9 on a True = masked mask
    built from id 0 and the upper triangle; `sdpa`: SDPA with the library's True = keep mask."""
    q, k, v = _lookup(tables, idx)
    T = idx.shape[1]
    if path == "notes":
        masked = notes_mask(idx, causal) if pad else (future_masked(T, idx.device) if causal else None)
        out = fill_attention(q, k, v, masked, NOTES_FILL)[0]
    else:
        keep = build_mask(T, T, causal=causal, pad_mask=idx != PAD_ID if pad else None, device=idx.device)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    return out.transpose(1, 2).flatten(2)


def _models(cfg: dict, kind: str, device) -> dict:
    """The same small model (one seed's weights) four ways: SDPA with a boolean mask, the explicit path
    (−inf), and the explicit path with the notes' fill or the float32 minimum."""
    mcfg = model_config(cfg, kind)
    cls = Encoder if kind == "encoder" else LM
    torch.manual_seed(cfg["seed"])
    base = cls(mcfg).to(device).eval()
    state = base.state_dict()

    def copy(**over):
        m = cls(mcfg.replace(**over)).to(device).eval()
        m.load_state_dict(state)
        return m

    return {
        "sdpa": base,
        "explicit": copy(attn_backend="explicit"),
        "notes": with_fill(copy(), NOTES_FILL),
        "finfo": with_fill(copy(), torch.finfo(torch.float32).min),
    }


def _drift(out: torch.Tensor, base: torch.Tensor) -> float | None:
    """max |out − base| ÷ max |base| over the real tokens; None where either holds a NaN."""
    if torch.isnan(out).any() or torch.isnan(base).any():
        return None
    return ((out - base).abs().max() / base.abs().max()).item()


@torch.no_grad()
def run_padding(cfg: dict, ctx) -> dict:
    """Per path, mask variant and pad count k: how far the real tokens' outputs move when k more pads are
    added (after the tokens, or before them for decoder_left), against the same batch with none added.
    Variants: `pad`, the padding mask (and the causal mask in a decoder); `nopad`, without the padding
    mask."""
    gen = torch.Generator().manual_seed(cfg["seed"])
    kind, left = cfg["kind"], cfg["kind"] == "decoder_left"
    causal = kind != "encoder"
    idx = _ids(cfg, gen, left).to(ctx.device)
    L = idx.shape[1]
    if cfg["level"] == "attention":
        tables = [t.to(ctx.device) for t in _tables(cfg, gen)]
        paths = {
            p: (lambda ids, pad, p=p: _attention_out(tables, ids, p, causal, pad)) for p in ("notes", "sdpa")
        }
    else:
        models = _models(cfg, kind, ctx.device)
        paths = {
            n: (lambda ids, pad, m=m: m(ids, pad_mask=ids != PAD_ID if pad else None))
            for n, m in models.items()
        }
    real0 = (idx != PAD_ID)[..., None]
    rows = []
    for path, fn in paths.items():
        for variant in ("pad", "nopad"):
            base = fn(idx, variant == "pad")
            for k in cfg["pads"]:
                out = fn(_add_pads(idx, k, left), variant == "pad")
                out = out[:, k:] if left else out[:, :L]  # the positions of the batch without the added pads
                o, b = out.masked_select(real0), base.masked_select(real0)
                nan = bool(torch.isnan(o).any() or torch.isnan(b).any())
                rows.append({"path": path, "variant": variant, "k": k, "drift": _drift(o, b), "nan": nan})
    return {"rows": rows}


def _row_change(out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Per query row: max over the row of |out − ref| ÷ max |ref| of the row (NaN where out is NaN)."""
    return (out.double() - ref).abs().amax(-1) / ref.abs().amax(-1)


@torch.no_grad()
def run_conventions(cfg: dict, ctx) -> dict:
    """The notes' True = masked masks against the library's True = keep mask (entries that disagree), and each
    path fed its own convention (`correct`) or the other one (`swapped`): the weight real query rows put on
    the keys they may see, and how far their outputs move from SDPA's in float64."""
    gen = torch.Generator().manual_seed(cfg["seed"])
    causal = cfg["kind"] == "decoder"
    idx = _ids(cfg, gen).to(ctx.device)
    B, T = idx.shape
    keep = build_mask(T, T, causal=causal, pad_mask=idx != PAD_ID, device=ctx.device).expand(B, 1, T, T)
    masked = notes_mask(idx, causal).expand(B, 1, T, T)
    mismatch = int((masked != ~keep).sum())
    if causal:  # note 001's lower triangle (True = keep) against the library's causal mask
        lower = build_mask(T, T, causal=True, device=ctx.device)[0, 0]
        mismatch += int((past_kept(T, ctx.device) != lower).sum())
    tables = [t.to(ctx.device) for t in _tables(cfg, gen)]
    q, k, v = _lookup(tables, idx)
    q64, k64, v64 = (t.double() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(q64, k64, v64, attn_mask=keep)
    real = (idx != PAD_ID)[:, None, :].expand(B, q.shape[1], T)  # real query rows (B, h, T)
    sees_forbidden = (~keep).any(-1).expand_as(real)  # rows with some key they may not see
    partial, full = real & sees_forbidden, real & ~sees_forbidden  # `full`: every key masked once swapped
    # the first sequence with pads: its weights (head 0) as a picture
    b = int((idx == PAD_ID).any(1).nonzero()[0])
    rows, example = [], {}
    for path in ("fill_1e9", "fill_inf", "sdpa"):
        for convention in ("correct", "swapped"):
            given = masked if convention == "correct" else keep  # what the path is fed as True = masked
            if path == "sdpa":
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=~given)
                w = sdpa_weights(q, k, ~given)
            else:
                out, w = fill_attention(q, k, v, given, NOTES_FILL if path == "fill_1e9" else float("-inf"))
            allowed = (w.double() * keep).sum(-1)  # (B, h, T)
            change = _row_change(out, ref)
            row = {
                "path": path,
                "convention": convention,
                "allowed_max": allowed[partial].max().item(),
                "allowed_min": allowed[partial].min().item(),
                "change_min": change[partial].min().item(),
                "change_median": change[partial].median().item(),
                "full_rows": int(full.sum()) if convention == "swapped" else 0,
            }
            if convention == "correct":  # against SDPA in float64 (swapped rows are NaN with −inf, by design)
                row["ref_error"] = ((out.double() - ref).abs().amax(-1)[real].max() / ref.abs().max()).item()
            if convention == "swapped" and row["full_rows"]:
                wf = w[full].double()  # (rows, S)
                row |= {
                    "full_nan": bool(torch.isnan(wf).any()),
                    "full_zero": bool((wf == 0).all()),
                    "full_uniform_dev": None if torch.isnan(wf).any() else (wf * T - 1).abs().max().item(),
                }
            rows.append(row)
            if path == "fill_1e9":
                example[convention] = [[round(x, 4) for x in r] for r in w[b, 0].tolist()]
    return {
        "rows": rows,
        "mismatch": mismatch,
        "example": example,
        "example_len": int((idx[b] != PAD_ID).sum()),
    }


def _fill_value(name: str, dtype: torch.dtype) -> float:
    return torch.finfo(dtype).min if name == "finfo.min" else FILL_VALUES[name]


def _weights(path: str, q: torch.Tensor, k: torch.Tensor, keep: torch.Tensor, value: float | None):
    """Attention weights (B, h, T, S) in q's dtype by one path: masked_fill with the fill, an additive mask
    (cast to the dtype) in explicit softmax or in SDPA, or SDPA with the boolean mask."""
    if path == "sdpa_bool":
        return sdpa_weights(q, k, keep)
    if path == "masked_fill":
        return fill_weights(q, k, ~keep, value)
    bias = additive_bias(keep, value, q.dtype)
    return sdpa_weights(q, k, bias) if path == "sdpa_additive" else additive_weights(q, k, bias)


def _summary(w: torch.Tensor, ref: torch.Tensor, keep: torch.Tensor, partial: torch.Tensor) -> dict:
    """Rows with a kept key: the largest weight on a masked key and the kept weights' error against float64;
    rows with none: NaN, all zero, or how far from uniform (max |w·S − 1|)."""
    w = w.double()
    wp, wf = w[partial], w[~partial]
    nan = bool(torch.isnan(wf).any())
    return {
        "masked_max": wp.masked_fill(keep.expand_as(w)[partial], 0).max().item(),
        "kept_error": (wp - ref[partial]).abs().max().item(),
        "full_nan": nan,
        "full_zero": bool((wf == 0).all()),
        "full_uniform_dev": None if nan else (wf * w.shape[-1] - 1).abs().max().item(),
    }


@torch.no_grad()
def run_fill(cfg: dict, ctx) -> dict:
    """Per fill, path and logit scale σ, in cfg's dtype: the fill as the dtype holds it, whether masked_fill
    accepts it, the largest weight left on a masked key (rows with some key kept), the error of the kept
    weights against float64, and what a row with every key masked becomes (NaN, zero or uniform).

    The batch: four sequences of n keys with n, n/2, 1 and 0 kept keys (the last one's rows fully masked);
    q ~ N(0, σ²), k ~ N(0, 1), so the scores q·k/√d have standard deviation σ."""
    dt = getattr(torch, cfg["dtype"])
    n, h, d = cfg["fill_n"], cfg["heads"], cfg["head_dim"]
    lens = torch.tensor([n, n // 2, 1, 0], device=ctx.device)
    keep = (torch.arange(n, device=ctx.device)[None] < lens[:, None])[:, None, None, :]  # (4, 1, 1, S)
    partial = (lens > 0)[:, None, None].expand(4, h, n)  # query rows with a kept key (B, h, T)
    gen = torch.Generator().manual_seed(cfg["seed"])
    rows = []
    for scale in cfg["scales"]:
        q = (torch.randn(4, h, n, d, generator=gen, dtype=torch.float64) * scale).to(dt).to(ctx.device)
        k = torch.randn(4, h, n, d, generator=gen, dtype=torch.float64).to(dt).to(ctx.device)
        s64 = (q.double() @ k.double().transpose(-2, -1)) * d**-0.5
        ref = s64.masked_fill(~keep, float("-inf")).softmax(-1)  # float64, from the rounded inputs
        cases = [("bool", "sdpa_bool")] + [
            (f, p) for f in FILLS for p in ("masked_fill", "additive", "sdpa_additive")
        ]
        for fill, path in cases:
            value = None if fill == "bool" else _fill_value(fill, dt)
            cast = None if value is None else torch.tensor(value, dtype=torch.float64).to(dt).item()
            row = {"fill": fill, "path": path, "scale": scale, "cast": cast, "raises": False}
            try:
                row |= _summary(_weights(path, q, k, keep, value), ref, keep, partial)
            except RuntimeError:  # masked_fill refuses a scalar that overflows the dtype
                row["raises"] = True
            rows.append(row)
    return {"rows": rows}
