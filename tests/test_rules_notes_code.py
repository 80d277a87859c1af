"""The declared rule of `notes_code` on synthetic records: the snippets part is the recipe's own output
(exact and cheap), edited to give each outcome; the training sweep is synthetic and grown as the runner grows
it (each arm chooses its rate on the selection seeds, then runs it on the fresh seeds)."""

import math

import numpy as np
import pytest
import torch

from tfclaims.evidence.evaluate import CheckFailed
from tfclaims.harness.experiment import RunContext
from tfclaims.harness.registry import load

from experiments.notes_code.grid import SNIPPET_KEYS
from experiments.notes_code.recipes import run_snippets
from rules import analyse, comparison, grown, sub, verdicts

EXP = load("notes_code")
P = {**EXP.profiles["quick"], "seeds": [0, 1, 2, 3]}  # four fresh seeds: paired tests with some power
UNIGRAM = 3.3
ARM_INDEX = {"fixed": 0, "bert": 1, "attention_ln": 2, "no_wo": 3}
COSTS = {"bert": 0.3, "attention_ln": 0.0, "no_wo": 0.0}  # only the redrawn projection costs loss
SNIPPETS = {}


def snippet_metrics(seed: int) -> dict:
    if seed not in SNIPPETS:
        cfg = {k: P[k] for k in SNIPPET_KEYS}
        SNIPPETS[seed] = run_snippets({**cfg, "seed": seed}, RunContext(torch.device("cpu"), progress=False))
    return SNIPPETS[seed]


def records(costs=COSTS, edit=None, learned=True, p=P):
    """costs: arm -> its final loss above the fixed module's at each arm's best rate; edit(rows): changes the
    snippets' rows in place."""

    def metrics(c: dict) -> dict:
        if c["part"] == "snippets":
            m = snippet_metrics(c["seed"])
            m = {**m, "rows": [dict(r) for r in m["rows"]]}
            if edit is not None:
                edit(m["rows"])
        else:
            best = p["rates"][-1]
            wobble = 0.01 * math.sin(1.7 * c["seed"] + ARM_INDEX[c["arm"]])
            v = 2.0 + wobble + 0.05 * np.log2(c["lr"] / best) ** 2 + costs.get(c["arm"], 0.0)
            if not learned:
                v = UNIGRAM + 0.02 * (c["seed"] % 2)
            m = {"final_val": v, "best_val": v, "val_loss": [4.4, v + 0.2, v], "eval_steps": [0, 6, 12],
                 "unigram_xent": UNIGRAM, "diverged_at": None, "n_params": 1000}  # fmt: skip
        return m

    return grown(EXP, p, metrics)


def patch(snippet: str, **values):
    def edit(rows):
        for r in rows:
            if r["snippet"] == snippet:
                r.update(values)

    return edit


def all_fixed(rows):
    """Every snippet as the fix would leave it: it runs and builds nothing per call."""
    for r in rows:
        if r["snippet"] != "001-view-bare":
            r.update(runs=True, exception=None)
        if r["repeat_diff"] is not None:
            r.update(repeat_diff=0.0, unregistered=0)


def test_notes_code_rule_on_the_measured_snippets(tmp_path):
    """The snippets as the recipe measures them: 000 and 002 do not run, 004 §attention needs CUDA, 004 Bert
    Q2 redraws its projection per call; the rest equal the library; the redrawn projection costs loss."""
    v = analyse(EXP, records(), P, tmp_path)
    got = verdicts(v)
    assert got["library"] == "supported" and sub(v, "library").kind == "check"
    for k in ("reference", "masks", "positions", "positions-f64", "ffn", "contiguous", "trains-attention_ln"):
        assert got[k] == "supported", k
    for k in ("runs", "deterministic", "registered"):
        assert got[k] == "mixed", k
    assert got["trains-bert"] == "refuted" and got["trains-no_wo"] == "supported"
    assert not sub(v, "trains-no_wo").counts and not sub(v, "positions-f64").counts
    assert v.verdict == "mixed"

    def failing(k):
        return {c for c, role in sub(v, k).roles.items() if role == "refute"}

    assert failing("runs") == {"runs/000-attention", "runs/000-mha", "runs/002-attention", "runs/004-mha"}
    assert failing("deterministic") == {"deterministic/004-bert-mha"}
    assert failing("registered") == {"registered/004-mha", "registered/004-bert-mha"}
    assert "+0.3" in v.key_number and "nan" not in v.key_number


def test_notes_code_rule_supported_when_every_snippet_is_fixed_and_trains_alike(tmp_path):
    v = analyse(EXP, records(costs={}, edit=all_fixed), P, tmp_path)
    assert v.verdict == "supported"
    assert set(verdicts(v).values()) == {"supported"}


def test_notes_code_rule_fails_a_snippet_that_computes_another_function(tmp_path):
    v = analyse(EXP, records(edit=patch("004-attention", err_ref=1e-3, err_sdpa=1e-3)), P, tmp_path)
    assert verdicts(v)["reference"] == "mixed"
    v = analyse(EXP, records(edit=patch("004-decoder-mask", mismatch=3)), P, tmp_path)
    assert verdicts(v)["masks"] == "mixed"
    v = analyse(EXP, records(edit=patch("001-pe", pe_err=0.5)), P, tmp_path)
    assert verdicts(v)["positions"] == "mixed"


def test_notes_code_rule_undecided_when_the_cost_sits_at_the_margin(tmp_path):
    margin = EXP.declare(P).sub("trains-bert").claim.hi
    v = analyse(EXP, records(costs={**COSTS, "bert": margin}), P, tmp_path)
    assert verdicts(v)["trains-bert"] == "inconclusive"
    assert comparison(v, "trains-bert").decision == "undecided"


def test_notes_code_rule_excludes_runs_that_never_learned(tmp_path):
    v = analyse(EXP, records(learned=False), P, tmp_path)
    for k in ("trains-bert", "trains-attention_ln", "trains-no_wo"):
        assert verdicts(v)[k] == "inconclusive"
        assert comparison(v, k).decision == "excluded"


def test_notes_code_rule_a_reference_that_misses_sdpa_stops_the_claim(tmp_path):
    with pytest.raises(CheckFailed, match="library"):
        analyse(EXP, records(edit=patch("library", err_sdpa=1e-6)), P, tmp_path)
