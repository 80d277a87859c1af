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
import traceback
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .config import ConfigError
from .device import environment, git_commit, seed_all
from .experiment import PROFILES, Experiment, Output, RunContext, Verdict
from .io import atomic_write_json

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
_TEXT_FIELDS = {"title", "order", "statement", "notes_say", "anchors", "anchor_number", "method", "rule"}


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


def _strip_analysis(source: str) -> str:
    """The experiment source without analysis functions and prose fields (they do not change runs)."""
    tree = ast.parse(source)
    drop = []
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for child in body:
            if isinstance(child, ast.FunctionDef) and child.name.startswith(_SKIP_FUNCS):
                drop.append((child.lineno - len(child.decorator_list), child.end_lineno))
            elif isinstance(node, ast.ClassDef) and isinstance(child, (ast.Assign, ast.AnnAssign)):
                targets = child.targets if isinstance(child, ast.Assign) else [child.target]
                if any(isinstance(t, ast.Name) and t.id in _TEXT_FIELDS for t in targets):
                    drop.append((child.lineno, child.end_lineno))
    lines = source.splitlines()
    keep = [True] * len(lines)
    for a, b in drop:
        for i in range(a - 1, b):
            keep[i] = False
    return "\n".join(line for line, k in zip(lines, keep) if k)


def code_hash(exp: Experiment) -> str:
    src_file = Path(inspect.getsourcefile(type(exp)))
    source = src_file.read_text()
    todo, seen = list(_lib_imports(ast.parse(source))), set()
    while todo:
        m = todo.pop()
        if m in seen or m in ANALYSIS_ONLY:
            continue
        seen.add(m)
        todo.extend(_lib_imports(ast.parse((PKG_DIR / f"{m}.py").read_text())))
    parts = [_strip_analysis(source)] + [f"{m}\n{(PKG_DIR / f'{m}.py').read_text()}" for m in sorted(seen)]
    return _sha("\n\0".join(parts))


def config_hash(claim_id: str, cfg: dict, device: torch.device) -> str:
    return _sha(json.dumps({"claim": claim_id, "config": cfg, "device": device.type}, sort_keys=True))


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
    records, failed, reused = [], 0, 0
    bar = tqdm(configs, desc=f"{exp.claim_id} [{profile}]", disable=not progress, unit="run")
    for cfg in bar:
        cfg_h = config_hash(exp.claim_id, cfg, device)
        run_id = _sha(cfg_h + chash)
        path = runs_dir / f"{run_id}.json"
        rec = _load_record(path)
        if rec is not None and rec.get("status") == "ok" and not force:
            records.append(rec)
            reused += 1
            continue
        rec = {
            "run_id": run_id,
            "claim_id": exp.claim_id,
            "config": cfg,
            "config_hash": cfg_h,
            "code_hash": chash,
            "device": device.type,
            "started_at": now(),
        }
        seed_all(int(cfg.get("seed", 0)))
        try:
            rec["metrics"] = exp.run_one(cfg, RunContext(device=device, progress=progress))
            rec["status"] = "ok"
        except Exception as e:  # a failing run is logged and kept; the others go on
            rec["status"] = "failed"
            rec["error"] = f"{type(e).__name__}: {e}"
            rec["traceback"] = traceback.format_exc()
            failed += 1
            log(f"run {run_id} of {exp.claim_id} failed: {rec['error']}")
        rec["finished_at"] = now()
        atomic_write_json(path, rec)
        records.append(rec)
    log(
        f"{exp.claim_id}: {len(configs)} runs ({reused} reused, {len(configs) - reused - failed} run, {failed} failed)"
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


def _load_record(path: Path) -> dict | None:
    """A finished record, or None when absent or unreadable (a corrupt file is rerun, not trusted)."""
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def stale_results(experiments: dict[str, Experiment], results_root: Path) -> list[str]:
    """Claims whose committed result.json was produced by code that no longer matches."""
    problems = []
    for cid, exp in experiments.items():
        path = results_root / cid / "result.json"
        if not path.exists():
            problems.append(f"{cid}: no result.json")
            continue
        res = json.loads(path.read_text())
        if res.get("profile") != "default":
            problems.append(f"{cid}: committed result is from profile {res.get('profile')!r}, not 'default'")
        if res.get("code_hash") != code_hash(exp):
            problems.append(
                f"{cid}: stale (code changed since its results were produced; rerun `make experiment NAME={cid}`)"
            )
        missing = [
            r for r in res.get("run_ids", []) if not (results_root / cid / "runs" / f"{r}.json").exists()
        ]
        if missing:
            problems.append(f"{cid}: {len(missing)} run record(s) named in result.json are missing")
    return problems
