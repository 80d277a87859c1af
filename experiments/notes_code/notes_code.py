"""The study notes' code for attention, multi-head attention, masks, positional encoding and the FFN, restated
by its behaviour (our code, not theirs), each with the least change that lets it run and with the full fix.

Modes of a restated snippet:
    as_written  behaves as the note's code does, failure included (an unbound name, a misspelt method, a layer
                moved to CUDA or left on the CPU in float32);
    runs        changes only what stops it running here (the name bound, the method spelt right, a layer built
                on the input's device and dtype) and keeps every other defect;
    fixed       also builds every layer once, in __init__, so that it is a registered, trained parameter.

Which note and section each restates:
    attention_000     000 §1: scaled dot product whose return statement names a variable it never binds
    AnnotatedMHA      000 §1 (a copy helper the note never defines, then that attention) and 001 §code (fixed)
    attention_002     002 §Attention steps: the masked path calls a tensor method that does not exist
    attention_004     004 §attention and Bert question 2: the scale reads the module-level d_k, True = masked
    NotesMHA          004 §attention (output projection registered, LayerNorm built in forward and moved with
                      .cuda()) and Bert question 2 (output projection and LayerNorm both built in forward)
    pad_mask_004, subsequence_mask_004, decoder_mask_004      004 §masks (True = masked)
    NotesPositionalEncoding   004 §Position Encoding (sequence first), 001 §Positional Embedding (batch first)
    notes_ffn         001 §summary and 003 §FFN: Linear(ReLU(Linear(x))), hidden width 4d
    merge_heads       001 §code's remark that view() after transpose() needs contiguous()

Shapes: B batch, h heads, T query length, S key length, dk head size, d = h * dk.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

MODES = ("as_written", "runs", "fixed")


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


# ---------------------------------------------------------------- layers built inside forward
class LinearPerCall(nn.Module):
    """A linear layer built inside forward (004, Bert question 2): a fresh nn.Linear, default-initialised from
    the global RNG, on every call; its weights are redrawn each time and are never in .parameters(), so no
    optimiser ever sees them. follow_input=False builds it where nn.Linear does by default (CPU, float32), as
    the note does; True builds it on the input's device and dtype."""

    def __init__(self, d_in: int, d_out: int, *, follow_input: bool = True):
        super().__init__()
        self.d_in, self.d_out, self.follow_input = d_in, d_out, follow_input

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kw = {"device": x.device, "dtype": x.dtype} if self.follow_input else {}
        return nn.Linear(self.d_in, self.d_out, **kw)(x)


class LayerNormPerCall(nn.Module):
    """A LayerNorm built inside forward (004 §attention and Bert question 2): gain 1 and bias 0, fresh on
    every call and never registered, so never trained. place: "cuda" moves it with .cuda() (004 §attention:
    fails where torch has no CUDA), "default" leaves it on the CPU in float32 (Bert question 2), "input"
    builds it on the input's device and dtype. Called as norm(x, mask=None) like the library's norms."""

    def __init__(self, d: int, *, place: str = "input"):
        super().__init__()
        if place not in ("cuda", "default", "input"):
            raise ValueError(f"place must be cuda, default or input, got {place!r}")
        self.d, self.place = d, place

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.place == "input":
            return nn.LayerNorm(self.d, device=x.device, dtype=x.dtype)(x)
        norm = nn.LayerNorm(self.d)
        return (norm.cuda() if self.place == "cuda" else norm)(x)


# ---------------------------------------------------------------- scaled dot-product attention
def attention_000(q, k, v, mask=None, dropout=None, *, mode: str = "as_written"):
    """000 §1. q, k, v (B, h, T|S, dk); mask broadcastable to (B, h, T, S), zero = masked; scores filled with
    −1e9, softmax, optional dropout on the weights. As written the output multiplies a name the function never
    binds (NameError); otherwise it multiplies the weights it computed. Returns (output, weights)."""
    _check_mode(mode)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = scores.softmax(dim=-1)
    if dropout is not None:
        weights = dropout(weights)
    used = weights_never_bound if mode == "as_written" else weights  # noqa: F821 (the note's unbound name)
    return used @ v, weights


