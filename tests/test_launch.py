"""Launchers: local, local-parallel and slurm (submitit's local executor, the same job path as a cluster)
fill one cache with identical records; lost jobs are recorded with their log and retried; a sweep split
across launchers finishes anywhere; killing a sweep (SIGINT, SIGKILL) at random points loses nothing."""

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from tfclaims.harness.launch import Launcher, LauncherError
from tfclaims.harness.provenance import code_hash
from tfclaims.harness.registry import load_file
from tfclaims.harness.runner import RunTask, execute_run, run_experiment

from toys import TOY


@pytest.fixture
def toy(tmp_path, monkeypatch):
    d = tmp_path / "experiments"
    d.mkdir()
    (d / "toy.py").write_text(textwrap.dedent(TOY))
    monkeypatch.setenv("TOY_CALLS", str(tmp_path / "calls.txt"))
    monkeypatch.setenv("TFCLAIMS_EXPERIMENTS", str(d))
    return load_file(d / "toy.py")


def calls(tmp_path) -> list[tuple[int, int]]:
    p = tmp_path / "calls.txt"
    return [tuple(map(int, line.split(","))) for line in p.read_text().split()] if p.exists() else []


def sweep(exp, root, launcher=None, **kw):
    kw.setdefault("profile", "quick")
    return run_experiment(
        exp,
        device=torch.device("cpu"),
        results_root=root,
        progress=False,
        log=lambda m: None,
        launcher=launcher,
        **kw,
    )


def records(root) -> list[dict]:
    return [json.loads(p.read_text()) for p in (root / "toy" / "runs").glob("*.json")]


def metrics(root) -> dict:
    recs = records(root)
    return {r["run_id"]: {k: v for k, v in r["metrics"].items() if k != "pid"} for r in recs}


@pytest.mark.slow
def test_every_launcher_writes_the_same_records(toy, tmp_path):
    rc, local = sweep(toy, tmp_path / "a")
    assert rc == 0
    rc, par = sweep(toy, tmp_path / "b", Launcher("local-parallel", workers=2))
    assert rc == 0
    rc, slurm = sweep(
        toy, tmp_path / "c", Launcher("slurm", cluster="local", log_dir=tmp_path / "logs", gpus=0)
    )
    assert rc == 0
    assert local["run_ids"] == par["run_ids"] == slurm["run_ids"]
    assert metrics(tmp_path / "a") == metrics(tmp_path / "b") == metrics(tmp_path / "c")  # seeded: identical
    pids = {r["metrics"]["pid"] for r in records(tmp_path / "b")}
    assert os.getpid() not in pids  # the parallel runs really ran in workers
    launchers = {r["launcher"] for r in records(tmp_path / "c")}
    assert launchers == {"slurm"}
    assert local["verdict"] == par["verdict"] == slurm["verdict"]


@pytest.mark.slow
def test_a_sweep_split_across_launchers_finishes_anywhere(toy, tmp_path):
    sweep(toy, tmp_path, seeds=[0])  # part of the grid here
    sweep(toy, tmp_path, Launcher("local-parallel", workers=2), seeds=[1])  # part elsewhere
    before = len(calls(tmp_path))
    rc, res = sweep(toy, tmp_path)  # the whole grid: nothing left to run
    assert rc == 0 and len(calls(tmp_path)) == before == 6 and res["n_runs"] == 6


@pytest.mark.slow
def test_lost_job_is_recorded_with_its_log_and_retried(toy, tmp_path, monkeypatch):
    monkeypatch.setenv("TOY_DIE_ONCE", str(tmp_path / "died"))
    launcher = Launcher("slurm", cluster="local", log_dir=tmp_path / "logs", gpus=0)
    rc, res = sweep(toy, tmp_path, launcher, seeds=[0])
    assert rc == 1 and res is None and not (tmp_path / "toy" / "result.json").exists()
    recs = records(tmp_path)
    failed = [r for r in recs if r["status"] == "failed"]
    assert len(recs) == 3 and len(failed) == 1 and failed[0]["config"] == {"i": 1, "seed": 0}
    assert "ended without a record" in failed[0]["error"] and Path(failed[0]["log"]).exists()
    n = len(calls(tmp_path))
    rc, res = sweep(toy, tmp_path, launcher, seeds=[0])  # the next invocation retries only the lost run
    assert rc == 0 and calls(tmp_path)[n:] == [(1, 0)] and res["n_runs"] == 3


