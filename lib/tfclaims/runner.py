"""Expand an experiment's grid, reuse cached runs, run the rest, write records atomically, analyse.

A run record lives at results/<claim>/runs/<run_id>.json, run_id = hash(config hash, code hash).
The config hash covers the run config and the device type; the code hash covers the experiment
file (less its analysis and text fields) and every library module it imports, transitively, that
can change a run's numbers (analysis-only modules are left out). A rerun skips records that exist
with status 'ok'; failed runs are retried; `force` reruns everything.
"""

from __future__ import annotations

import ast
import datetime as dt
import hashlib
import inspect
import json
import os
import socket
import traceback
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from .config import ConfigError
from .data import CorpusError, corpus_files
from .device import environment, git_commit, seed_all
from .experiment import PROFILES, Experiment, Output, RunContext, Verdict
from .io import atomic_write_json
from .launch import Launcher
from .registry import load_file

PKG_DIR = Path(__file__).resolve().parent
REPO_ROOT = PKG_DIR.parents[1]
# Modules that shape analysis, files or the CLI, never a run's numbers.
ANALYSIS_ONLY = {
    "plotting",
    "stats",
    "report",
    "runner",
    "experiment",
    "cli",
    "registry",
    "io",
    "bench",
    "__init__",
    "__main__",
}
# Parts of an experiment file that do not change runs: analysis, figures and prose.
_SKIP_FUNCS = ("analyse", "plot", "_plot", "describe")
# `profiles` too: a run's settings enter its config hash, and the default profile is checked against
# result.json by result_problems, so resizing `full` or `quick` does not invalidate default results.
_TEXT_FIELDS = {
    "title",
    "order",
    "statement",
    "notes_say",
    "anchors",
    "anchor_number",
    "method",
    "rule",
    "profiles",
}


class BadInput(Exception):
    """User error: one line, exit code 2."""


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _sha(data: bytes | str, n: int = 16) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()[:n]


def _lib_imports(tree: ast.AST) -> set[str]:
    mods = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:
                mods.add(node.module.split(".")[0])
            elif node.level == 1:
                mods.update(a.name for a in node.names)
            elif node.module and node.module.startswith("tfclaims"):
                parts = node.module.split(".")
                if len(parts) > 1:
                    mods.add(parts[1])
                else:
                    mods.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("tfclaims."):
                    mods.add(a.name.split(".")[1])
    return {m for m in mods if (PKG_DIR / f"{m}.py").exists()}


def _is_docstring(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _normalise(tree: ast.AST) -> str:
    """Source regenerated from the syntax tree less docstrings: comments, blank lines and layout drop out."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            node.body = [c for c in body if not _is_docstring(c)] or [ast.Pass()]
    return ast.unparse(tree)


def _strip_analysis(source: str) -> str:
    """The experiment source without analysis functions, prose fields, docstrings and comments (none change runs)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        keep = []
        for child in body:
            if isinstance(child, ast.FunctionDef) and child.name.startswith(_SKIP_FUNCS):
                continue
            if isinstance(node, ast.ClassDef) and isinstance(child, (ast.Assign, ast.AnnAssign)):
                targets = child.targets if isinstance(child, ast.Assign) else [child.target]
                if any(isinstance(t, ast.Name) and t.id in _TEXT_FIELDS for t in targets):
                    continue
            keep.append(child)
        node.body = keep
    return _normalise(tree)


def _lib_modules(source: str) -> list[str]:
    """Library modules an experiment source imports, transitively, that can change a run's numbers."""
    todo, seen = list(_lib_imports(ast.parse(source))), set()
    while todo:
        m = todo.pop()
        if m in seen or m in ANALYSIS_ONLY:
            continue
        seen.add(m)
        todo.extend(_lib_imports(ast.parse((PKG_DIR / f"{m}.py").read_text())))
    return sorted(seen)


def _source_file(exp: Experiment) -> Path:
    return Path(inspect.getsourcefile(type(exp)))


def code_hash(exp: Experiment) -> str:
    source = _source_file(exp).read_text()
    parts = [_strip_analysis(source)]
    parts += [
        f"{m}\n{_normalise(ast.parse((PKG_DIR / f'{m}.py').read_text()))}" for m in _lib_modules(source)
    ]
    return _sha("\n\0".join(parts))


def config_hash(claim_id: str, cfg: dict, device: torch.device) -> str:
    return _sha(json.dumps({"claim": claim_id, "config": cfg, "device": device.type}, sort_keys=True))


def run_id(cfg_hash: str, chash: str) -> str:
    """A run's record name: its config (with the device type) and the code that ran it."""
    return _sha(cfg_hash + chash)


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
            "job_id": os.environ.get("SLURM_ARRAY_JOB_ID", os.environ.get("SLURM_JOB_ID")),
            "started_at": now(),
        }


