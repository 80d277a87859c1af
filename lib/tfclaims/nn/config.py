"""Frozen, validated configurations for models and training, and named presets.

Every size the library builds or counts comes from a `ModelConfig`; invalid combinations
raise `ConfigError` (a `ValueError`) with one sentence saying what is wrong.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

NORMS = ("layer", "rms", "batch", "batch_masked", "none")
PLACEMENTS = ("pre", "post", "deepnorm")
FFNS = ("relu", "gelu", "gelu_tanh", "swiglu")
POSITIONS = ("learned", "sinusoidal", "rope", "none")
BACKENDS = ("sdpa", "explicit")
INITS = ("normal", "torch", "xavier")
SCHEDULES = ("cosine", "linear", "constant")


class ConfigError(ValueError):
    """An invalid configuration; the message is one line meant for the user."""


def _check(ok: bool, msg: str) -> None:
    if not ok:
        raise ConfigError(msg)


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 96
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int | None = None  # None -> n_heads (MHA); 1 -> MQA; in between -> GQA
    head_dim: int | None = None  # None -> d_model // n_heads; may differ from it (attention width h*head_dim)
    d_ff: int | None = None  # None -> 4*d_model, or the LLaMA rule 2/3*4d rounded up to 256 for swiglu
    ffn: str = "gelu"
    norm: str = "layer"
    placement: str = "pre"
    max_seq_len: int = 256
    pos: str = "learned"
    bias: bool = True
    tie_weights: bool = True
    final_norm: bool | None = None  # None -> True for pre-norm stacks, False for post/deepnorm
    causal: bool = True
    attn_scale: float | None = None  # None -> 1/sqrt(head_dim); 1.0 -> unscaled dot product
    attn_backend: str = "sdpa"
    norm_eps: float = 1e-5
    init: str = "normal"  # normal(0, 0.02) with residual projections / sqrt(2L), torch defaults, or xavier
    emb_scale: bool = False  # multiply token embeddings by sqrt(d_model)
    n_token_types: int = 0  # BERT's segment embeddings
    emb_norm: bool = False  # BERT's LayerNorm after the embeddings
    n_experts: int = 0  # >0: mixture-of-experts FFN with a linear router
    moe_top_k: int = 2
    rope_base: float = 10000.0

    # derived
    kv_heads: int = field(init=False)
    dk: int = field(init=False)
    ff: int = field(init=False)
    use_final_norm: bool = field(init=False)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "max_seq_len"):
            _check(
                isinstance(getattr(self, name), int) and getattr(self, name) > 0,
                f"{name} must be a positive integer, got {getattr(self, name)!r}",
            )
        _check(self.norm in NORMS, f"norm must be one of {NORMS}, got {self.norm!r}")
        _check(self.placement in PLACEMENTS, f"placement must be one of {PLACEMENTS}, got {self.placement!r}")
        _check(self.ffn in FFNS, f"ffn must be one of {FFNS}, got {self.ffn!r}")
        _check(self.pos in POSITIONS, f"pos must be one of {POSITIONS}, got {self.pos!r}")
        _check(
            self.attn_backend in BACKENDS,
            f"attn_backend must be one of {BACKENDS}, got {self.attn_backend!r}",
        )
        _check(self.init in INITS, f"init must be one of {INITS}, got {self.init!r}")
        if self.head_dim is None:
            _check(
                self.d_model % self.n_heads == 0,
                f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})",
            )
            dk = self.d_model // self.n_heads
        else:
            _check(self.head_dim > 0, f"head_dim must be positive, got {self.head_dim}")
            dk = self.head_dim
        kv = self.n_heads if self.n_kv_heads is None else self.n_kv_heads
        _check(
            isinstance(kv, int) and kv > 0, f"n_kv_heads must be a positive integer, got {self.n_kv_heads!r}"
        )
        _check(self.n_heads % kv == 0, f"n_heads ({self.n_heads}) must be divisible by n_kv_heads ({kv})")
        if self.pos == "rope":
            _check(dk % 2 == 0, f"rope needs an even head_dim, got {dk}")
        if self.pos == "sinusoidal":
            _check(self.d_model % 2 == 0, f"sinusoidal positions need an even d_model, got {self.d_model}")
        if self.d_ff is None:
            ff = 4 * self.d_model
            if self.ffn == "swiglu":  # LLaMA: 2/3 of 4d, rounded up to a multiple of 256
                ff = 256 * math.ceil(int(2 * 4 * self.d_model / 3) / 256)
        else:
            _check(self.d_ff > 0, f"d_ff must be positive, got {self.d_ff}")
            ff = self.d_ff
        _check(self.n_experts >= 0, f"n_experts must be >= 0, got {self.n_experts}")
        if self.n_experts:
            _check(
                1 <= self.moe_top_k <= self.n_experts,
                f"moe_top_k must lie in [1, n_experts={self.n_experts}], got {self.moe_top_k}",
            )
        _check(
            self.attn_scale is None or self.attn_scale > 0,
            f"attn_scale must be positive, got {self.attn_scale}",
        )
        _check(self.norm_eps >= 0, f"norm_eps must be >= 0, got {self.norm_eps}")
        _check(self.n_token_types >= 0, f"n_token_types must be >= 0, got {self.n_token_types}")
        final = (self.placement == "pre") if self.final_norm is None else self.final_norm
        object.__setattr__(self, "kv_heads", kv)
        object.__setattr__(self, "dk", dk)
        object.__setattr__(self, "ff", ff)
        object.__setattr__(self, "use_final_norm", final)

    @property
    def scale(self) -> float:
        """The factor applied to q.k before softmax."""
        return 1.0 / math.sqrt(self.dk) if self.attn_scale is None else float(self.attn_scale)

    def replace(self, **changes) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 200
    batch_size: int = 32
    seq_len: int = 64
    lr: float = 1e-3
    min_lr_ratio: float = 0.1  # the decay ends at lr * min_lr_ratio
    warmup: int = 0  # linear warm-up steps; 0 allowed
    schedule: str = "cosine"
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float | None = None  # off by default: clipping hides instability
    eval_every: int = 50
    eval_batches: int = 8
    log_grad_every: int = 0  # 0: per-layer gradient norms only at step 0 and at eval steps
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "seq_len", "eval_every", "eval_batches"):
            _check(
                isinstance(getattr(self, name), int) and getattr(self, name) > 0,
                f"{name} must be a positive integer, got {getattr(self, name)!r}",
            )
        _check(self.lr > 0, f"lr must be positive, got {self.lr}")
        _check(
            0 <= self.warmup <= self.steps, f"warmup must lie in [0, steps={self.steps}], got {self.warmup}"
        )
        _check(self.schedule in SCHEDULES, f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        _check(0 <= self.min_lr_ratio <= 1, f"min_lr_ratio must lie in [0, 1], got {self.min_lr_ratio}")
        _check(
            self.grad_clip is None or self.grad_clip > 0,
            f"grad_clip must be positive or None, got {self.grad_clip}",
        )
        object.__setattr__(self, "betas", tuple(self.betas))

    def replace(self, **changes) -> TrainConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def llama_like(**kw) -> ModelConfig:
    """The LLaMA family's block: SwiGLU FFN, RMSNorm, rotary positions, no biases."""
    return ModelConfig(ffn="swiglu", norm="rms", pos="rope", bias=False, **kw)


