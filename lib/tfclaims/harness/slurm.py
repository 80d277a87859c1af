"""What SLURM says of a sweep's jobs, read as SLURM means it.

submitit learns a job's state from `sacct`, which lags and names states a job passes through: a job
pre-empted under `PreemptMode=REQUEUE`, or caught by a node failure, shows PREEMPTED or NODE_FAIL while SLURM
already queues it again, and a SUSPENDED job is stopped, not dead. So whether a job is still SLURM's is asked
of `squeue` (the controller's own queue: pending, running, suspended, requeued); only a job that has left it
is over, and only then does its last state decide what follows:

- COMPLETED: its runs are recorded (a run the job did not record is lost);
- PREEMPTED (pre-empted and cancelled), NODE_FAIL, BOOT_FAIL: lost through no fault of its runs, submitted
  once more;
- CANCELLED, FAILED, TIMEOUT, OUT_OF_MEMORY, DEADLINE: its unrecorded runs are lost, each failed record
  naming the state, the log and what the log's tail says of the cause.

A sweep records the jobs it submits in `<claim folder>/.slurm-jobs.json` until they are over, so that a
sweep interrupted while they run (Ctrl-C) leaves a trace: a later sweep of the claim refuses to start while
they are still SLURM's, since it would run their runs a second time.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

# States in which a job that has left the queue is submitted once more: SLURM lost it, its runs did not fail.
RESUBMITTED = ("PREEMPTED", "NODE_FAIL", "BOOT_FAIL")
JOBS_FILE = ".slurm-jobs.json"
# What a job's log says of why it ended, most telling first: SLURM's own verdict ("CANCELLED AT … DUE TO TIME
# LIMIT"), a memory kill, a refused permission, then any error line.
_CAUSES = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (r"due to", r"memory|oom", r"permission denied|not permitted", r"error|killed")
)


def queue(job_ids: list[str]) -> dict[str, tuple[str, str]] | None:
    """SLURM's own queue for these jobs (array tasks as <array>_<task>): each job still in it, with its state
    and reason (PENDING Resources, SUSPENDED, RUNNING None, …); None when squeue cannot be asked (not on
    PATH, the controller not answering)."""
    if not job_ids or shutil.which("squeue") is None:
        return None
    arrays = sorted({str(j).split("_")[0] for j in job_ids})
    cmd = ["squeue", "-h", "-r", "-o", "%i|%T|%r", "-j", ",".join(arrays)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:  # every job gone past MinJobAge: squeue calls the ids invalid
        return {} if "Invalid job id" in out.stderr else None
    found = {}
    for line in out.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3:
            found[parts[0]] = (parts[1], parts[2])
    return found


def cause(state: str, log_tail: str | None) -> str:
    """One line on why a job ended without its records: SLURM's state, and the last line of its log that
    names a cause (an error, a refused permission, a kill, a limit), if any."""
    lines = [ln.strip(" *") for ln in (log_tail or "").splitlines() if ln.strip()]
    for pattern in _CAUSES:
        said = [ln for ln in lines if pattern.search(ln)]
        if said:
            return f"{state}; its log: {said[-1][:200]}"
    return state


def cancel(job_ids: list[str]) -> bool:
    """scancel the jobs; whether SLURM took it."""
    try:
        out = subprocess.run(["scancel", *map(str, job_ids)], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0


def compact(job_ids: list[str]) -> str:
    """Job ids as a user types them: array ids alone (scancel 123 stops all of array 123's tasks)."""
    return " ".join(sorted({str(j).split("_")[0] for j in job_ids}, key=lambda s: (len(s), s)))


def remember(claim_dir: Path, job_ids: list[str], sweep_id: str) -> None:
    """Record the sweep's outstanding jobs beside its runs (see the module's note)."""
    from ..io import atomic_write_json

    atomic_write_json(claim_dir / JOBS_FILE, {"sweep_id": sweep_id, "jobs": sorted(map(str, job_ids))})


def forget(claim_dir: Path) -> None:
    with contextlib.suppress(OSError):
        (claim_dir / JOBS_FILE).unlink()


def still_running(claim_dir: Path) -> list[str]:
    """The jobs an earlier, interrupted sweep of this claim left that SLURM still holds; the record of them is
    removed once none is (or when this machine has no SLURM to ask: they cannot be this cluster's)."""
    path = claim_dir / JOBS_FILE
    try:
        jobs = json.loads(path.read_text())["jobs"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    active = queue(jobs)
    alive = sorted(j for j in (active or {}) if j in jobs or j.split("_")[0] in jobs)
    if not alive:
        forget(claim_dir)
    return alive


class TimeLimit:
    """Inside a job: SLURM's warning signal (SIGUSR2, some seconds before the time limit, and on pre-emption)
    is noted and never raised into a run.

    submitit's own handler raises `UncompletedJobError` (a RuntimeError) inside whatever code runs, or
    requeues the job: a recipe that catches RuntimeError or Exception itself would swallow it and file a
    wrong value as a good run, and each requeue spends the time limit again. Here the run goes on; if it
    finishes first its record is good, else SLURM stops the job at the limit (TIMEOUT) and the launcher
    records its unfinished runs as lost, once."""

    seen = False

    @classmethod
    def install(cls) -> None:
        signal.signal(signal.SIGUSR2, cls._note)

    @classmethod
    def _note(cls, signum, frame) -> None:
        if not cls.seen:
            print(
                "tfclaims: SLURM signalled the job's time limit (SIGUSR2); the run in progress goes on until "
                "it finishes or SLURM stops the job, which is not requeued",
                file=sys.stderr,
                flush=True,
            )
        cls.seen = True
