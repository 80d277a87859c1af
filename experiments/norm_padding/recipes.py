"""Run recipes and probes of `norm_padding`: a character LM on padded lines with LayerNorm, BatchNorm (pads
counted or masked, or with causal statistics that see no later token) or PowerNorm; the same network on
fixed-length windows; a bidirectional masked LM (BERT-style) on lines and windows, where train-mode BatchNorm
leaks nothing; an MLP with BatchNorm on synthetic fixed-size inputs (where BatchNorm is known to work).

Probes: how far each BatchNorm's batch statistics lie from its running statistics during training
(`StatRecorder`), the loss per real token in train or eval mode (`token_loss`), and whether the same tokens'
outputs change with the padding and the neighbours of their batch, or with a later token (`invariance_probe`).
Every recipe is `recipe(cfg, ctx) -> metrics`.
"""

from __future__ import annotations

import contextlib
import copy
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tfclaims.data.corpus import PAD, eval_windows, load_corpus, pad_batch, random_windows
from tfclaims.measure.threads import intra_op_threads
from tfclaims.nn.config import ModelConfig, TrainConfig
from tfclaims.nn.models import LM, Encoder
from tfclaims.nn.norms import TokenBatchNorm
from tfclaims.train.loop import lr_at, make_optimizer, train_lm

from .powernorm import PowerNorm


# ---------------------------------------------------------------------------- models and data
class CausalBatchNorm(TokenBatchNorm):
    """BatchNorm without the future: in training, position t of every line is normalised with the mean and
    variance over the real tokens at positions <= t of all lines of the batch, so no output depends on a
    later token (train-mode BatchNorm's leak in a causal LM) while it still depends on its batch, and
    gradients flow through the statistics as in BatchNorm. Eval mode uses running averages of the same
    statistics, one per position (`pos_mean`, `pos_var`: (max_len, d), unbiased, BatchNorm's momentum), so
    that inference sees what training saw; the whole batch's running statistics are kept too, for the
    statistics record. The statistics at early positions pool fewer tokens (B at t = 0): noisier, as a small
    batch's."""

    def __init__(self, d: int, max_len: int, eps: float = 1e-5, momentum: float = 0.1):
        super().__init__(d, eps, momentum, masked=True)
        self.register_buffer("pos_mean", torch.zeros(max_len, d))
        self.register_buffer("pos_var", torch.ones(max_len, d))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        T = x.shape[1]
        if not self.training:
            return (x - self.pos_mean[:T]) * torch.rsqrt(
                self.pos_var[:T] + self.eps
            ) * self.weight + self.bias
        w = torch.ones(x.shape[:2], dtype=x.dtype, device=x.device) if mask is None else mask.to(x.dtype)
        w = w[..., None]  # (B, T, 1)
        cnt = w.sum(0).cumsum(0)  # (T, 1): real tokens at positions <= t
        n = cnt.clamp_min(1)
        mean = (x * w).sum(0).cumsum(0) / n  # (T, d)
        var = ((x * x * w).sum(0).cumsum(0) / n - mean**2).clamp_min(0)  # (T, d), biased
        with torch.no_grad():
            full_mean, full_var, k = self.batch_stats(x.detach(), mask)
            self.running_mean.lerp_(full_mean, self.momentum)
            self.running_var.lerp_(full_var * k / max(k - 1, 1), self.momentum)
            seen = cnt > 1  # (T, 1): positions whose prefix holds two real tokens or more
            pm, pv = self.pos_mean[:T], self.pos_var[:T]
            pm.copy_(torch.where(seen, pm.lerp(mean.detach(), self.momentum), pm))
            unbiased = var.detach() * cnt / (cnt - 1).clamp_min(1)
            pv.copy_(torch.where(seen, pv.lerp(unbiased, self.momentum), pv))
        self.last_stats = (full_mean, full_var)
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias


