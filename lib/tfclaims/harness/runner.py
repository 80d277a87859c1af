"""Expand an experiment's grid, reuse cached runs, run the rest, write records atomically, analyse, publish.

Run ids and code hashes come from `provenance`. A rerun skips records that exist with status 'ok'; failed
runs are retried; `force` reruns everything. The analysis writes its tables and figures into a staging
folder; they are published beside result.json only when it completed, so a failing analysis changes
nothing that was committed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import inspect
import json
import os
import shutil
import socket
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import pandas as pd
import torch

from ..data.corpus import CorpusError, corpus_files
from ..device import environment, fix_precision, seed_all
from ..evidence.evaluate import CheckFailed
from ..io import atomic_write_json, jsonable
from . import slurm
from .experiment import Experiment, Output, RunContext, Verdict
from .launch import Launcher, LauncherError
from .overrides import Records
from .plan import (
    BadInput,
    check_grid,
    durations,
    load_record,
    ok,
    read_json,
    resolve_profile,
    run_keys,
)
from .planner import sweep_grid
from .provenance import (
    code_definitions,
    code_hash,
    differences,
    git_commit,
    grid_run_ids,
    reached_modules,
    result_problems,
    run_code_hash,
    sha,
)
from .registry import REPO_ROOT, load_file
from .sameness import file_difference, same_values


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class RunTask:
    """One pending (config, seed) run: everything a worker on any machine needs to run it and file it."""

    experiment_file: str
    claim_id: str
    config: dict
    config_hash: str
    code_hash: str
    run_id: str
    device: str  # device type; it is part of config_hash
    path: str  # where the record goes
    progress: bool = False
    launcher: str = "local"
    sweep_id: str = ""  # the invocation that asked for the run: tells its record from an earlier one
    estimate_s: float | None = None  # the run's duration in an earlier record, if any (groups SLURM jobs)
    job_group: str | None = None  # which of a sweep's SLURM jobs ran it ("3/12 (5 runs)")

    def record(self) -> dict:
        return {
            "run_id": self.run_id,
            "claim_id": self.claim_id,
            "config": self.config,
            "config_hash": self.config_hash,
            "code_hash": self.code_hash,
            "device": self.device,
            "launcher": self.launcher,
            "host": socket.gethostname(),
            "job_id": _slurm_job_id(),
            "job_group": self.job_group,
            "sweep_id": self.sweep_id,
            "started_at": now(),
        }

    def recorded(self) -> bool:
        """Whether this sweep already wrote the run's outcome: its record, or the marker of a failed rerun."""
        return bool(self.sweep_id) and any(
            (read_json(Path(p)) or {}).get("sweep_id") == self.sweep_id
            for p in (self.path, self.path + FAILED_MARKER)
        )


def _slurm_job_id() -> str | None:
    """<array job>_<task> inside an array task, the job id in a plain job, None outside SLURM."""
    env = os.environ
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return env.get("SLURM_JOB_ID")


_LOADED: dict[str, Experiment] = {}


FAILED_MARKER = ".failed"  # beside a kept record: <run_id>.json.failed holds the failed rerun's record


def execute_run(task: RunTask, exp: Experiment | None = None) -> str:
    """Run one task and write its record atomically; returns the status. Runs in the caller or a worker.

    An exception in the run is recorded as a failed run (the sweep goes on); a worker whose copy of the
    code no longer matches the sweep's code hash refuses to run rather than file a mislabelled result.
    """
    rec = task.record()
    t0 = time.perf_counter()
    try:
        if exp is None:
            if task.experiment_file not in _LOADED:
                _LOADED[task.experiment_file] = load_file(Path(task.experiment_file))
            exp = _LOADED[task.experiment_file]
            if run_code_hash(exp, task.config) != task.code_hash:
                raise RuntimeError(
                    f"the code on {rec['host']} differs from the code the sweep was launched with"
                )
        if task.device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"no CUDA GPU in this worker on {rec['host']}")
        seed_all(int(task.config.get("seed", 0)))
        rec["precision"] = fix_precision()  # as set, not as found: the same fp32 on every device
        device = torch.device(task.device)
        rec["metrics"] = exp.run_one(task.config, RunContext(device=device, progress=task.progress))
        rec["status"] = "ok"
    except Exception as e:  # a failing run is logged and kept; the others go on
        rec["status"] = "failed"
        rec["error"] = f"{type(e).__name__}: {e}"
        rec["traceback"] = traceback.format_exc()
    rec["finished_at"] = now()
    rec["wall_s"] = round(time.perf_counter() - t0, 3)
    rec["threads"] = torch.get_num_threads()  # recorded, not keyed: see README (Runs and threads)
    rec["omp_wait_policy"] = os.environ.get("OMP_WAIT_POLICY")
    if rec["status"] == "failed" and ok(load_record(Path(task.path), True)) is not None:
        # a forced rerun that failed never replaces a good record; the sweep learns of it from a marker
        atomic_write_json(Path(task.path + FAILED_MARKER), rec)
        return rec["status"]
    atomic_write_json(Path(task.path), rec)
    return rec["status"]