_LOADED: dict[str, Experiment] = {}


def execute_run(task: RunTask, exp: Experiment | None = None) -> str:
    """Run one task and write its record atomically; returns the status. Runs in the caller or a worker.

    An exception in the run is recorded as a failed run (the sweep goes on); a worker whose copy of the
    code no longer matches the sweep's code hash refuses to run rather than file a mislabelled result.
    """
    rec = task.record()
    try:
        if exp is None:
            if task.experiment_file not in _LOADED:
                _LOADED[task.experiment_file] = load_file(Path(task.experiment_file))
            exp = _LOADED[task.experiment_file]
            if code_hash(exp) != task.code_hash:
                raise RuntimeError(
                    f"the code on {rec['host']} differs from the code the sweep was launched with"
                )
        if task.device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"no CUDA GPU in this worker on {rec['host']}")
        seed_all(int(task.config.get("seed", 0)))
        device = torch.device(task.device)
        rec["metrics"] = exp.run_one(task.config, RunContext(device=device, progress=task.progress))
        rec["status"] = "ok"
    except Exception as e:  # a failing run is logged and kept; the others go on
        rec["status"] = "failed"
        rec["error"] = f"{type(e).__name__}: {e}"
        rec["traceback"] = traceback.format_exc()
    rec["finished_at"] = now()
    atomic_write_json(Path(task.path), rec)
    return rec["status"]


def resolve_profile(exp: Experiment, profile: str, seeds=None, overrides: dict | None = None) -> dict:
    if profile not in PROFILES:
        raise BadInput(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
    p = dict(exp.profiles[profile])
    for k, v in (overrides or {}).items():
        if k not in p:
            raise BadInput(
                f"--set {k}: {exp.claim_id} profile {profile!r} has no parameter {k!r} (it has: {', '.join(sorted(p))})"
            )
        p[k] = v
    if seeds is not None:
        if "seeds" not in p:
            raise BadInput(f"{exp.claim_id} takes no seeds (its runs are deterministic)")
        p["seeds"] = list(seeds)
    return p


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
) -> tuple[int, dict | None]:
    """Run (or reuse) every run of the grid and analyse. Returns (exit code, result dict or None)."""
    p = resolve_profile(exp, profile, seeds, overrides)
    try:
        configs = exp.grid(p)
    except ConfigError as e:
        raise BadInput(f"{exp.claim_id}: invalid configuration: {e}") from None
    claim_dir = results_root / exp.claim_id
    runs_dir = claim_dir / "runs"
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
        probe = runs_dir / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise BadInput(f"cannot write results under {claim_dir}: {e.strerror or e}") from None

    started = now()
    chash = code_hash(exp)
    _check_corpus(exp)
    launcher = launcher or Launcher()
    src = str(_source_file(exp))
    tasks, paths, n_reused = [], [], 0
    for cfg in configs:
        cfg_h = config_hash(exp.claim_id, cfg, device)
        rid = run_id(cfg_h, chash)
        path = runs_dir / f"{rid}.json"
        paths.append(path)
        rec = _load_record(path, force)
        if rec is not None and rec.get("status") == "ok" and not force:
            n_reused += 1
            continue
        progress_inside = progress and launcher.in_process
        tasks.append(
            RunTask(
                src,
                exp.claim_id,
                cfg,
                cfg_h,
                chash,
                rid,
                device.type,
                str(path),
                progress_inside,
                launcher.name,
            )
        )
    fn = partial(execute_run, exp=exp) if launcher.in_process else execute_run
    for task, lost in launcher.map(
        fn, tasks, desc=f"{exp.claim_id} [{profile}]", claim_id=exp.claim_id, progress=progress
    ):
        if lost is not None and _ok(_load_record(Path(task.path), True)) is None:
            rec = task.record()
            rec.update(
                status="failed", error=lost.error, log=lost.log, log_tail=lost.log_tail, finished_at=now()
            )
            atomic_write_json(Path(task.path), rec)
    records, failed = [], 0
    for path in paths:
        rec = _load_record(path, True) or {"status": "failed", "error": "no record"}
        if rec.get("status") != "ok":
            failed += 1
            log(f"run {path.stem} of {exp.claim_id} failed: {rec.get('error')}")
        records.append(rec)
    log(
        f"{exp.claim_id}: {len(configs)} runs ({n_reused} reused, {len(configs) - n_reused - failed} run, {failed} failed)"
    )
    if failed:
        log(
            f"{exp.claim_id}: analysis skipped because {failed} run(s) failed; result.json left as it was (records in {runs_dir})"
        )
        return 1, None

    out = Output(claim_dir=claim_dir, claim_id=exp.claim_id)
    verdict: Verdict = exp.analyse(records, p, out)
    env = environment(device)
    seeds_used = sorted({c["seed"] for c in configs if "seed" in c})
    result = {
        "claim_id": exp.claim_id,
        "title": exp.title,
        "statement": exp.statement,
        "notes_say": exp.notes_say,
        "verdict": verdict.verdict,
        "summary": verdict.summary,
        "key_number": verdict.key_number,
        "rule": exp.rule,
        "evidence": verdict.evidence,
        "sub_verdicts": [vars(s) for s in verdict.sub_verdicts],
        "anchors": exp.anchors,
        "anchor_number": exp.anchor_number,
        "method": exp.method,
        "caveats": verdict.caveats,
        "profile": profile,
        "params": p,
        "device": device.type,
        "device_name": env["device_name"],
        "seeds": seeds_used,
        "n_runs": len(records),
        "n_diverged": sum(1 for r in records if (r.get("metrics") or {}).get("diverged_at") is not None),
        "versions": env["versions"],
        "environment": env,
        "git_commit": git_commit(),
        "config_hash": _sha("".join(sorted(r["config_hash"] for r in records))),
        "code_hash": chash,
        "run_ids": sorted(r["run_id"] for r in records),
        "started_at": started,
        "finished_at": now(),
        "figures": out.figures,
        "tables": out.tables,
    }
    atomic_write_json(claim_dir / "result.json", result)
    log(f"{exp.claim_id}: verdict {verdict.verdict} — {verdict.key_number}")
    return 0, result


