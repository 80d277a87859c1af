"""The declared rule of `length_extrapolation`, fed synthetic records. The staged grid grows as the runner
grows it (each arm's sweep chooses its rate on the selection seeds); each run's per-position losses are
written so that its window means are known in advance: a level L over the first T positions and L + rise
beyond, so the loss increase at n× is rise·(n − 1)/n."""

import numpy as np
import pytest

from tfclaims.evidence.evaluate import CheckFailed
from tfclaims.harness.registry import load

from rules import analyse, grown, sub, verdicts

EXP = load("length_extrapolation")
P = {**EXP.profiles["quick"], "seeds": [0, 1, 2, 3, 4]}
T, N = P["seq_len"], max(P["mults"]) * P["seq_len"]
UNIGRAM = 3.3
JITTER = (0.011, -0.007, 0.004, -0.009, 0.006)  # per seed: the null pairs' spread comes from it
COUNTED = ("control", "alibi", "copy-random", "works")

# beyond-T rise of each arm; the learned table's extensions: rise over positions T.. as built and trained
HOLDS = {"sinusoidal": 0.8, "rope": 0.4, "alibi": 0.0, "copy": (0.3, -0.1), "random": (1.5, 0.03)}
FAILS = {"sinusoidal": -0.2, "rope": 0.4, "alibi": 0.9, "copy": (1.6, 0.4), "random": (0.3, 0.1)}


def curve(level: float, rise: float, n: int, s: int) -> dict:
    """Per-position losses over n positions: level for the first T, level + rise beyond (plus a seed's
    wobble that grows with the rise, so differences are not exact)."""
    w = JITTER[s]
    y = np.full(n, level + w)
    y[T:] += rise * (1 + 3 * w)
    return {"at_0": y.tolist()}


def metrics(c: dict, v: float, ok: bool, arms: dict, s: int, tile=0.0, kept=0.0, shift=0.0) -> dict:
    """One run's record; `shift` is added to every rise (the null pairs' reruns get it)."""
    level = v if ok else UNIGRAM
    pos = c["pos"]
    arms = {k: (r + shift if isinstance(r, float) else tuple(x + shift for x in r)) for k, r in arms.items()}
    own = T if pos == "learned" else N  # positions a model has
    m = {
        "final_val": level,
        "best_val": level,
        "val_loss": [4.4, level + 0.2, level],
        "eval_steps": [0, 6, 12],
        "unigram_xent": UNIGRAM,
        "diverged_at": None,
        "longest_window": own,
        "position_loss": curve(level, 0.0 if pos == "learned" else arms[pos], own, s),
    }
    if c.get("extend"):
        m["extended"] = {
            how: {
                "position_loss": curve(level, arms[how][0], N, s),
                "kept_change": kept,
                "tile_error": tile if how == "copy" else 0.7,
                "trained": {
                    "position_loss": curve(level, arms[how][1], N, s),
                    "final_val": level,
                    "diverged_at": None,
                    "seconds": 1.0,
                },
            }
            for how in ("copy", "random")
        }
    return m


def records(arms=HOLDS, learned=lambda pos: True, p=P, null_shift=0.0, **kw):
    def run(c: dict) -> dict:
        null = c["seed"] >= 1000
        s = (c["seed"] + 2 * null) % 5  # a rerun wobbles as another seed does
        v = 2.0 + JITTER[s] + 0.05 * np.log2(c["lr"] / p["rates"][-1]) ** 2
        return metrics(c, v, learned(c["pos"]), arms, s, shift=null_shift if null else 0.0, **kw)

    return grown(EXP, p, run)


def test_rule_supported_when_sinusoids_rise_alibi_stays_and_copying_wins(tmp_path):
    v = analyse(EXP, records(), P, tmp_path)
    assert all(verdicts(v)[k] == "supported" for k in COUNTED), verdicts(v)
    assert verdicts(v)["rope-alibi"] == verdicts(v)["rope-sinusoidal"] == "supported"  # RoPE in between
    assert not sub(v, "rope-alibi").counts and all(sub(v, k).counts for k in COUNTED)
    assert v.verdict == "supported"
    assert verdicts(v)["stops"] == verdicts(v)["kept"] == verdicts(v)["tiled"] == "supported"
    assert "sinusoidal +0.7" in v.key_number and "ALiBi +0.000" in v.key_number and "nan" not in v.key_number