def run_experiment(
    exp: Experiment,
    *,
    profile: str = "default",
    device: torch.device,
    results_root: Path,
    seeds=None,
    overrides: dict | None = None,
    force: bool = False,
    progress: bool = True,
    log=print,
    launcher: Launcher | None = None,
    allow_dirty: bool = False,
) -> tuple[int, dict | None]:
    """Run (or reuse) every run of the grid and analyse. Returns (exit code, result dict or None).

    `allow_dirty`: publish a default or full result into the repository's results/ from a tree with
    uncommitted code changes (see `check_clean_tree`)."""
    resolve_profile(exp, profile, seeds, overrides)  # a bad --set or --seeds before anything else
    check_destination(profile, results_root, custom=bool(overrides) or seeds is not None)
    check_clean_tree(profile, results_root, allow_dirty)
    claim_dir = results_root / exp.claim_id
    runs_dir = claim_dir / "runs"
    records = Records(runs_dir, *(r / exp.claim_id / "runs" for r in map(published_root, PUBLISHED)))
    p, configs = sweep_grid(exp, profile, seeds, overrides, records, device)
    new_dirs = [d for d in (results_root, claim_dir) if not d.exists()]
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
        probe = runs_dir / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise BadInput(f"cannot write results under {claim_dir}: {e.strerror or e}") from None
    try:
        _check_corpus(exp)
        with claim_lock(claim_dir, exp.claim_id):
            if left := slurm.still_running(claim_dir):
                ids = slurm.compact(left)
                raise BadInput(
                    f"{exp.claim_id}: SLURM job(s) {ids} of an interrupted sweep still hold its runs; wait "
                    f"until they end (squeue -j {ids}) or stop them (scancel {ids}), then rerun"
                )
            sweep = _Sweep(exp, profile, device, claim_dir, force, progress, log, launcher or Launcher())
            return _sweep(sweep, p, configs)
    except (BadInput, LauncherError):  # refused before any run (a corpus, a cluster): leave nothing behind
        if claim_dir in new_dirs and not any(runs_dir.iterdir()):
            shutil.rmtree(claim_dir, ignore_errors=True)
            with contextlib.suppress(OSError):
                new_dirs[0].rmdir()  # the results folder too, when this command made it and it is empty
        raise


# Where the repository publishes a profile's results: the default profile's in results/ (with report/, the
# README's tables and the figures' citations), the full profile's beside them in results/full/ (with
# report/full/). Any other run (the quick profile, a --set or --seeds run) goes to a scratch folder.
PUBLISHED = {"default": Path("results"), "full": Path("results", "full")}
SCRATCH = Path(".scratch")  # ignored by git: <repo>/.scratch/<profile>/


def published_root(profile: str) -> Path | None:
    """The repository's folder for a profile's published results; None for a profile it never publishes."""
    return REPO_ROOT / PUBLISHED[profile] if profile in PUBLISHED else None


def scratch_root(profile: str) -> Path:
    """Where a run that is not published goes unless told otherwise."""
    return REPO_ROOT / SCRATCH / profile


def check_destination(profile: str, results_root: Path, custom: bool = False) -> None:
    """Refuse, before anything runs, to write into a published results folder what is not that folder's
    publication: another profile, or its own profile with --set or --seeds (`custom`)."""
    target = results_root.resolve()
    for name, rel in PUBLISHED.items():
        if target != (REPO_ROOT / rel).resolve() or (name == profile and not custom):
            continue
        what = f"the {profile} profile" + (" with --set or --seeds" if custom else "")
        home = PUBLISHED[profile] if profile in PUBLISHED and not custom else SCRATCH / profile
        raise BadInput(
            f"{rel.as_posix()}/ holds the published {name} profile's results and {what} is not that run; "
            f"leave out --results-dir (it goes to {home.as_posix()}/) or give another folder"
        )