def attention_002(q, k, v, mask=None, *, mode: str = "as_written"):
    """002 §Attention steps: the scale divides kᵀ before the product (the same function); with a mask, as
    written, it calls a method tensors do not have (AttributeError); without one it runs. Returns the
    output."""
    _check_mode(mode)
    scores = q @ (k.transpose(-2, -1) / math.sqrt(q.size(-1)))
    if mask is not None:
        fill = scores.mask_fill if mode == "as_written" else scores.masked_fill
        scores = fill(mask == 0, -1e9)
    return scores.softmax(dim=-1) @ v


def attention_004(q, k, v, attn_mask, d_k: int):
    """004 §attention / Bert question 2: the scale is 1/sqrt of the module-level setting d_k (not of q's size:
    right only while they agree); attn_mask (B, h, T, S) True = masked, filled with −1e9 in place. Returns
    (output, weights)."""
    scores = q @ k.transpose(-1, -2) / np.sqrt(d_k)
    scores.masked_fill_(attn_mask, -1e9)
    weights = nn.Softmax(dim=-1)(scores)
    return weights @ v, weights


# ---------------------------------------------------------------- multi-head attention
class AnnotatedMHA(nn.Module):
    """000 §1 and 001 §code: four d×d linears (query, key, value, output), heads split by view + transpose,
    attention_000, heads merged by transpose + contiguous + view, the output linear. mask (B, T|1, S), zero =
    masked. 000 as written builds its linears with a copy helper it never defines (NameError at
    construction); "runs" binds it as deep copies of one linear (the Annotated Transformer's definition, where
    all four start equal); "fixed" is 001's: four independent linears and a correct attention."""

    def __init__(self, h: int, d_model: int, mode: str = "fixed", dropout: float = 0.1):
        super().__init__()
        _check_mode(mode)
        self.h, self.dk, self.mode = h, d_model // h, mode
        if mode == "as_written":
            self.linears = copies_never_defined(nn.Linear(d_model, d_model), 4)  # noqa: F821 (the note's)
        elif mode == "runs":
            one = nn.Linear(d_model, d_model)
            self.linears = nn.ModuleList(copy.deepcopy(one) for _ in range(4))
        else:
            self.linears = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(4))
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, query, key, value, mask=None):
        if mask is not None:
            mask = mask.unsqueeze(1)  # the same mask for every head
        B = query.size(0)
        q, k, v = (
            lin(x).view(B, -1, self.h, self.dk).transpose(1, 2)
            for lin, x in zip(self.linears, (query, key, value))
        )
        x, _ = attention_000(q, k, v, mask=mask, dropout=self.dropout, mode=self.mode)
        return self.linears[-1](merge_heads(x, contiguous=True))


@dataclass(frozen=True)
class NoteSettings:
    """004's module-level settings, which its classes read instead of their arguments."""

    d_model: int
    n_heads: int
    d_k: int  # = d_v


class NotesMHA(nn.Module):
    """004's multi-head attention: projections (bias-free in §attention, with bias in Bert question 2), heads
    split, the mask repeated per head, attention_004, heads merged, an output projection, then
    LayerNorm(out + input).

    variant "attention" (004 §attention): the output projection is registered; the LayerNorm is built in
    forward and moved with .cuda(). variant "bert" (Bert question 2): the output projection and the LayerNorm
    are both built in forward, on the CPU in float32. "runs" builds them on the input's device and dtype
    (still per call); "fixed" registers both in __init__. forward(x_q, x_k, x_v, attn_mask (B, T, S), True =
    masked)."""

    def __init__(self, s: NoteSettings, variant: str, mode: str = "as_written"):
        super().__init__()
        _check_mode(mode)
        if variant not in ("attention", "bert"):
            raise ValueError(f"variant must be attention or bert, got {variant!r}")
        self.s, bias, d, hv = s, variant == "bert", s.d_model, s.n_heads * s.d_k
        self.W_Q, self.W_K, self.W_V = (nn.Linear(d, hv, bias=bias) for _ in range(3))
        follow = mode != "as_written"
        if mode == "fixed":
            self.out, self.norm = nn.Linear(hv, d, bias=bias), nn.LayerNorm(d)
        elif variant == "attention":
            self.out = nn.Linear(hv, d, bias=False)
            self.norm = LayerNormPerCall(d, place="input" if follow else "cuda")
        else:
            self.out = LinearPerCall(hv, d, follow_input=follow)
            self.norm = LayerNormPerCall(d, place="input" if follow else "default")

    def forward(self, x_q, x_k, x_v, attn_mask):
        s, B = self.s, x_q.size(0)
        q, k, v = (
            w(x).view(B, -1, s.n_heads, s.d_k).transpose(1, 2)
            for w, x in ((self.W_Q, x_q), (self.W_K, x_k), (self.W_V, x_v))
        )
        mask = attn_mask.unsqueeze(1).repeat(1, s.n_heads, 1, 1)  # (B, h, T, S)
        context, _ = attention_004(q, k, v, mask, s.d_k)
        return self.norm(self.out(merge_heads(context, contiguous=True)) + x_q)


