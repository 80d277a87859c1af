"""postln_quality's library pieces against independent computations: the fixed subset (evenly spaced blocks
of the text), windows drawn inside one block, the epoch count, the staged grid (a sweep per subset size, a
null pair per subset) and the run recipe (a tiny run: deterministic, reading the subset's loss at every
evaluation, with an untied head)."""

import numpy as np
import pytest
import torch

from tfclaims.data.files import CorpusError
from tfclaims.harness.registry import load
from tfclaims.nn.config import ConfigError

from experiments.postln_quality.grid import NULL_OFFSET, grid_sweep, subsets
from experiments.postln_quality.subset import block_windows, epochs, fixed_subset

DATA = torch.arange(10_000) % 251  # (N,) distinct neighbours: a window's position can be read back


def test_fixed_subset_is_evenly_spaced_blocks_of_the_text():
    blocks = fixed_subset(DATA, 4 * 300, 300)
    starts = [i * (10_000 - 300) // 3 for i in range(4)]  # the first at 0, the last ending at N
    expect = np.stack([DATA.numpy()[s : s + 300] for s in starts])
    assert blocks.shape == (4, 300) and np.array_equal(blocks.numpy(), expect)


@pytest.mark.parametrize("n_chars, block", [(1000, 300), (0, 300), (20_000, 500)])
def test_fixed_subset_refuses_sizes_that_are_not_whole_blocks_of_the_text(n_chars, block):
    with pytest.raises(CorpusError, match="subset"):
        fixed_subset(DATA, n_chars, block)


def test_block_windows_stay_inside_one_block_and_shift_by_one():
    text = torch.arange(6000)  # every token distinct: a window is found by its first token
    blocks = fixed_subset(text, 3 * 40, 40)
    x, y = block_windows(blocks, 256, 16, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (256, 16) and x.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    inside = {int(b[0]): int(b[-1]) for b in blocks}  # block start token -> its last token
    for row_x, row_y in zip(x, y):
        start = max(s for s in inside if s <= int(row_x[0]))
        assert int(row_y[-1]) <= inside[start]  # the target's last token is still in the same block
        assert torch.equal(row_y, torch.arange(int(row_x[0]) + 1, int(row_x[0]) + 17))
    firsts = {int(v) - max(s for s in inside if s <= int(v)) for v in x[:, 0]}
    assert 0 in firsts and 40 - 17 in firsts  # every start offset can be drawn, the last one included
    x2, _ = block_windows(blocks, 256, 16, torch.Generator().manual_seed(0))
    assert torch.equal(x, x2)  # a seeded generator gives the same windows
    with pytest.raises(CorpusError, match="shorter"):
        block_windows(blocks, 2, 40, torch.Generator())


def test_epochs_is_predicted_characters_over_the_subset():
    assert epochs(400, 32, 64, 40_960) == pytest.approx(20.0)
    assert epochs(400, 32, 64, 409_600) == pytest.approx(2.0)


def test_default_profile_reads_the_subsets_twenty_and_two_times():
    p = load("postln_quality").profiles["default"]
    assert [epochs(p["steps"], p["batch"], p["seq_len"], k) for k in p["subsets"]] == [20.0, 2.0]


def test_grid_sweeps_each_subset_and_reruns_pre_ln_in_every_cell():
    exp = load("postln_quality")
    p = {**exp.profiles["quick"], "seeds": [0, 1]}
    first = grid_sweep(p, [])
    per = len(p["rates"]) * len(p["selection_seeds"])
    assert len(first) == 2 * len(subsets(p)) * per  # two placements, the first scale only, selection seeds
    assert {c["subset"] for c in first} == set(p["subsets"]) and all(c["part"] == "sweep" for c in first)

    def finish(cfgs):  # every run done; Pre-LN best at the highest rate, Post-LN at the lowest
        out = []
        for c in cfgs:
            v = 2.0 - c["lr"] if c["placement"] == "pre" else 2.0 + c["lr"]
            out.append({"config": c, "metrics": {"final_val": v, "val_loss": [4.0, v], "diverged_at": None}})
        return out

    grid = None
    while (g := grid_sweep(p, finish(grid or first))) != grid:
        grid = g
    nulls = [c for c in grid if c["seed"] >= NULL_OFFSET]
    n_cells = len(p["subsets"]) * len(p["scales"])
    assert len(nulls) == n_cells * len(p["seeds"]) and {c["placement"] for c in nulls} == {"pre"}
    every = {(k, L) for k in p["subsets"] for _, L in p["scales"]}
    assert {(c["subset"], c["n_layers"]) for c in nulls} == every
    pre = {(c["subset"], c["n_layers"], c["seed"]): c["lr"] for c in grid if c["placement"] == "pre"}
    # each rerun at its fresh run's rate: the cell's choice
    assert all(pre[c["subset"], c["n_layers"], c["seed"] - NULL_OFFSET] == c["lr"] for c in nulls)


@pytest.mark.parametrize("bad", [{"subsets": [4096, 1024]}, {"subsets": [1000]}, {"block": 16}])
def test_grid_refuses_malformed_subsets(bad):
    p = {**load("postln_quality").profiles["quick"], **bad}
    with pytest.raises(ConfigError):
        grid_sweep(p, [])


def test_recipe_reads_the_subset_loss_at_each_evaluation_and_repeats_itself():
    from tfclaims.device import seed_all
    from tfclaims.harness.experiment import RunContext
    from tfclaims.nn.models import LM
    from tfclaims.train.profiles import model_config, model_kw

    from experiments.postln_quality.recipes import train_repeated

    cfg = {"placement": "post", "d_model": 16, "n_layers": 1, "n_heads": 2, "seq_len": 16, "batch": 4,
           "steps": 6, "lr": 3e-3, "eval_every": 3, "eval_batches": 1, "subset": 1024, "block": 256,
           "seed": 0}  # fmt: skip
    ctx = RunContext(device=torch.device("cpu"), progress=False)
    seed_all(0)  # as the runner does before a run
    m = train_repeated(cfg, ctx)
    assert len(m["train_loss_eval"]) == len(m["val_loss"]) == 3
    assert m["final_train"] == m["train_loss_eval"][-1] and m["epochs"] == pytest.approx(6 * 4 * 16 / 1024)
    assert m["train_loss_eval"][0] == pytest.approx(m["val_loss"][0], abs=0.2)  # at init: both near log V
    seed_all(0)
    again = train_repeated(cfg, ctx)
    assert [again[k] for k in ("val_loss", "train_loss_eval")] == [
        m[k] for k in ("val_loss", "train_loss_eval")
    ]
    lm = LM(model_config(cfg, 85, **model_kw(cfg)))
    assert lm.head.weight is not lm.stack.tok.weight and lm.cfg.placement == "post"  # untied head
