"""Run recipes of `sinusoidal_relative`: what the sinusoidal table is (exact identities of `offset_dot`,
`shift_matrix`, `toeplitz_r2`; `identity_run`), what a learned table becomes (`learned_run`), and how each
kind of position information extrapolates in length (`length_run`).

The length part: the small character LM trained with one kind of position
information (learned, sinusoidal, rotary or none) at the training length T, then evaluated on windows of up to
`max(mults)`·T characters, on T-windows moved to absolute positions it never saw, and probed for how much of
its first layer's position-only attention logits depends on the offset i − j alone.

Learned embeddings have no rows beyond the positions they were trained on, so that arm is built with
max_seq_len = T and evaluated at 1× only; the other arms hold no trainable position parameters (a fixed buffer
or nothing), so building them with max_seq_len = max(mults)·T changes neither their parameters nor their
training.
"""

from __future__ import annotations

import math

import torch

from tfclaims.data.corpus import eval_windows, load_corpus
from tfclaims.measure.lengths import EVAL_SEED, match_norms, position_losses
from tfclaims.nn.positions import apply_rope, sinusoidal_table
from tfclaims.train.small_lm import train_small

COPY_EVAL_SEED = 8765  # the copy task's evaluation sequences: the same for every run and arm


@torch.no_grad()
def norm_ratio(model, T: int) -> float | None:
    """Mean position-row norm over the first T positions / mean token-row norm as added to it (None without
    an additive position encoding)."""
    st, cfg = model.stack, model.cfg
    tok = st.tok.weight.norm(dim=-1).mean() * (math.sqrt(cfg.d_model) if cfg.emb_scale else 1.0)
    if st.pos is not None:
        pos = st.pos.weight[:T]
    elif cfg.pos == "sinusoidal":
        pos = st.pe[:T]
    else:
        return None
    return float(pos.norm(dim=-1).mean() / tok)


def offset_share(L: torch.Tensor) -> float | None:
    """Share of the variance of logits L (..., T, T) over the causal cells j ≤ i explained by a function of
    i − j alone (each cell replaced by the mean of its diagonal): 1 − Σ SS_res / Σ SS_tot, pooled over the
    leading dims (heads), so a head whose logits barely vary weighs little. A function of i − j gives 1;
    independent noise gives about (T − 1) / (T(T + 1)/2 − 1)."""
    L = L.detach().double().cpu()
    if not torch.isfinite(L).all():
        return None
    T = L.shape[-1]
    L = L.reshape(-1, T, T)
    i, j = torch.tril_indices(T, T)  # the causal cells, (n,) each
    x = L[:, i, j]  # (h, n)
    off = i - j  # diagonal 0..T-1
    counts = torch.bincount(off, minlength=T).double()
    sums = torch.zeros(x.shape[0], T, dtype=torch.float64).index_add_(1, off, x)
    fitted = (sums / counts)[:, off]  # (h, n): the per-diagonal means
    tot = ((x - x.mean(-1, keepdim=True)) ** 2).sum()
    return float(1 - ((x - fitted) ** 2).sum() / tot) if tot > 0 else None