class MaskedLM(nn.Module):
    """A bidirectional encoder with a tied output head (BERT-style masked-token prediction): logits (B, T, V)
    of idx (B, T); the vocabulary includes the mask token."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.head.weight = self.encoder.stack.tok.weight

    @property
    def blocks(self) -> nn.ModuleList:
        return self.encoder.blocks

    @property
    def stack(self):
        return self.encoder.stack

    def forward(self, idx: torch.Tensor, *, pad_mask=None) -> torch.Tensor:
        return self.head(self.encoder(idx, pad_mask=pad_mask))


def build_lm(cfg: dict, vocab: int) -> nn.Module:
    """The model of a run with cfg['norm'] everywhere: a causal LM (attn 'causal') or a masked LM over the
    vocabulary plus a mask token (attn 'bidirectional'). PowerNorm and CausalBatchNorm (not ModelConfig
    norms) replace the norms after init."""
    swap = cfg["norm"] in ("power", "batch_causal")
    enc = cfg["attn"] == "bidirectional"
    mc = ModelConfig(
        vocab_size=vocab + enc,
        d_model=cfg["d_model"],
        n_layers=cfg["n_layers"],
        n_heads=cfg["n_heads"],
        placement=cfg["placement"],
        norm="layer" if swap else cfg["norm"],
        causal=not enc,
        max_seq_len=max(cfg["max_len"] - 1, cfg["seq_len"]),
    )
    model = MaskedLM(mc) if enc else LM(mc)
    if swap:

        def make():
            if cfg["norm"] == "batch_causal":
                return CausalBatchNorm(cfg["d_model"], mc.max_seq_len)
            # as the authors: group scaling over head-sized groups, PowerNorm warm-up = the lr warm-up
            return PowerNorm(cfg["d_model"], group_num=cfg["n_heads"], warmup_iters=cfg["warmup"])

        for blk in model.blocks:
            blk.norm1, blk.norm2 = make(), make()
        if model.stack.final_norm is not None:
            model.stack.final_norm = make()
    return model


def mask_tokens(x: torch.Tensor, real: torch.Tensor | None, rate: float, mask_id: int, gen) -> tuple:
    """BERT's input corruption, simplified: each real token is replaced by the mask token with probability
    `rate` and becomes a target; every other position has target -1 (ignored). Returns (inputs, targets)."""
    hit = torch.rand(x.shape, generator=gen) < rate
    if real is not None:
        hit &= real
    return x.masked_fill(hit, mask_id), torch.where(hit, x, torch.full_like(x, -1))


_LINES: dict = {}


def cached_lines(corpus, split: str, min_len: int, max_len: int) -> list[torch.Tensor]:
    """corpus.lines, computed once per process (it walks every line of the split)."""
    key = (split, min_len, max_len, corpus.train.numel(), corpus.val.numel())
    if key not in _LINES:
        _LINES[key] = corpus.lines(split, min_len, max_len)
    return _LINES[key]


def fixed_subset(lines: list[torch.Tensor], n: int, seed: int = 1234) -> list[torch.Tensor]:
    """The same n lines for every run (independent of the training seed)."""
    perm = torch.randperm(len(lines), generator=torch.Generator().manual_seed(seed))[:n]
    return [lines[i] for i in perm.tolist()]


def line_batches(lines: list[torch.Tensor], size: int, order: str) -> list[tuple]:
    """Consecutive groups of `size` lines, padded to each group's longest: in the given order or sorted by
    length."""
    if order == "sorted":
        lines = sorted(lines, key=lambda t: t.numel())
    return [pad_batch(lines[i : i + size]) for i in range(0, len(lines), size)]


@contextlib.contextmanager
def scratch_mode(model: nn.Module, train_mode: bool):
    """Run `model` in train or eval mode and afterwards restore its mode and every buffer (running statistics
    a train-mode call updates), so that probes leave no trace and no call sees another's updates."""
    was = model.training
    saved = [(b, b.detach().clone()) for b in model.buffers()]
    model.train(train_mode)
    try:
        with torch.no_grad():
            yield model
    finally:
        with torch.no_grad():
            for b, v in saved:
                b.copy_(v)
        model.train(was)


def token_loss(model: nn.Module, batches: list[tuple], device, train_mode: bool) -> float:
    """Cross-entropy per real token (nats/char) over all batches, with the model in train or eval mode.

    Running statistics are restored after every batch (each train-mode batch sees the trained model's state);
    per-token weighting makes the number independent of how tokens are grouped whenever the model is."""
    tot, n = 0.0, 0
    for b in batches:
        x, y = b[0].to(device), b[1].to(device)
        with scratch_mode(model, train_mode) as m:
            logits = m(x, pad_mask=b[2].to(device)) if len(b) > 2 else m(x)
        tot += float(F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=-1, reduction="sum"))
        n += int((y >= 0).sum())
    return tot / n


