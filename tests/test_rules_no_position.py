"""The declared rule of `no_position`, fed synthetic records: the permutation part's exact rows, and
training runs whose final losses and probe gains are set per arm and scale. The staged grid grows as the
runner grows it (each arm's sweep chooses its rate on the selection seeds, which here always prefer 8e-3)."""

import math

import pytest

from tfclaims.evidence.evaluate import CheckFailed
from tfclaims.harness.registry import load

from rules import analyse, comparison, grown, record, sub, verdicts

EXP = load("no_position")
P = {**EXP.profiles["quick"], "seeds": [0, 1, 2, 3]}  # four fresh seeds: power for paired tests
UNIGRAM = 3.3
JITTER = (0.011, -0.007, 0.004, -0.009)  # per seed, shared by every arm: paired differences stay exact
COUNTED = ("encoder", "decoder", "quality", "probe")
ARMS = (("encoder", "none"), ("encoder", "sinusoidal"), ("encoder", "learned"), ("decoder", "none"),
        ("decoder", "sinusoidal"))  # fmt: skip

# the permutation part: what the notes predict (every model without positions blind to order) and what a
# causal mask does (decoders without positions see the permutation, deeper ones the order of their prefix)
BLIND = dict(encoder=1e-16, decoder=1e-16, control=0.7, prefix_one=1e-17, prefix_deeper=1e-17)
MASKED = dict(encoder=1e-16, decoder=0.3, control=0.7, prefix_one=1e-17, prefix_deeper=1e-3)


def perm_rows(c: dict, encoder, decoder, control, prefix_one, prefix_deeper) -> list[dict]:
    rows = []
    for d, L, _ in c["perm_sizes"]:
        for init in c["inits"]:
            for backend in c["backends"]:
                for model, pos in ARMS:
                    base = dict(model=model, pos=pos, d_model=d, n_layers=L, init=init, backend=backend)
                    err = control if pos != "none" else encoder if model == "encoder" else decoder
                    rows.append({**base, "measure": "perm", "error": err})
                    if model == "decoder":
                        prefix = control if pos != "none" else prefix_one if L == 1 else prefix_deeper
                        rows.append({**base, "measure": "prefix", "error": prefix})
    return rows


def probe(L: int, gain: float, input_gain: float, T: int) -> dict:
    """A probe record whose best layer (the last) reads `gain` and whose input layer reads `input_gain`."""
    gains = [input_gain] + [gain * (i + 1) / L for i in range(L)]
    return {
        "gain": gains,
        "mae": [16 * (1 - g) for g in gains],
        "chance_mae": 16.0,
        "fit_gain": gains,
        "best": L,
        "mae_by_position": [16 * (1 - gain)] * T,
    }


def records(gap=0.3, ctrl_gap=0.3, gain=0.0, perm=BLIND, learned=True, null_drift=0.0, spread=0.0, p=P):
    """Runs where NoPE ends `gap` nats/char above sinusoidal at two layers and `ctrl_gap` at one, learned
    positions as sinusoidal, and NoPE's best layer reads probe gain `gain` (the position arms 0.9); NoPE's
    runs move by ±spread from seed to seed (its reruns alike); NoPE's null reruns drift by null_drift (with a
    wobble of 0.001 per seed)."""

    def metrics(c: dict) -> dict:
        if c["part"] == "perm":
            return {"rows": perm_rows(c, **perm)}
        s, nope = c["seed"] % 1000 % 4, c["pos"] == "none"
        v = 2.0 + JITTER[s] + 0.05 * math.log2(c["lr"] / 8e-3) ** 2
        if nope:
            v += ctrl_gap if c["n_layers"] == 1 else gap
            v += spread * (1 if s % 2 else -1)
            v += null_drift + 0.001 * s if c["seed"] >= 1000 and null_drift else 0.0
        if not learned:
            v = UNIGRAM + 0.02 * (s % 2)
        return {
            "final_val": v,
            "best_val": v,
            "val_loss": [4.4, v + 0.2, v],
            "eval_steps": [0, 6, 12],
            "unigram_xent": UNIGRAM,
            "diverged_at": None,
            "probe": probe(
                c["n_layers"], gain + JITTER[s] if nope else 0.9, JITTER[s] if nope else 0.8, c["seq_len"]
            ),
        }

    return grown(EXP, p, metrics)


