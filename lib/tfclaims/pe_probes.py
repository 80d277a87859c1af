"""The run recipes of `sinusoidal_relative`: the shift identity measured on the library's sinusoidal table, and
a small LM trained with learned absolute positions whose table is probed for the same relative structure.

Both recipes return JSON-ready metrics; the analysis (tolerances, thresholds, convergence) lives with the claim.
"""

from __future__ import annotations

import torch

from .positions import sinusoidal_table
from .relative_pe import offset_dot, shift_fit_residual, shift_matrix, toeplitz_r2
from .small_lm import train_small

SHIFT_K = (1, 4, 16)  # offsets for the least-squares shift map on a (T, d) table


def table_stats(P: torch.Tensor) -> dict:
    """The relative-structure measures of a position table P (T, d): the offset R² of its Gram matrix and the
    residual of the best linear shift map for each offset k with more rows than columns (string keys, as JSON)."""
    T, d = P.shape
    return {
        "toeplitz_r2": toeplitz_r2(P),
        "shift_residual": {str(k): shift_fit_residual(P, k) for k in SHIFT_K if T - k > d},
    }


def cosine_gram(P: torch.Tensor, stride: int) -> list:
    Q = torch.nn.functional.normalize(P.double(), dim=-1)[::stride]
    return (Q @ Q.T).round(decimals=3).tolist()


def shift_identity_rows(max_len: int, d_models, offsets) -> list[dict]:
    """Per (d, k): max |M_k PE(p) − PE(p+k)| over every position in float32 and float64 arithmetic, M_k's
    departure from orthogonality and from M_k M_1 = M_(k+1), and the dot products PE(p)·PE(p+k) over p
    against Σ cos(k ω_i)."""
    rows = []
    for d in d_models:
        pe = sinusoidal_table(max_len, d)  # (L, d) float32
        eye = torch.eye(d, dtype=torch.float64)
        for k in offsets:
            m = shift_matrix(k, d)
            dots = (pe[:-k].double() * pe[k:].double()).sum(-1)  # (L - k,)
            closed = offset_dot(k, d)
            rows.append({
                "d": d, "k": k,
                "err32": float((pe[:-k] @ m.float().T - pe[k:]).abs().max()),
                "err64": float((pe[:-k].double() @ m.T - pe[k:].double()).abs().max()),
                "orth_err": float((m.T @ m - eye).abs().max()),
                "compose_err": float((m @ shift_matrix(1, d) - shift_matrix(k + 1, d)).abs().max()),
                "dot_mean": float(dots.mean()), "dot_spread": float(dots.max() - dots.min()),
                "dot_closed": float(closed), "dot_closed_err": float((dots - closed).abs().max()),
            })  # fmt: skip
    return rows


def identity_run(cfg: dict, ctx) -> dict:
    """The `identity` part: the shift identity over every position, and dot-product curves for the figure."""
    L = cfg["max_len"]
    rows = shift_identity_rows(L, cfg["d_models"], cfg["offsets"])
    d = cfg["d_models"][0]
    pe = sinusoidal_table(L, d).double()
    ks = list(range(0, min(L // 2, 200)))
    starts = [0, 10, 100, L // 2 - 1] if L // 2 - 1 > 100 else [0, 10]
    curves = {p: [float(pe[p] @ pe[p + k]) for k in ks] for p in starts if p + ks[-1] < L}
    return {"rows": rows, "curve_ks": ks, "curves": curves, "curve_d": d}


def learned_run(cfg: dict, ctx) -> dict:
    """The `learned` part (and its null pair): the small LM with learned absolute positions; the position table
    is probed at every evaluation, and the final table set beside a sinusoidal one of the same shape."""

    def probe(step, model):
        return table_stats(model.stack.pos.weight.detach().cpu())

    res, model = train_small(
        cfg, ctx, model_kw={"pos": "learned"}, on_eval=probe, desc=f"learned positions seed {cfg['seed']}"
    )
    P = model.stack.pos.weight.detach().cpu()
    sin = sinusoidal_table(*P.shape)
    stride = max(1, P.shape[0] // 64)
    res["final_table"] = table_stats(P)
    res["sinusoidal_table"] = table_stats(sin)
    res["gram_learned"] = cosine_gram(P, stride)
    res["gram_sinusoidal"] = cosine_gram(sin, stride)
    res["gram_stride"] = stride
    res["norms"] = P.norm(dim=-1).tolist()
    return res
