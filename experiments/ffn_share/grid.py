"""`ffn_share`'s published configurations (`CATALOGUE`) and their closed-form counts, in parameters and in
per-token FLOPs (torch-free: the grid and the declarations read them before anything runs).

FLOPs: per-token forward FLOPs of a block's FFN against its attention as the context grows, and where they
cross.

The convention of `tfclaims.measure.counting`: a multiply-add is 2 FLOPs, and only matmuls count (norms,
softmax, activations, rotary tables and biases do not). For one token at context n:
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

from dataclasses import dataclass

from tfclaims.measure.counting import (
    attention_params,
    attention_projection_flops,
    attention_score_flops,
    cross_attention_block_params,
    embedding_params,
    ffn_flops,
    ffn_params,
    norm_params,
)
from tfclaims.nn.config import PRESETS, ConfigError, ModelConfig, llama_like


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


LAYOUTS = ("sequential", "parallel")


@dataclass(frozen=True)
class Published:
    """A published model: its widths and the structure `ModelConfig` leaves out."""

    config: ModelConfig
    layout: str = "sequential"
    decoder_layers: int = 0  # > 0: encoder–decoder with this many decoder blocks
    rel_pos_buckets: int = 0  # T5: a (buckets x heads) relative-position bias in each stack's first block
    ffn_label: str = ""  # the published FFN name where `config.ffn` stands in for its count
    window: int | None = None  # sliding-window attention: keys per query at most

    def __post_init__(self):
        if self.layout not in LAYOUTS:
            raise ConfigError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        if self.layout == "parallel" and (self.decoder_layers or self.config.placement != "pre"):
            raise ConfigError("a parallel block is a pre-norm decoder block")
        if self.decoder_layers and self.config.causal:
            raise ConfigError(
                "an encoder–decoder's config describes its (bidirectional) encoder: causal=False"
            )
        if self.window is not None and self.window < 1:
            raise ConfigError(f"window must be positive, got {self.window}")

    @property
    def encoder_decoder(self) -> bool:
        return self.decoder_layers > 0

    @property
    def ffn_kind(self) -> str:
        return self.ffn_label or self.config.ffn


MODERN: dict[str, Published] = {
    # meta-llama/Meta-Llama-3-8B: hidden_size 4096, intermediate_size 14336, 32 layers, 32 heads,
    # num_key_value_heads 8, vocab_size 128256, rope_theta 500000, max_position_embeddings 8192,
    # tie_word_embeddings false (8,030,261,248 parameters).
    "llama3-8b": Published(
        llama_like(
            vocab_size=128256,
            d_model=4096,
            n_layers=32,
            n_heads=32,
            n_kv_heads=8,
            d_ff=14336,
            tie_weights=False,
            max_seq_len=8192,
            rope_base=5e5,
        )
    ),
    # mistralai/Mistral-7B-v0.1: Llama-3-8B's block widths, vocab_size 32000, rope_theta 10000,
    # sliding_window 4096, max_position_embeddings 32768, untied (7,241,732,096 parameters).
    "mistral-7b": Published(
        llama_like(
            vocab_size=32000,
            d_model=4096,
            n_layers=32,
            n_heads=32,
            n_kv_heads=8,
            d_ff=14336,
            tie_weights=False,
            max_seq_len=32768,
        ),
        window=4096,
    ),
    # google/gemma-7b: hidden_size 3072, 28 layers, 16 heads and 16 K/V heads of head_dim 256 (attention width
    # 4096 != d), intermediate_size 24576 with a tanh-GELU gate (GeGLU), vocab_size 256000, tied, embeddings
    # scaled by sqrt(d), RMSNorm eps 1e-6 (8,537,680,896 parameters).
    "gemma-7b": Published(
        llama_like(
            vocab_size=256000,
            d_model=3072,
            n_layers=28,
            n_heads=16,
            head_dim=256,
            d_ff=24576,
            tie_weights=True,
            max_seq_len=8192,
            emb_scale=True,
            norm_eps=1e-6,
        ),
        ffn_label="geglu",
    ),
    # tiiuae/falcon-7b: hidden_size 4544, n_head 71 (head_dim 64), multi_query (one K/V head), parallel_attn,
    # bias false (LayerNorms keep theirs), vocab_size 65024, 32 layers, GELU FFN of 4·d = 18176 (the modelling
    # code's width), rotary positions, tied (6,921,720,704 parameters).
    "falcon-7b": Published(
        ModelConfig(
            vocab_size=65024,
            d_model=4544,
            n_layers=32,
            n_heads=71,
            n_kv_heads=1,
            d_ff=18176,
            ffn="gelu",
            norm="layer",
            pos="rope",
            bias=False,
            tie_weights=True,
            max_seq_len=2048,
        ),
        layout="parallel",
    ),
    # google/t5-v1_1-base: d_model 768, d_ff 2048, d_kv 64, 12 heads, 12 encoder + 12 decoder layers,
    # feed_forward_proj gated-gelu, vocab_size 32128, no biases, RMS-style norms, relative attention bias of
    # 32
    # buckets, output head not tied to the embedding (247,577,856 parameters).
    "t5-v1.1-base": Published(
        ModelConfig(
            vocab_size=32128,
            d_model=768,
            n_layers=12,
            n_heads=12,
            d_ff=2048,
            ffn="swiglu",
            norm="rms",
            pos="none",
            bias=False,
            tie_weights=False,
            causal=False,
            max_seq_len=512,
            norm_eps=1e-6,
        ),
        decoder_layers=12,
        rel_pos_buckets=32,
        ffn_label="gated-gelu",
    ),
    # A generic parallel block (GPT-J / PaLM style) at GPT-J-6B's widths (EleutherAI/gpt-j-6b: n_embd 4096,
    # n_head 16 of 256, n_layer 28, n_inner 4·4096, vocab_size 50400, untied) without biases, as in PaLM
    # (GPT-J itself keeps FFN biases and an output bias: 623,840 parameters more).
    "parallel-generic": Published(
        ModelConfig(
            vocab_size=50400,
            d_model=4096,
            n_layers=28,
            n_heads=16,
            ffn="gelu_tanh",
            norm="layer",
            pos="rope",
            bias=False,
            tie_weights=False,
            max_seq_len=2048,
        ),
        layout="parallel",
    ),
}

# The original Transformer's presets describe its encoder; its 6 decoder blocks add cross-attention.
_ENC_DEC = {"transformer-base": 6, "transformer-big": 6}
CATALOGUE: dict[str, Published] = {
    **{name: Published(c, decoder_layers=_ENC_DEC.get(name, 0)) for name, c in PRESETS.items()},
    **MODERN,
}


# ------------------------------------------------------------------ closed forms
def block_norms(a: Published) -> int:
    """Norm parameters of one (encoder or decoder-only) block: two norms, one in a parallel block."""
    return (1 if a.layout == "parallel" else 2) * norm_params(a.config.norm, a.config.d_model)


def block_params(a: Published) -> int:
    return attention_params(a.config) + ffn_params(a.config) + block_norms(a)


def decoder_block_params(a: Published) -> int:
    """An encoder–decoder's decoder block: self-attention, cross-attention, FFN, three norms (0 otherwise)."""
    return cross_attention_block_params(a.config) if a.encoder_decoder else 0


