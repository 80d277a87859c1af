"""Per-token forward FLOPs of a block's FFN against its attention as the context grows, and where they cross.

The convention of `tfclaims.counting`: a multiply-add is 2 FLOPs, and only matmuls count (norms, softmax,
activations, rotary tables and biases do not). For one token at context n:
  FFN          2·m·d·d_ff, m = 2 matrices (3 when gated); MoE: the top_k experts a token uses plus the router
  projections  2·d·(h·dk + 2·kv·dk) + 2·h·dk·d         W_q, W_k, W_v, W_o
  scores       4·h·dk·k(n)                             QK^T and AV, each 2·h·dk per key attended
where k(n) is the mean number of keys a query attends to:
  causal (decoders; what a causal kernel computes, the masked half skipped): (n + 1)/2, and with a sliding
    window w the mean of min(i, w) over positions i = 1..n, which tends to w;
  full (bidirectional encoders; also what a kernel charging every query all keys computes): n (min(n, w)).
A parallel block computes the same matmuls as a sequential one, so the layout does not enter.
"""

from __future__ import annotations

from .config import ModelConfig
from .counting import attention_projection_flops, attention_score_flops, ffn_flops


def mean_keys(n: float, *, causal: bool = True, window: int | None = None) -> float:
    """Keys per query, averaged over the n positions of a sequence."""
    w = n if window is None else min(window, n)
    if not causal:
        return float(w)
    return (w * (w + 1) / 2 + (n - w) * w) / n  # sum over i of min(i, w), divided by n


def score_flops_per_key(c: ModelConfig) -> int:
    """QK^T + AV for one query against one key, over every query head: 4·h·dk."""
    return attention_score_flops(c, 1, 1)


def token_flops(c: ModelConfig, n: float, *, causal: bool = True, window: int | None = None) -> dict:
    """Forward FLOPs per token of one block at context n: FFN, attention projections, scores."""
    ffn, proj = ffn_flops(c, 1), attention_projection_flops(c, 1)
    scores = score_flops_per_key(c) * mean_keys(n, causal=causal, window=window)
    return {
        "ffn": ffn,
        "projections": proj,
        "scores": scores,
        "attention": proj + scores,
        "ffn_share": ffn / (ffn + proj + scores),
    }


def crossover(c: ModelConfig, *, causal: bool = True, window: int | None = None) -> float | None:
    """The context n at which a block's attention FLOPs per token (projections + scores) equal its FFN's.

    0.0 when the projections alone already match the FFN; None when no context reaches it (a window caps the
    keys below what is needed). A real number: k(n) is extended to real n by its formula."""
    k = (ffn_flops(c, 1) - attention_projection_flops(c, 1)) / score_flops_per_key(c)  # keys needed
    if k <= 0:
        return 0.0
    if window is not None and (k >= window if causal else k > window):
        return None  # the causal mean stays below w at every finite n; without the mask it is at most w
    if not causal:
        return k
    if window is None or k <= (window + 1) / 2:  # reached while n <= w: (n + 1)/2 = k
        return 2 * k - 1
    return window * (window - 1) / (2 * (window - k))  # beyond the window: w − w(w − 1)/(2n) = k
