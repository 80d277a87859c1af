"""What the SLURM launcher reads from the cluster, without a cluster: squeue's answer, a job's cause of death
from its log, the jobs an interrupted sweep left, stale markers, and the options it refuses."""

import json
import os

import pytest
import torch

from tfclaims.harness import slurm
from tfclaims.harness.launch import Launcher, LauncherError
from tfclaims.harness.registry import load_file
from tfclaims.harness.runner import BadInput, run_experiment

from toys import TOY, register


@pytest.fixture
def squeue(tmp_path, monkeypatch):
    """A fake squeue on PATH that prints what the test writes to `said` (and fails with `err`, if any)."""
    said, err = tmp_path / "squeue.out", tmp_path / "squeue.err"
    script = tmp_path / "bin" / "squeue"
    script.parent.mkdir()
    script.write_text(
        f'#!/bin/sh\necho "$@" > {tmp_path}/squeue.args\ncat {said}\n'
        f"if [ -s {err} ]; then cat {err} >&2; exit 1; fi\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{script.parent}:{os.environ['PATH']}")
    said.write_text("")
    return said, err


def test_the_queue_is_read_per_array_task_with_state_and_reason(squeue, tmp_path):
    said, err = squeue
    said.write_text("12_0|RUNNING|None\n12_3|PENDING|Resources\n13|SUSPENDED|None\n")
    assert slurm.queue(["12_0", "12_3", "13"]) == {
        "12_0": ("RUNNING", "None"),
        "12_3": ("PENDING", "Resources"),
        "13": ("SUSPENDED", "None"),
    }
    assert (tmp_path / "squeue.args").read_text().split() == ["-h", "-r", "-o", "%i|%T|%r", "-j", "12,13"]
    said.write_text("")
    err.write_text("slurm_load_jobs error: Invalid job id specified\n")
    assert slurm.queue(["12_0"]) == {}  # every job gone: over, not unknown
    err.write_text("slurm_load_jobs error: Unable to contact slurm controller\n")
    assert slurm.queue(["12_0"]) is None  # the controller did not answer: unknown
    assert slurm.queue([]) is None


@pytest.mark.parametrize(
    "state, tail, cause",
    [
        (
            "TIMEOUT",
            "srun: error: vm: task 0: Killed\nslurmstepd-vm: error: *** JOB 4 ON vm CANCELLED AT "
            "2026-11-28T21:31:02 DUE TO TIME LIMIT ***\nsrun: error: vm: task 0: Killed",
            "TIMEOUT; its log: slurmstepd-vm: error: *** JOB 4 ON vm CANCELLED AT 2026-11-28T21:31:02 DUE TO "
            "TIME LIMIT",
        ),
        (
            "FAILED",
            "srun: error: task 0: Killed\nslurmstepd-vm: error: Exceeded job memory limit\n",
            "FAILED; its log: slurmstepd-vm: error: Exceeded job memory limit",
        ),
        (
            "FAILED",
            "Traceback (most recent call last):\nPermissionError: [Errno 13] Permission denied: '/data'",
            "FAILED; its log: PermissionError: [Errno 13] Permission denied: '/data'",
        ),
        ("CANCELLED", "all went well\n", "CANCELLED"),
        ("NODE_FAIL", None, "NODE_FAIL"),
    ],
)
def test_a_lost_jobs_cause_is_its_state_and_what_its_log_says_of_it(state, tail, cause):
    assert slurm.cause(state, tail) == cause


def test_an_interrupted_sweeps_jobs_hold_the_claim_until_slurm_lets_them_go(squeue, tmp_path, monkeypatch):
    said, _ = squeue
    exp = load_file(register(tmp_path, monkeypatch, TOY) / "experiments" / "toy.py")
    claim = tmp_path / "r" / "toy"
    claim.mkdir(parents=True)
    slurm.remember(claim, ["41_0", "41_1"], "abc")
    said.write_text("41_1|RUNNING|None\n")

    def sweep():
        return run_experiment(
            exp,
            profile="quick",
            device=torch.device("cpu"),
            results_root=tmp_path / "r",
            progress=False,
            log=lambda m: None,
        )

    with pytest.raises(BadInput, match=r"SLURM job\(s\) 41 of an interrupted sweep still hold its runs"):
        sweep()
    assert not (claim / "runs").exists() or not list((claim / "runs").iterdir())
    said.write_text("")  # gone
    assert sweep()[0] == 0 and not (claim / slurm.JOBS_FILE).exists()


def test_a_failed_marker_from_another_sweep_fails_nothing_in_this_one(tmp_path, monkeypatch):
    """A job that outlived an interrupted sweep filed a failed rerun's marker beside a good record; a later
    --force sweep whose own runs all succeed is not failed by it."""
    exp = load_file(register(tmp_path, monkeypatch, TOY) / "experiments" / "toy.py")
    kw = dict(profile="quick", device=torch.device("cpu"), results_root=tmp_path / "r", progress=False)
    assert run_experiment(exp, log=lambda m: None, **kw)[0] == 0
    runs = tmp_path / "r" / "toy" / "runs"
    first = sorted(runs.glob("*.json"))[0]
    stale = {**json.loads(first.read_text()), "status": "failed", "error": "ValueError: x", "sweep_id": "old"}
    (runs / f"{first.name}.failed").write_text(json.dumps(stale))
    logs = []
    rc, res = run_experiment(exp, log=logs.append, force=True, **kw)
    assert rc == 0 and res is not None and not any("failed" in m for m in logs if "0 failed" not in m)
    assert not list(runs.glob("*.failed"))


@pytest.mark.parametrize("mem", [0.0005, 1e-9])
def test_a_memory_request_below_a_megabyte_is_refused(mem):
    with pytest.raises(LauncherError, match="mem_gb must be at least 1 MB"):
        Launcher("slurm", mem_gb=mem)
    assert Launcher("slurm", mem_gb=0.001).mem_gb == 0.001


def test_cancel_on_interrupt_comes_from_the_option_or_the_environment():
    assert Launcher.from_options("slurm", env={}).cancel is False
    assert Launcher.from_options("slurm", env={"TFCLAIMS_SLURM_CANCEL": "1"}).cancel is True
    assert Launcher.from_options("slurm", env={"TFCLAIMS_SLURM_CANCEL": "0"}).cancel is False
    assert Launcher.from_options("slurm", env={}, cancel=True).cancel is True
    with pytest.raises(LauncherError, match="is not 0 or 1"):
        Launcher.from_options("slurm", env={"TFCLAIMS_SLURM_CANCEL": "maybe"})
