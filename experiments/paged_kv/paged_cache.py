"""A paged KV cache: keys and values in a pool of fixed-size blocks, found through a block table (Kwon et al.
2023, vLLM's PagedAttention), with `KVCache`'s interface so the library's models decode with either.

Per layer the pool is (n_blocks, kv, block, dk); the table (B, blocks per sequence) maps a sequence's i-th
block of positions to a pool block. Blocks are handed out in a shuffled order, as a pool that has served other
requests hands them out: a sequence's blocks are not adjacent. Attention reads a sequence's keys and values by
gathering its blocks, (B, kv, n, dk) from the pool through the table: the indirection whose cost the
`paged_kv` claim measures. (vLLM's kernel reads the blocks in place; gathering then calling SDPA is the
portable equivalent and an upper bound on the cost.)
"""

from __future__ import annotations

import torch

from tfclaims.nn.config import ModelConfig


class PagedKVCache:
    def __init__(
        self,
        n_layers: int,
        batch: int,
        kv_heads: int,
        max_len: int,
        dk: int,
        *,
        block: int = 16,
        dtype=torch.float32,
        device=None,
        seed: int = 0,
    ):
        if block < 1:
            raise ValueError(f"block must be >= 1, got {block}")
        per_seq = -(-max_len // block)
        n_blocks = batch * per_seq
        shape = (n_blocks, kv_heads, block, dk)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        order = torch.randperm(n_blocks, generator=torch.Generator().manual_seed(seed))
        self.table = order.view(batch, per_seq).to(device)  # (B, blocks per sequence): pool block ids
        self.block, self.max_len, self.batch = block, max_len, batch
        self.pos = 0  # number of positions filled; advanced by the model after all layers ran

    @classmethod
    def for_model(
        cls,
        cfg: ModelConfig,
        batch: int,
        max_len: int | None = None,
        *,
        block: int = 16,
        dtype=torch.float32,
        device=None,
        seed: int = 0,
    ) -> PagedKVCache:
        return cls(
            cfg.n_layers,
            batch,
            cfg.kv_heads,
            max_len or cfg.max_seq_len,
            cfg.dk,
            block=block,
            dtype=dtype,
            device=device,
            seed=seed,
        )

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write (B, kv, T, dk) at the current position into its blocks; return all keys/values so far,
        gathered from the pool, (B, kv, pos+T, dk)."""
        end = self.pos + k.shape[2]
        if end > self.max_len:
            raise ValueError(f"KV cache holds {self.max_len} positions; cannot write up to {end}")
        positions = torch.arange(self.pos, end, device=self.table.device)
        blocks = self.table[:, positions // self.block]  # (B, T) pool block of each new position
        offsets = positions % self.block  # (T,)
        for pool, new in ((self.k[layer], k), (self.v[layer], v)):
            pool[blocks, :, offsets] = new.transpose(1, 2)  # (B, T, kv, dk) into (n_blocks, kv, block, dk)
        return self._gather(self.k[layer], end), self._gather(self.v[layer], end)

    def _gather(self, pool: torch.Tensor, end: int) -> torch.Tensor:
        used = -(-end // self.block)
        g = pool[self.table[:, :used]]  # (B, used, kv, block, dk)
        return g.transpose(1, 2).flatten(2, 3)[:, :, :end]  # (B, kv, used·block, dk) → first `end` positions

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)
