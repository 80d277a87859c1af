"""Parameter counts of BERT and ALBERT in closed form (the Hugging Face models' structure), and of the
library's stack with its blocks shared.

BERT: embeddings V·H + P·H + T·H and their LayerNorm, L blocks of 4H² + 2IH (+ biases and two LayerNorms), a
pooler H² + H. ALBERT factorises the embedding (V·E + P·E + T·E, its LayerNorm at width E, then an E×H map
with bias) and shares one block across the L depths. P = 512 positions and T = 2 token types, as both papers.
"""

from __future__ import annotations

from dataclasses import dataclass

from tfclaims.measure.counting import block_params, model_params
from tfclaims.nn.config import ModelConfig

POSITIONS, TYPES = 512, 2


@dataclass(frozen=True)
class Size:
    """One published size: vocabulary V, hidden H, layers L, embedding E (ALBERT), FFN I = 4H."""

    name: str
    V: int
    H: int
    L: int
    E: int

    @property
    def I(self) -> int:  # noqa: E743
        return 4 * self.H


# Lan et al. 2020, Table 1: BERT and ALBERT at each size (V = 30,000, E = 128 for ALBERT)
SIZES = (
    Size("base", 30000, 768, 12, 128),
    Size("large", 30000, 1024, 24, 128),
    Size("xlarge", 30000, 2048, 24, 128),
)
PUBLISHED = {"base": (108e6, 12e6), "large": (334e6, 18e6), "xlarge": (1270e6, 60e6)}  # (BERT, ALBERT)


def encoder_layer(H: int, I: int) -> int:  # noqa: E741
    """One BERT/ALBERT block: Q, K, V, O with biases, two LayerNorms, the FFN's two maps with biases."""
    return 4 * (H * H + H) + (H * I + I) + (I * H + H) + 2 * 2 * H


def embeddings(V: int, width: int) -> int:
    """Token, position and token-type tables at `width`, and their LayerNorm."""
    return (V + POSITIONS + TYPES) * width + 2 * width


def bert_params(V: int, H: int, L: int, I: int) -> int:  # noqa: E741
    """BertModel: embeddings at H, L blocks, the pooler."""
    return embeddings(V, H) + L * encoder_layer(H, I) + H * H + H


def albert_params(V: int, E: int, H: int, L: int, I: int, shared: bool = True) -> int:  # noqa: E741
    """AlbertModel: embeddings at E, the E→H map, one block (or L unshared), the pooler."""
    return embeddings(V, E) + E * H + H + (1 if shared else L) * encoder_layer(H, I) + H * H + H


def shared_stack_params(c: ModelConfig) -> int:
    """The library's LM (`model_params`) with its L blocks shared (`nn.sharing.share_blocks`): one block's."""
    return model_params(c) - (c.n_layers - 1) * block_params(c)