def test_no_position_rule_supported_where_nothing_without_positions_sees_order(tmp_path):
    v = analyse(EXP, records(perm=BLIND), P, tmp_path)
    assert all(verdicts(v)[k] == "supported" for k in COUNTED), verdicts(v)
    assert v.verdict == "supported"
    assert all(sub(v, k).counts for k in COUNTED) and not sub(v, "learned").counts


def test_no_position_rule_mixed_when_the_causal_model_learns_position_and_closes_the_gap(tmp_path):
    """The anchors' picture: the encoder is blind, the causal decoder is not, NoPE trains to within the margin
    of sinusoidal while the one-layer control stays well behind, and the probe reads position."""
    v = analyse(EXP, records(gap=0.0, gain=0.5, perm=MASKED), P, tmp_path)
    got = verdicts(v)
    assert got["encoder"] == "supported"
    assert got["decoder"] == got["quality"] == got["probe"] == "refuted"
    assert got["control"] == "supported" and got["prefix-order"] == "supported"
    assert v.verdict == "mixed"
    assert comparison(v, "quality/d16-L2").decision == "equivalent"
    assert comparison(v, "probe/d32-L2").decision == "b_better"  # above the margin: fails


def test_no_position_rule_refuted_when_even_the_encoder_moves(tmp_path):
    v = analyse(EXP, records(gap=0.0, gain=0.5, perm={**MASKED, "encoder": 1e-6}), P, tmp_path)
    assert verdicts(v)["encoder"] == "refuted" and v.verdict == "refuted"


@pytest.mark.parametrize(
    "ctrl_gap, spread, roles, verdict",
    [
        (0.3, 0.0, "refute", "refuted"),  # the control holds; equal losses, power ≈ 1 at ±0.05: refutes
        (0.0, 0.0, "not decidable", "inconclusive"),  # the control fails in its (one, covering) cell
        (0.3, 0.02, "undecided", "inconclusive"),  # the control holds; TOST passes with under 80% power
    ],
)
def test_no_position_rule_an_equivalence_refutes_only_beside_a_holding_control_and_with_power(
    tmp_path, ctrl_gap, spread, roles, verdict
):
    """NoPE trains to sinusoidal's loss at both scales (an equivalence within ±0.05 in each cell). The one-
    layer positive control (one cell: it covers every cell of quality) either shows NoPE 0.3 worse, or shows
    nothing, which makes quality's conclusions of no difference not decidable; and an equivalence refutes
    only with power ≥ 80% at the SESOI."""
    v = analyse(EXP, records(gap=0.0, ctrl_gap=ctrl_gap, gain=0.5, perm=MASKED, spread=spread), P, tmp_path)
    assert verdicts(v)["control"] == ("supported" if ctrl_gap else "refuted")
    q = [comparison(v, f"quality/{c}") for c in ("d16-L2", "d32-L2")]
    assert all(c.decision == "equivalent" and 0 < c.power <= 1 for c in q)
    assert all((c.power >= 0.8) == (spread == 0) for c in q)
    assert set(sub(v, "quality").roles.values()) == {roles}
    assert verdicts(v)["quality"] == verdict
    detail = sub(v, "quality").detail
    assert ("not decidable here (the positive control failed in the cell" in detail) == (not ctrl_gap)
    assert ("under 80% power there, so this does not refute" in detail) == (spread > 0)


