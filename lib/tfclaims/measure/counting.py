"""Closed-form parameter and FLOP counts, written from the formulas (not from modules), so tests can
check instantiated models against them.

FLOP convention: a multiply-add counts 2; a (m x k) @ (k x n) matmul costs 2mkn.
"""

from __future__ import annotations

from ..nn.config import ModelConfig


def norm_params(kind: str, d: int) -> int:
    return {"layer": 2 * d, "rms": d, "batch": 2 * d, "batch_masked": 2 * d, "none": 0}[kind]


def attention_params(c: ModelConfig) -> int:
    """W_q (d x h*dk), W_k and W_v (d x kv*dk), W_o (h*dk x d), plus biases."""
    q, kv = c.n_heads * c.dk, c.kv_heads * c.dk
    w = c.d_model * q + 2 * c.d_model * kv + q * c.d_model
    b = (q + 2 * kv + c.d_model) if c.bias else 0
    return w + b


def ffn_params(c: ModelConfig) -> int:
    """Dense FFN: 2 matrices (3 for SwiGLU); an MoE layer holds n_experts of them plus a d x E router."""
    mats = 3 if c.ffn == "swiglu" else 2
    one = mats * c.d_model * c.ff + ((mats - 1) * c.ff + c.d_model if c.bias else 0)
    if c.n_experts:
        return c.n_experts * one + c.d_model * c.n_experts
    return one


def active_ffn_params(c: ModelConfig) -> int:
    """FFN parameters used per token: top_k experts (and the router) for MoE."""
    if not c.n_experts:
        return ffn_params(c)
    return c.moe_top_k * (ffn_params(c) - c.d_model * c.n_experts) // c.n_experts + c.d_model * c.n_experts


def block_params(c: ModelConfig) -> int:
    return attention_params(c) + ffn_params(c) + 2 * norm_params(c.norm, c.d_model)


def cross_attention_block_params(c: ModelConfig) -> int:
    """A decoder block of an encoder-decoder model: self-attention, cross-attention, FFN, three norms."""
    return 2 * attention_params(c) + ffn_params(c) + 3 * norm_params(c.norm, c.d_model)


def embedding_params(c: ModelConfig) -> int:
    n = c.vocab_size * c.d_model
    n += c.max_seq_len * c.d_model if c.pos == "learned" else 0
    n += c.n_token_types * c.d_model
    n += norm_params("layer", c.d_model) if c.emb_norm else 0
    return n


def model_params(c: ModelConfig, *, lm_head: bool = True) -> int:
    """Whole stack: embeddings + blocks + final norm (+ an untied LM head)."""
    n = embedding_params(c) + c.n_layers * block_params(c)
    n += norm_params(c.norm, c.d_model) if c.use_final_norm else 0
    if lm_head and not c.tie_weights:
        n += c.vocab_size * c.d_model
    return n


def matmul_flops(m: int, k: int, n: int) -> int:
    return 2 * m * k * n


# ---- forward FLOPs of matmuls (the convention above; norms, softmax, activations and biases not counted;
# causal masking not discounted: every query is charged for all S keys, as the MATH kernel computes them).


def attention_projection_flops(c: ModelConfig, T: int, batch: int = 1) -> int:
    """W_q, W_k, W_v, W_o applied to batch*T tokens."""
    q, kv = c.n_heads * c.dk, c.kv_heads * c.dk
    return (
        matmul_flops(batch * T, c.d_model, q)
        + 2 * matmul_flops(batch * T, c.d_model, kv)
        + matmul_flops(batch * T, q, c.d_model)
    )


def attention_score_flops(c: ModelConfig, T: int, S: int | None = None, batch: int = 1) -> int:
    """QK^T and PV for T queries over S keys (S = T by default) in every query head: 2 * 2*T*S*dk per head."""
    S = T if S is None else S
    return 2 * batch * c.n_heads * matmul_flops(T, c.dk, S)


def attention_flops(c: ModelConfig, T: int, S: int | None = None, batch: int = 1) -> int:
    return attention_projection_flops(c, T, batch) + attention_score_flops(c, T, S, batch)


def ffn_flops(c: ModelConfig, T: int, batch: int = 1) -> int:
    """Dense FFN: 2 (3 for SwiGLU) d x d_ff matmuls per token; MoE: top_k experts per token plus the
    router."""
    mats = 3 if c.ffn == "swiglu" else 2
    one = mats * matmul_flops(batch * T, c.d_model, c.ff)
    if c.n_experts:
        return c.moe_top_k * one + matmul_flops(batch * T, c.d_model, c.n_experts)
    return one


def block_flops(c: ModelConfig, T: int, S: int | None = None, batch: int = 1) -> int:
    return attention_flops(c, T, S, batch) + ffn_flops(c, T, batch)


def lm_forward_flops(c: ModelConfig, T: int, S: int | None = None, batch: int = 1) -> int:
    """A decoder-only LM's forward over T new tokens attending to S keys (S > T: a KV cache holds S - T)."""
    return c.n_layers * block_flops(c, T, S, batch) + matmul_flops(batch * T, c.d_model, c.vocab_size)


def score_crossover_length(c: ModelConfig) -> float:
    """Sequence length n at which a block's QK^T + PV FLOPs equal its projections + FFN FLOPs.

    Per token, scores cost 4*n*h*dk against (projections + FFN) per token: 24 d^2 -> n = 6d for MHA with d_ff
    = 4d.
    """
    return (attention_projection_flops(c, 1) + ffn_flops(c, 1)) / attention_score_flops(c, 1, 1)


def kv_cache_bytes(c: ModelConfig, n: int, batch: int = 1, bytes_per_value: int = 4) -> int:
    """Keys and values of n positions in every layer: 2 * n_layers * batch * kv_heads * n * dk values."""
    return 2 * c.n_layers * batch * c.kv_heads * n * c.dk * bytes_per_value
