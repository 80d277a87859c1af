"""Run recipe of `sinusoidal_relative`'s length part: the small character LM trained with one kind of position
information (learned, sinusoidal, rotary or none) at the training length T, then evaluated on windows of up to
`max(mults)`·T characters, on T-windows moved to absolute positions it never saw, and probed for how much of its
first layer's position-only attention logits depends on the offset i − j alone.

Learned embeddings have no rows beyond the positions they were trained on, so that arm is built with
max_seq_len = T and evaluated at 1× only; the other arms hold no trainable position parameters (a fixed buffer or
nothing), so building them with max_seq_len = max(mults)·T changes neither their parameters nor their training.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .data import eval_windows, load_corpus
from .positions import apply_rope
from .small_lm import train_small

EVAL_SEED = 4321  # the evaluation windows: the same text for every run and arm


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


@torch.no_grad()
def forward_at(model, idx: torch.Tensor, start: int) -> torch.Tensor:
    """Logits (B, T, V) of idx (B, T) placed at absolute positions start .. start + T − 1 (the model's own
    forward always starts at 0): the same embedding, blocks and head, with the positions shifted."""
    st = model.stack
    x = st.embed(idx, start)
    rope = None
    if st.cfg.pos == "rope":
        T = idx.shape[1]
        rope = (st.rope_cos[start : start + T], st.rope_sin[start : start + T])
    for i, blk in enumerate(st.blocks):
        x = blk(x, layer=i, rope=rope)
    if st.final_norm is not None:
        x = st.final_norm(x)
    return model.head(x)


@torch.no_grad()
def position_losses(model, windows, device, T: int, starts=(0,)) -> dict:
    """Mean next-character loss at each position, averaged over the evaluation windows (B, T_eval) each:
    'at_0' for the windows from position 0 (as far as the model has positions: learned stops at T), and for
    each start s > 0, 'at_s' for the windows' first T characters placed at positions s .. s + T − 1."""
    was = model.training
    model.eval()
    sums: dict[int, torch.Tensor] = {}
    for x, y in windows:
        x, y = x.to(device), y.to(device)
        for s in starts:
            n = min(x.shape[1], model.cfg.max_seq_len) if s == 0 else T
            logits = forward_at(model, x[:, :n], s)  # (B, n, V)
            nll = F.cross_entropy(logits.flatten(0, 1).float(), y[:, :n].flatten(), reduction="none")
            sums[s] = sums.get(s, 0) + nll.view(-1, n).mean(0).double().cpu()  # (n,)
    model.train(was)
    return {f"at_{s}": (v / len(windows)).tolist() for s, v in sums.items()}


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
    """One arm of the length part: train at cfg['seq_len'] with cfg['pos'], then evaluate per position on
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
    res, model = train_small(
        cfg,
        ctx,
        model_kw={"pos": pos, "max_seq_len": max_len, "emb_scale": cfg.get("emb_scale", False)},
        on_eval=probe,
        desc=f"{pos} seed {cfg['seed']}",
    )
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
