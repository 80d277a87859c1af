"""The runner: cache reuse, resume after an interruption, atomic records, failures, stale detection."""

import json

import pytest
import torch

from tfclaims.experiment import Experiment, SubVerdict, Verdict
from tfclaims.runner import BadInput, _strip_analysis, run_experiment, stale_results

CALLS = []


class Toy(Experiment):
    claim_id = "toy"
    title = "toy"
    statement = "toy claim"
    rule = "supported if the mean is positive"
    profiles = {
        "quick": {"n": 4, "seeds": [0, 1]},
        "default": {"n": 6, "seeds": [0, 1]},
        "full": {"n": 8, "seeds": [0, 1]},
    }
    fail_on = None
    interrupt_on = None

    def grid(self, p):
        return self.with_seeds([{"i": i} for i in range(p["n"])], p["seeds"])

    def run_one(self, cfg, ctx):
        CALLS.append((cfg["i"], cfg["seed"]))
        if cfg["i"] == self.interrupt_on:
            raise KeyboardInterrupt
        if cfg["i"] == self.fail_on:
            raise RuntimeError("boom")
        return {"value": cfg["i"] + 0.5 * cfg["seed"], "noise": float(torch.rand(()))}

    def analyse(self, runs, p, out):
        mean = sum(r["metrics"]["value"] for r in runs) / len(runs)
        return Verdict(
            "supported" if mean > 0 else "refuted",
            "toy",
            f"mean {mean}",
            {"mean": mean},
            [SubVerdict("x", "supported", "y")],
        )


def run(tmp_path, exp=None, **kw):
    kw.setdefault("profile", "quick")
    return run_experiment(
        exp or Toy(),
        device=torch.device("cpu"),
        results_root=tmp_path,
        progress=False,
        log=lambda m: None,
        **kw,
    )


def test_second_run_reuses_every_record(tmp_path):
    CALLS.clear()
    rc, res = run(tmp_path)
    assert rc == 0 and len(CALLS) == 8 and res["verdict"] == "supported"
    CALLS.clear()
    rc, res2 = run(tmp_path)
    assert rc == 0 and CALLS == [] and res2["run_ids"] == res["run_ids"]
    run(tmp_path, force=True)
    assert len(CALLS) == 8


def test_seeded_runs_are_deterministic(tmp_path):
    run(tmp_path)
    first = {p.name: json.loads(p.read_text())["metrics"] for p in (tmp_path / "toy" / "runs").glob("*.json")}
    run(tmp_path, force=True)
    second = {
        p.name: json.loads(p.read_text())["metrics"] for p in (tmp_path / "toy" / "runs").glob("*.json")
    }
    assert first == second


def test_interrupted_sweep_keeps_finished_runs_and_resumes(tmp_path):
    exp = Toy()
    exp.interrupt_on = 2
    CALLS.clear()
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, exp)
    runs = tmp_path / "toy" / "runs"
    finished = sorted(runs.glob("*.json"))
    assert len(finished) == 4  # i = 0, 1 for both seeds
    assert not list(runs.glob(".*.tmp")) and not (tmp_path / "toy" / "result.json").exists()
    CALLS.clear()
    rc, _ = run(tmp_path)
    assert rc == 0 and sorted(CALLS) == [(2, 0), (2, 1), (3, 0), (3, 1)]


def test_failed_run_is_recorded_others_kept_and_result_untouched(tmp_path):
    rc, _ = run(tmp_path)
    before = (tmp_path / "toy" / "result.json").read_text()
    exp = Toy()
    exp.fail_on = 1
    rc, res = run(tmp_path, exp, force=True)
    assert rc == 1 and res is None
    assert (tmp_path / "toy" / "result.json").read_text() == before
    recs = [json.loads(p.read_text()) for p in (tmp_path / "toy" / "runs").glob("*.json")]
    failed = [r for r in recs if r["status"] == "failed"]
    assert len(failed) == 2 and "RuntimeError: boom" in failed[0]["error"]
    CALLS.clear()
    assert run(tmp_path)[0] == 0  # failed runs are retried on the next invocation
    assert sorted(CALLS) == [(1, 0), (1, 1)]


def test_corrupt_record_is_bad_input_and_left_alone_unless_forced(tmp_path):
    run(tmp_path)
    victim = sorted((tmp_path / "toy" / "runs").glob("*.json"))[0]
    victim.write_text('{"status": "ok", "metr')
    CALLS.clear()
    with pytest.raises(BadInput, match="corrupt run record"):
        run(tmp_path)
    assert CALLS == [] and victim.read_text() == '{"status": "ok", "metr'  # nothing ran, nothing overwritten
    assert run(tmp_path, force=True)[0] == 0 and json.loads(victim.read_text())["status"] == "ok"


def test_overridden_seeds_or_settings_make_a_result_stale(tmp_path):
    run(tmp_path, profile="default")
    assert stale_results({"toy": Toy()}, tmp_path) == []
    run(tmp_path, profile="default", seeds=[0])
    assert "default profile" in stale_results({"toy": Toy()}, tmp_path)[0]
    run(tmp_path, profile="default", overrides={"n": 3})
    assert "default profile" in stale_results({"toy": Toy()}, tmp_path)[0]


def test_comments_docstrings_and_layout_do_not_enter_the_code_hash():
    src = 'def run_one(x):\n    """Doc."""\n    return x + 1\n'
    assert _strip_analysis(src) == _strip_analysis(
        "# note\n\n\ndef run_one(x):  # why\n    return (x +\n 1)\n"
    )
    assert _strip_analysis(src) != _strip_analysis(src.replace("x + 1", "x + 2"))


def test_bad_profile_and_overrides_are_bad_input(tmp_path):
    with pytest.raises(BadInput, match="unknown profile"):
        run(tmp_path, profile="huge")
    with pytest.raises(BadInput, match="has no parameter 'width'"):
        run(tmp_path, overrides={"width": 3})


def test_result_json_fields(tmp_path):
    _, res = run(tmp_path)
    saved = json.loads((tmp_path / "toy" / "result.json").read_text())
    for key in (
        "claim_id",
        "statement",
        "verdict",
        "rule",
        "evidence",
        "anchors",
        "profile",
        "device",
        "seeds",
        "versions",
        "git_commit",
        "config_hash",
        "code_hash",
        "started_at",
        "finished_at",
        "figures",
        "caveats",
    ):
        assert key in saved, key
    assert saved["seeds"] == [0, 1] and saved["versions"]["torch"] == torch.__version__


def test_stale_detection(tmp_path, monkeypatch):
    run(tmp_path, profile="default")
    assert stale_results({"toy": Toy()}, tmp_path) == []
    monkeypatch.setattr("tfclaims.runner.code_hash", lambda exp: "changed")
    assert "stale" in stale_results({"toy": Toy()}, tmp_path)[0]


def test_analysis_and_prose_do_not_enter_the_code_hash():
    src = """
class E:
    rule = "a"
    statement = (
        "b"
    )
    def run_one(self):
        return 1
    def analyse(self):
        return 2
    def plot_x(self):
        return 3
"""
    changed = (
        src.replace('"a"', '"z"')
        .replace("return 2", "return 20")
        .replace("return 3", "return 30")
        .replace('"b"', '"y"')
    )
    assert _strip_analysis(src) == _strip_analysis(changed)
    assert _strip_analysis(src) != _strip_analysis(src.replace("return 1", "return 10"))