@torch.no_grad()
def position_logits(model, T: int, mean_input: torch.Tensor | None = None) -> torch.Tensor | None:
    """First layer's position-only attention logits (h, T, T), scaled as the model scales them.

    Additive encodings (learned, sinusoidal): the term (W_q p̃_i)·(W_k p̃_j) of the encodings alone, with
    p̃ = γ ⊙ (p − mean(p)) in a pre-LayerNorm stack: the first norm's centring and gain are linear and
    token-independent, so they are folded in; its 1/σ (a factor on row i and column j that depends on the
    tokens there) and every bias are left out. Post-norm stacks feed p to attention as it is.
    RoPE: the only content-free part is the query and key of the mean first-layer input (`mean_input`, (d,),
    the normalised input averaged over evaluation windows), rotated to positions i and j; the rotation makes
    these logits a function of i − j by construction, which the measure should report as 1.
    None: no position information, no such logits."""
    st, cfg = model.stack, model.cfg
    blk = st.blocks[0]
    h, dk = cfg.n_heads, cfg.dk
    if cfg.pos in ("learned", "sinusoidal"):
        P = (st.pos.weight if cfg.pos == "learned" else st.pe)[:T].float()  # (T, d)
        if cfg.placement == "pre":  # the first norm's token-independent linear parts
            if cfg.norm == "layer":
                P = P - P.mean(-1, keepdim=True)
            if getattr(blk.norm1, "weight", None) is not None:
                P = P * blk.norm1.weight
        q = (P @ blk.attn.wq.weight.T).view(T, h, dk).transpose(0, 1)  # (h, T, dk)
        k = (P @ blk.attn.wk.weight.T).view(T, -1, dk).transpose(0, 1)  # (kv, T, dk)
    elif cfg.pos == "rope" and mean_input is not None:
        q0 = blk.attn.wq(mean_input).view(h, 1, dk).expand(h, T, dk)
        k0 = blk.attn.wk(mean_input).view(-1, 1, dk).expand(-1, T, dk)
        cos, sin = st.rope_cos[:T], st.rope_sin[:T]
        q, k = apply_rope(q0, cos, sin), apply_rope(k0, cos, sin)
    else:
        return None
    k = k.repeat_interleave(h // k.shape[0], dim=0)  # GQA: each query head's key head
    return (q @ k.transpose(-2, -1)) * blk.attn.scale


def mean_first_input(model, windows, device) -> torch.Tensor:
    """The first block's normalised input averaged over every position of the windows: (d,)."""
    st = model.stack
    with torch.no_grad():
        tot = sum(
            st.blocks[0].norm1(st.embed(x[:, : st.cfg.max_seq_len].to(device))).mean((0, 1))
            for x, _ in windows
        )
    return tot / len(windows)


def length_run(cfg: dict, ctx) -> dict:
    """One arm of the length part, its norms matched (`match_norms`): train at cfg['seq_len'] with cfg['pos'],
    then evaluate per position on
    windows of max(mults)·T characters (learned: their first T), and on T-windows moved to start at k·T for
    each k in shift_mults (arms with room for them); probe the offset-only share of the first layer's
    position-only logits at every evaluation."""
    T, pos = cfg["seq_len"], cfg["pos"]
    T_eval = max(cfg["mults"]) * T
    corpus = load_corpus()
    windows = eval_windows(corpus.val, cfg["len_eval_batches"], cfg["batch"], T_eval, seed=EVAL_SEED)
    probe_windows = windows[:1]

    def share(model):
        mi = mean_first_input(model, probe_windows, ctx.device) if pos == "rope" else None
        L = position_logits(model, T, mi)
        return None if L is None else offset_share(L)

    def probe(step, model):
        return {"offset_share": share(model)}

    max_len = T if pos == "learned" else T_eval
    ratio = {}

    def prepare(model):
        match_norms(model)
        ratio["init"] = norm_ratio(model, T)

    res, model = train_small(
        cfg,
        ctx,
        model_kw={"pos": pos, "max_seq_len": max_len, "emb_scale": True},
        prepare=prepare,
        on_eval=probe,
        desc=f"{pos} seed {cfg['seed']}",
    )
    res["norm_ratio"] = {"init": ratio["init"], "final": norm_ratio(model, T)}
    res["offset_share"] = res["probes"][-1]["offset_share"] if res.get("probes") else None
    res["offset_share_init"] = res["probes"][0]["offset_share"] if res.get("probes") else None
    if res["diverged_at"] is not None:
        return res
    starts = (0,) if pos == "learned" else (0, *(k * T for k in cfg["shift_mults"]))
    res["position_loss"] = position_losses(model, windows, ctx.device, T, starts)
    L = position_logits(
        model, T, mean_first_input(model, probe_windows, ctx.device) if pos == "rope" else None
    )
    if L is not None:  # the head whose position logits vary most, for the figure
        top = int(L.flatten(1).var(-1).argmax())
        res["logits_head"] = top
        res["position_logits"] = L[top].round(decimals=4).tolist()
    return res


def frequencies(d: int) -> torch.Tensor:
    """w_i = 10000^(-2i/d), i < d/2, float64 (the same expression as sinusoidal_table)."""
    return torch.exp(-math.log(10000.0) * torch.arange(0, d, 2, dtype=torch.float64) / d)


def shift_matrix(k: int, d: int, dtype=torch.float64) -> torch.Tensor:
    """M_k (d, d) with PE[p + k] = M_k @ PE[p] for every p (column vectors; rows: PE[p + k] = PE[p] @
    M_k.T)."""
    a = k * frequencies(d)
    c, s = torch.cos(a), torch.sin(a)
    m = torch.zeros(d, d, dtype=torch.float64)
    i = torch.arange(0, d, 2)
    m[i, i], m[i, i + 1] = c, s  # new sin = sin cos(kw) + cos sin(kw)
    m[i + 1, i], m[i + 1, i + 1] = -s, c  # new cos = cos cos(kw) - sin sin(kw)
    return m.to(dtype)


def offset_dot(k, d: int) -> torch.Tensor:
    """PE[p] . PE[p + k] = sum_i cos(k w_i), for one offset or a tensor of offsets."""
    k = torch.as_tensor(k, dtype=torch.float64)
    return torch.cos(k.unsqueeze(-1) * frequencies(d)).sum(-1)


def shift_fit_residual(table: torch.Tensor, k: int) -> float | None:
    """Relative residual ||P[:-k] A - P[k:]||_F / ||P[k:]||_F of the best single linear map A taking every
    row p to row p + k (least squares). 0 means one position-independent map exists. Needs more rows than
    columns (T - k > d) to mean anything."""
    P = table.double()
    if not torch.isfinite(P).all():  # a diverged model's table: no fit to make
        return None
    src, dst = P[:-k], P[k:]
    A = torch.linalg.lstsq(src, dst).solution
    return float(torch.linalg.norm(src @ A - dst) / torch.linalg.norm(dst))


def toeplitz_r2(table: torch.Tensor) -> float | None:
    """Share of the variance of the Gram matrix G[p, q] = P[p] . P[q] over pairs p != q explained by the
    offset q - p alone (G replaced by its mean along each diagonal). 1 means dot products depend only on the
    offset; the main diagonal (the squared norms) is left out, so a random table scores about 0."""
    P = table.double()
    if not torch.isfinite(P).all():
        return None
    G = P @ P.T
    T = G.shape[0]
    idx = torch.arange(T, device=P.device)
    off = idx[None, :] - idx[:, None] + (T - 1)  # diagonal index 0..2T-2
    keep = off != T - 1
    g, o = G[keep], off[keep]
    sums = torch.zeros(2 * T - 1, dtype=torch.float64, device=P.device).index_add_(0, o, g)
    counts = torch.bincount(o, minlength=2 * T - 1).double()
    fitted = (sums / counts.clamp_min(1))[o]
    total = ((g - g.mean()) ** 2).sum()
    return float(1 - ((g - fitted) ** 2).sum() / total) if total > 0 else 1.0


SHIFT_K = (1, 4, 16)  # offsets for the least-squares shift map on a (T, d) table


def table_stats(P: torch.Tensor) -> dict:
    """The relative-structure measures of a position table P (T, d): the offset R² of its Gram matrix and the
    residual of the best linear shift map for each offset k with more rows than columns (string keys, as
    JSON)."""
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
            rows.append(
                {
                    "d": d,
                    "k": k,
                    "err32": float((pe[:-k] @ m.float().T - pe[k:]).abs().max()),
                    "err64": float((pe[:-k].double() @ m.T - pe[k:].double()).abs().max()),
                    "orth_err": float((m.T @ m - eye).abs().max()),
                    "compose_err": float((m @ shift_matrix(1, d) - shift_matrix(k + 1, d)).abs().max()),
                    "dot_mean": float(dots.mean()),
                    "dot_spread": float(dots.max() - dots.min()),
                    "dot_closed": float(closed),
                    "dot_closed_err": float((dots - closed).abs().max()),
                }
            )
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
    """The `learned` part (and its null pair): the small LM with learned absolute positions, its norms matched
    as in the length part; the position table is probed at every evaluation, and the final table set beside a
    sinusoidal one of the same shape."""

    def probe(step, model):
        return table_stats(model.stack.pos.weight.detach().cpu())

    res, model = train_small(
        cfg,
        ctx,
        model_kw={"pos": "learned", "emb_scale": True},
        prepare=match_norms,
        on_eval=probe,
        desc=f"learned positions seed {cfg['seed']}",
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


# ---------------------------------------------------------------------------- the copy task
def copy_batch(gen: torch.Generator, batch: int, T: int, k: int, symbols: int):
    """Random sequences x (batch, T) over `symbols` tokens and targets y: at position i the token at i − k
    (−1, ignored, at i < k). Solving it needs the token a fixed offset back, wherever i is."""
    x = torch.randint(0, symbols, (batch, T), generator=gen)
    y = torch.full_like(x, -1)
    y[:, k:] = x[:, : T - k]
    return x, y


@torch.no_grad()
def copy_accuracy(model, batches, device, start: int = 0) -> list[float]:
    """Per position, the share of sequences whose target the model predicts (NaN where there is none), the
    sequences placed at absolute positions start .. start + T − 1."""
    was = model.training
    model.eval()
    hit = cnt = 0
    for x, y in batches:
        pred = model(x.to(device), start=start).argmax(-1).cpu()  # (B, T)
        keep = y >= 0
        hit = hit + ((pred == y) & keep).sum(0).double()
        cnt = cnt + keep.sum(0).double()
    model.train(was)
    return (hit / cnt).tolist()  # 0/0 -> NaN where no target


def copy_run(cfg: dict, ctx) -> dict:
    """One arm of the copy task: the small LM with position encoding cfg['pos'] (norms matched) trained to
    output the token k = cfg['k'] positions back, on fresh random sequences of T = cfg['seq_len'] tokens; then
    its per-position accuracy on sequences of `max(mults)`·T (beyond T: positions never trained on; learned
    embeddings: their T only) and on T-sequences moved to start at s·T for s in shift_mults."""
    T, k, n, pos = cfg["seq_len"], cfg["k"], cfg["symbols"], cfg["pos"]
    T_eval = max(cfg["mults"]) * T
    gen = torch.Generator().manual_seed(COPY_EVAL_SEED)
    val = [copy_batch(gen, cfg["batch"], T, k, n) for _ in range(cfg["eval_batches"])]
    long = [copy_batch(gen, cfg["batch"], T_eval, k, n) for _ in range(cfg["eval_batches"])]
    res, model = train_small(
        cfg,
        ctx,
        model_kw={"pos": pos, "max_seq_len": T if pos == "learned" else T_eval, "emb_scale": True},
        prepare=match_norms,
        sample=lambda g: copy_batch(g, cfg["batch"], T, k, n),
        val_batches=val,
        on_eval=lambda step, model: {
            "acc": float(torch.tensor(copy_accuracy(model, val, ctx.device)).nanmean())
        },
        desc=f"copy k={k} {pos} seed {cfg['seed']}",
    )
    res["chance_xent"] = math.log(n)  # the loss of a uniform guess over the symbols
    if res.get("diverged_at") is not None:
        return res
    res["acc_by_position"] = copy_accuracy(model, long if pos != "learned" else val, ctx.device)
    if pos != "learned":
        res["acc_at_0"] = copy_accuracy(model, val, ctx.device)
        res["acc_moved"] = {
            str(s): copy_accuracy(model, val, ctx.device, start=s * T) for s in cfg["shift_mults"]
        }
    return res