# ---------------------------------------------------------------------------- batch-statistics fluctuation
class StatRecorder:
    """For every TokenBatchNorm in a model: at every `every`-th training call, how far the batch's statistics
    lie from the running statistics held before the call, in units of the running standard deviation:

        mean_dev = sqrt(mean_j (mu_B,j - mu_j)^2 / (var_j + eps))      (i.i.d. sampling alone: ~ 1/sqrt(n))
        var_dev  = sqrt(mean_j ((var_B,j + eps) / (var_j + eps) - 1)^2) (i.i.d. Gaussian alone: ~ sqrt(2/n))

    with n the number of positions the statistics were computed over."""

    def __init__(self, model: nn.Module, every: int):
        self.every = every
        self.mods = {name or "bn": m for name, m in model.named_modules() if isinstance(m, TokenBatchNorm)}
        self.data = {name: {"step": [], "mean_dev": [], "var_dev": [], "n": []} for name in self.mods}
        self.handles = []
        for name, m in self.mods.items():
            self.handles.append(m.register_forward_pre_hook(self._pre))
            self.handles.append(m.register_forward_hook(self._make_post(name)))
            m._calls = 0

    @staticmethod
    def _pre(mod, args):
        if mod.training:
            mod._prev = (mod.running_mean.clone(), mod.running_var.clone())

    def _make_post(self, name):
        def post(mod, args, out):
            if not mod.training:
                return
            step = mod._calls
            mod._calls += 1
            if step % self.every:
                return
            (mu, var), (rm, rv) = mod.last_stats, mod._prev
            x, mask = args[0], args[1] if len(args) > 1 else None
            n = int(mask.sum()) if (mod.masked and mask is not None) else x.numel() // x.shape[-1]
            d = self.data[name]
            d["step"].append(step)
            d["mean_dev"].append(float(((mu - rm) ** 2 / (rv + mod.eps)).mean().sqrt()))
            d["var_dev"].append(float((((var + mod.eps) / (rv + mod.eps) - 1) ** 2).mean().sqrt()))
            d["n"].append(n)

        return post

    def close(self) -> dict:
        for h in self.handles:
            h.remove()
        return self.data


# ---------------------------------------------------------------------------- invariance probes
def _logits(model64: nn.Module, x: torch.Tensor, mask: torch.Tensor, train_mode: bool) -> torch.Tensor:
    """Logits (B, T, V); no call sees running statistics another call changed."""
    with scratch_mode(model64, train_mode) as m:
        return m(x, pad_mask=mask)


def _change(ref: torch.Tensor, new: torch.Tensor) -> tuple[float, float]:
    """Max absolute change and max per-token relative change ||new - ref|| / ||ref|| over (K, T0, V)
    logits."""
    diff = new - ref
    return float(diff.abs().max()), float((diff.norm(dim=-1) / ref.norm(dim=-1)).max())


