"""Every profile parameter acts, and `--set` of one that would change nothing is refused in one line."""

import textwrap

import pytest

from tfclaims.cli import main
from tfclaims.harness.overrides import Records, acts, footprint, refusal, variants
from tfclaims.harness.plan import resolve_profile
from tfclaims.harness.registry import REPO_ROOT, load_all

from toys import register

EXPS = load_all([])


def dead_keys(exp, profile: str, records: Records) -> list[str]:
    """The parameters of a profile that no variant of their value makes act (False: told, not unknown)."""
    p = resolve_profile(exp, profile)
    base = footprint(exp, p, records, "cpu")
    out = []
    for k, v in p.items():
        if k == "seeds":  # --seeds, not --set
            continue
        found = [acts(exp, p, k, x, records, "cpu", base=base) for x in variants(v)]
        if found and all(f is False for f in found):
            out.append(k)
    return out


def test_profiles_of_a_claim_hold_the_same_parameters():
    for cid, exp in EXPS.items():
        keys = {name: sorted(p) for name, p in exp.profiles.items()}
        assert keys["quick"] == keys["default"] == keys["full"], cid


@pytest.mark.slow
@pytest.mark.parametrize("cid", list(EXPS))
def test_every_default_parameter_changes_the_grid_or_the_rule(cid):
    """Grown to its end from the committed records, as the committed sweep grew it."""
    exp, records = EXPS[cid], Records(REPO_ROOT / "results" / cid / "runs")
    assert footprint(exp, resolve_profile(exp, "default"), records, "cpu")[2], "grid not grown"
    assert dead_keys(exp, "default", records) == [], "parameters that change nothing"


@pytest.mark.slow
@pytest.mark.parametrize("cid", list(EXPS))
@pytest.mark.parametrize("profile", ["quick", "full"])
def test_no_quick_or_full_parameter_is_known_to_change_nothing(profile, cid, tmp_path):
    """Without records a staged grid stops at its first round, so some parameters are unknown (None), never
    told inert (False)."""
    assert dead_keys(EXPS[cid], profile, Records(tmp_path)) == [], "parameters that change nothing"


def test_variants_differ_from_the_value():
    for v in (3, 0, 2.5, 0.0, "a", True, [1, 2], [0.5], [[64, 2]], ["xavier"], [[64, 2], [128, 2]]):
        assert all(x != v for x in variants(v)) and variants(v), v


TOY = textwrap.dedent(
    """
    from tfclaims.harness.experiment import Experiment, SubVerdict, Verdict


    class Toy(Experiment):
        claim_id = "toy"
        title = "toy"
        statement = "toy"
        rule = "toy"
        profiles = {
            name: {"n": 2, "unused": 5, "cap": 100, "seeds": [0, 1]} for name in ("quick", "default", "full")
        }

        def grid(self, p):
            return self.with_seeds([{"i": i} for i in range(p["n"]) if i * i <= p["cap"]], p["seeds"])

        def run_one(self, cfg, ctx):
            return {"value": float(cfg["i"])}

        def analyse(self, runs, p, out):
            return Verdict("supported", "toy", "toy", {}, [SubVerdict("x", "supported", "y")])
    """
)


@pytest.fixture
def toy(tmp_path, monkeypatch):
    return register(tmp_path, monkeypatch, TOY)


@pytest.mark.parametrize(
    "setting, message",
    [
        (
            "unused=6",
            "--set unused: toy reads 'unused' nowhere that the quick profile's runs or rule depend on",
        ),
        ("cap=101", "--set cap: toy reads 'cap' nowhere"),  # read, but this value admits the same runs
        ("n=2", "--set n=2: that is the quick profile's own value; nothing would change"),
        ("d_model=30", "--set d_model: toy profile 'quick' has no parameter 'd_model'"),
    ],
)
@pytest.mark.parametrize("cmd", ["run", "plan"])
def test_a_setting_that_changes_nothing_is_refused_in_one_line_and_nothing_is_written(
    toy, capsys, setting, message, cmd
):
    results = toy / "results"
    extra = ["--no-progress", "--no-report"] if cmd == "run" else []
    rc = main([cmd, "toy", "--profile", "quick", "--set", setting, "--results-dir", str(results), *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith(f"error: {message}"), err
    assert not results.exists()


@pytest.mark.parametrize("setting", ["n=3", "cap=0"])
def test_a_setting_that_changes_the_runs_is_taken(toy, setting):
    args = ["--set", setting, "--results-dir", str(toy / "results"), "--no-progress", "--no-report"]
    assert main(["run", "toy", "--profile", "quick", *args]) == 0


def test_refusal_is_unknown_while_a_staged_grid_waits_on_runs():
    """postln_quality's fresh seeds join once its sweep has chosen: with no records, a change of them cannot
    be told from the first round, so it is taken."""
    exp = EXPS["postln_quality"]
    p = resolve_profile(exp, "quick")
    fresh = [s + 50 for s in p["seeds"]]
    assert acts(exp, p, "seeds", fresh, Records(), "cpu") is None
    assert refusal(exp, "quick", {**p, "seeds": fresh}, {}, Records(), "cpu") is None


@pytest.mark.parametrize(
    "claim, setting",
    [
        ("postln_quality", "block=0"),
        ("flash_speed", "dtype='float64'"),
        ("no_position", "control=[64]"),
        ("dk_scaling", "batch=0"),  # a field named unlike TrainConfig's batch_size: checked all the same
        ("init_variance", "batch=0"),
    ],
)
def test_a_value_that_breaks_a_grid_is_one_line_of_bad_input(claim, setting, tmp_path, capsys):
    results = tmp_path / "results"
    rc = main(["plan", claim, "--profile", "quick", "--set", setting, "--results-dir", str(results)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith(f"error: {claim}: "), err
    assert not results.exists()