def merge_heads(x: torch.Tensor, *, contiguous: bool) -> torch.Tensor:
    """(B, h, T, dk) -> (B, T, h·dk) by transpose then view; without contiguous() view cannot merge the
    transposed axes (RuntimeError), which 001 §code warns of."""
    B, h, T, dk = x.shape
    y = x.transpose(1, 2)
    return (y.contiguous() if contiguous else y).view(B, T, h * dk)


# ---------------------------------------------------------------- masks (004 §masks: True = masked)
def pad_mask_004(seq_q: torch.Tensor, seq_k: torch.Tensor) -> torch.Tensor:
    """(B, T) and (B, S) token ids, 0 = pad -> (B, T, S), True where the key is a pad."""
    (B, T), S = seq_q.shape, seq_k.shape[1]
    return seq_k.eq(0).unsqueeze(1).expand(B, T, S)


def subsequence_mask_004(seq: torch.Tensor) -> torch.Tensor:
    """(B, T) -> (B, T, T) uint8, 1 above the diagonal (a later key), built with numpy's triu."""
    B, T = seq.shape
    return torch.from_numpy(np.triu(np.ones((B, T, T)), k=1)).byte()


def decoder_mask_004(seq: torch.Tensor) -> torch.Tensor:
    """The decoder's self-attention mask: pad or later key, as the sum of both masks compared with 0."""
    return torch.gt(pad_mask_004(seq, seq) + subsequence_mask_004(seq), 0)


# ---------------------------------------------------------------- positions and the FFN
def notes_sinusoid_table(d: int, max_len: int, dtype=torch.float32) -> torch.Tensor:
    """(max_len, d): even columns sin(pos·w_i), odd cos(pos·w_i), w_i = exp(2i · (−ln 10000 / d)); as the
    notes compute it, in float32 (the positions' arange and the frequencies' exp in the default dtype)."""
    pos = torch.arange(0, max_len, dtype=dtype).unsqueeze(1)
    freq = torch.exp(torch.arange(0, d, 2, dtype=dtype) * (-math.log(10000.0) / d))
    pe = torch.zeros(max_len, d, dtype=dtype)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)
    return pe


class NotesPositionalEncoding(nn.Module):
    """The table added to the embeddings, then dropout: batch_first=False is 004's layout (table (max_len, 1,
    d), x (T, B, d)), True is 001's (table (1, max_len, d), x (B, T, d))."""

    def __init__(
        self, d: int, max_len: int = 5000, *, batch_first: bool, dropout: float = 0.1, dtype=torch.float32
    ):
        super().__init__()
        self.batch_first, self.dropout = batch_first, nn.Dropout(p=dropout)
        pe = notes_sinusoid_table(d, max_len, dtype)
        self.register_buffer("pe", pe.unsqueeze(0) if batch_first else pe.unsqueeze(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pe = self.pe[:, : x.size(1)] if self.batch_first else self.pe[: x.size(0)]
        return self.dropout(x + pe)


def notes_ffn(d: int) -> nn.Sequential:
    """Linear(d, 4d), ReLU, Linear(4d, d): the position-wise FFN as 001 §summary and 003 §FFN describe it."""
    return nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d))
