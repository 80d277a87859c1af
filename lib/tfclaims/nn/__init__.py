"""The model library: configs and published presets, attention with its KV cache, positions, norms, blocks,
models."""