def head_params(a: Published) -> int:
    """An output projection not tied to the token embedding."""
    c = a.config
    return 0 if c.tie_weights else c.vocab_size * c.d_model


def model_params(a: Published) -> int:
    """The whole model: embeddings, every block, final norms, the relative-position tables, an untied head.

    An encoder–decoder has one embedding for both stacks, a final norm per stack when pre-norm, and
    (T5) a (buckets x heads) bias table in each stack's first block."""
    c = a.config
    n = encoder_stack_params(a) + head_params(a)
    if a.encoder_decoder:
        n += a.decoder_layers * decoder_block_params(a) + _final_norm(c)
    return n + (2 if a.encoder_decoder else 1) * a.rel_pos_buckets * c.n_heads


def _final_norm(c: ModelConfig) -> int:
    return norm_params(c.norm, c.d_model) if c.use_final_norm else 0


def encoder_stack_params(a: Published) -> int:
    """Embedding, the `n_layers` (encoder or decoder-only) blocks and their final norm: what the library's
    `Encoder` holds for an encoder–decoder."""
    c = a.config
    return embedding_params(c) + c.n_layers * block_params(a) + _final_norm(c)


def built_params(a: Published) -> int:
    """The parameters of `build(a)`: the whole model, or an encoder–decoder's encoder stack (all the library
    builds of it)."""
    return encoder_stack_params(a) if a.encoder_decoder else model_params(a)


def ffn_total(a: Published) -> int:
    return (a.config.n_layers + a.decoder_layers) * ffn_params(a.config)
