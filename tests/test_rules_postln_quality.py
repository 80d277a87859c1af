"""The postln_quality rule on synthetic run records: every outcome it can give.

The quick profile's grid (grown stage by stage as the runner grows it) with five fresh seeds and two
selection seeds, so that the paired tests can decide. A run's final held-out loss is its placement's level in
its cell, plus a bowl around its best rate and a seed-and-placement jitter (which the null pair sees); its
training-subset loss lies its placement's gap below it."""

import numpy as np

from tfclaims.harness.registry import load

from experiments.postln_quality.grid import NULL_OFFSET
from rules import analyse, decisions, grown, sub, verdicts

EXP = load("postln_quality")
P = {**EXP.profiles["quick"], "seeds": [0, 1, 2, 3, 4], "selection_seeds": [10, 11]}
UNIGRAM = 3.3
SMALL, LARGE = P["subsets"]


def jitter(seed: int, placement: str) -> float:
    return 0.01 * np.random.default_rng([seed, placement == "post"]).standard_normal()


def records(
    level,
    gap=lambda placement, subset: 0.1,
    learned=lambda c: True,
    diverged=lambda c: False,
    rerun_shift=lambda c: 0.0,
):
    """level(placement, subset) -> the final held-out loss at the best rate; learned(config) False: the run
    ends at the unigram level; diverged(config) True: the run diverged (no final loss); rerun_shift(config)
    is added to a null-pair rerun's loss (seeds from NULL_OFFSET)."""

    def metrics(c: dict) -> dict:
        best = P["rates"][-1] if c["n_layers"] == P["scales"][0][1] else P["rates"][-1] / 2
        v = level(c["placement"], c["subset"]) + jitter(c["seed"], c["placement"])
        v = v + 0.05 * np.log2(c["lr"] / best) ** 2 if learned(c) else UNIGRAM + 0.01 * (c["seed"] % 2)
        v += rerun_shift(c) if c["seed"] >= NULL_OFFSET else 0.0
        m = {
            "final_val": v,
            "best_val": v,
            "val_loss": [4.4, v + 0.2, v],
            "eval_steps": [0, 6, 12],
            "final_train": v - gap(c["placement"], c["subset"]),
            "unigram_xent": UNIGRAM,
            "diverged_at": None,
            "epochs": 1.0,
            "train_loss_eval": [4.4, v, v - 0.1],
        }
        if diverged(c):
            m |= {"final_val": None, "final_train": None, "diverged_at": 5, "val_loss": [4.4, None]}
        return m

    return grown(EXP, P, metrics)


def test_postln_rule_supported_when_post_ln_ends_lower_in_every_cell(tmp_path):
    v = analyse(EXP, records(lambda pl, k: 2.0 if pl == "post" else 2.3), P, tmp_path)
    assert v.verdict == "supported" and verdicts(v)["quality"] == "supported"
    assert set(decisions(v, "quality").values()) == {"b_better"} and len(decisions(v, "quality")) == 4
    assert not sub(v, "gap").counts and not sub(v, "data-size").counts


def test_postln_rule_refuted_when_pre_ln_ends_lower_everywhere(tmp_path):
    v = analyse(EXP, records(lambda pl, k: 2.3 if pl == "post" else 2.0), P, tmp_path)
    assert v.verdict == "refuted" and set(decisions(v, "quality").values()) == {"a_better"}


def test_postln_rule_mixed_with_the_anchors_data_size_dependence(tmp_path):
    """Pre-LN ahead on the small subset, Post-LN on the larger: mixed, and the reported trend finds it."""
    level = {("post", SMALL): 2.3, ("pre", SMALL): 2.0, ("post", LARGE): 2.0, ("pre", LARGE): 2.3}
    v = analyse(EXP, records(lambda pl, k: level[pl, k]), P, tmp_path)
    assert v.verdict == "mixed"
    assert verdicts(v)["data-size"] == "supported"


def test_postln_rule_differences_inside_the_noise_floor_decide_nothing(tmp_path):
    v = analyse(EXP, records(lambda pl, k: 2.0 if pl == "post" else 2.004), P, tmp_path)
    assert verdicts(v)["quality"] == "inconclusive" and v.verdict == "inconclusive"


def test_postln_rule_each_cell_reads_its_own_null_pair(tmp_path):
    """Pre-LN's rerun drifting in one cell only (deeper stack, larger subset): that cell is undecided, the
    other three still decide, and the claim cannot hold in every cell."""
    deep = P["scales"][1][1]
    shift = lambda c: 0.3 if c["n_layers"] == deep and c["subset"] == LARGE else 0.0  # noqa: E731
    v = analyse(EXP, records(lambda pl, k: 2.0 if pl == "post" else 2.3, rerun_shift=shift), P, tmp_path)
    got = decisions(v, "quality")
    drifted = f"d{P['scales'][1][0]}-L{deep}-k{LARGE // 1024}"
    assert got.pop(f"quality/{drifted}") == "undecided" and set(got.values()) == {"b_better"}
    assert verdicts(v)["quality"] == "inconclusive"


def test_postln_rule_excludes_cells_where_neither_placement_learned(tmp_path):
    v = analyse(EXP, records(lambda pl, k: 2.0, learned=lambda c: False), P, tmp_path)
    assert v.verdict == "inconclusive"
    assert set(decisions(v, "quality").values()) == {"excluded"}


def test_postln_rule_drops_diverged_runs_and_names_them(tmp_path):
    """Post-LN diverging at the highest rate on the small subset: those runs count at init in the sweep, the
    rate is not chosen, and the caveat lists them."""
    top = P["rates"][-1]
    diverged = lambda c: c["placement"] == "post" and c["lr"] >= top  # noqa: E731
    v = analyse(EXP, records(lambda pl, k: 2.0 if pl == "post" else 2.3, diverged=diverged), P, tmp_path)
    assert v.verdict == "supported"
    assert v.evidence["diverged_runs"] > 0 and any(
        "seed" in c for c in v.caveats if c.startswith("Runs that")
    )
    post = [c for c in v.evidence["lr_choices"] if c["arm"] == "post"]
    assert all(c["chosen_lr"] < top for c in post)


def test_postln_rule_repetition_control_and_gap(tmp_path):
    """Pre-LN's gap large on the small subset and small on the larger; Post-LN's smaller everywhere."""
    gaps = {("pre", SMALL): 0.5, ("pre", LARGE): 0.05, ("post", SMALL): 0.2, ("post", LARGE): 0.0}
    v = analyse(
        EXP, records(lambda pl, k: 2.0 if pl == "post" else 2.3, gap=lambda pl, k: gaps[pl, k]), P, tmp_path
    )
    assert verdicts(v)["repetition"] == "supported"
    assert verdicts(v)["gap"] == "supported"


def test_postln_rule_text_names_the_cells_and_the_null_pair():
    text = EXP.rule_text(P)
    assert "Pre-LN rerun" in text and "selection seeds" in text and "log10 chars" in text
    labels = [c.label for c in EXP.declare(P).sub("quality").cells]
    assert labels == [f"d{d}-L{L}-k{k // 1024}" for k in P["subsets"] for d, L in P["scales"]]
