"""Nothing committed is lost or rewritten by a failed or mistaken command: bad input, faults, signals,
races."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tfclaims.cli import main
from tfclaims.harness.registry import REPO_ROOT, load_all

from toys import register

TOY = textwrap.dedent(
    """
    import os
    import time

    from tfclaims.evidence import decisions as ev
    from tfclaims.harness.experiment import Experiment, Part, SubVerdict, Verdict


    def grid(p):
        return [{"d_model": p["d_model"], "n_heads": p["n_heads"], "steps": p["steps"], "lr": p["lr"],
                 "sleep": p["sleep"], "seed": s} for s in p["seeds"]]


    def run(cfg, ctx):
        if os.environ.get("TOY_STARTED"):  # tests wait for this before they signal
            open(os.environ["TOY_STARTED"], "a").write(f"{os.getpid()}\\n")
        from tqdm.auto import tqdm

        with tqdm(total=1, disable=True):  # as a training loop's bar: its lock is made in the worker
            time.sleep(cfg["sleep"])
        if os.environ.get("TOY_FAIL"):
            raise RuntimeError("toy failure")
        return {"value": cfg["seed"] * cfg["lr"], "pid": os.getpid()}


    class Toy(Experiment):
        claim_id = "toy"
        title = "toy"
        statement = "toy"
        rule = "toy"
        profiles = {name: {"d_model": 32, "n_heads": 4, "steps": 10, "lr": 1e-3, "sleep": 0.0,
                           "widths": [1, 2], "seeds": [0, 1, 2]} for name in ("quick", "default", "full")}
        parts = (Part("only", grid, run),)

        def analyse(self, runs, p, out):
            vals = {r["config"]["seed"]: r["metrics"]["value"] for r in runs}
            c = ev.paired("self", vals, vals, metric="value")
            subs = [SubVerdict("x", "inconclusive", "y")]
            return Verdict("inconclusive", "toy", "toy", {}, subs, comparisons=[c])
    """
)


@pytest.fixture
def toy(tmp_path, monkeypatch):
    return register(tmp_path, monkeypatch, TOY)


def cli(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as e:  # argparse's own usage errors
        code = e.code
    return code, capsys.readouterr().err.strip().splitlines()


def one_line(capsys, *argv, code=2):
    got, err = cli(capsys, *argv)
    assert got == code and len(err) == 1 and err[0].startswith("error: "), (got, err)
    return err[0]


def records(root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((root / "toy" / "runs").glob("*.json"))]


def run_toy(root, *extra):
    return ["run", "toy", "--profile", "quick", "--results-dir", str(root), "--no-progress", *extra]


# 1 and 2: a failing analysis changes nothing (tests/test_runner.py); results folders never rewrite another
def test_reliability_report_follows_its_results_folder(toy, capsys, monkeypatch):
    monkeypatch.delenv("TFCLAIMS_REPORT")
    committed = {p: p.read_bytes() for p in (REPO_ROOT / "report").rglob("*") if p.is_file()}
    readme = (REPO_ROOT / "README.md").read_bytes()
    assert cli(capsys, *run_toy(toy / "x"))[0] == 0
    assert (toy / "x-report" / "report.md").exists()
    assert (toy / "x-report" / "figures" / "summary.png").exists()  # its summary figure goes with it
    assert {p: p.read_bytes() for p in (REPO_ROOT / "report").rglob("*") if p.is_file()} == committed
    assert (REPO_ROOT / "README.md").read_bytes() == readme


def test_reliability_missing_or_empty_results_folder_is_an_error(toy, capsys):
    assert "no results folder" in one_line(capsys, "report", "--results-dir", str(toy / "typo"))
    (toy / "empty").mkdir()
    assert "nothing to report" in one_line(capsys, "report", "--results-dir", str(toy / "empty"))
    assert "--results-dir is empty" in one_line(capsys, *run_toy(""))


# 3: every input is validated before any run starts
@pytest.mark.parametrize(
    "setting, message",
    [
        ("steps=-5", "must not be negative"),
        ("steps=abc", "expected an integer"),
        ("steps=12.5", "expected an integer"),
        ("lr=nan", "must be a finite number"),
        ("lr=1e999", "must be a finite number"),
        ("lr=-inf", "must be a finite number"),
        ("steps=0", "steps must be a positive integer, got 0"),
        ("seeds=5", "use --seeds"),
        ("widths=[]", "must not be empty"),
    ],
)
def test_reliability_set_values_are_typed_and_range_checked(toy, capsys, setting, message):
    assert message in one_line(capsys, *run_toy(toy / "r", "--set", setting))
    assert not (toy / "r" / "toy" / "runs").exists() or not records(toy / "r")


@pytest.mark.parametrize(
    "cells, ok",
    [
        ([[6, 4e-3]], True),  # a record [depth, lr]: each position has its own type
        ([[6, 4e-3], [12, 1]], True),  # an integer where a float is expected is a number
        ([[6.5, 4e-3]], False),  # the depth stays an integer
        ([["6", 4e-3]], False),
        ([6, 4e-3], False),  # a cell, not a list of cells
    ],
)
def test_reliability_list_settings_of_records_are_typed_by_position(cells, ok):
    from tfclaims.harness.runner import BadInput, resolve_profile

    exp = load_all()["postnorm_warmup"]
    if ok:
        assert resolve_profile(exp, "default", overrides={"cells": cells})["cells"] == cells
    else:
        with pytest.raises(BadInput, match="--set cells="):
            resolve_profile(exp, "default", overrides={"cells": cells})


def test_reliability_model_configs_are_validated_for_the_whole_grid_first(toy, capsys):
    line = one_line(capsys, *run_toy(toy / "r", "--set", "d_model=30", "--set", "n_heads=4"))
    assert "divisible" in line and not (toy / "r" / "toy" / "runs").exists()


@pytest.mark.parametrize("seeds", ["1,1", "0,-3", "10000000000000"])
def test_reliability_seeds_are_distinct_integers_in_range(toy, capsys, seeds):
    assert "--seeds" in one_line(capsys, *run_toy(toy / "r", "--seeds", seeds))
    assert not (toy / "r" / "toy" / "runs").exists()


def test_reliability_unwritable_report_folder_is_checked_before_the_sweep(toy, capsys):
    blocker = toy / "file"
    blocker.write_text("")
    assert "cannot write the report" in one_line(
        capsys, *run_toy(toy / "r", "--report-dir", str(blocker / "r"))
    )
    assert not (toy / "r" / "toy" / "runs").exists()


# 4: one line, never a traceback
@pytest.mark.parametrize("content", ["[1, 2]", "[]", '{"status": "ok"}', "{"])
def test_reliability_malformed_run_record_is_one_line(toy, capsys, content):
    assert cli(capsys, *run_toy(toy / "r"))[0] == 0
    victim = sorted((toy / "r" / "toy" / "runs").glob("*.json"))[0]
    victim.write_text(content)
    assert "corrupt run record" in one_line(capsys, *run_toy(toy / "r"))
    assert victim.read_text() == content


@pytest.mark.parametrize("content", ["[1, 2]", "[]", '{"x": 1}'])
def test_reliability_malformed_result_json_is_one_line(toy, capsys, content):
    assert cli(capsys, *run_toy(toy / "r"))[0] == 0
    (toy / "r" / "toy" / "result.json").write_text(content)
    assert "corrupt result file" in one_line(capsys, "report", "--results-dir", str(toy / "r"))


def test_reliability_disk_full_is_one_line_and_keeps_finished_runs(toy, capsys, monkeypatch):
    import tfclaims.harness.runner as runner

    real, calls = runner.atomic_write_json, []

    def full(path, obj):
        calls.append(path)
        if len(calls) > 1:
            raise OSError(28, "No space left on device", str(path))
        real(path, obj)

    monkeypatch.setattr(runner, "atomic_write_json", full)
    assert "No space left on device" in one_line(capsys, *run_toy(toy / "r"))
    assert len(records(toy / "r")) == 1  # the run finished before the disk filled is kept


def test_reliability_broken_claim_file_is_named_and_does_not_stop_the_others(toy, capsys):
    (toy / "experiments" / "broken.py").write_text("def oops(:\n")
    code, err = cli(capsys, "list")
    assert code == 1 and any("broken.py" in e and "SyntaxError" in e for e in err)
    code, err = cli(
        capsys, "reproduce", "--profile", "quick", "--results-dir", str(toy / "r"), "--no-progress"
    )
    assert code == 1 and (toy / "r" / "toy" / "result.json").exists()
    assert "cannot be loaded" in one_line(capsys, "run", "broken")


def test_reliability_reproduce_with_no_claims_fails(toy, capsys):
    (toy / "experiments" / "toy.py").unlink()
    assert "no claims found" in one_line(capsys, "reproduce", "--results-dir", str(toy / "r"))


# 5: one sweep per claim folder at a time
def test_reliability_second_sweep_of_a_claim_says_who_holds_it(toy, capsys):
    from tfclaims.harness.runner import claim_lock

    (toy / "r" / "toy").mkdir(parents=True)
    with claim_lock(toy / "r" / "toy", "toy"):
        line = one_line(capsys, *run_toy(toy / "r"))
    assert "another sweep holds" in line and f"pid {os.getpid()}" in line
    assert cli(capsys, *run_toy(toy / "r"))[0] == 0  # released


# 6: signals, workers, --force
def _default_signals():
    """A signal ignored by the test process (some test helpers ignore SIGINT) would be ignored by the child
    too."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _spawn(toy, *extra, runs_started=1):
    """Start a sweep in its own session and return once `runs_started` runs are under way."""
    started = toy / "started"
    args = [sys.executable, "-m", "tfclaims", *run_toy(toy / "r", *extra)]
    env = {**os.environ, "TOY_STARTED": str(started)}
    proc = subprocess.Popen(
        args, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=_default_signals
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        if started.exists() and len(started.read_text().split()) >= runs_started:
            return proc
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("the sweep did not start its runs within 120 s")


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
def test_reliability_sigterm_is_handled_like_ctrl_c(toy):
    proc = _spawn(toy, "--set", "sleep=20.0")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "rerun the same command to resume" in err and "Traceback" not in err


@pytest.mark.slow
def test_reliability_killing_a_parallel_sweep_leaves_no_orphans(toy):
    proc = _spawn(
        toy, "--set", "sleep=30.0", "--launcher", "local-parallel", "--workers", "2", runs_started=2
    )
    kids = _children(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    deadline = time.time() + 20
    while [k for k in kids if _alive(k)] and time.time() < deadline:
        time.sleep(0.2)
    assert kids and not [k for k in kids if _alive(k)]


@pytest.mark.slow
@pytest.mark.parametrize(
    "send",
    [
        lambda pid: os.killpg(pid, signal.SIGINT),  # Ctrl-C in a terminal: the sweep and its workers
        lambda pid: os.kill(pid, signal.SIGTERM),  # a scheduler or `kill`: the sweep alone
        lambda pid: os.killpg(pid, signal.SIGTERM),
    ],
    ids=["ctrl-c", "sigterm", "sigterm-group"],
)
def test_reliability_a_signal_stops_a_parallel_sweep_promptly_in_one_line(toy, send):
    """One `interrupted:` line and nothing else: no traceback, no resource tracker's warning of semaphores
    that the terminated workers could not release."""
    proc = _spawn(
        toy, "--set", "sleep=120.0", "--launcher", "local-parallel", "--workers", "2", runs_started=2
    )
    t0 = time.time()
    send(proc.pid)
    _, err = proc.communicate(timeout=150)
    assert time.time() - t0 < 60 and proc.returncode == 130
    assert err.strip().splitlines() == [
        "interrupted: finished runs are kept; rerun the same command to resume"
    ]


def test_reliability_force_does_not_replace_a_good_record_with_a_failed_one(toy, capsys, monkeypatch):
    assert cli(capsys, *run_toy(toy / "r"))[0] == 0
    good = {r["run_id"]: r for r in records(toy / "r")}
    monkeypatch.setenv("TOY_FAIL", "1")
    cli(capsys, *run_toy(toy / "r", "--force"))
    assert {r["run_id"]: r["status"] for r in records(toy / "r")} == {k: "ok" for k in good}


# 8: what a run's numbers depend on is recorded
def test_reliability_thread_count_is_recorded_in_every_run(toy, capsys):
    assert cli(capsys, *run_toy(toy / "r"))[0] == 0
    assert all(isinstance(r["threads"], int) and r["threads"] >= 1 for r in records(toy / "r"))
    # the fp32 precision as the run set it (TF32 off everywhere), not as the process happened to find it
    assert all(r["precision"]["cuda_matmul"] == r["precision"]["fp32"] == "ieee" for r in records(toy / "r"))


# 7: a diverging run is an outcome, and analyses that meet it say so
DIVERGING = {
    cid: (
        ["--set", "lrs=[1e30]", "--set", "null_lr=1e30"]
        if "lrs" in e.profiles["quick"]
        else ["--set", "lr=1e30"]
    )
    + (["--set", "rates=[1e30,2e30]"] if "rates" in e.profiles["quick"] else [])  # a learning-rate sweep's
    + (["--set", "copy_rates=[1e30,2e30]"] if "copy_rates" in e.profiles["quick"] else [])
    for cid, e in load_all().items()
    if "lr" in e.profiles["quick"] or "lrs" in e.profiles["quick"]
}


def _trained(metrics: dict) -> list[dict]:
    """The records of every model a run trained: its metrics, or, where one run trains several (a teacher and
    its students), each nested record that says whether it diverged."""
    if "diverged_at" in metrics:
        return [metrics]
    nested = [v for v in metrics.values() if isinstance(v, dict)]
    nested += [x for v in metrics.values() if isinstance(v, list) for x in v if isinstance(x, dict)]
    return [m for m in nested if "diverged_at" in m]


@pytest.mark.slow
@pytest.mark.parametrize("claim", sorted(DIVERGING))
def test_reliability_a_huge_learning_rate_is_recorded_as_diverged(claim, tmp_path, capsys):
    import re

    root = tmp_path / "r"
    argv = ["run", claim, "--profile", "quick", "--results-dir", str(root), "--no-progress", "--no-report"]
    assert main(argv + DIVERGING[claim]) == 0, capsys.readouterr().err[-2000:]
    res = json.loads((root / claim / "result.json").read_text())
    recs = [json.loads(p.read_text()) for p in (root / claim / "runs").glob("*.json")]
    trained = [m for r in recs for m in _trained(r["metrics"])]
    assert trained and all(m["diverged_at"] is not None for m in trained)
    assert not re.search(r"\bnan\b", res["key_number"], re.I), res["key_number"]
    assert all(
        c["decision"] in ("excluded", "undecided", "equivalent")
        for c in res["comparisons"]
        if c.get("learned_a") == 0 and c.get("learned_b") == 0
    )