def check_clean_tree(profile: str, results_root: Path, allow_dirty: bool = False) -> None:
    """Refuse, before anything runs or is written, to publish a default or full result into its published
    folder (`published_root`) while the repository's code has uncommitted changes, unless `allow_dirty` (the
    result's commit then ends in `-dirty`). Code is what `git_commit` reads: tracked files modified outside
    results/, report/ and README.md; untracked files (a running sweep's records, scratch files) do not count.
    Without git the state is unknown and nothing is refused. Any other folder is never refused."""
    home = published_root(profile)
    if allow_dirty or home is None or results_root.resolve() != home.resolve():
        return
    commit = git_commit(REPO_ROOT)
    if commit and commit.endswith("-dirty"):
        raise BadInput(
            f"the working tree has uncommitted code changes: a {profile} result in "
            f"{PUBLISHED[profile].as_posix()}/ must come from a commit; commit them first, or pass "
            "--allow-dirty to publish it marked -dirty"
        )


@contextlib.contextmanager
def claim_lock(claim_dir: Path, claim_id: str):
    """One sweep at a time per claim folder: a second one says which process holds it and stops (exit 2), so
    two sweeps can never interleave their publications of one claim's tables and result.json."""
    from filelock import FileLock, Timeout

    lock, owner = FileLock(str(claim_dir / ".lock")), claim_dir / ".lock.owner"
    try:
        lock.acquire(timeout=0)
    except Timeout:
        who = owner.read_text().strip() if owner.exists() else "another process"
        raise BadInput(
            f"{claim_id}: another sweep holds {claim_dir} ({who}); wait for it to finish, then rerun"
        ) from None
    try:
        owner.write_text(f"pid {os.getpid()} on {socket.gethostname()} since {now()}")
        yield
    finally:
        owner.unlink(missing_ok=True)
        lock.release()


@dataclass(frozen=True)
class _Sweep:
    """What every round of one sweep shares: the claim, where its records go, and how its runs are
    launched."""

    exp: Experiment
    profile: str
    device: torch.device
    claim_dir: Path
    force: bool
    progress: bool
    log: Callable[[str], None]
    launcher: Launcher

    @property
    def runs_dir(self) -> Path:
        return self.claim_dir / "runs"


def _sweep(s: _Sweep, p: dict, configs: list[dict]):
    exp, profile, device, claim_dir, log = s.exp, s.profile, s.device, s.claim_dir, s.log
    runs_dir = s.runs_dir
    started = now()
    chash = code_hash(exp)
    handled: set[Path] = set()  # runs made (or found) in an earlier round of a staged grid
    n_run = failed = 0
    while True:
        paths, ran, lost = _round(s, configs, handled)
        n_run, failed = n_run + ran, failed + lost
        records = [load_record(path, True) or {"status": "failed", "error": "no record"} for path in paths]
        if failed or not exp.staged or any(r.get("status") != "ok" for r in records):
            break
        grown = exp.grid(p, records)  # a staged part reads the runs made so far (a sweep's selection seeds)
        if grown == configs:
            break
        check_grid(exp, grown)
        configs = grown
    for path, rec in zip(paths, records):
        if rec.get("status") != "ok":
            failed += 1
            log(f"run {path.stem} of {exp.claim_id} failed: {rec.get('error')}")
    reused, made = len(configs) - n_run, n_run - failed
    log(f"{exp.claim_id}: {len(configs)} runs ({reused} reused, {made} run, {failed} failed)")
    if failed:
        log(
            f"{exp.claim_id}: analysis skipped because {failed} run(s) failed; result.json left as it was "
            f"(records in {runs_dir})"
        )
        return 1, None

    seeds_used = sorted({c["seed"] for c in configs if "seed" in c})
    meta = {
        "profile": profile,
        "params": p,
        "device": device.type,
        "seeds": seeds_used,
        "code_hash": chash,
        "code_definitions": code_definitions(exp),
        "config_hash": _sha_join(r["config_hash"] for r in records),
        "run_ids": sorted(r["run_id"] for r in records),
        "started_at": started,
    }
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=claim_dir))
    try:
        try:
            result = analyse_records(exp, records, p, staging, meta, device)
        except CheckFailed as e:
            log(f"error: {exp.claim_id}: {e}; result.json left as it was")
            return 1, None
        changed = _publish(staging, claim_dir, result)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    same = "" if changed else " (as committed: files left untouched)"
    log(f"{exp.claim_id}: verdict {result['verdict']} — {result['key_number']}{same}")
    return 0, result


