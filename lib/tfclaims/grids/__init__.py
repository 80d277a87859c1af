"""What the claims' grids share: `sweep` grows a learning-rate sweep per arm and scale from the runs made so
far. A claim's own grid lives in its folder (`experiments/<id>/grid.py`). Torch-free: `tfclaims plan` builds
grids without it."""