def _gpt2(d: int, layers: int, heads: int) -> ModelConfig:
    return ModelConfig(
        vocab_size=50257, d_model=d, n_layers=layers, n_heads=heads, max_seq_len=1024, ffn="gelu_tanh"
    )


def _bert(d: int, layers: int, heads: int) -> ModelConfig:
    return ModelConfig(
        vocab_size=30522,
        d_model=d,
        n_layers=layers,
        n_heads=heads,
        max_seq_len=512,
        placement="post",
        causal=False,
        n_token_types=2,
        emb_norm=True,
        norm_eps=1e-12,
    )


def _vaswani(d: int, heads: int, **kw) -> ModelConfig:
    """The original Transformer's encoder stack (post-LN, ReLU, 6 layers); decoder blocks add cross-attention
    (see `measure.counting`)."""
    return ModelConfig(
        vocab_size=37000,
        d_model=d,
        n_layers=6,
        n_heads=heads,
        max_seq_len=512,
        placement="post",
        ffn="relu",
        causal=False,
        pos="sinusoidal",
        emb_scale=True,
        **kw,
    )


# Named presets: the published sizes, used both for closed-form counting and for instantiation.
PRESETS: dict[str, ModelConfig] = {
    "gpt2-small": _gpt2(768, 12, 12),
    "gpt2-medium": _gpt2(1024, 24, 16),
    "gpt2-large": _gpt2(1280, 36, 20),
    "gpt2-xl": _gpt2(1600, 48, 25),
    "bert-base": _bert(768, 12, 12),
    "bert-large": _bert(1024, 24, 16),
    "transformer-base": _vaswani(512, 8),
    "transformer-big": _vaswani(1024, 16, d_ff=4096),
    "llama-7b": llama_like(
        vocab_size=32000, d_model=4096, n_layers=32, n_heads=32, d_ff=11008, tie_weights=False,
                           max_seq_len=2048,
        norm_eps=1e-6,
    ),
    "llama2-70b": llama_like(
        vocab_size=32000, d_model=8192, n_layers=80, n_heads=64, n_kv_heads=8, d_ff=28672, tie_weights=False,
        max_seq_len=4096, norm_eps=1e-5,
    ),
    "mixtral-8x7b": llama_like(
        vocab_size=32000, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=14336, tie_weights=False,
        max_seq_len=4096, n_experts=8, moe_top_k=2, rope_base=1e6,
    ),
}  # fmt: skip
