"""Where runs execute: in this process, in local worker processes, or as SLURM jobs through submitit.

Every launcher maps the same picklable function over the pending runs of a sweep. The function writes
its run record itself, atomically, into results/<claim>/runs/, so results flow into one cache whichever
launcher (or machine) produced them, and a sweep may be split and finished anywhere. A launcher only
reports runs whose worker or job was lost (killed, cancelled, pre-empted, out of time or memory) so that
the caller can record them as failed, with the log, and retry them on the next invocation.

SLURM jobs ask for what the runs use: no GPU and one CPU per job for CPU runs (one thread is as fast as
two at these sizes), one GPU and 4 CPUs for CUDA runs, and a stated memory; runs whose duration is known
from earlier records are packed into jobs of about `job_min` minutes, so that seconds-long runs do not each
pay the scheduler. Cluster defaults come from environment variables (TFCLAIMS_SLURM_PARTITION, ..._ACCOUNT,
..._QOS, ..._TIME_MIN, ..._JOB_MIN, ..._GPUS, ..._CPUS, ..._MEM_GB, ..._ARRAY_PARALLELISM, ..._POLL_S,
TFCLAIMS_SUBMITIT_CLUSTER); command-line options override them.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

import submitit
from tqdm.auto import tqdm

from ..device import DEVICES, DeviceError, device_type
from . import slurm
from .registry import REPO_ROOT

if TYPE_CHECKING:
    import torch

LAUNCHERS = ("auto", "local", "local-parallel", "slurm")
SUBMITIT_CLUSTERS = ("slurm", "local", "debug")
_ENV = "TFCLAIMS_SLURM_"


class LauncherError(ValueError):
    """An invalid launcher option; the message is one line for the user."""


@dataclass(frozen=True)
class Lost:
    """A run whose worker or job ended without writing a record."""

    error: str
    log: str | None = None
    log_tail: str | None = None
    job_id: str | None = None  # the SLURM job that held it


@dataclass(frozen=True)
class Launcher:
    name: str = "local"
    workers: int = 0  # local-parallel: 0 = one per GPU, else one per CPU core pair
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_min: int = 120  # limit per job
    job_min: float = 10.0  # work per job when run durations are known from earlier records
    gpus: int | None = None  # per job; None: 1 for CUDA runs, 0 for CPU runs
    cpus: int | None = None  # per job; None: 1 for CPU runs (the threads a run uses), 4 for CUDA runs
    mem_gb: float | None = None  # per job; None: 4 for CPU runs, 16 for CUDA runs
    array_parallelism: int = 64  # jobs of one array running at once
    poll_s: float = 15.0  # how often the job states are asked for (one sacct call for all jobs)
    cluster: str = "slurm"  # submitit backend; "local" runs the same job path on this machine
    log_dir: Path = field(default_factory=lambda: REPO_ROOT / "logs")
    cancel: bool = False  # an interrupted sweep cancels its SLURM jobs (else they run on and say so)

    def __post_init__(self):
        if self.name not in LAUNCHERS:
            raise LauncherError(f"unknown launcher {self.name!r}; choose one of {', '.join(LAUNCHERS)}")
        if self.cluster not in SUBMITIT_CLUSTERS:
            raise LauncherError(
                f"unknown submitit cluster {self.cluster!r}; choose one of {', '.join(SUBMITIT_CLUSTERS)}"
            )
        for name in ("workers", "gpus"):
            if (getattr(self, name) or 0) < 0:
                raise LauncherError(f"launcher option {name} must be >= 0, got {getattr(self, name)}")
        for name in ("time_min", "cpus", "array_parallelism"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise LauncherError(f"launcher option {name} must be >= 1, got {getattr(self, name)}")
        for name in ("mem_gb", "job_min", "poll_s"):
            if getattr(self, name) is not None and not getattr(self, name) > 0:
                raise LauncherError(f"launcher option {name} must be > 0, got {getattr(self, name)}")
        if self.mem_gb is not None and int(self.mem_gb * 1024) < 1:
            # sbatch takes whole megabytes, and --mem=0 means the whole node
            raise LauncherError(
                f"launcher option mem_gb must be at least 1 MB (0.001 GB), got {self.mem_gb:g}"
            )

    @classmethod
    def from_options(cls, name: str = "local", env: dict | None = None, **options) -> Launcher:
        """Options given (not None) override TFCLAIMS_SLURM_* / TFCLAIMS_SUBMITIT_CLUSTER, which override
        defaults."""
        env = os.environ if env is None else env
        kw: dict = {"name": name}
        for f in fields(cls):
            raw = env.get(_ENV + f.name.upper())
            if f.name == "cluster":
                raw = env.get("TFCLAIMS_SUBMITIT_CLUSTER")
            if raw is not None and f.name not in ("name", "log_dir"):
                kw[f.name] = _parse_env(f.name, raw, f.type)
        kw.update({k: v for k, v in options.items() if v is not None})
        if "log_dir" in kw:
            kw["log_dir"] = Path(kw["log_dir"])
        return cls(**kw)

    @property
    def in_process(self) -> bool:
        return self.name in ("local", "auto")

    def resolve(self, *, times_code: bool, device: torch.device, n_tasks: int) -> Launcher:
        """`auto`, decided per sweep: one single-threaded worker per CPU core for training runs on the CPU
        (torch's intra-op threads buy little at these sizes while two processes use both cores), in process
        otherwise — for claims that time code (a run needs the machine to itself), on a GPU, or when one run
        is pending."""
        if self.name != "auto":
            return self
        cores = os.cpu_count() or 1
        if times_code or device.type != "cpu" or cores < 2 or n_tasks < 2:
            return replace(self, name="local")
        return replace(self, name="local-parallel", workers=min(cores, n_tasks))

    def device(self, spec: str) -> torch.device:
        """The device runs will use, as a torch.device (see `device_type`)."""
        import torch

        return torch.device(self.device_type(spec))

    def device_type(self, spec: str) -> str:
        """The device type runs will use (it enters each run's hash).

        Local launchers check this machine. SLURM jobs run elsewhere: `auto` means CUDA when the jobs are
        given GPUs (--slurm-gpus), else the CPU; the job itself checks that it got what it asked for.
        """
        if self.name != "slurm" or spec not in DEVICES:
            return device_type(spec)  # an unknown spec raises the standard message
        if spec == "cuda" and self.gpus == 0:
            raise DeviceError("--device cuda with --slurm-gpus 0: the jobs would have no GPU")
        if spec == "cpu" and self.gpus:
            raise LauncherError(
                f"--device cpu with --slurm-gpus {self.gpus}: the jobs would hold GPUs they never use"
            )
        if spec == "auto":
            return "cuda" if self.gpus else "cpu"
        return spec

    def request(self, device: torch.device | str) -> dict:
        """What each SLURM job asks for, defaults following the device (or its type)."""
        cuda = getattr(device, "type", device) == "cuda"
        return {
            "partition": self.partition,
            "account": self.account,
            "qos": self.qos,
            "gpus": (1 if cuda else 0) if self.gpus is None else self.gpus,
            "cpus": (4 if cuda else 1) if self.cpus is None else self.cpus,
            "mem_gb": (16.0 if cuda else 4.0) if self.mem_gb is None else self.mem_gb,
            "time_min": self.time_min,
        }

    def map(
        self, fn: Callable, tasks: Sequence, *, desc: str, claim_id: str, progress: bool = True
    ) -> Iterator[tuple[object, Lost | None]]:
        """Run fn(task) for every task; yield (task, None) when it returned, (task, Lost) when it was lost."""
        if not tasks:
            return iter(())
        if self.name in ("local", "auto"):
            return self._local(fn, tasks, desc, progress)
        if self.name == "local-parallel":
            return self._parallel(fn, tasks, desc, progress)
        return self._submitit(fn, tasks, desc, claim_id, progress)

    # -- backends -------------------------------------------------------------------------------

    def _local(self, fn, tasks, desc, progress):
        for task in tqdm(tasks, desc=desc, disable=not progress, unit="run"):
            fn(task)
            yield task, None

    def _parallel(self, fn, tasks, desc, progress):
        """A pool of spawned workers. A worker that dies (killed, out of memory) breaks the pool and every run
        it had not finished; those runs get one more try in a fresh pool, then count as lost."""
        import torch

        n_gpu = torch.cuda.device_count()
        n = self.workers or n_gpu or max(1, (os.cpu_count() or 2) // 2)
        threads = max(1, (os.cpu_count() or 1) // n)
        bar = tqdm(total=len(tasks), desc=f"{desc} ×{n}", disable=not progress, unit="run")
        todo = list(tasks)
        try:
            for last_try in (False, True):
                broken = []
                for task, done in _pool_round(fn, todo, n, n_gpu, threads):
                    if not (done or last_try):
                        broken.append(task)  # its worker died: one more try in a fresh pool
                        continue
                    bar.update()
                    yield task, None if done else _DIED_TWICE
                if not broken:
                    break
                todo = broken
        finally:
            bar.close()

    def _submitit(self, fn, tasks, desc, claim_id, progress):
        """One array job per sweep, each array task running a group of runs one after another."""
        if self.cluster == "slurm":
            _check_slurm()
        req = self.request(tasks[0].device)
        groups = group_runs(tasks, self.job_min * 60)
        folder = self.log_dir / claim_id
        ex = submitit.AutoExecutor(folder=folder / "%j", cluster=self.cluster)
        extra = {k: v for k, v in (("account", req["account"]), ("qos", req["qos"])) if v}
        ex.update_parameters(
            name=f"tfclaims-{claim_id}",
            timeout_min=req["time_min"],
            cpus_per_task=req["cpus"],
            mem_gb=req["mem_gb"],
            slurm_partition=req["partition"],
            slurm_array_parallelism=self.array_parallelism,
            # SLURM warns (SIGUSR2) this long before the limit; submitit's 90 s would, in a job of a minute or
            # two, arrive while Python still starts, before `TimeLimit` handles it, and kill the job outright
            slurm_signal_delay_s=min(90, req["time_min"] * 60 // 4),
            slurm_additional_parameters=extra or None,
            **({"gpus_per_node": req["gpus"]} if req["gpus"] else {}),
        )
        jobs = _submit(ex, _Job(fn), groups, folder)
        n_known = sum(t.estimate_s is not None for t in tasks)
        print(
            f"{claim_id}: SLURM job {jobs[0].job_id.split('_')[0]}: {len(groups)} job(s) for {len(tasks)} "
            f"run(s) ({n_known} with a recorded duration, packed to about {self.job_min:g} min a job; the "
            f"rest one a job); each asks for {_describe(req)}; logs in {folder}/{_log_pattern(jobs)}/",
            file=sys.stderr,
        )
        watch = _Watch(self, ex, fn, claim_id, Path(tasks[0].path).parent.parent, tasks[0].sweep_id)
        for job, group in zip(jobs, groups):
            watch.pending[job] = (group, False)
        try:
            with tqdm(
                total=len(tasks), desc=f"{desc} [{self.cluster} jobs]", disable=not progress, unit="run"
            ) as bar:
                yield from watch.follow(bar)
        except BaseException:  # Ctrl-C, SIGTERM: say what is left running (or cancel it), then stop
            watch.interrupted()
            raise


class _Resubmitted:
    """A job's outcome when its runs were submitted once more."""


class _Watch:
    """The jobs of one sweep until each is over (see `slurm`): what ended is yielded run by run, a job lost
    through no fault of its runs is submitted once more, a suspension or a queue that does not move is said,
    and the jobs still out are kept in the claim's `.slurm-jobs.json`."""

    LAG_S = 60.0  # a job gone from SLURM's queue whose state sacct has not caught up with, at the longest
    FIRST_NOTE_S, NOTE_EVERY_S = 30.0, 600.0  # a queue that runs none of the sweep's jobs: said then

    def __init__(self, launcher: Launcher, ex, fn, claim_id: str, claim_dir: Path, sweep_id: str):
        self.launcher, self.ex, self.fn, self.claim_id = launcher, ex, fn, claim_id
        self.claim_dir, self.sweep_id = claim_dir, sweep_id
        # SLURM's queue decides what is over; without squeue (never seen beside sbatch), submitit's states do
        self.on_slurm = launcher.cluster == "slurm" and shutil.which("squeue") is not None
        self.pending: dict = {}  # job -> (its group of runs, whether it is a second submission)
        self.gone: dict = {}  # job -> when it left SLURM's queue
        self.suspended: set = set()
        self.waiting_since, self.next_note = None, self.FIRST_NOTE_S
        self.remembered: list = []

    def follow(self, bar):
        poll = self.launcher.poll_s if self.on_slurm else 1.0
        wait_s = min(poll, 2.0)  # a first look soon: a quick sweep may be done in seconds
        while self.pending:
            self._remember()
            time.sleep(wait_s)
            wait_s = poll
            _refresh(self.pending)
            active = slurm.queue([j.job_id for j in self.pending]) if self.on_slurm else None
            if self.on_slurm and active is None:
                continue  # the controller did not answer (a restart): nothing is over that we know of
            self._notes(active or {})
            for job in [j for j in self.pending if self._over(j, active)]:
                group, retried = self.pending.pop(job)
                lost = self._outcome(job, group, retried)
                if lost is _Resubmitted:
                    continue
                for task in group:
                    bar.update()
                    yield task, lost
        slurm.forget(self.claim_dir)

    def _over(self, job, active: dict | None) -> bool:
        if active is None:
            return job.done()  # submitit's local executor: its own process table
        if str(job.job_id) in active:
            return False
        since = self.gone.setdefault(job, time.time())
        settled = _state(job).split()[0] not in ("PENDING", "RUNNING", "REQUEUED", "SUSPENDED", "UNKNOWN")
        return settled or time.time() - since > self.LAG_S

    def _outcome(self, job, group, retried: bool):
        state = _state(job)
        try:
            # no result is coming: do not wait for one. A local job writes its result on this machine's
            # disk before its process exits, so one that exited without it died.
            local_died = self.launcher.cluster == "local" and not job.paths.result_pickle.exists()
            if state.split()[0] in DIED_STATES or local_died:
                raise RuntimeError(f"the job ended {state} without a result")
            job.result()
            return None
        except Exception as e:  # UncompletedJobError, FailedJobError: the job died
            if state.split()[0] in slurm.RESUBMITTED and not retried:
                with _quiet():
                    self.pending[self.ex.submit(_Job(self.fn), group)] = (group, True)
                print(
                    f"{self.claim_id}: job {job.job_id} ended {state}; its runs are tried once more",
                    file=sys.stderr,
                )
                return _Resubmitted
            tail = _tail(job.paths.stderr)
            said = str(e).splitlines()[0]
            why = f"job {job.job_id} ended without a record ({slurm.cause(state, tail)}): {said}"
            return Lost(why, str(job.paths.stderr), tail, str(job.job_id))

    def _notes(self, active: dict) -> None:
        """A line when SLURM suspends or resumes one of the sweep's jobs, and while none of them runs."""
        mine = {str(j.job_id) for j in self.pending}
        states = {j: s for j, (s, _) in active.items() if j in mine}
        now_suspended = {j for j, s in states.items() if s == "SUSPENDED"}
        for ids, what in (
            (now_suspended - self.suspended, "suspended"),
            (self.suspended - now_suspended, "resumed"),
        ):
            if ids:
                tail = "; waiting for them to resume" if what == "suspended" else ""
                print(f"{self.claim_id}: SLURM {what} job(s) {' '.join(sorted(ids))}{tail}", file=sys.stderr)
        self.suspended = now_suspended
        values = set(states.values())
        if "PENDING" not in values or values - {"PENDING", "SUSPENDED"}:
            self.waiting_since, self.next_note = None, self.FIRST_NOTE_S
            return
        self.waiting_since = self.waiting_since or time.time()
        waited = time.time() - self.waiting_since
        if waited >= self.next_note:
            reasons = sorted({r for j, (s, r) in active.items() if j in mine and s == "PENDING"})
            print(
                f"{self.claim_id}: {len(states)} job(s) waiting in SLURM's queue for {waited / 60:.1f} min, "
                f"none running (reason: {', '.join(reasons) or 'none given'}); `squeue -j "
                f"{slurm.compact(list(states))}` shows them",
                file=sys.stderr,
            )
            self.next_note += self.NOTE_EVERY_S

    def _remember(self) -> None:
        ids = sorted(str(j.job_id) for j in self.pending)
        if self.on_slurm and ids != self.remembered:
            slurm.remember(self.claim_dir, ids, self.sweep_id)
            self.remembered = ids

    def interrupted(self) -> None:
        ids = [str(j.job_id) for j in self.pending]
        if not ids or not self.on_slurm:
            return
        short = slurm.compact(ids)
        if self.launcher.cancel and slurm.cancel(ids):
            slurm.forget(self.claim_dir)
            print(f"{self.claim_id}: cancelled SLURM job(s) {short}", file=sys.stderr)
            return
        print(
            f"{self.claim_id}: SLURM job(s) {short} keep running and record their runs; stop them with "
            f"`scancel {short}`; a new sweep of {self.claim_id} starts once they are gone",
            file=sys.stderr,
        )


_DIED_TWICE = Lost("a worker process died (killed, or out of memory) while this run was pending, twice")


def _pool_round(fn, tasks, n: int, n_gpu: int, threads: int):
    """Run tasks in one pool of n spawned workers; yield (task, True) when a run returned, (task, False) when
    the pool broke before it did."""
    ctx = mp.get_context("spawn")  # CUDA cannot be used in forked children
    gpu_ids = ctx.Queue()
    for i in range(n):
        gpu_ids.put(i % n_gpu if n_gpu else None)
    pool = ProcessPoolExecutor(
        n, mp_context=ctx, initializer=_init_worker, initargs=(gpu_ids, threads, os.getpid())
    )
    try:
        pending = {pool.submit(fn, t): t for t in tasks}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                task = pending.pop(fut)
                try:
                    fut.result()
                    yield task, True
                except BrokenProcessPool:
                    yield task, False
    except BaseException:  # Ctrl-C, SIGTERM: stop now rather than finish the queue
        procs = list((getattr(pool, "_processes", None) or {}).values())  # shutdown forgets them
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in procs:
            proc.terminate()  # a run cut short leaves no record (records are written atomically)
        for proc in procs:
            proc.join(timeout=5)  # nothing of the sweep's is still running once it says it stopped
        raise
    pool.shutdown()
    gpu_ids.close()


# States of a job that ended without returning (SLURM's, and INTERRUPTED: submitit's local executor for a
# killed process). Its result file will never appear, so the launcher does not wait out submitit's 15 s
# allowance for a slow shared filesystem (meant for jobs that did finish).
DIED_STATES = (
    *slurm.RESUBMITTED,
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "OUT_OF_MEMORY",
    "DEADLINE",
    "INTERRUPTED",
)


def group_runs(tasks, target_s: float) -> list[list]:
    """Consecutive runs packed into groups of about target_s seconds of recorded run time; a run whose
    duration is unknown (`estimate_s` None) is a group of its own. Each task learns its group."""
    groups: list[list] = []
    cur, cur_s = [], 0.0
    for t in tasks:
        if t.estimate_s is None:
            groups.append([t])
            continue
        cur.append(t)
        cur_s += t.estimate_s
        if cur_s >= target_s:
            groups.append(cur)
            cur, cur_s = [], 0.0
    if cur:
        groups.append(cur)
    n = len(groups)
    return [[replace(t, job_group=f"{k + 1}/{n} ({len(g)} runs)") for t in g] for k, g in enumerate(groups)]


class _Job:
    """One array task: its group's runs one after another, with as many threads as CPUs were allocated.

    Not checkpointable: a time limit ends the job once (TIMEOUT) and its unfinished runs are lost, instead
    of a requeue per signal (`slurm.TimeLimit`). Where SLURM itself requeues the job (pre-emption under
    PreemptMode=REQUEUE, a node failure), the requeued job skips the runs this sweep already recorded."""

    def __init__(self, fn: Callable):
        self.fn = fn

    def __call__(self, group):
        import torch

        slurm.TimeLimit.install()
        torch.set_num_threads(allocated_cpus())
        return [self.fn(t) for t in group if not t.recorded()]


def allocated_cpus() -> int:
    """The CPUs this process may use: SLURM's allocation, else the CPU affinity mask, else all cores."""
    if os.environ.get("SLURM_CPUS_PER_TASK", "").isdigit():
        return int(os.environ["SLURM_CPUS_PER_TASK"])
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _check_slurm() -> None:
    """sbatch to submit, and sacct (SLURM accounting) to learn how a job ended: submitit reads job states
    from it, so without it a dead job would be waited for forever."""
    if shutil.which("sbatch") is None:
        raise LauncherError(
            "--launcher slurm needs SLURM's sbatch on PATH and found none "
            "(run from a login node, or use --submitit-cluster local to run the jobs on this machine)"
        )
    try:
        out = subprocess.run(["sacct", "-n", "-X", "-j", "1"], capture_output=True, text=True, timeout=60)
        why = out.stderr.strip().splitlines()[-1] if out.returncode else None
    except (OSError, subprocess.SubprocessError) as e:
        why = str(e)
    if why:
        raise LauncherError(f"--launcher slurm needs SLURM accounting (sacct) to follow its jobs: {why}")


@contextlib.contextmanager
def _quiet():
    """submitit prints sbatch's complaints to stderr before raising; the caller says it in one line."""
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        yield


def _submit(ex, job_fn, groups, folder: Path) -> list:
    """Submit the array; a refusal is one line with sbatch's own words, and leaves no file behind."""
    before = set(folder.rglob("*")) if folder.exists() else None
    try:
        with _quiet():
            return ex.map_array(job_fn, groups)
    except (submitit.core.utils.FailedJobError, submitit.core.utils.FailedSubmissionError, OSError) as e:
        for path in sorted(set(folder.rglob("*")) - (before or set()), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink(missing_ok=True)
        if before is None:
            shutil.rmtree(folder, ignore_errors=True)
            with contextlib.suppress(OSError):
                folder.parent.rmdir()  # the log folder, when this submission created it
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        said = [ln.removeprefix("sbatch: error: ") for ln in lines if ln.startswith("sbatch: error:")]
        raise LauncherError(
            f"SLURM refused the jobs: {'; '.join(said or lines[-1:]) or type(e).__name__}"
        ) from None


def _refresh(pending: dict) -> None:
    """One sacct call for every job of the sweep (left to itself, submitit backs off to minutes)."""
    watcher = getattr(next(iter(pending)), "watcher", None)  # shared by the jobs of one cluster
    if watcher is not None:
        with contextlib.suppress(Exception), _quiet():
            watcher.update()


def _state(job) -> str:
    with contextlib.suppress(Exception), _quiet():
        return str(job.state)
    return "UNKNOWN"


def _describe(req: dict) -> str:
    where = ", ".join(f"{k} {req[k]}" for k in ("partition", "account", "qos") if req[k])
    gpus = f"{req['gpus']} GPU(s)" if req["gpus"] else "no GPU"
    return f"{req['cpus']} CPU(s), {gpus}, {req['mem_gb']:g} GB, {req['time_min']} min" + (
        f", {where}" if where else ""
    )


def _log_pattern(jobs) -> str:
    """The real log folder: <array job id>_<task> for an array, the job id for a single job."""
    first = str(jobs[0].job_id)
    return f"{first.split('_')[0]}_<task>" if "_" in first else first


def _init_worker(gpu_ids, threads: int, parent: int) -> None:
    def watch():  # a worker whose parent died (killed, even with SIGKILL) exits instead of lingering
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()
    # tqdm's default lock holds a multiprocessing semaphore, registered with the parent's resource tracker;
    # a worker terminated mid-run (Ctrl-C, SIGTERM of the sweep) cannot release it, and the tracker then
    # warns of "leaked semaphore objects" after the sweep's one `interrupted:` line. A worker draws no bar:
    # a thread lock serves it.
    tqdm.set_lock(threading.RLock())
    import torch

    gpu = gpu_ids.get()
    if gpu is not None:
        torch.cuda.set_device(gpu)
    torch.set_num_threads(threads)


def _tail(path: Path, n: int = 20) -> str | None:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return None


def _parse_env(name: str, raw: str, typ) -> object:
    if "bool" in str(typ):
        if raw.strip().lower() not in ("0", "1", "true", "false", "yes", "no", ""):
            raise LauncherError(f"{_ENV}{name.upper()}={raw!r} is not 0 or 1")
        return raw.strip().lower() in ("1", "true", "yes")
    try:
        if "float" in str(typ):
            return float(raw)
        if "int" in str(typ):
            return int(raw)
    except ValueError:
        raise LauncherError(f"{_ENV}{name.upper()}={raw!r} is not a number") from None
    return raw
