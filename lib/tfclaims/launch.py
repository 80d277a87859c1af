"""Where runs execute: in this process, in local worker processes, or as SLURM jobs through submitit.

Every launcher maps the same picklable function over the pending runs of a sweep. The function writes
its run record itself, atomically, into results/<claim>/runs/, so results flow into one cache whichever
launcher (or machine) produced them, and a sweep may be split and finished anywhere. A launcher only
reports runs whose worker or job was lost (killed, pre-empted, out of time or memory) so that the
caller can record them as failed, with the log, and retry them on the next invocation.

Cluster defaults come from environment variables (TFCLAIMS_SLURM_PARTITION, ..._ACCOUNT, ..._QOS,
..._TIME_MIN, ..._GPUS, ..._CPUS, ..._MEM_GB, ..._ARRAY_PARALLELISM, TFCLAIMS_SUBMITIT_CLUSTER);
command-line options override them.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import submitit
import torch
from tqdm.auto import tqdm

from .device import DEVICES, DeviceError, resolve_device
from .registry import REPO_ROOT

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


@dataclass(frozen=True)
class Launcher:
    name: str = "local"
    workers: int = 0  # local-parallel: 0 = one per GPU, else one per CPU core pair
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_min: int = 120  # per job (one run)
    gpus: int = 1  # per job; 0 = CPU-only jobs
    cpus: int = 4  # per job
    mem_gb: float | None = None
    array_parallelism: int = 64  # jobs of one array running at once
    cluster: str = "slurm"  # submitit backend; "local" runs the same job path on this machine
    log_dir: Path = field(default_factory=lambda: REPO_ROOT / "logs")

    def __post_init__(self):
        if self.name not in LAUNCHERS:
            raise LauncherError(f"unknown launcher {self.name!r}; choose one of {', '.join(LAUNCHERS)}")
        if self.cluster not in SUBMITIT_CLUSTERS:
            raise LauncherError(
                f"unknown submitit cluster {self.cluster!r}; choose one of {', '.join(SUBMITIT_CLUSTERS)}"
            )
        for name in ("workers", "gpus"):
            if getattr(self, name) < 0:
                raise LauncherError(f"launcher option {name} must be >= 0, got {getattr(self, name)}")
        for name in ("time_min", "cpus", "array_parallelism"):
            if getattr(self, name) < 1:
                raise LauncherError(f"launcher option {name} must be >= 1, got {getattr(self, name)}")
        if self.mem_gb is not None and self.mem_gb <= 0:
            raise LauncherError(f"launcher option mem_gb must be > 0, got {self.mem_gb}")

    @classmethod
    def from_options(cls, name: str = "local", env: dict | None = None, **options) -> Launcher:
        """Options given (not None) override TFCLAIMS_SLURM_* / TFCLAIMS_SUBMITIT_CLUSTER, which override defaults."""
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
        """`auto`, decided per sweep: one single-threaded worker per CPU core for training runs on the CPU (torch's
        intra-op threads buy little at these sizes while two processes use both cores), in process otherwise —
        for claims that time code (a run needs the machine to itself), on a GPU, or when one run is pending."""
        if self.name != "auto":
            return self
        cores = os.cpu_count() or 1
        if times_code or device.type != "cpu" or cores < 2 or n_tasks < 2:
            return replace(self, name="local")
        return replace(self, name="local-parallel", workers=min(cores, n_tasks))

    def device(self, spec: str) -> torch.device:
        """The device type runs will use (it enters each run's hash).

        Local launchers check this machine. SLURM jobs run elsewhere: `auto` means CUDA when the jobs
        ask for GPUs, and the job itself checks that it got one.
        """
        if self.name != "slurm":
            return resolve_device(spec)
        if spec not in DEVICES:
            return resolve_device(spec)  # raises the standard message
        if spec == "cuda" and self.gpus == 0:
            raise DeviceError("--device cuda with --slurm-gpus 0: the jobs would have no GPU")
        if spec == "auto":
            return torch.device("cuda" if self.gpus > 0 else "cpu")
        return torch.device(spec)

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
        n_gpu = torch.cuda.device_count()
        n = self.workers or n_gpu or max(1, (os.cpu_count() or 2) // 2)
        threads = max(1, (os.cpu_count() or 1) // n)
        ctx = mp.get_context("spawn")  # CUDA cannot be used in forked children
        gpu_ids = ctx.Queue()
        for i in range(n):
            gpu_ids.put(i % n_gpu if n_gpu else None)
        pool = ProcessPoolExecutor(
            n, mp_context=ctx, initializer=_init_worker, initargs=(gpu_ids, threads, os.getpid())
        )
        bar = tqdm(total=len(tasks), desc=f"{desc} ×{n}", disable=not progress, unit="run")
        try:
            pending = {pool.submit(fn, t): t for t in tasks}
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    task = pending.pop(fut)
                    bar.update()
                    try:
                        fut.result()
                        yield task, None
                    except BrokenProcessPool:
                        yield (
                            task,
                            Lost(
                                "a worker process died (killed, or out of memory) while this run was pending"
                            ),
                        )
        except BaseException:  # Ctrl-C, SIGTERM: stop now rather than finish the queue
            procs = list((getattr(pool, "_processes", None) or {}).values())  # shutdown forgets them
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in procs:
                proc.terminate()  # a run cut short leaves no record (records are written atomically)
            raise
        finally:
            bar.close()
        pool.shutdown()

    def _submitit(self, fn, tasks, desc, claim_id, progress):
        if self.cluster == "slurm" and shutil.which("sbatch") is None:
            raise LauncherError(
                "--launcher slurm needs SLURM's sbatch on PATH and found none "
                "(run from a login node, or use --submitit-cluster local to run the jobs on this machine)"
            )
        folder = self.log_dir / claim_id / "%j"
        ex = submitit.AutoExecutor(folder=folder, cluster=self.cluster)
        extra = {k: v for k, v in (("account", self.account), ("qos", self.qos)) if v}
        ex.update_parameters(
            name=f"tfclaims-{claim_id}",
            timeout_min=self.time_min,
            gpus_per_node=self.gpus,
            cpus_per_task=self.cpus,
            mem_gb=self.mem_gb,
            slurm_partition=self.partition,
            slurm_array_parallelism=self.array_parallelism,
            slurm_additional_parameters=extra or None,
        )
        jobs = ex.map_array(_Requeueable(fn), tasks)
        by_id = {id(j): t for j, t in zip(jobs, tasks)}
        poll = 1.0 if self.cluster != "slurm" else 15.0
        with tqdm(
            total=len(jobs), desc=f"{desc} [{self.cluster} jobs]", disable=not progress, unit="run"
        ) as bar:
            for job in submitit.helpers.as_completed(jobs, poll_frequency=poll):
                bar.update()
                task = by_id[id(job)]
                try:
                    job.result()
                    yield task, None
                except Exception as e:  # UncompletedJobError, FailedJobError: the job died
                    yield (
                        task,
                        Lost(
                            f"job {job.job_id} ended without a record: {str(e).splitlines()[0]}",
                            str(job.paths.stderr),
                            _tail(job.paths.stderr),
                        ),
                    )


class _Requeueable(submitit.helpers.Checkpointable):
    """On pre-emption or time-out SLURM requeues the job; the run then starts again from scratch."""

    def __init__(self, fn: Callable):
        self.fn = fn

    def __call__(self, task):
        return self.fn(task)


def _init_worker(gpu_ids, threads: int, parent: int) -> None:
    def watch():  # a worker whose parent died (killed, even with SIGKILL) exits instead of lingering
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()
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
    try:
        if "float" in str(typ):
            return float(raw)
        if "int" in str(typ):
            return int(raw)
    except ValueError:
        raise LauncherError(f"{_ENV}{name.upper()}={raw!r} is not a number") from None
    return raw