def _round(s: _Sweep, configs: list[dict], handled: set):
    """Run the configs whose records are missing (all of them, forced, once per sweep). Returns the record
    paths in grid order, how many runs were started and how many failed beside an earlier good record."""
    exp, device, runs_dir, force, log = s.exp, s.device, s.runs_dir, s.force, s.log
    src = inspect.getsourcefile(type(exp))
    tasks, paths = [], []
    for cfg, key in zip(configs, run_keys(exp, configs, device)):
        path = runs_dir / f"{key.run_id}.json"
        paths.append(path)
        rec = load_record(path, force)
        if path in handled or (rec is not None and rec.get("status") == "ok" and not force):
            handled.add(path)
            continue
        handled.add(path)
        tasks.append(
            RunTask(
                src, exp.claim_id, cfg, key.config_hash, key.code_hash, key.run_id, device.type, str(path)
            )
        )
    sweep_id = uuid.uuid4().hex[:12]
    # the runs that time code first, one at a time in process; then the others (in parallel where `auto` may)
    groups = [[t for t in tasks if exp.timed(t.config)], [t for t in tasks if not exp.timed(t.config)]]
    done: list = []
    for timed, group in zip((True, False), groups):
        if group:
            done += _launch(s, group, timed, sweep_id)
    tasks = done
    _remove_partial_writes(tasks)
    lost = 0
    for task in tasks:
        marker = Path(task.path + FAILED_MARKER)
        if not marker.exists():
            continue
        rec = load_record(marker, True) or {}
        marker.unlink()
        if rec.get("sweep_id") != task.sweep_id:
            continue  # another sweep's (a job that outlived an interrupted sweep): says nothing of this one
        lost += 1
        log(
            f"run {task.run_id} of {exp.claim_id} failed ({rec.get('error')}); its earlier good "
            "record is kept"
        )
    return paths, len(tasks), lost


def _launch(s: _Sweep, tasks: list, timed: bool, sweep_id: str) -> list:
    """Run one group of tasks through the launcher resolved for it; a lost job's unfinished runs are recorded
    as failed. Returns the tasks as launched."""
    exp, progress = s.exp, s.progress
    launcher = s.launcher.resolve(times_code=timed, device=s.device, n_tasks=len(tasks))
    estimates = durations(s.runs_dir, s.device) if launcher.name == "slurm" and tasks else {}
    tasks = [
        replace(
            t,
            progress=progress and launcher.in_process,
            launcher=launcher.name,
            sweep_id=sweep_id,
            estimate_s=estimates.get(t.config_hash, estimates.get(("part", t.config.get("part")))),
        )
        for t in tasks
    ]
    fn = partial(execute_run, exp=exp) if launcher.in_process else execute_run
    for task, lost in launcher.map(
        fn, tasks, desc=f"{exp.claim_id} [{s.profile}]", claim_id=exp.claim_id, progress=progress
    ):
        if lost is None or task.recorded():  # a job lost after this run finished: the run stands
            continue
        rec = task.record()
        rec.update(status="failed", error=lost.error, log=lost.log, log_tail=lost.log_tail, finished_at=now())
        rec["job_id"] = lost.job_id or rec["job_id"]
        # never reported as a run: with an earlier good record (a forced rerun) the marker names the failure
        good = ok(load_record(Path(task.path), True)) is not None
        atomic_write_json(Path(task.path + (FAILED_MARKER if good else "")), rec)
    return tasks


def _remove_partial_writes(tasks) -> None:
    """A worker killed while writing its record leaves the temporary file of the atomic write; once every
    run of the sweep has ended, nothing writes those any more."""
    for task in tasks:
        path = Path(task.path)
        for tmp in path.parent.glob(f".{path.name}.*.tmp"):
            tmp.unlink(missing_ok=True)


def _sha_join(hashes) -> str:
    return sha("".join(sorted(hashes)))


ARMS_TITLE = (
    "Each arm the rule compares, per cell and readout: units, units without a value (diverged or "
    "unfinished), units that learned (where the comparison guards on it), and the mean with its 95% interval "
    "(Student's t; Clopper-Pearson for a yes/no readout)"
)


