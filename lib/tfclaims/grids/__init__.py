"""Which runs an experiment makes: run configs built from a profile (what the experiment varies), before any
run. `sweep` grows a learning-rate sweep per arm and scale from the runs made so far; a module per claim holds
that claim's grid where it is more than a few lines. The runs themselves are `claims`' recipes; the records
are read by `analysis`."""
