"""Additive (Bahdanau) attention next to dot-product attention, single head, same interface.

    additive:     score(q_i, k_j) = w . tanh(W_q q_i + W_k k_j)      (W_q: d_q -> d_h, W_k: d_kv -> d_h)
    dot product:  score(q_i, k_j) = scale * (W_q q_i) . (W_k k_j)    (scale 1/sqrt(d_k), or 1 unscaled)

Both then take softmax over keys and average W_v k_j. Queries and keys may have different sizes in both
(the projections absorb it). Shapes: q (B, T, d_q), kv (B, S, d_kv); scores (B, T, S); output (B, T, d_v).
The additive score materialises a (B, T, S, d_h) tensor: its cost is elementwise work, not a matmul.

Below the layers, the run recipes of `additive_vs_dot` (each `recipe(cfg, ctx) -> metrics`): the score
variance at init over d (`score_variance`), forward time of both kinds timed interleaved with an A/A pair
(`attention_timing`), and a key-value retrieval task trained with each kind (`retrieval_task`).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from tfclaims.measure.threads import intra_op_threads
from tfclaims.measure.timing import time_interleaved

from .grid import AA, KINDS

INITS = ("torch", "xavier")


def _init(module: nn.Module, init: str) -> None:
    if init not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {init!r}")
    if init == "xavier":
        for m in module.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_normal_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)


class AdditiveAttention(nn.Module):
    def __init__(self, d_q: int, d_kv: int, d_h: int, d_v: int | None = None, init: str = "torch"):
        super().__init__()
        self.wq = nn.Linear(d_q, d_h, bias=False)
        self.wk = nn.Linear(d_kv, d_h, bias=False)
        self.w = nn.Linear(d_h, 1, bias=False)
        self.wv = nn.Linear(d_kv, d_v or d_kv, bias=False)
        _init(self, init)

    def scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """(B, T, S). The (B, t, S, d_h) tanh block is built for one chunk of queries at a time, sized to stay
        in a core's cache: the whole (B, T, S, d_h) tensor (134 MB at T = S = 512, d_h = 128) would time
        memory traffic, not the scoring."""
        qp, kp = self.wq(q), self.wk(k)  # (B, T, d_h), (B, S, d_h)
        B, T, dh = qp.shape
        step = max(1, CHUNK_BYTES // (B * kp.shape[1] * dh * qp.element_size()))
        return torch.cat(
            [
                self.w(torch.tanh(qp[:, i : i + step, None] + kp[:, None])).squeeze(-1)
                for i in range(0, T, step)
            ],
            dim=1,
        )

    def forward(self, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return self.scores(q, kv).softmax(-1) @ self.wv(kv)


CHUNK_BYTES = 1 << 20  # one query chunk's (B, t, S, d_h) block of the additive score: within a 2 MiB L2 cache


class DotAttention(nn.Module):
    def __init__(
        self,
        d_q: int,
        d_kv: int,
        d_k: int,
        d_v: int | None = None,
        *,
        scaled: bool = True,
        init: str = "torch",
    ):
        super().__init__()
        self.scale = 1 / math.sqrt(d_k) if scaled else 1.0
        self.wq = nn.Linear(d_q, d_k, bias=False)
        self.wk = nn.Linear(d_kv, d_k, bias=False)
        self.wv = nn.Linear(d_kv, d_v or d_kv, bias=False)
        _init(self, init)

    def scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return (self.wq(q) @ self.wk(k).transpose(-2, -1)) * self.scale

    def forward(self, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return self.scores(q, kv).softmax(-1) @ self.wv(kv)


def make_attention(kind: str, d_q: int, d_kv: int, d_h: int, init: str = "torch") -> nn.Module:
    """One of KINDS with hidden/key size d_h (the additive layer's tanh width, or d_k)."""
    if kind == "additive":
        return AdditiveAttention(d_q, d_kv, d_h, init=init)
    if kind in ("dot_scaled", "dot_unscaled"):
        return DotAttention(d_q, d_kv, d_h, scaled=kind == "dot_scaled", init=init)
    raise ValueError(f"unknown attention kind {kind!r}; known: {', '.join(KINDS)}")


# ------------------------------------------------------------------ run recipes of additive_vs_dot
def score_variance(cfg: dict, ctx) -> dict:
    """Variance of the scores at init for unit-variance q, k over d: mean over independent inits (fewer for
    wide layers, whose one init already averages over d hidden units), under each init scheme."""
    with torch.no_grad():
        return {"rows": [_variances(d, cfg["samples"], cfg["inits"]) for d in cfg["dims"]]}


def _variances(d: int, n: int, inits: int) -> dict:
    acc: dict[str, list[float]] = {}
    for _ in range(max(2, min(inits, inits * 64 // d))):
        q, k = torch.randn(n, 1, d), torch.randn(n, 1, d)
        k2 = torch.randn(n, 1, 2 * d)
        acc.setdefault("raw q·k", []).append(float((q * k).sum(-1).var()))
        for init in INITS:
            for kind in KINDS:
                acc.setdefault(f"{kind} ({init})", []).append(
                    float(make_attention(kind, d, d, d, init=init).scores(q, k).var())
                )
        acc.setdefault("additive, keys of size 2d (torch)", []).append(
            float(AdditiveAttention(d, 2 * d, d).scores(q, k2).var())
        )
    return {"d": d, **{name: float(np.mean(v)) for name, v in acc.items()}}


def attention_timing(cfg: dict, ctx) -> dict:
    """Forward time of single-head self-attention (batch 1, no grad), additive vs scaled dot product, at each
    (n, d), interleaved round by round with the dot product timed a second time (A/A); per-round times
    kept."""
    dev = ctx.device
    rows = []
    with intra_op_threads(cfg["threads"]), torch.no_grad():
        for d in cfg["ds"]:
            for n in cfg["ns"]:
                x = torch.randn(1, n, d, device=dev)
                mods = {kind: make_attention(kind, d, d, d).to(dev) for kind in ("additive", "dot_scaled")}
                fns = {k: (lambda m=m, x=x: m(x, x)) for k, m in mods.items()}
                fns[AA] = fns["dot_scaled"]
                t = time_interleaved(fns, device=dev, repeats=cfg["repeats"])
                rows.append(
                    {
                        "n": n,
                        "d": d,
                        **{
                            k: {"median": v["median"], "q25": v["q25"], "q75": v["q75"], "times": v["times"]}
                            for k, v in t.items()
                        },
                    }
                )
        return {"rows": rows, "threads": torch.get_num_threads()}


def kv_batch(gen: torch.Generator, batch: int, pairs: int, n_keys: int, n_values: int):
    """Key-value retrieval: `pairs` (key, value) pairs with distinct keys, and one of the keys as the query;
    the target is its value. Returns keys, values (B, pairs), query, target (B,)."""
    keys = torch.rand(batch, n_keys, generator=gen).argsort(-1)[:, :pairs]
    vals = torch.randint(0, n_values, (batch, pairs), generator=gen)
    j = torch.randint(0, pairs, (batch,), generator=gen)
    rows = torch.arange(batch)
    return keys, vals, keys[rows, j], vals[rows, j]


class Retrieval(nn.Module):
    """One attention layer: the query key's embedding attends over slots (key + value embeddings); a linear
    read-out predicts the value. Embeddings N(0, 1) (unit-variance inputs, the setting of the variance
    argument); the attention's projections keep PyTorch's default init."""

    def __init__(self, kind: str, d: int, n_keys: int, n_values: int):
        super().__init__()
        self.ek, self.ev = nn.Embedding(n_keys, d), nn.Embedding(n_values, d)
        self.attn = make_attention(kind, d, d, d)
        self.out = nn.Linear(d, n_values)

    def forward(self, keys, vals, query):
        slots = self.ek(keys) + self.ev(vals)  # (B, pairs, d)
        return self.out(self.attn(self.ek(query).unsqueeze(1), slots).squeeze(1))  # (B, n_values)


def retrieval_task(cfg: dict, ctx) -> dict:
    """Train one attention kind on key-value retrieval (Adam); held-out accuracy and cross-entropy every
    `eval_every` steps.

    A saturated softmax (unscaled scores at large d) yields subnormal floats, which the CPU handles tens of
    times slower; flushing them to zero changes nothing measurable (same losses) and keeps every kind at the
    same speed."""
    torch.set_flush_denormal(True)
    try:
        return _train_retrieval(cfg, ctx)
    finally:
        torch.set_flush_denormal(False)  # torch's default


def _train_retrieval(cfg: dict, ctx) -> dict:
    dev = ctx.device
    model = Retrieval(cfg["attn"], cfg["d"], cfg["n_keys"], cfg["n_values"]).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    gen = torch.Generator().manual_seed(cfg["seed"])
    shape = (cfg["pairs"], cfg["n_keys"], cfg["n_values"])
    test = [t.to(dev) for t in kv_batch(torch.Generator().manual_seed(1234), cfg["eval_size"], *shape)]

    @torch.no_grad()
    def evaluate() -> tuple[float, float]:
        """Held-out accuracy and cross-entropy (nats) on the fixed test set."""
        model.eval()
        logits = model(*test[:3])
        acc = float((logits.argmax(-1) == test[3]).float().mean())
        model.train()
        return acc, float(nn.functional.cross_entropy(logits, test[3]))

    acc0, val0 = evaluate()
    steps, accs, held, losses, diverged = [0], [acc0], [val0], [], None
    for step in range(cfg["steps"]):
        keys, vals, query, target = (t.to(dev) for t in kv_batch(gen, cfg["batch"], *shape))
        loss = nn.functional.cross_entropy(model(keys, vals, query), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        lv = float(loss.detach())
        if not math.isfinite(lv):  # an outcome, recorded as such
            diverged = step
            break
        opt.step()
        losses.append(lv)
        if (step + 1) % cfg["eval_every"] == 0:
            acc, val = evaluate()
            steps.append(step + 1)
            accs.append(acc)
            held.append(val)
    return {
        "eval_steps": steps,
        "accuracy": accs,
        "val_loss": held,
        "final_val": held[-1] if diverged is None else None,
        "train_loss": losses,
        "auc": float(np.mean(accs[1:])) if diverged is None and len(accs) > 1 else None,
        "final_acc": accs[-1] if diverged is None else None,
        "chance": 1 / cfg["n_values"],
        "diverged_at": diverged,
    }