def analyse_records(exp: Experiment, records: list[dict], p: dict, out_dir: Path, meta: dict, device) -> dict:
    """Run the experiment's analysis over run records, writing tables and figures under `out_dir`;
    returns the result dict (what result.json holds)."""
    out = Output(claim_dir=out_dir, claim_id=exp.claim_id)
    verdict: Verdict = exp.analyse(records, p, out)
    for name, cmps, title in (
        ("comparisons", verdict.comparisons, "Every decision the rule used (one row per comparison)"),
        ("noise_floor", verdict.noise_floor, "Null pairs: what chance alone gives at this scale"),
    ):
        if cmps:
            out.table(name, pd.DataFrame([c.as_dict() for c in cmps]), title, in_report=False)
    if verdict.arms is not None and len(verdict.arms):
        out.table("arms", verdict.arms, ARMS_TITLE, in_report=False)
    env = environment(device)
    return {
        "claim_id": exp.claim_id,
        "title": exp.title,
        "statement": exp.statement,
        "notes_say": exp.notes_say,
        "verdict": verdict.verdict,
        "summary": verdict.summary,
        "key_number": verdict.key_number,
        "rule": exp.rule_text(p),
        "evidence": verdict.evidence,
        "sub_verdicts": [vars(s) for s in verdict.sub_verdicts],
        "comparisons": [c.as_dict() for c in verdict.comparisons],
        "noise_floor": [c.as_dict() for c in verdict.noise_floor],
        "anchors": exp.anchors,
        "anchor_number": exp.anchor_number,
        "regime": exp.regime,
        "headline": exp.headline,
        "method": exp.method,
        "caveats": verdict.caveats,
        "profile": meta["profile"],
        "params": meta["params"],
        "device": meta["device"],
        "device_name": env["device_name"],
        "seeds": meta["seeds"],
        "n_runs": len(records),
        "n_diverged": sum(1 for r in records if (r.get("metrics") or {}).get("diverged_at") is not None),
        "versions": env["versions"],
        "environment": env,
        "git_commit": git_commit(),
        "config_hash": meta["config_hash"],
        "code_hash": meta["code_hash"],
        "code_definitions": meta.get("code_definitions"),
        "run_ids": meta["run_ids"],
        "started_at": meta["started_at"],
        "finished_at": now(),
        "figures": out.figures,
        "tables": out.tables,
    }


# Fields that say when, where and from which commit an analysis ran, not what it found.
CIRCUMSTANCES = ("git_commit", "started_at", "finished_at", "environment", "device_name", "versions")


def _publish(staging: Path, claim_dir: Path, result: dict) -> bool:
    """Move the staged tables and figures into place, then result.json last (each move atomic); returns
    whether anything changed.

    A re-analysis that reproduces the committed result (`sameness`: every table, figure and result.json
    field the same within a tolerance far below any printed digit, CIRCUMSTANCES aside) leaves the committed
    files untouched, so its commit, dates and platform stay those of the analysis that first produced them
    and `git status` stays clean on any machine; unless the committed result names no clean commit and this
    analysis ran from one: then result.json takes it, so that its figures can be cited. Otherwise every file
    whose bytes differ is replaced, so that what is published comes from one analysis.
    """
    staged = [src for src in sorted(staging.rglob("*")) if src.is_file()]
    committed = read_json(claim_dir / "result.json")
    reproduced = all(file_difference(claim_dir / src.relative_to(staging), src) is None for src in staged)
    if reproduced and _same_result(committed, result):
        if not _newly_citable(committed, result):
            return False
        atomic_write_json(claim_dir / "result.json", {**committed, "git_commit": result["git_commit"]})
        return True
    for src in staged:
        dst = claim_dir / src.relative_to(staging)
        if not _same_bytes(src, dst):
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
    atomic_write_json(claim_dir / "result.json", result)
    _remove_unnamed(claim_dir, {src.relative_to(staging) for src in staged})
    return True


def _remove_unnamed(claim_dir: Path, written: set[Path]) -> None:
    """A table or figure that an earlier analysis wrote and this one did not (a renamed table) would sit
    beside the result as if it were part of it: removed, once the new result.json is in place."""
    old = [*claim_dir.glob("*.csv"), *(claim_dir / "figures").glob("*")]
    for path in old:
        if path.is_file() and path.relative_to(claim_dir) not in written:
            path.unlink()