def test_no_position_rule_a_drifting_null_pair_undecides_the_first_scale_only(tmp_path):
    """NoPE 0.3 worse at both scales (p ≈ 0), but NoPE's reruns (at its first-scale choice) drift 0.2 away:
    the null pair is significant, so the first scale's comparisons are undecided whatever their p; the second
    scale, where it was not run, decides, and quality (every cell) is inconclusive."""
    v = analyse(EXP, records(gap=0.3, perm=BLIND, null_drift=0.2), P, tmp_path)
    null = next(f for f in v.noise_floor if f.id == "null/final_val")
    assert null.p < 0.05
    first, second = comparison(v, "quality/d16-L2"), comparison(v, "quality/d32-L2")
    assert first.p < 0.05 and first.null_p == null.p and first.null_significant
    assert first.decision == "undecided"
    assert second.p < 0.05 and second.null_p is None and second.decision == "a_better"
    assert sub(v, "quality").roles == {"quality/d16-L2": "undecided", "quality/d32-L2": "support"}
    assert verdicts(v)["quality"] == "inconclusive"
    assert "d16-L2: the null pair in the cell is significant" in sub(v, "quality").detail
    assert comparison(v, "control").decision == "a_better"  # the one-layer control is another scale


def test_no_position_rule_arms_that_did_not_learn_are_excluded(tmp_path):
    v = analyse(EXP, records(learned=False, perm=MASKED), P, tmp_path)
    for k in ("quality", "probe", "control"):
        assert verdicts(v)[k] == "inconclusive"
        assert all(c.excluded for c in v.comparisons if c.id.split("/")[0] == k)
    assert verdicts(v)["decoder"] == "refuted" and v.verdict == "mixed"


@pytest.mark.parametrize(
    "perm",
    [{**BLIND, "control": 1e-10}, {**MASKED, "prefix_one": 1e-9}],
    ids=["positions-unseen", "one-layer"],
)
def test_no_position_rule_a_failing_check_stops_the_claim(tmp_path, perm):
    with pytest.raises(CheckFailed):
        analyse(EXP, records(perm=perm), P, tmp_path)


def test_no_position_rule_text_names_the_margins_the_control_and_the_probe():
    text = EXP.rule_text(EXP.profiles["default"])
    assert "±0.05" in text and "Positive control, one layer" in text and "fitting windows" in text
    assert "Positive control: (control), per cell" in text  # quality names it from its declaration
    assert "Smallest effect of interest: ±0.05 nats/char (the claim's 'close'" in text
    assert "Calibrated by null pair null in the cells it was run in." in text and "noise floor" not in text
    assert "NoPE rerun" in text and "{" not in text and "None" not in text


def test_no_position_grids_refuse_a_control_that_is_a_scale_or_too_few_probe_tokens():
    from tfclaims.nn.config import ConfigError

    q = EXP.profiles["quick"]
    for bad in (
        {"control": [16, 2]},
        {"control": [32, 1], "scales": [[32, 1], [32, 2]]},
        {"probe_batches": 1},
    ):
        with pytest.raises(ConfigError):
            EXP.grid({**q, **bad})


def test_model_sweep_runs_reads_roles_scales_and_each_arms_choice():
    from tfclaims.evidence import readouts as rd
    from tfclaims.evidence.tuning import model_sweep_runs

    def rec(pos, lr, seed, v):
        c = {"pos": pos, "d_model": 16, "n_layers": 2, "lr": lr, "seed": seed}
        return record(
            c,
            {"final_val": v, "val_loss": [4.0, v], "unigram_xent": UNIGRAM, "diverged_at": None},
            f"{pos}-{lr}-{seed}",
        )

    recs = [
        rec(pos, lr, s, 2.0 + (lr != 8e-3) + (pos == "none"))
        for pos in ("none", "sinusoidal")
        for lr in (4e-3, 8e-3)
        for s in (10, 0, 1000)
    ]
    arms = {k: {"pos": k} for k in ("none", "sinusoidal")}
    t, choices, tuned, _ = model_sweep_runs(recs, (rd.final_loss(),), arms, {(16, 2): "d16-L2"}, [10], 1000)
    assert dict(zip(t.seed, t.role)) == {10: "selection", 0: "test", 1000: "null"}
    assert set(t.scale) == {"d16-L2"} and (t.init_loss == 4.0).all()
    assert set(choices.chosen_lr) == {8e-3} and sorted(tuned.run_id) == ["none-0.008-0", "sinusoidal-0.008-0"]