@pytest.mark.slow
def test_a_job_slurm_lost_with_its_node_is_submitted_once_more(toy, tmp_path, monkeypatch):
    monkeypatch.setenv("TOY_DIE_ONCE", str(tmp_path / "died"))
    monkeypatch.setattr("tfclaims.harness.launch._state", lambda job: "NODE_FAIL")
    launcher = Launcher("slurm", cluster="local", log_dir=tmp_path / "logs", gpus=0)
    rc, res = sweep(toy, tmp_path, launcher, seeds=[0])
    assert rc == 0 and res["n_runs"] == 3 and calls(tmp_path).count((1, 0)) == 2


@pytest.mark.slow
def test_a_lost_group_fails_only_its_unfinished_runs_and_force_keeps_good_records(toy, tmp_path, monkeypatch):
    """Runs with a duration on record share a job; the job dies in its second run: the first run stands,
    the second and third are failed. Under --force the earlier good records stay, and the failures are
    counted: the analysis is skipped and result.json kept."""
    launcher = Launcher("slurm", cluster="local", log_dir=tmp_path / "logs", gpus=0, job_min=60)
    assert sweep(toy, tmp_path, launcher, seeds=[0])[0] == 0  # one run a job: no durations yet
    result = (tmp_path / "toy" / "result.json").read_bytes()
    good = {r["run_id"]: r for r in records(tmp_path)}
    monkeypatch.setenv("TOY_DIE_ONCE", str(tmp_path / "died"))
    logs = []
    rc, res = run_experiment(
        toy,
        profile="quick",
        device=torch.device("cpu"),
        results_root=tmp_path,
        progress=False,
        log=logs.append,
        launcher=launcher,
        seeds=[0],
        force=True,
    )
    assert rc == 1 and res is None and (tmp_path / "toy" / "result.json").read_bytes() == result
    assert "toy: 3 runs (0 reused, 1 run, 2 failed)" in logs
    assert sum("its earlier good record is kept" in m for m in logs) == 2
    now = {r["run_id"]: r for r in records(tmp_path)}
    assert {r["status"] for r in now.values()} == {"ok"} and now.keys() == good.keys()
    rerun = [r["config"] for r in now.values() if r["job_group"] == "1/1 (3 runs)"]
    assert rerun == [{"i": 0, "seed": 0}]  # the one run the packed job finished; the others kept


@pytest.mark.slow
def test_a_dead_parallel_worker_is_retried_once_and_its_partial_writes_removed(toy, tmp_path, monkeypatch):
    monkeypatch.setenv("TOY_DIE_ONCE", str(tmp_path / "died"))
    runs = tmp_path / "toy" / "runs"
    runs.mkdir(parents=True)
    for rid in ("0123456789abcdef", "fedcba9876543210"):  # what a worker killed mid-write leaves behind
        (runs / f".{rid}.json.k2j4.tmp").write_text('{"run_id": ')
    rc, res = sweep(toy, tmp_path, Launcher("local-parallel", workers=2))
    assert rc == 0 and res["n_runs"] == 6  # the dead worker's runs ran again in a fresh pool
    assert calls(tmp_path).count((1, 0)) == 2 and {r["status"] for r in records(tmp_path)} == {"ok"}
    # the partial files of runs this sweep did not touch stay; none of its own are left
    assert sorted(p.name for p in runs.glob("*.tmp")) == sorted(
        f".{rid}.json.k2j4.tmp"
        for rid in ("0123456789abcdef", "fedcba9876543210")
        if not (runs / f"{rid}.json").exists()
    )


@pytest.mark.slow
def test_a_run_that_kills_its_worker_twice_is_recorded_as_failed(toy, tmp_path, monkeypatch):
    monkeypatch.setenv("TOY_DIE_ALWAYS", "1")
    rc, _ = sweep(toy, tmp_path, Launcher("local-parallel", workers=2))
    assert rc == 1 and calls(tmp_path).count((1, 0)) == 2
    failed = [r for r in records(tmp_path) if r["status"] == "failed"]
    assert failed and all("worker process died" in r["error"] for r in failed)
    assert {(r["config"]["i"], r["config"]["seed"]) for r in failed} >= {(1, 0)}
    monkeypatch.delenv("TOY_DIE_ALWAYS")
    assert sweep(toy, tmp_path, Launcher("local-parallel", workers=2))[0] == 0  # the rerun redoes them


def test_a_worker_with_different_code_refuses_to_run(toy, tmp_path):
    """A job that starts after the code changed must not file its numbers under the old code hash."""
    src = str(Path(os.environ["TFCLAIMS_EXPERIMENTS"]) / "toy.py")
    cfg = {"i": 0, "seed": 0}
    task = RunTask(src, "toy", cfg, "c" * 16, "not-the-hash", "r" * 16, "cpu", str(tmp_path / "rec.json"))
    assert execute_run(task) == "failed"
    rec = json.loads((tmp_path / "rec.json").read_text())
    assert "differs from the code the sweep was launched with" in rec["error"] and calls(tmp_path) == []
    ok = RunTask(src, "toy", cfg, "c" * 16, code_hash(toy), "r" * 16, "cpu", str(tmp_path / "rec.json"))
    assert execute_run(ok) == "ok" and calls(tmp_path) == [(0, 0)]