def _newly_citable(committed: dict, fresh: dict) -> bool:
    """The committed result's commit is unknown or dirty, and the fresh analysis ran from a clean one."""

    def clean(c) -> bool:
        return bool(c) and not str(c).endswith("-dirty")

    return not clean(committed.get("git_commit")) and clean(fresh.get("git_commit"))


def _same_bytes(a: Path, b: Path) -> bool:
    try:
        return b.stat().st_size == a.stat().st_size and a.read_bytes() == b.read_bytes()
    except OSError:
        return False


def _same_result(committed, fresh: dict) -> bool:
    """The same result as stored (a JSON round trip), circumstances aside, numbers within the tolerance."""
    if not isinstance(committed, dict):
        return False

    def stored(d):
        return json.loads(
            json.dumps({k: v for k, v in d.items() if k not in CIRCUMSTANCES}, default=jsonable)
        )

    return same_values(stored(committed), stored(fresh))


def _check_corpus(exp: Experiment) -> None:
    """Fail before any run, in one line, when the experiment reads the corpus and its package is missing."""
    if any(m.split(".")[0] == "data" for m in reached_modules(exp)):  # data.corpus, data.bpe
        try:
            corpus_files()
        except CorpusError as e:
            raise BadInput(str(e)) from None


def load_result(path: Path) -> dict:
    """A claim's result.json; a corrupt or malformed one is bad input (one line), never silently skipped."""
    try:
        res = json.loads(Path(path).read_text())
        ok = isinstance(res, dict) and all(k in res for k in ("claim_id", "verdict", "profile"))
        problem = None if ok else "not a result: it lacks claim_id, verdict or profile"
    except (OSError, ValueError) as e:
        problem = type(e).__name__
    if problem:
        raise BadInput(f"corrupt result file {path} ({problem}); rerun that claim to regenerate it") from None
    return res


def reanalysis_problems(exp: Experiment, res: dict, results_root: Path) -> list[str]:
    """Re-run the analysis on the committed records: a decision, text or number that would change (beyond
    `sameness`'s tolerance), in result.json or in a table or figure it publishes, is a problem. So
    check-results passes exactly where `make reproduce` would leave every committed file as it is."""
    claim_dir = results_root / exp.claim_id
    records = []
    order = grid_run_ids(exp, res.get("params", {}), res.get("device", "cpu"), claim_dir / "runs")
    if sorted(order) != sorted(res.get("run_ids", [])):
        return []  # reported by result_problems
    for rid in order:  # the grid's order, as the sweep handed them to the analysis
        rec = load_record(claim_dir / "runs" / f"{rid}.json")
        if rec is None:
            return []  # reported by result_problems
        records.append(rec)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            fresh = analyse_records(
                exp,
                records,
                res.get("params", {}),
                Path(tmp),
                {**res, "device": res.get("device", "cpu")},
                torch.device("cpu"),
            )
        except Exception as e:  # an analysis that no longer runs on its own records is stale too
            return [f"re-analysis of the committed runs fails: {type(e).__name__}: {e}"]
        diff = differences(res, fresh)
        for src in sorted(p for p in Path(tmp).rglob("*") if p.is_file()):
            rel = src.relative_to(tmp)
            if (d := file_difference(claim_dir / rel, src)) is not None:
                diff.append(f"{rel} ({d})")
                break  # the first file is enough to say it is stale
    if not diff:
        return []
    was, now_ = res.get("verdict"), fresh.get("verdict")
    change = f" (verdict {was} → {now_})" if was != now_ else ""
    return [
        f"re-analysis of the committed runs changes {'; '.join(diff)}{change}; rerun `make experiment "
        f"NAME={exp.claim_id}` (it reuses the runs and re-analyses them)"
    ]


def stale_results(
    experiments: dict[str, Experiment], results_root: Path, reanalyse: bool = False
) -> list[str]:
    """Claims whose committed result.json is missing or was produced by code or settings that no longer
    match."""
    problems = []
    for cid, exp in experiments.items():
        path = results_root / cid / "result.json"
        if not path.exists():
            problems.append(f"{cid}: no result.json")
            continue
        res = load_result(path)
        if res.get("profile") != "default":
            problems.append(f"{cid}: committed result is from profile {res.get('profile')!r}, not 'default'")
        found = result_problems(exp, res, results_root, resolve_profile)
        if not found and reanalyse:
            found = reanalysis_problems(exp, res, results_root)
        problems += [f"{cid}: {m}" for m in found]
    return problems
