"""Which runs an experiment makes: run configs built from a profile (what the experiment varies), before any
run, and the configs and constants a claim's recipes share with its grid (a model config, the arms' names).
`sweep` grows a learning-rate sweep per arm and scale from the runs made so far; a module per claim holds that
claim's grid where it is more than a few lines. Torch-free: `tfclaims plan` builds grids without it. The runs
themselves are `claims`' recipes; the records are read by `analysis`."""