def test_launcher_options_from_environment_and_validation():
    env = {"TFCLAIMS_SLURM_PARTITION": "gpu", "TFCLAIMS_SLURM_GPUS": "2", "TFCLAIMS_SLURM_MEM_GB": "64"}
    launcher = Launcher.from_options("slurm", env=env, gpus=4)
    assert (launcher.partition, launcher.gpus, launcher.mem_gb) == ("gpu", 4, 64.0)  # options beat env
    assert launcher.device("auto").type == "cuda"  # jobs with GPUs: the login node need not have one
    assert Launcher.from_options("slurm", env={}, gpus=0).device("auto").type == "cpu"
    for bad, match in [
        (dict(name="cloud"), "unknown launcher"),
        (dict(name="slurm", cluster="k8s"), "unknown submitit cluster"),
        (dict(workers=-1), "workers must be >= 0"),
        (dict(time_min=0), "time_min must be >= 1"),
    ]:
        with pytest.raises(LauncherError, match=match):
            Launcher(**bad)
    with pytest.raises(LauncherError, match="not a number"):
        Launcher.from_options("slurm", env={"TFCLAIMS_SLURM_GPUS": "two"})


def _wait_for_runs(runs: Path, n: int, timeout: float) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if runs.exists() and len(list(runs.glob("*.json"))) >= n:
            return
        time.sleep(0.05)


@pytest.mark.slow
def test_killing_a_sweep_at_random_points_loses_nothing(toy, tmp_path, monkeypatch):
    """SIGINT and SIGKILL, eight times, at random moments; each finished run survives and is never rerun."""
    monkeypatch.setenv("TOY_SLEEP", "0.15")
    root, runs = tmp_path / "results", tmp_path / "results" / "toy" / "runs"
    cmd = [
        sys.executable,
        "-m",
        "tfclaims",
        "run",
        "toy",
        "--no-progress",
        "--no-report",
        "--results-dir",
        str(root),
    ]
    rng, finished = random.Random(0), {}
    for k in range(8):
        if len(finished) > 30:
            break
        sig = signal.SIGINT if k % 2 == 0 else signal.SIGKILL
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _wait_for_runs(runs, len(finished) + 1, 60)  # startup done, the sweep is under way
        time.sleep(rng.uniform(0.0, 0.4))
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        if sig == signal.SIGINT and proc.returncode != 0:
            assert proc.returncode == 130 and err.strip().splitlines()[-1].startswith("interrupted:"), err
            assert "leaked" not in err  # the pool's semaphores are released before the process exits
        now = {}
        for p in runs.glob("*.json"):  # every visible record is whole and finished
            rec = json.loads(p.read_text())
            assert rec["status"] == "ok" and p.stem == rec["run_id"]
            now[p.stem] = (rec["config"]["i"], rec["config"]["seed"])
        assert finished.items() <= now.items()
        finished = now
    n = len(calls(tmp_path))
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rerun = calls(tmp_path)[n:]
    everything = {(i, s) for i in range(12) for s in range(3)}
    # the rerun completed exactly what was missing, once each, and no finished run again
    assert sorted(rerun) == sorted(everything - set(finished.values()))
    assert len(list(runs.glob("*.json"))) == 36


def _hammer(path: str, tag: int, n: int) -> None:
    from tfclaims.io import atomic_write_json

    for k in range(n):
        atomic_write_json(Path(path), {"writer": tag, "k": k, "payload": [tag] * 20000})


@pytest.mark.slow
def test_concurrent_writers_of_one_record_never_expose_a_partial_file(tmp_path):
    """Workers that finish the same run at once (a sweep split across machines): readers see whole files
    only."""
    import multiprocessing as mp

    path = tmp_path / "run.json"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_hammer, args=(str(path), tag, 60)) for tag in range(3)]
    for p in procs:
        p.start()
    reads = 0
    while any(p.is_alive() for p in procs):
        if path.exists():
            rec = json.loads(path.read_text())  # raises on a torn file
            assert rec["payload"] == [rec["writer"]] * 20000
            reads += 1
    for p in procs:
        p.join()
        assert p.exitcode == 0
    assert reads > 10 and not list(tmp_path.glob(".*.tmp"))