def invariance_probe(
    model: nn.Module, targets: torch.Tensor, pool: list[torch.Tensor], p: dict, gen: torch.Generator
) -> dict:
    """The same K target sequences (K, T0) under different batch compositions, in float64, train and eval
    mode.

    padding:    the targets right-padded to T = T0 / (1 - f) (same neighbours, only pads added);
    neighbours: the targets next to n other lines, all padded to the longest;
    leak:       the last token of target 0 changed; the change of every earlier output (same row) and of
                the other rows. Causal attention lets no output see a later token, so any change is a leak."""
    m64 = copy.deepcopy(model).cpu().double()
    K, T0 = targets.shape
    full = torch.ones(K, T0, dtype=torch.bool)
    padded = []  # the targets with pads only
    for f in p["pad_fracs"]:
        x = torch.full((K, int(round(T0 / (1 - f)))), PAD, dtype=torch.long)
        x[:, :T0] = targets
        padded.append(x)
    mixed = []  # the targets beside other lines; the same draws for both modes
    for n_nb in p["inv_neighbours"]:
        for _ in range(p["inv_draws"]):
            idx = torch.randint(0, len(pool), (n_nb,), generator=gen).tolist()
            others = [pool[i][:-1] for i in idx]  # the x part of lines
            x = torch.full((K + n_nb, max([T0] + [o.numel() for o in others])), PAD, dtype=torch.long)
            x[:K, :T0] = targets
            for i, o in enumerate(others):
                x[K + i, : o.numel()] = o
            mixed.append((n_nb, x))
    out = {"padding": [], "neighbours": [], "leak": {}}
    for train_mode, mode in ((True, "train"), (False, "eval")):
        ref = _logits(m64, targets, full, train_mode)
        for x in padded:
            a, r = _change(ref, _logits(m64, x, x != PAD, train_mode)[:, :T0])
            out["padding"].append({"mode": mode, "frac": 1 - T0 / x.shape[1], "abs": a, "rel": r})
        for n_nb, x in mixed:
            mask = x != PAD
            a, r = _change(ref, _logits(m64, x, mask, train_mode)[:K, :T0])
            out["neighbours"].append(
                {
                    "mode": mode,
                    "n_neighbours": n_nb,
                    "frac": 1 - float(mask.float().mean()),
                    "abs": a,
                    "rel": r,
                }
            )
        x2 = targets.clone()
        x2[0, -1] = x2[0, -1] % (m64.cfg.vocab_size - 1) + 1  # another character, never the pad id
        new = _logits(m64, x2, full, train_mode)
        a_same, r_same = _change(ref[:1, : T0 - 1], new[:1, : T0 - 1])
        a_other, r_other = _change(ref[1:], new[1:])
        out["leak"][mode] = {
            "same_row_abs": a_same,
            "same_row_rel": r_same,
            "other_rows_abs": a_other,
            "other_rows_rel": r_other,
        }
    return out


# ---------------------------------------------------------------------------- run recipes
def padded_lm(cfg: dict, ctx) -> dict:
    """The model with one norm (a causal LM, or a masked LM with attn 'bidirectional'), trained on whole lines
    padded to each batch's longest (data 'lines') or on fixed-length contiguous windows (data 'windows', no
    padding). Metrics: losses per target token in eval mode (running statistics, batches of `eval_batch`
    lines) and in train mode (batch statistics at the training batch size, random order and sorted by
    length), the batch-statistics record, the unigram cross-entropy (the learned-at-all baseline) and, for
    the causal LM on lines, the invariance probes of the trained model."""
    # threads only set the speed (tiny models run faster on one thread beside busy neighbours)
    with intra_op_threads(cfg["threads"]):
        return _padded_lm(cfg, ctx)


