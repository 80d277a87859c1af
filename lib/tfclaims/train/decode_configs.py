"""What a decoding run decodes, as data: its model config and the K/V head counts it compares.

Torch-free: grids are built from these before anything runs. `train.decode` builds and times the decoders."""

from __future__ import annotations

from ..nn.config import ModelConfig

AA = "A/A"  # the name under which a callable is timed a second time in the same rounds


def kv_list(h: int) -> list[int]:
    """n_kv_heads in {h, h/2, h/4, ..., 1} (halving while it divides)."""
    out = [h]
    while out[-1] > 1 and out[-1] % 2 == 0:
        out.append(out[-1] // 2)
    if out[-1] != 1:
        out.append(1)
    return out


def decode_config(cfg: dict, kv: int | None, max_len: int, backend: str = "sdpa") -> ModelConfig:
    """The decoding model of a run config (d_model, n_layers, n_heads) with `kv` K/V heads (None: MHA)."""
    return ModelConfig(
        vocab_size=96,
        d_model=cfg["d_model"],
        n_layers=cfg["n_layers"],
        n_heads=cfg["n_heads"],
        n_kv_heads=kv,
        max_seq_len=max_len,
        attn_backend=backend,
    )
