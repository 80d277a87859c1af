"""The sizes, configs and closed forms behind `attention_cost` (flash_memory's) (torch-free: the grids and
analyses of `attention_complexity` and `flash_memory` read them before anything runs)."""

from __future__ import annotations

from ..nn.config import ModelConfig
from .counting import (
    attention_flops,
    attention_projection_flops,
    attention_score_flops,
    block_flops,
    ffn_flops,
)

# ---------------------------------------------------------------------------------------------- FLOPs and
# time
# What is timed: the library's modules (non-causal, batch 1, no grad) and their parts.
UNITS = {
    "attention_explicit": "attention module, explicit (n×n scores materialised)",
    "attention_sdpa": "attention module, SDPA (fused kernel)",
    "block_sdpa": "pre-LN block (SDPA attention + GELU FFN)",
    "scores_explicit": "QKᵀ, softmax, PV only (explicit)",
    "scores_sdpa": "QKᵀ, softmax, PV only (fused SDPA)",
    "dense": "projections + FFN + norms of the block",
}
SCORES_HELD = ("attention_explicit", "scores_explicit")  # the units that hold the n×n scores in memory


def working_set_bytes(unit: str, d: int, h: int, n: int, itemsize: int = 4, batch: int = 1) -> int:
    """Bytes one call touches at a time: the input and q, k, v and the output (5·n·d values a sequence), and
    in the units that hold the n×n scores also S = QKᵀ and P = softmax(S) for every head (2·h·n²). The fused
    kernel streams blocks of S and never holds it."""
    return batch * itemsize * (5 * n * d + (2 * h * n * n if unit in SCORES_HELD else 0))


def fill_batch(h: int, n: int, rows: int) -> int:
    """Sequences per call so that batch × heads × n reaches `rows` query rows (0: one sequence). One head
    at short n leaves most of a GPU's cores idle, which would flatten a fitted exponent; on the CPU one
    sequence already keeps its single thread busy."""
    return max(1, rows // (h * n)) if rows else 1


def unit_config(d: int, h: int, n: int, backend: str = "sdpa", causal: bool = False) -> ModelConfig:
    return ModelConfig(d_model=d, n_heads=h, max_seq_len=max(n, 1), attn_backend=backend, causal=causal)


def unit_flops(unit: str, c: ModelConfig, n: int) -> int:
    """Closed-form matmul FLOPs of a timed unit (batch 1, n tokens)."""
    if unit.startswith("attention"):
        return attention_flops(c, n)
    if unit.startswith("block"):
        return block_flops(c, n)
    if unit.startswith("scores"):
        return attention_score_flops(c, n)
    return attention_projection_flops(c, n) + ffn_flops(c, n)


def score_share(unit: str, c: ModelConfig, n: int) -> float:
    """Fraction of the unit's FLOPs in QK^T + PV (the n² term)."""
    return attention_score_flops(c, n) / unit_flops(unit, c, n)


# ---------------------------------------------------------------------------------------------- saved bytes
ITEMSIZE = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float64": 8,
    "bool": 1,
    "int64": 8,
    "int32": 4,
    "uint8": 1,
}
# The attention core on leaf q, k, v of shape (B, h, n, dk), and the whole module on x of shape (B, n, d).
VARIANTS = {
    "explicit": "library explicit path: softmax(QKᵀ·s)·V, no mask",
    "explicit_causal": "library explicit path with the boolean causal mask",
    "math": "SDPA forced onto the MATH kernel, no mask",
    "fused": "SDPA, default kernel choice, no mask",
    "fused_causal": "SDPA, default kernel choice, is_causal=True",
    "fused_mask": "SDPA, default kernel choice, boolean causal mask passed as a tensor",
    "module_explicit": "causal Attention module, explicit backend (parameters excluded)",
    "module_sdpa": "causal Attention module, SDPA backend (parameters excluded)",
}


# What each fused SDPA kernel keeps beside q, k, v and its output, by its autograd node (read from the saved
# tensors of every kernel on an H100 and on the CPU): the float32 log-sum-exp of every score row, its row
# count
# rounded up to a multiple (CUDA's memory-efficient kernel pads it to 32), and the random-number state that
# dropout would need (a seed and an offset: uint64[2] + uint64 for flash, two int64 for the others), in bytes.
KERNEL_KEEPS = {
    "ScaledDotProductFlashAttentionForCpuBackward0": (1, 0),
    "ScaledDotProductFlashAttentionBackward0": (1, 24),
    "ScaledDotProductEfficientAttentionBackward0": (32, 16),
    "ScaledDotProductCudnnAttentionBackward0": (1, 16),
}


def lse_rows(n: int, kernel: str = "") -> int:
    """Rows of the log-sum-exp a fused kernel keeps for n queries (its padding: `KERNEL_KEEPS`)."""
    pad = KERNEL_KEEPS.get(kernel, (1, 0))[0]
    return -(-n // pad) * pad


def hand_bytes(variant: str, B: int, h: int, n: int, dk: int, *, itemsize: int = 4, kernel: str = "") -> int:
    """Bytes autograd keeps, derived by hand from what each operation saves (tensors of `itemsize` bytes, the
    log-sum-exp in float32, bool = 1); `kernel`: the autograd node of the fused kernel that ran.

    explicit: QKᵀ saves q and k, softmax its output P (B,h,n,n), PV saves P (same storage) and v.
    math:     the same, computed in float32 whatever the input type (SDPA's MATH kernel upcasts half types).
    fused:    q, k, v, the output (B,h,n,dk) and the float32 log-sum-exp of every score row (B,h,n), with the
              kernel's padding of those rows and its random-number state (`KERNEL_KEEPS`).
    masks:    masked_fill keeps the boolean mask (n×n); the fused kernel keeps the mask converted to q's
    dtype.
    module:   also the input x (saved by W_q, W_k, W_v: one storage) and the input of W_o (B,n,d); the
              CPU fused kernel returns its output laid out as (B,n,h,dk), so W_o's input is a view of the kept
              output.
    """
    d, it = h * dk, itemsize
    naive = it * B * h * (3 * n * dk + n * n)
    extra = KERNEL_KEEPS.get(kernel, (1, 0))[1]
    fused = B * h * (4 * n * dk * it + 4 * lse_rows(n, kernel)) + extra
    return {
        "explicit": naive,
        "math": naive * max(4, it) // it,
        "explicit_causal": naive + n * n,
        "fused": fused,
        "fused_causal": fused,
        "fused_mask": fused + it * n * n,
        "module_explicit": it * B * (5 * n * d + h * n * n) + n * n,
        "module_sdpa": B * (5 * n * d * it + 4 * h * lse_rows(n, kernel)) + extra,
    }[variant]


def classify(elems: int, B: int, h: int, n: int, dk: int, kernel: str = "") -> str:
    """What a saved storage of `elems` elements is, by size (n > dk keeps the cases apart; `kernel`: the fused
    kernel that ran, whose row padding `lse_rows` gives)."""
    if elems == B * h * lse_rows(n, kernel):
        return "per row (n)"
    if elems == B * h * n * dk:
        return "n×d"
    if elems in (n * n, B * n * n, B * h * n * n):
        return "n×n"
    return "other"