def _padded_lm(cfg: dict, ctx) -> dict:
    corpus = load_corpus()
    model = build_lm(cfg, corpus.vocab_size)
    t = TrainConfig(
        steps=cfg["steps"],
        batch_size=cfg["batch"],
        seq_len=cfg["seq_len"],
        lr=cfg["lr"],
        warmup=cfg["warmup"],
        eval_every=cfg["steps"],
        seed=cfg["seed"],
    )
    B, enc = cfg["batch"], cfg["attn"] == "bidirectional"
    pad_seen = []

    def task(batch, g):
        """A causal LM's batch as it is; a masked LM's with masked inputs and targets at the masked tokens."""
        if not enc:
            return batch
        x, real = batch[0], (batch[2] if len(batch) > 2 else None)
        xm, y = mask_tokens(x, real, cfg["mask_rate"], corpus.vocab_size, g)
        return (xm, y) if real is None else (xm, y, real)

    def fixed(batches):
        g = torch.Generator().manual_seed(2468)  # the same masks for every run
        return [task(b, g) for b in batches]

    if cfg["data"] == "lines":
        train = cached_lines(corpus, "train", cfg["min_len"], cfg["max_len"])
        val_pool = cached_lines(corpus, "val", cfg["min_len"], cfg["max_len"])
        val = fixed_subset(val_pool, cfg["n_val_lines"])

        def sample(g):
            x, y, mask = pad_batch(
                [train[i] for i in torch.randint(0, len(train), (B,), generator=g).tolist()]
            )
            pad_seen.append(1 - float(mask.float().mean()))
            return task((x, y, mask), g)

        evals = {
            "eval_mixed": (fixed(line_batches(val, cfg["eval_batch"], "random")), False),
            "train_mixed": (fixed(line_batches(val, B, "random")), True),
            "train_sorted": (fixed(line_batches(val, B, "sorted")), True),
        }
    else:  # fixed-length contiguous windows: no padding at all

        def sample(g):
            pad_seen.append(0.0)
            return task(random_windows(corpus.train, B, cfg["seq_len"], g), g)

        # as many windows as lines for the masked LM (it predicts 1 in 1 / mask_rate tokens), a quarter for
        # the LM
        n_win = max(cfg["n_val_lines"] // (1 if enc else 4), cfg["eval_batch"])
        eb, sl = cfg["eval_batch"], cfg["seq_len"]
        evals = {
            "eval_mixed": (fixed(eval_windows(corpus.val, n_win // eb, eb, sl)), False),
            "train_mixed": (fixed(eval_windows(corpus.val, max(n_win // B, 1), B, sl)), True),
        }
    rec = StatRecorder(model, cfg["stat_every"])
    res = train_lm(
        model,
        t,
        corpus,
        ctx.device,
        sample=sample,
        val_batches=evals["eval_mixed"][0][:1],
        progress=ctx.progress,
        desc=f"{cfg['norm']} B={B}",
    )
    out = {
        "diverged_at": res["diverged_at"],
        "train_loss": res["train_loss"][:: max(1, cfg["steps"] // 100)],
        "seconds": res["seconds"],
        "pad_frac_train": float(np.mean(pad_seen)),
        "stats": rec.close(),
        "unigram_xent": res["unigram_xent"],
        "init_loss": res["val_loss"][0],
    }
    if res["diverged_at"] is not None:
        return out
    for name, (batches, train_mode) in evals.items():
        out[name] = token_loss(model, batches, ctx.device, train_mode)
    if cfg["data"] == "lines" and not enc:
        gen = torch.Generator().manual_seed(4321)
        cands = [ln for ln in val_pool if ln.numel() > cfg["inv_T0"]]
        pick = torch.randperm(len(cands), generator=gen)[: cfg["inv_K"]].tolist()
        targets = torch.stack([cands[i][: cfg["inv_T0"]] for i in pick])  # (K, T0)
        out["invariance"] = invariance_probe(model, targets, val_pool, cfg, gen)
    return out


def bn_mlp(cfg: dict, ctx) -> dict:
    """BatchNorm where it is known to work: an MLP on fixed-size i.i.d. inputs (a random teacher's classes);
    the batch-statistics record, test accuracy and chance level."""
    with intra_op_threads(cfg["threads"]):
        return _bn_mlp(cfg, ctx)


def _bn_mlp(cfg: dict, ctx) -> dict:
    gen = torch.Generator().manual_seed(cfg["seed"])
    d, w, classes = cfg["d_in"], cfg["width"], 10
    teacher = [
        torch.randn(d, 4 * d, generator=gen) / math.sqrt(d),
        torch.randn(4 * d, classes, generator=gen) / math.sqrt(4 * d),
    ]

    def draw(n):
        x = torch.randn(n, d, generator=gen)
        return x, (torch.tanh(x @ teacher[0]) @ teacher[1]).argmax(-1)

    layers: list[nn.Module] = []
    for i in range(3):
        layers += [nn.Linear(d if i == 0 else w, w), TokenBatchNorm(w), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(w, classes)).to(ctx.device)
    t = TrainConfig(
        steps=cfg["steps"], batch_size=cfg["batch"], lr=cfg["lr"], warmup=cfg["warmup"], seed=cfg["seed"]
    )
    opt = make_optimizer(model, t)
    rec = StatRecorder(model, cfg["stat_every"])
    test_x, test_y = draw(4096)
    for step in range(t.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, t)
        x, y = draw(cfg["batch"])
        loss = F.cross_entropy(model(x.to(ctx.device)), y.to(ctx.device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    stats = rec.close()
    model.eval()
    with torch.no_grad():
        acc = float((model(test_x.to(ctx.device)).argmax(-1).cpu() == test_y).float().mean())
    return {
        "stats": stats,
        "final_train_loss": float(loss.detach()),
        "test_acc": acc,
        "chance": float(torch.bincount(test_y, minlength=classes).max()) / len(test_y),
    }