def test_rule_refuted_when_everything_goes_the_other_way(tmp_path):
    v = analyse(EXP, records(FAILS), P, tmp_path)
    assert all(verdicts(v)[k] == "refuted" for k in COUNTED), verdicts(v)
    assert v.verdict == "refuted"


def test_rule_a_significant_null_pair_leaves_the_cells_it_was_run_in_undecided(tmp_path):
    """The arms as in the supported case, but each rerun's rise is 0.1 nats/char above its original's: both
    null pairs are significant, so the cells they calibrate are undecided whatever their p (every ALiBi
    cell; the copied rows after training), while the extension as built, which no null pair reran, still
    decides: supported beside undecided is not supported."""
    v = analyse(EXP, records(null_shift=0.1), P, tmp_path)
    assert all(c.p < 0.05 for c in v.noise_floor if c.id.startswith(("null/", "learned-null/loss2x")))
    alibi = [c for c in v.comparisons if c.sub_claim == "alibi"]
    assert len(alibi) == 3 and all(c.p < 0.05 and c.null_significant for c in alibi)
    assert {c.decision for c in alibi} == {"undecided"}
    cr = {c.id.rsplit("-", 1)[1]: c for c in v.comparisons if c.sub_claim == "copy-random"}
    assert cr["trained"].null_significant and cr["trained"].decision == "undecided"
    assert cr["built"].null_p is None and cr["built"].decision == "a_better"
    assert verdicts(v)["alibi"] == verdicts(v)["copy-random"] == "inconclusive"
    assert "the null pair in the cell is significant" in sub(v, "copy-random").detail


def test_rule_an_arm_that_did_not_learn_is_left_out(tmp_path):
    v = analyse(EXP, records(learned=lambda pos: pos != "alibi"), P, tmp_path)
    assert verdicts(v)["alibi"] == "inconclusive" and verdicts(v)["control"] == "supported"
    v = analyse(EXP, records(learned=lambda pos: False), P, tmp_path)
    assert v.verdict == "inconclusive"
    assert all(verdicts(v)[k] == "inconclusive" for k in COUNTED)
    assert all(c.decision == "excluded" for c in v.comparisons if c.sub_claim in ("alibi", "copy-random"))


@pytest.mark.parametrize("bad", [dict(tile=1e-3), dict(kept=0.5)])
def test_rule_a_failing_check_stops_the_claim(tmp_path, bad):
    with pytest.raises(CheckFailed):
        analyse(EXP, records(**bad), P, tmp_path)


def test_rule_a_learned_table_that_ran_past_t_fails_its_check(tmp_path):
    recs = records()
    for r in recs:
        if r["config"]["pos"] == "learned":
            r["metrics"]["longest_window"] = 2 * T
    with pytest.raises(CheckFailed, match="stops"):
        analyse(EXP, recs, P, tmp_path)


def test_rule_text_names_the_arms_the_extension_and_the_null_pairs():
    text = EXP.rule_text(EXP.profiles["default"])
    assert "ALiBi" in text and "rows copied" in text and "rows drawn at random" in text
    assert "selection seeds" in text and "rerun" in text
    assert "{" not in text and "None" not in text and "nan" not in text


def test_tables_and_figures_are_written(tmp_path):
    v = analyse(EXP, records(), P, tmp_path, render=True)
    assert v.verdict == "supported"
    for name in ("length", "extension", "lr_choices", "lr_sweep", "differences"):
        assert (tmp_path / f"{name}.csv").is_file()
    for fig in ("length", "extension", "lr-sweep"):
        assert (tmp_path / "figures" / f"{fig}.png").is_file()
