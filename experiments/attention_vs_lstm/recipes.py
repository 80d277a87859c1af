"""Run recipes of `attention_vs_lstm`: training-step time of one self-attention layer against one LSTM layer
of the same parameter count over sequence lengths, and recall of the token k positions back, learned by a
one-layer Transformer and an LSTM LM of matched size.

Recall-k: tokens drawn uniformly from a small vocabulary; at every position t ≥ k the target is the token at
t − k (positions t < k are not scored). Attention reaches token t − k in one step whatever k is; an LSTM must
carry it through k recurrent steps in its state."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from tfclaims.measure.threads import intra_op_threads
from tfclaims.measure.timing import time_interleaved
from tfclaims.nn.attention import Attention
from tfclaims.nn.config import ModelConfig
from tfclaims.nn.models import LM, n_params

from .grid import AA
from .recurrent import RecurrentLM, lstm_params, matched_hidden


def layer_pair(d: int, heads: int, n: int) -> tuple[Attention, torch.nn.LSTM]:
    """A causal self-attention layer (Q, K, V, O with biases; SDPA) and the LSTM layer (input d) whose
    parameter count comes closest to it."""
    attn = Attention(ModelConfig(d_model=d, n_heads=heads, max_seq_len=n))
    return attn, torch.nn.LSTM(d, matched_hidden(d, n_params(attn)), batch_first=True)


def run_throughput(cfg: dict, ctx) -> dict:
    """Per length n: one training step (forward, a scalar loss, backward) of each layer on a (batch, n, d)
    input, in interleaved rounds, the attention layer timed twice (AA: the timer's own spread)."""
    dev, rows = ctx.device, []
    with intra_op_threads(cfg["threads"]) as n_threads:
        for n in cfg["ns"]:
            attn, lstm = (m.to(dev) for m in layer_pair(cfg["d_model"], cfg["n_heads"], n))
            x = torch.randn(cfg["batch"], n, cfg["d_model"], device=dev, requires_grad=True)

            def attn_step(attn=attn, x=x):
                attn(x).square().mean().backward()

            def lstm_step(lstm=lstm, x=x):
                lstm(x)[0].square().mean().backward()

            fns = {"attention": attn_step, "lstm": lstm_step, AA: attn_step}
            t = time_interleaved(fns, device=dev, repeats=cfg["repeats"], warmup=cfg["warmup"], min_sample=0)
            rows.append(
                {
                    "n": n,
                    "tokens": cfg["batch"] * n,
                    "params": {"attention": n_params(attn), "lstm": n_params(lstm)},
                    "times": {k: v["times"] for k, v in t.items()},
                }
            )
    return {"rows": rows, "threads": n_threads}


def recall_batch(gen: torch.Generator, batch: int, seq_len: int, vocab: int, k: int):
    """Uniform tokens x (B, T) and targets y: y_t = x_(t−k) for t ≥ k, −1 (not scored) before."""
    x = torch.randint(0, vocab, (batch, seq_len), generator=gen)
    y = torch.full_like(x, -1)
    y[:, k:] = x[:, :-k]
    return x, y


def recall_model(cfg: dict) -> torch.nn.Module:
    """The one-layer Transformer (RoPE positions, untied read-out) or the LSTM LM of (about) its size."""
    c = ModelConfig(
        vocab_size=cfg["vocab"],
        d_model=cfg["d_model"],
        n_layers=1,
        n_heads=cfg["n_heads"],
        max_seq_len=cfg["seq_len"],
        pos="rope",
        tie_weights=False,
    )
    if cfg["arch"] == "attention":
        return LM(c)
    d, V = cfg["d_model"], cfg["vocab"]
    target = n_params(LM(c))
    h = min(range(1, 8 * d), key=lambda h: abs(V * d + lstm_params(d, h) + h * V + V - target))
    return RecurrentLM(V, d, h)


def run_recall(cfg: dict, ctx) -> dict:
    """Train one model on recall-k (Adam, the shared recipe's warm-up and cosine schedule); held-out accuracy
    and cross-entropy on the scored positions every `eval_every` steps."""
    from tfclaims.train.loop import lr_at
    from tfclaims.train.profiles import train_config

    dev, k = ctx.device, cfg["k"]
    torch.manual_seed(cfg["seed"])
    model = recall_model(cfg).to(dev)
    t = train_config(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    gen = torch.Generator().manual_seed(cfg["seed"])
    shape = (cfg["batch"], cfg["seq_len"], cfg["vocab"], k)
    held = [recall_batch(torch.Generator().manual_seed(1234 + i), *shape) for i in range(cfg["eval_batches"])]

    @torch.no_grad()
    def evaluate() -> tuple[float, float]:
        model.eval()
        hits = total = 0
        loss = 0.0
        for x, y in held:
            logits = model(x.to(dev)).float()
            y = y.to(dev)
            scored = y >= 0
            loss += float(F.cross_entropy(logits[scored], y[scored], reduction="sum"))
            hits += int((logits.argmax(-1)[scored] == y[scored]).sum())
            total += int(scored.sum())
        model.train()
        return hits / total, loss / total

    acc0, val0 = evaluate()
    steps, accs, vals, losses, diverged = [0], [acc0], [val0], [], None
    for step in range(cfg["steps"]):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, t)
        x, y = (v.to(dev) for v in recall_batch(gen, *shape))
        loss = F.cross_entropy(model(x).flatten(0, 1).float(), y.flatten(), ignore_index=-1)
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
            vals.append(val)
    ok = diverged is None
    return {
        "eval_steps": steps,
        "accuracy": accs,
        "val_loss": vals,
        "train_loss": losses,
        "final_val": vals[-1] if ok else None,
        "final_acc": accs[-1] if ok else None,
        "chance": 1 / cfg["vocab"],
        "unigram_xent": math.log(cfg["vocab"]),
        "n_params": n_params(model),
        "diverged_at": diverged,
    }
