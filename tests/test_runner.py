"""The runner: cache reuse, resume after an interruption, atomic records, failures, stale detection."""

import json

import pytest
import torch

from tfclaims.harness.experiment import Experiment, SubVerdict, Verdict
from tfclaims.harness.runner import BadInput, run_experiment, stale_results

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
    exp = Toy()
    exp.fail_on = 1
    rc, res = run(tmp_path, exp)
    assert rc == 1 and res is None and not (tmp_path / "toy" / "result.json").exists()
    recs = [json.loads(p.read_text()) for p in (tmp_path / "toy" / "runs").glob("*.json")]
    failed = [r for r in recs if r["status"] == "failed"]
    assert len(failed) == 2 and "RuntimeError: boom" in failed[0]["error"]
    assert len([r for r in recs if r["status"] == "ok"]) == 6  # the quick grid: 4 values × 2 seeds
    CALLS.clear()
    assert run(tmp_path)[0] == 0  # failed runs are retried on the next invocation
    assert sorted(CALLS) == [(1, 0), (1, 1)]


def test_a_failed_forced_rerun_keeps_the_good_record_and_the_result(tmp_path):
    rc, _ = run(tmp_path)
    before = (tmp_path / "toy" / "result.json").read_text()
    good = {p.name: p.read_text() for p in (tmp_path / "toy" / "runs").glob("*.json")}
    exp = Toy()
    exp.fail_on = 1
    rc, res = run(tmp_path, exp, force=True)
    assert rc == 1 and res is None  # the failure is reported...
    assert (tmp_path / "toy" / "result.json").read_text() == before  # ...and nothing was replaced
    now = {p.name: json.loads(p.read_text()) for p in (tmp_path / "toy" / "runs").glob("*.json")}
    assert now.keys() == good.keys() and all(r["status"] == "ok" for r in now.values())
    assert not list((tmp_path / "toy" / "runs").glob("*.failed"))


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
    monkeypatch.setattr("tfclaims.harness.provenance.code_hash", lambda exp: "changed")
    assert "stale" in stale_results({"toy": Toy()}, tmp_path)[0]


def test_a_failing_analysis_changes_nothing_that_was_published(tmp_path):
    run(tmp_path)
    claim = tmp_path / "toy"
    before = {p: p.read_bytes() for p in claim.rglob("*") if p.is_file()}

    class Broken(Toy):
        def analyse(self, runs, p, out):
            import pandas as pd

            out.table("partial", pd.DataFrame({"a": [1]}), "written before the failure")
            raise ValueError("analysis broke")

    with pytest.raises(ValueError, match="analysis broke"):
        run(tmp_path, Broken())
    after = {p: p.read_bytes() for p in claim.rglob("*") if p.is_file()}
    assert after == before  # no partial table, no staging folder left behind
    assert not list(claim.glob(".staging-*"))


def test_check_results_reanalyses_and_notices_a_changed_verdict(tmp_path):
    run(tmp_path, profile="default")
    assert stale_results({"toy": Toy()}, tmp_path, reanalyse=True) == []

    class Flipped(Toy):
        def analyse(self, runs, p, out):
            v = super().analyse(runs, p, out)
            v.verdict = "refuted"
            return v

    problems = stale_results({"toy": Flipped()}, tmp_path, reanalyse=True)
    assert len(problems) == 1 and "supported → refuted" in problems[0]


def test_comparisons_and_noise_floor_reach_result_json(tmp_path):
    from tfclaims.evidence import decisions as ev

    class WithEvidence(Toy):
        def analyse(self, runs, p, out):
            v = super().analyse(runs, p, out)
            a = {r["config"]["seed"]: r["metrics"]["value"] for r in runs if r["config"]["i"] == 0}
            b = {r["config"]["seed"]: r["metrics"]["value"] for r in runs if r["config"]["i"] == 1}
            v.comparisons = [ev.paired("i1-vs-i0", a, b, metric="value", better="higher")]
            v.noise_floor = [ev.paired("null", a, a, metric="value")]
            return v

    _, res = run(tmp_path, WithEvidence())
    saved = json.loads((tmp_path / "toy" / "result.json").read_text())
    (c,) = saved["comparisons"]
    assert c["id"] == "i1-vs-i0" and c["diff"] == 1.0 and c["paired"] and c["decision"] == "b_better"
    assert saved["noise_floor"][0]["diff"] == 0.0


class Drawn(Toy):
    """Toy with a table and a figure; `label` changes the figure only."""

    label = "value"

    def analyse(self, runs, p, out):
        import pandas as pd

        from tfclaims.plotting import plt  # its style applies to every figure, the first included

        df = pd.DataFrame([{"i": r["config"]["i"], "value": r["metrics"]["value"]} for r in runs])
        out.table("values", df, "values")
        fig, ax = plt.subplots()
        ax.plot(df["i"], df["value"], "o")
        ax.set_ylabel(self.label)
        out.figure("values", fig, "values")
        return super().analyse(runs, p, out)


