"""`--launcher slurm` on a real single-node SLURM (slurmctld, slurmd, munge, slurmdbd for sacct), brought up
from Debian's packages on the loopback by tests/slurm/cluster.sh and stopped by the PIDs it started.

Checked: numbers identical to a local run apart from wall-clock fields, with runs packed into jobs once their
durations are on record; threads equal to the CPUs allocated; a job cancelled mid-run recorded as failed and
redone alone by the rerun; under --force a cancelled job reported as failed, the earlier record and
result.json kept; an unknown partition answered in one line (exit 2) with nothing left behind.
Skipped, with the reason, where SLURM cannot be brought up; failed instead under TFCLAIMS_REQUIRE_TOOLS.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from tfclaims.harness.registry import REPO_ROOT, load

from toys import TOY

# one cluster for these tests: they stay on one pytest-xdist worker (make test uses --dist loadgroup)
pytestmark = [pytest.mark.xdist_group("slurm"), pytest.mark.slow]
SCRIPT = REPO_ROOT / "tests" / "slurm" / "cluster.sh"
WALL_CLOCK = {"seconds", "steps_per_s"}  # metrics that time the run: the only ones a launcher may change
# the real claim the cluster runs: trained language models (float reductions that depend on the threads) in a
# staged grid (a learning-rate sweep in rounds): at the quick profile, 44 runs (four arms at two depths)
CLAIM = "prenorm_effective_depth"


def _unavailable(why: str):
    if os.environ.get("TFCLAIMS_REQUIRE_TOOLS"):
        pytest.fail(f"SLURM test cluster: {why}, and TFCLAIMS_REQUIRE_TOOLS is set")
    pytest.skip(f"SLURM test cluster: {why}")


# session-scoped: pytest tears a module's fixture down whenever the worker turns to another module's test in
# between, and the SLURM tests share their worker with others
@pytest.fixture(scope="session")
def slurm():
    """What a client of a fresh single-node cluster adds to its environment (SLURM_CONF)."""
    if os.geteuid() != 0:
        _unavailable("needs root to run slurmd")
    check = subprocess.run(["bash", str(SCRIPT), "check"], capture_output=True, text=True, timeout=120)
    if check.returncode != 0:
        _unavailable(check.stderr.strip() or "cluster.sh check failed")
    state = Path(tempfile.mkdtemp(prefix="slurm-", dir="/tmp"))  # short: the munge socket path is limited
    up = subprocess.run(["bash", str(SCRIPT), "up", str(state)], capture_output=True, text=True, timeout=900)
    try:
        if up.returncode != 0:
            _unavailable(up.stderr.strip().splitlines()[-1] if up.stderr.strip() else "up failed")
        yield {"SLURM_CONF": str(state / "etc" / "slurm.conf")}
    finally:
        subprocess.run(["bash", str(SCRIPT), "down", str(state)], capture_output=True, timeout=120)


def tfclaims(env, root: Path, *args, claim=CLAIM, launcher="slurm", **popen):
    cmd = [sys.executable, "-m", "tfclaims", "run", claim, "--profile", "quick", "--results-dir", str(root)]
    cmd += ["--no-report", "--no-progress", "--launcher", launcher, *args]
    if launcher == "slurm":
        cmd += ["--slurm-partition", "debug", "--slurm-poll", "1", "--log-dir", str(root.parent / "logs")]
    env = {**os.environ, **env}
    if popen:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def records(root: Path, claim: str) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (root / claim / "runs").glob("*.json")}


def numbers(recs: dict[str, dict]) -> dict[str, dict]:
    return {k: {m: v for m, v in r["metrics"].items() if m not in WALL_CLOCK} for k, r in recs.items()}


@pytest.fixture
def toy(tmp_path, monkeypatch):
    d = tmp_path / "experiments"
    d.mkdir()
    (d / "toy.py").write_text(textwrap.dedent(TOY))
    monkeypatch.setenv("TFCLAIMS_EXPERIMENTS", str(d))
    return tmp_path


def test_slurm_gives_the_local_numbers_and_packs_recorded_runs_into_jobs(slurm, tmp_path):
    """Like with like: a run's float reductions depend on its thread count, so each SLURM sweep is compared
    with a local sweep at the threads its jobs were allocated."""
    one = tfclaims(slurm, tmp_path / "one", "--workers", str(os.cpu_count()), launcher="local-parallel")
    both = tfclaims(slurm, tmp_path / "all", launcher="local")  # in process: torch's own thread count
    assert one.returncode == both.returncode == 0, one.stderr + both.stderr
    local1, local_all = records(tmp_path / "one", CLAIM), records(tmp_path / "all", CLAIM)
    assert {r["threads"] for r in local1.values()} == {1}
    (threads,) = {r["threads"] for r in local_all.values()}

    # the grid is staged: each round is a sweep of its own on the cluster
    n1 = len(load(CLAIM).grid(load(CLAIM).profiles["quick"]))  # its first round
    first = tfclaims(slurm, tmp_path / "slurm")  # no durations on record yet: one run a job
    assert first.returncode == 0, first.stderr
    assert f"{n1} job(s) for {n1} run(s)" in first.stderr and "1 CPU(s), no GPU, 4 GB" in first.stderr
    sl = records(tmp_path / "slurm", CLAIM)
    assert len(sl) == len(local1) > n1 and numbers(sl) == numbers(local1)  # the later rounds ran too
    assert {r["threads"] for r in sl.values()} == {1}  # the CPUs allocated, not the machine's cores

    again = tfclaims(slurm, tmp_path / "slurm", "--force", "--slurm-cpus", str(threads))  # durations known
    assert again.returncode == 0, again.stderr
    assert f"1 job(s) for {n1} run(s)" in again.stderr and f"{threads} CPU(s)" in again.stderr
    packed = records(tmp_path / "slurm", CLAIM)
    assert numbers(packed) == numbers(local_all)
    groups = {r["job_group"] for r in packed.values()}
    assert f"1/1 ({n1} runs)" in groups and all(g.startswith("1/1 (") for g in groups)  # a job per round
    assert {r["threads"] for r in packed.values()} == {threads}


def _wait_for(path: Path, timeout: float = 120) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.2)
    raise AssertionError(f"{path} never appeared")


def _cancel_mid_run(env, toy, *args) -> subprocess.CompletedProcess:
    env = {**env, "TOY_SLEEP_1": "60", "TOY_STARTED_1": str(toy / "started")}
    proc = tfclaims(env, toy / "r", *args, claim="toy", popen=True)
    try:
        job = _wait_for(toy / "started")
    except AssertionError:
        proc.kill()
        raise AssertionError(proc.communicate()[1]) from None
    subprocess.run(["scancel", job], env={**os.environ, **env}, check=True, timeout=60)
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_a_cancelled_job_is_a_failed_run_that_the_rerun_redoes_alone(slurm, toy):
    done = _cancel_mid_run(slurm, toy)
    assert done.returncode == 1, done.stderr
    assert "6 runs (0 reused, 5 run, 1 failed)" in done.stderr and "analysis skipped" in done.stderr
    failed = [r for r in records(toy / "r", "toy").values() if r["status"] == "failed"]
    assert [(r["config"]["i"], r["config"]["seed"]) for r in failed] == [(1, 0)]
    assert "CANCELLED" in failed[0]["error"] and not (toy / "r" / "toy" / "result.json").exists()
    rerun = tfclaims(slurm, toy / "r", claim="toy")
    assert rerun.returncode == 0, rerun.stderr
    assert "6 runs (5 reused, 1 run, 0 failed)" in rerun.stderr
    assert "1 job(s) for 1 run(s)" in rerun.stderr


def test_under_force_a_cancelled_job_is_reported_failed_and_nothing_is_replaced(slurm, toy):
    assert tfclaims(slurm, toy / "r", claim="toy", launcher="local").returncode == 0
    before = {p: p.read_bytes() for p in (toy / "r" / "toy").rglob("*") if p.is_file()}
    done = _cancel_mid_run(slurm, toy, "--force")  # durations on record: the 6 runs form one job
    assert done.returncode == 1, done.stderr
    # the job ran i = 0 (two seeds) and was cancelled in i = 1: every run it did not finish is failed
    assert "1 job(s) for 6 run(s)" in done.stderr and "6 runs (0 reused, 2 run, 4 failed)" in done.stderr
    assert "its earlier good record is kept" in done.stderr and "analysis skipped" in done.stderr
    after = {p: p.read_bytes() for p in (toy / "r" / "toy").rglob("*") if p.is_file()}
    assert after[toy / "r" / "toy" / "result.json"] == before[toy / "r" / "toy" / "result.json"]
    assert {r["status"] for r in records(toy / "r", "toy").values()} == {"ok"}  # the earlier good records


def test_an_unknown_partition_is_one_line_and_leaves_nothing_behind(slurm, tmp_path):
    cmd = [sys.executable, "-m", "tfclaims", "run", CLAIM, "--profile", "quick", "--no-report"]
    cmd += ["--results-dir", str(tmp_path / "r"), "--launcher", "slurm", "--slurm-partition", "nope"]
    cmd += ["--log-dir", str(tmp_path / "logs")]
    out = subprocess.run(cmd, env={**os.environ, **slurm}, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "error: SLURM refused the jobs: invalid partition specified: nope; "
        "Batch job submission failed: Invalid partition name specified"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no runs folder, no pickles, no script


# -- the cluster's own faults: a time limit, pre-emption, suspension, an interrupted sweep, a closed queue --


def _sweep_in_background(env, toy, *args, partition="debug", **hooks):
    """The toy sweep started with its stderr going to a file; returns (process, stderr file)."""
    env = {**env, "TOY_CALLS": str(toy / "calls"), "TOY_STARTED_1": str(toy / "started"), **hooks}
    opts = "--profile quick --no-report --no-progress --launcher slurm --slurm-poll 1 --slurm-mem-gb 0.5"
    cmd = [sys.executable, "-m", "tfclaims", "run", "toy", *opts.split(), "--slurm-partition", partition]
    cmd += ["--results-dir", str(toy / "r"), "--log-dir", str(toy / "logs"), *args]
    err = toy / f"stderr-{time.time_ns()}"
    proc = subprocess.Popen(
        cmd, env={**os.environ, **env}, stderr=err.open("w"), text=True, preexec_fn=_default_signals
    )
    return proc, err


def _default_signals():
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _finish(proc, err: Path, timeout: float = 300) -> tuple[int, str]:
    proc.wait(timeout=timeout)
    return proc.returncode, err.read_text()


def _calls(toy) -> list[tuple[int, int]]:
    return sorted(tuple(map(int, ln.split(","))) for ln in (toy / "calls").read_text().split())


def _slurm(env, *args) -> str:
    out = subprocess.run(list(args), env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _until(check, timeout: float = 120, what: str = "the condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if got := check():
            return got
        time.sleep(0.5)
    raise AssertionError(f"{what} never held")


def _each_at_most_twice(toy) -> bool:
    """Every run ran, none more than once beyond its pre-empted execution."""
    calls = _calls(toy)
    return set(calls) == {(i, s) for i in range(3) for s in (0, 1)} and max(map(calls.count, calls)) <= 2


def _ok_sweep_of_six(toy, rc: int, err: str) -> None:
    assert rc == 0, err
    assert "toy: 6 runs (0 reused, 6 run, 0 failed)" in err
    assert {r["status"] for r in records(toy / "r", "toy").values()} == {"ok"}
    assert (toy / "r" / "toy" / "result.json").exists() and not (
        toy / "r" / "toy" / ".slurm-jobs.json"
    ).exists()


def test_a_time_limit_fails_the_run_once_with_its_log_though_the_recipe_catches_exceptions(slurm, toy):
    """SLURM warns of the limit with SIGUSR2; nothing is raised into the run (whose `except Exception` would
    file -100 as a good value), the job is not requeued, and its unfinished run is failed once, with its
    log."""
    assert tfclaims(slurm, toy / "r", claim="toy", launcher="local").returncode == 0
    published = (toy / "r" / "toy" / "result.json").read_bytes()
    (rid,) = [
        k for k, r in records(toy / "r", "toy").items() if (r["config"]["i"], r["config"]["seed"]) == (1, 0)
    ]
    (toy / "r" / "toy" / "runs" / f"{rid}.json").unlink()  # the one run the SLURM sweep makes
    proc, err = _sweep_in_background(slurm, toy, "--slurm-time", "1", TOY_CATCH="600")
    rc, said = _finish(proc, err)
    assert rc == 1 and "toy: 6 runs (5 reused, 0 run, 1 failed)" in said, said
    rec = records(toy / "r", "toy")[rid]
    assert rec["status"] == "failed" and rec.get("metrics") is None
    assert (
        "ended without a record (TIMEOUT; its log: " in rec["error"] and "DUE TO TIME LIMIT" in rec["error"]
    )
    assert Path(rec["log"]).is_file() and "signalled the job's time limit" in rec["log_tail"]
    assert rec["job_id"] and rec["job_id"].split("_")[0] in said
    assert _calls(toy).count((1, 0)) == 1  # no requeue
    assert (toy / "r" / "toy" / "result.json").read_bytes() == published


def _preempt(env, toy) -> str:
    """Once run (1, 0) runs, a job in the urgent partition takes the whole node; returns the pre-empted
    job."""
    job = _wait_for(toy / "started")
    _slurm(
        env, "sbatch", "-p", "urgent", "--exclusive", "--mem", "100", "-o", "/dev/null", "--wrap", "sleep 3"
    )
    return job


def test_a_job_preempted_and_cancelled_is_submitted_once_more(slurm, toy):
    proc, err = _sweep_in_background(slurm, toy, partition="preempt-cancel", TOY_SLEEP_1="12")
    job = _preempt(slurm, toy)
    rc, said = _finish(proc, err)
    _ok_sweep_of_six(toy, rc, said)
    assert f"toy: job {job} ended PREEMPTED; its runs are tried once more" in said
    assert _calls(toy).count((1, 0)) == 2 and _each_at_most_twice(toy)


def test_a_job_preempted_and_requeued_by_slurm_is_left_to_slurm(slurm, toy):
    """Under PreemptMode=REQUEUE the job passes through PREEMPTED back into the queue: no second
    submission."""
    proc, err = _sweep_in_background(slurm, toy, partition="preempt-requeue", TOY_SLEEP_1="12")
    job = _preempt(slurm, toy)
    _until(
        lambda: _slurm(slurm, "squeue", "-h", "-r", "-j", job, "-o", "%r").strip() == "BeginTime",
        what=f"job {job} requeued",
    )
    queue = _slurm(slurm, "squeue", "-h", "-r", "-j", job.split("_")[0], "-o", "%i %r").split("\n")
    for task in [ln.split()[0] for ln in queue if ln.endswith(" BeginTime")]:  # every task pre-empted
        _slurm(slurm, "scontrol", "update", f"JobId={task}", "StartTime=now")  # else SLURM holds it 2 min
    rc, said = _finish(proc, err)
    _ok_sweep_of_six(toy, rc, said)
    assert "tried once more" not in said and _calls(toy).count((1, 0)) == 2 and _each_at_most_twice(toy)


def test_a_suspended_job_is_waited_for_and_said(slurm, toy):
    proc, err = _sweep_in_background(slurm, toy, TOY_SLEEP_1="10")
    job = _wait_for(toy / "started")
    _slurm(slurm, "scontrol", "suspend", job)
    _until(lambda: "SLURM suspended job(s)" in err.read_text(), what="the suspension said")
    time.sleep(16)  # longer than submitit waits for a result it thinks is coming
    assert proc.poll() is None
    _slurm(slurm, "scontrol", "resume", job)
    rc, said = _finish(proc, err)
    _ok_sweep_of_six(toy, rc, said)
    assert f"toy: SLURM suspended job(s) {job}; waiting for them to resume" in said
    assert f"toy: SLURM resumed job(s) {job}" in said and _calls(toy).count((1, 0)) == 1


def test_an_interrupted_sweep_names_the_jobs_it_leaves_and_a_rerun_waits_for_them(slurm, toy):
    gate = toy / "gate"  # the job's run 1 holds it until the test has seen the rerun refused
    proc, err = _sweep_in_background(slurm, toy, TOY_GATE_1=str(gate))
    try:
        job = _wait_for(toy / "started").split("_")[0]
        proc.send_signal(signal.SIGINT)
        rc, said = _finish(proc, err)
        assert rc == 130 and said.strip().splitlines()[-2:] == [
            f"toy: SLURM job(s) {job} keep running and record their runs; stop them with `scancel {job}`; "
            "a new sweep of toy starts once they are gone",
            "interrupted: finished runs are kept; rerun the same command to resume",
        ]
        again = tfclaims(slurm, toy / "r", claim="toy")
        assert again.returncode == 2 and again.stderr.strip().splitlines() == [
            f"error: toy: SLURM job(s) {job} of an interrupted sweep still hold its runs; wait until they "
            f"end (squeue -j {job}) or stop them (scancel {job}), then rerun"
        ]
    finally:
        gate.touch()  # a failure above leaves no job waiting on the cluster the next tests share
    _until(lambda: not _slurm(slurm, "squeue", "-h", "-j", job).strip(), what=f"job {job} gone")
    rerun = tfclaims(slurm, toy / "r", claim="toy")
    assert rerun.returncode == 0 and "6 runs (6 reused, 0 run, 0 failed)" in rerun.stderr, rerun.stderr
    assert _calls(toy) == [(i, s) for i in range(3) for s in (0, 1)]  # every run once: nothing duplicated


def test_slurm_cancel_stops_the_jobs_of_an_interrupted_sweep(slurm, toy):
    proc, err = _sweep_in_background(slurm, toy, "--slurm-cancel", TOY_SLEEP_1="60")
    job = _wait_for(toy / "started").split("_")[0]
    proc.send_signal(signal.SIGINT)
    rc, said = _finish(proc, err)
    assert rc == 130 and f"toy: cancelled SLURM job(s) {job}" in said
    _until(lambda: not _slurm(slurm, "squeue", "-h", "-j", job).strip(), timeout=60, what=f"job {job} gone")
    assert not (toy / "r" / "toy" / ".slurm-jobs.json").exists()


def test_a_queue_that_runs_none_of_the_jobs_says_why(slurm, toy):
    proc, err = _sweep_in_background(slurm, toy, partition="closed")
    try:
        _until(lambda: "waiting in SLURM's queue" in err.read_text(), timeout=90, what="the pending note")
    finally:
        proc.send_signal(signal.SIGINT)
        rc, said = _finish(proc, err)
    (note,) = [ln for ln in said.splitlines() if "waiting in SLURM's queue" in ln]
    assert (
        "toy: 6 job(s) waiting in SLURM's queue for " in note
        and "none running (reason: PartitionDown)" in note
    )
    assert rc == 130 and "keep running" in said
    _slurm(slurm, "scancel", "-p", "closed")


def test_a_job_killed_for_its_memory_names_the_cause(slurm, toy):
    proc, err = _sweep_in_background(slurm, toy, TOY_HOLD_MB="900", TOY_SLEEP_1="5")
    rc, said = _finish(proc, err)
    assert rc == 1 and "toy: 6 runs (0 reused, 5 run, 1 failed)" in said, said
    (failed,) = [r for r in records(toy / "r", "toy").values() if r["status"] == "failed"]
    assert "its log: " in failed["error"] and "memory limit" in failed["error"]
    assert failed["job_id"] and failed["log_tail"]
