"""A decoder-only language model and a bidirectional encoder built from the same stack."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .attention import KVCache
from .blocks import Block, deepnorm_constants
from .config import ModelConfig
from .norms import make_norm
from .positions import rope_tables, sinusoidal_table


class Stack(nn.Module):
    """Embeddings (+ positions, segments) -> N blocks -> optional final norm. Output (B, T, d)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_seq_len, cfg.d_model) if cfg.pos == "learned" else None
        if cfg.pos == "sinusoidal":
            self.register_buffer("pe", sinusoidal_table(cfg.max_seq_len, cfg.d_model), persistent=False)
        if cfg.pos == "rope":
            cos, sin = rope_tables(cfg.dk, cfg.max_seq_len, cfg.rope_base)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        self.types = nn.Embedding(cfg.n_token_types, cfg.d_model) if cfg.n_token_types else None
        self.emb_norm = make_norm("layer", cfg.d_model, cfg.norm_eps) if cfg.emb_norm else None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.final_norm = make_norm(cfg.norm, cfg.d_model, cfg.norm_eps) if cfg.use_final_norm else None

    def embed(
        self, idx: torch.Tensor, start: int = 0, token_types: torch.Tensor | None = None
    ) -> torch.Tensor:
        cfg = self.cfg
        T = idx.shape[1]
        if start + T > cfg.max_seq_len:
            raise ValueError(f"sequence of {start + T} positions exceeds max_seq_len={cfg.max_seq_len}")
        x = self.tok(idx)  # (B, T, d)
        if cfg.emb_scale:
            x = x * math.sqrt(cfg.d_model)
        if self.pos is not None:
            x = x + self.pos.weight[start : start + T]
        elif cfg.pos == "sinusoidal":
            x = x + self.pe[start : start + T]
        if self.types is not None:
            x = x + self.types(torch.zeros_like(idx) if token_types is None else token_types)
        if self.emb_norm is not None:
            x = self.emb_norm(x)
        return x

    def forward(
        self, idx, *, pad_mask=None, cache: KVCache | None = None, token_types=None, start: int = 0
    ) -> torch.Tensor:
        """Hidden states (B, T, d) of idx (B, T) at absolute positions start .. start + T − 1 (with a cache:
        from the cache's position, which `start` must not contradict)."""
        if cache is not None:
            if start not in (0, cache.pos):
                raise ValueError(f"start {start} contradicts the cache's position {cache.pos}")
            start = cache.pos
        x = self.embed(idx, start, token_types)
        rope = None
        if self.cfg.pos == "rope":
            T = idx.shape[1]
            rope = (self.rope_cos[start : start + T], self.rope_sin[start : start + T])
        for i, block in enumerate(self.blocks):
            x = block(x, pad_mask=pad_mask, cache=cache, layer=i, rope=rope)
        if cache is not None:
            cache.pos += idx.shape[1]
        if self.final_norm is not None:
            x = self.final_norm(x, pad_mask)
        return x


def init_weights(model: nn.Module, cfg: ModelConfig) -> None:
    """Apply cfg.init, then DeepNorm's beta scaling when placement == 'deepnorm'.

    normal: N(0, 0.02) for linears and embeddings, residual output projections (attn.wo, ffn.w2)
            N(0, 0.02/sqrt(2L)) as in GPT-2; biases zero.
    torch:  PyTorch's defaults (Linear: U(+-1/sqrt(fan_in)); Embedding: N(0, 1)).
    xavier: Xavier-normal linears, embeddings N(0, 1/d) (the setting where sqrt(d) scaling matters).
    """
    if cfg.init != "torch":
        for name, m in model.named_modules():
            if isinstance(m, nn.Linear):
                if cfg.init == "normal":
                    std = 0.02 / math.sqrt(2 * cfg.n_layers) if name.endswith(("attn.wo", "w2")) else 0.02
                    nn.init.normal_(m.weight, 0.0, std)
                else:
                    nn.init.xavier_normal_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, 0.0, 0.02 if cfg.init == "normal" else cfg.d_model**-0.5)
    if cfg.placement == "deepnorm":
        beta = deepnorm_constants(cfg.n_layers)[1]
        for m in model.modules():
            if isinstance(m, Block):
                for lin in (m.attn.wq, m.attn.wk):
                    nn.init.xavier_normal_(lin.weight, gain=1.0)
                ffns = m.ffn.experts if hasattr(m.ffn, "experts") else [m.ffn]
                lins = [m.attn.wv, m.attn.wo] + [w for f in ffns for w in (f.w1, f.w2, f.w3) if w is not None]
                for lin in lins:
                    nn.init.xavier_normal_(lin.weight, gain=beta)


class LM(nn.Module):
    """Decoder-only language model: logits (B, T, vocab)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if not cfg.causal:
            raise ValueError("LM needs causal=True")
        self.cfg = cfg
        self.stack = Stack(cfg)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        init_weights(self, cfg)
        if cfg.tie_weights:
            self.head.weight = self.stack.tok.weight

    @property
    def blocks(self) -> nn.ModuleList:
        return self.stack.blocks

    def forward(self, idx: torch.Tensor, *, pad_mask=None, cache: KVCache | None = None, start: int = 0):
        """Logits (B, T, V) of idx (B, T) placed at positions start .. start + T − 1."""
        return self.head(self.stack(idx, pad_mask=pad_mask, cache=cache, start=start))

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, n_new: int, *, use_cache: bool = True) -> torch.Tensor:
        """Greedy decoding of n_new tokens after the prompt idx (B, T0). Returns (B, T0 + n_new)."""
        if use_cache:
            cache = KVCache.for_model(
                self.cfg, idx.shape[0], idx.shape[1] + n_new, device=idx.device, dtype=self.head.weight.dtype
            )
            logits = self(idx, cache=cache)
            out = [idx]
            for _ in range(n_new):
                nxt = logits[:, -1].argmax(-1, keepdim=True)
                out.append(nxt)
                logits = self(nxt, cache=cache)
            return torch.cat(out, dim=1)
        for _ in range(n_new):
            nxt = self(idx)[:, -1].argmax(-1, keepdim=True)
            idx = torch.cat([idx, nxt], dim=1)
        return idx


class Encoder(nn.Module):
    """Bidirectional encoder with padding masks: hidden states (B, T, d)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if cfg.causal:
            cfg = cfg.replace(causal=False)
        self.cfg = cfg
        self.stack = Stack(cfg)
        init_weights(self, cfg)

    @property
    def blocks(self) -> nn.ModuleList:
        return self.stack.blocks

    def forward(self, idx: torch.Tensor, *, pad_mask=None, token_types=None) -> torch.Tensor:
        return self.stack(idx, pad_mask=pad_mask, token_types=token_types)


def lm_loss(logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """Mean next-token cross-entropy; targets < 0 (padding) are ignored."""
    return F.cross_entropy(
        logits.flatten(0, 1), targets.flatten(), ignore_index=-1, label_smoothing=label_smoothing
    )


def n_params(model: nn.Module) -> int:
    """Parameters counted once each (`parameters()` already yields a tied matrix once)."""
    return sum(p.numel() for p in model.parameters())