def _files(root):
    """Every published file's bytes and modification time; the sweep's lock file is no publication (filelock
    versions differ in whether acquiring it touches it: newer ones do)."""
    return {
        p: (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted((root / "toy").glob("**/*"))
        if p.is_file() and p.name != ".lock"
    }


def test_a_reanalysis_that_changes_nothing_leaves_every_file_untouched(tmp_path, monkeypatch):
    run(tmp_path, Drawn())
    before = _files(tmp_path)
    # another commit, platform and time: circumstances of the analysis, not what it found
    monkeypatch.setattr("tfclaims.harness.runner.git_commit", lambda: "0" * 40 + "-dirty")
    monkeypatch.setattr("tfclaims.harness.runner.now", lambda: "2099-01-01T00:00:00+00:00")
    rc, res = run(tmp_path, Drawn())
    assert rc == 0 and res["git_commit"].startswith("0" * 40)
    assert _files(tmp_path) == before  # same bytes and the same modification times


def test_a_reanalysis_that_changes_a_figure_republishes_it_with_its_provenance(tmp_path, monkeypatch):
    run(tmp_path, Drawn())
    before = _files(tmp_path)
    monkeypatch.setattr("tfclaims.harness.runner.git_commit", lambda: "f" * 40)
    exp = Drawn()
    exp.label = "value (nats)"
    run(tmp_path, exp)
    after = _files(tmp_path)
    changed = {p.name for p in after if after[p][0] != before.get(p, (None,))[0]}
    assert changed == {"values.png", "values.svg", "result.json"}  # the table is the same bytes
    assert json.loads((tmp_path / "toy" / "result.json").read_text())["git_commit"] == "f" * 40


def test_a_result_filed_from_a_dirty_tree_takes_the_clean_commit_of_a_reanalysis(tmp_path, monkeypatch):
    monkeypatch.setattr("tfclaims.harness.runner.git_commit", lambda: "a" * 40 + "-dirty")
    run(tmp_path, Drawn())
    before = _files(tmp_path)
    monkeypatch.setattr("tfclaims.harness.runner.git_commit", lambda: "b" * 40)
    run(tmp_path, Drawn())
    after = _files(tmp_path)
    assert {p.name for p in after if after[p] != before[p]} == {"result.json"}  # figures and tables untouched
    assert json.loads((tmp_path / "toy" / "result.json").read_text())["git_commit"] == "b" * 40
    monkeypatch.setattr("tfclaims.harness.runner.git_commit", lambda: "c" * 40)
    run(tmp_path, Drawn())  # a clean commit is never replaced by another for the same result
    assert json.loads((tmp_path / "toy" / "result.json").read_text())["git_commit"] == "b" * 40


def test_the_commit_is_read_once_and_ignores_the_harness_outputs(tmp_path):
    import subprocess

    from tfclaims.harness.provenance import git_commit

    def git(*a):
        subprocess.run(["git", "-C", str(tmp_path), *a], check=True, capture_output=True)

    git("init", "-q")
    for name in ("code.py", "README.md", "results/x/result.json", "report/report.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("a\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    for name in ("README.md", "results/x/result.json", "report/report.md"):
        (tmp_path / name).write_text("b\n")  # what a sweep writes
    clean = git_commit(tmp_path)
    assert len(clean) == 40 and not clean.endswith("-dirty")
    (tmp_path / "code.py").write_text("b\n")
    assert git_commit(tmp_path) == clean  # read once per process
    git_commit.cache_clear()
    assert git_commit(tmp_path) == clean + "-dirty"


def test_a_new_publication_removes_the_tables_and_figures_it_no_longer_writes(tmp_path):
    """A renamed table (choices -> lr_choices) leaves no stale file beside the result; runs stay."""
    from tfclaims.harness.runner import _publish

    claim, staging = tmp_path / "claim", tmp_path / "staging"
    for d in (claim / "figures", claim / "runs", staging / "figures"):
        d.mkdir(parents=True)
    (claim / "result.json").write_text(
        json.dumps({"verdict": "supported", "tables": [{"csv": "choices.csv"}]})
    )
    for name in ("choices.csv", "kept.csv", "figures/old.png", "runs/r1.json"):
        (claim / name).write_text("old")
    for name in ("lr_choices.csv", "kept.csv", "figures/new.png"):
        (staging / name).write_text("new")
    assert _publish(staging, claim, {"verdict": "refuted", "tables": [{"csv": "lr_choices.csv"}]})
    left = sorted(p.relative_to(claim).as_posix() for p in claim.rglob("*") if p.is_file())
    assert left == ["figures/new.png", "kept.csv", "lr_choices.csv", "result.json", "runs/r1.json"]
    assert (claim / "kept.csv").read_text() == "new"