def test_auto_launcher_parallel_only_for_training_runs_on_a_multicore_cpu(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    auto, cpu, cuda = Launcher("auto"), torch.device("cpu"), torch.device("cuda")
    training = auto.resolve(times_code=False, device=cpu, n_tasks=10)
    assert (training.name, training.workers) == ("local-parallel", 4)
    assert auto.resolve(times_code=False, device=cpu, n_tasks=3).workers == 3  # no idle workers
    assert (
        auto.resolve(times_code=True, device=cpu, n_tasks=10).name == "local"
    )  # timing: the machine to itself
    assert auto.resolve(times_code=False, device=cuda, n_tasks=10).name == "local"
    assert auto.resolve(times_code=False, device=cpu, n_tasks=1).name == "local"
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    assert auto.resolve(times_code=False, device=cpu, n_tasks=10).name == "local"
    explicit = Launcher("local-parallel", workers=2)
    assert explicit.resolve(times_code=True, device=cpu, n_tasks=10) is explicit  # an explicit choice stands


def test_slurm_requests_follow_the_device_and_every_value_can_be_overridden():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    base = Launcher("slurm")
    assert base.device("auto") == cpu and Launcher("slurm", gpus=2).device("auto") == cuda
    assert {k: base.request(cpu)[k] for k in ("gpus", "cpus", "mem_gb")} == {
        "gpus": 0,
        "cpus": 1,
        "mem_gb": 4.0,
    }
    assert {k: base.request(cuda)[k] for k in ("gpus", "cpus", "mem_gb")} == {
        "gpus": 1,
        "cpus": 4,
        "mem_gb": 16.0,
    }
    mine = Launcher("slurm", gpus=2, cpus=8, mem_gb=64, time_min=30)
    assert {k: mine.request(cuda)[k] for k in ("gpus", "cpus", "mem_gb", "time_min")} == {
        "gpus": 2,
        "cpus": 8,
        "mem_gb": 64,
        "time_min": 30,
    }
    with pytest.raises(LauncherError, match="GPUs they never use"):
        Launcher("slurm", gpus=1).device("cpu")


def test_runs_are_packed_by_recorded_duration_in_grid_order():
    from dataclasses import dataclass

    from tfclaims.harness.launch import group_runs

    @dataclass(frozen=True)
    class T:
        name: str
        estimate_s: float | None
        job_group: str | None = None

    tasks = [T("a", 100), T("b", 300), T("c", None), T("d", 250), T("e", 700), T("f", 10)]
    groups = group_runs(tasks, 600)
    assert [[t.name for t in g] for g in groups] == [["c"], ["a", "b", "d"], ["e"], ["f"]]
    assert [t.job_group for t in groups[1]] == ["2/4 (3 runs)"] * 3


def test_threads_come_from_the_allocation(monkeypatch):
    from tfclaims.harness.launch import allocated_cpus

    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "3")
    assert allocated_cpus() == 3
    monkeypatch.delenv("SLURM_CPUS_PER_TASK")
    assert allocated_cpus() == len(os.sched_getaffinity(0))


def test_slurm_without_accounting_is_refused_before_submitting(tmp_path, monkeypatch):
    from tfclaims.harness.launch import _check_slurm

    for name, body in (
        ("sbatch", "exit 0"),
        ("sacct", 'echo "sacct: error: Slurm accounting storage is disabled" >&2; exit 1'),
    ):
        (tmp_path / name).write_text(f"#!/bin/sh\n{body}\n")
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    with pytest.raises(LauncherError, match="needs SLURM accounting .*storage is disabled"):
        _check_slurm()


def test_a_timed_part_runs_alone_in_process_before_the_claims_other_runs_share_the_cores(
    monkeypatch, tmp_path
):
    """albert_sharing times one part (`Part.timed`): under `auto` on a multicore CPU its run goes first, in
    process, and the counts and training runs then go to one worker per core."""
    from tfclaims.harness.registry import load

    calls = []

    def fake_map(self, fn, tasks, **kw):
        calls.append((self.name, sorted({t.config["part"] for t in tasks})))
        return iter(())  # nothing runs: the launch decisions are what is tested

    monkeypatch.setattr(Launcher, "map", fake_map)
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    exp = load("albert_sharing")
    run_experiment(
        exp,
        profile="quick",
        device=torch.device("cpu"),
        results_root=tmp_path,
        progress=False,
        log=lambda *a: None,
        launcher=Launcher("auto"),
    )
    assert calls == [("local", ["timing"]), ("local-parallel", ["counts", "sweep"])]
    assert exp.timed({"part": "timing"}) and not exp.timed({"part": "sweep"})