def _load_record(path: Path, force: bool = False) -> dict | None:
    """A record, or None when absent. An unreadable one is bad input (nothing overwrites it) unless forced."""
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        if force:
            return None
        raise BadInput(
            f"corrupt run record {path} ({type(e).__name__}); delete it (or pass --force) to rerun that run"
        ) from None


def _ok(rec: dict | None) -> dict | None:
    return rec if rec is not None and rec.get("status") == "ok" else None


def _check_corpus(exp: Experiment) -> None:
    """Fail before any run, in one line, when the experiment reads the corpus and its package is missing."""
    if "data" in _lib_modules(_source_file(exp).read_text()):
        try:
            corpus_files()
        except CorpusError as e:
            raise BadInput(str(e)) from None


def load_result(path: Path) -> dict:
    """A claim's result.json; a corrupt one is bad input (one line), never silently skipped."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise BadInput(
            f"corrupt result file {path} ({type(e).__name__}); rerun that claim to regenerate it"
        ) from None


def result_problems(exp: Experiment, res: dict, results_root: Path) -> list[str]:
    """Why a result no longer stands for the code under its own profile: changed code, parameters that are
    not the profile's (a --set or --seeds run, or an edited profile), missing run records."""
    cid, profile, problems = exp.claim_id, res.get("profile", "default"), []
    rerun = f"rerun `make experiment NAME={cid}" + ("`" if profile == "default" else f" PROFILE={profile}`")
    chash = code_hash(exp)
    p = resolve_profile(exp, profile)
    if res.get("code_hash") != chash:
        problems.append(f"stale (code changed since its results were produced; {rerun})")
    elif res.get("params") != json.loads(json.dumps(p)):  # as stored in result.json
        problems.append(
            f"stale (its parameters are not the {profile} profile's: a --set or --seeds run, or the profile "
            f"changed; {rerun})"
        )
    else:
        try:
            device = torch.device(res.get("device", "cpu"))
            expected = sorted(run_id(config_hash(cid, c, device), chash) for c in exp.grid(p))
        except ConfigError as e:
            expected = [f"invalid: {e}"]
        if expected != sorted(res.get("run_ids", [])):
            problems.append(f"stale (its runs are not the {profile} profile's grid; {rerun})")
    missing = [r for r in res.get("run_ids", []) if not (results_root / cid / "runs" / f"{r}.json").exists()]
    if missing:
        problems.append(f"{len(missing)} run record(s) named in result.json are missing")
    return problems


def stale_results(experiments: dict[str, Experiment], results_root: Path) -> list[str]:
    """Claims whose committed result.json is missing or was produced by code or settings that no longer match."""
    problems = []
    for cid, exp in experiments.items():
        path = results_root / cid / "result.json"
        if not path.exists():
            problems.append(f"{cid}: no result.json")
            continue
        res = load_result(path)
        if res.get("profile") != "default":
            problems.append(f"{cid}: committed result is from profile {res.get('profile')!r}, not 'default'")
        problems += [f"{cid}: {m}" for m in result_problems(exp, res, results_root)]
    return problems
