"""What a run's numbers depend on, and whether a committed result still stands for the code.

A run record lives at results/<claim>/runs/<run_id>.json, run_id = hash(config hash, code hash).
- The config hash covers the run config and the device type.
- The code hash covers the definitions the part's recipe (`Part.run`) reaches, wherever they live
  (`reach`): moving a definition between modules, or editing analysis, plotting, prose, profiles or another
  part's recipe, reruns nothing; editing a definition a run reaches reruns exactly the claims that reach it.
`result_problems` says why a committed result no longer stands: changed code (naming the definitions that
changed), parameters that are not its profile's, missing records — and, through `reanalysis_problems`, an
analysis that would now give a different verdict or evidence from the same records.
"""

from __future__ import annotations

import functools
import inspect
import json
import subprocess
from pathlib import Path

from ..nn.config import ConfigError
from .experiment import Experiment, Recipe
from .reach import PKG_DIR, Definition, code_digest, reached, sha
from .sameness import first_difference

# Where the project is published: CITATION.cff's repository-code and the figures' URLs (a test keeps them
# equal).
REPOSITORY = "https://github.com/tfclaims/tfclaims"


# What the harness itself writes: uncommitted changes there say nothing about the code that ran.
OUTPUTS = ("results", "report", "README.md")


@functools.cache
def git_commit(root: Path = PKG_DIR.parents[1]) -> str | None:
    """HEAD of the tree this process runs from, with `-dirty` when code or settings had uncommitted changes.

    Read once per process, so that publishing one claim's results cannot mark the next claim's commit dirty;
    changes under the harness's own outputs (results/, report/, README.md's table) are not code.
    """
    git = ["git", "-C", str(root)]
    try:
        head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if head.returncode != 0:
            return None
        exclude = [f":(exclude){p}" for p in OUTPUTS]
        status = [*git, "status", "--porcelain", "--untracked-files=no", "--", ".", *exclude]
        dirty = subprocess.run(status, capture_output=True, text=True, timeout=5).stdout.strip()
        return head.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def recipe_definitions(fn) -> list[Definition]:
    """What one recipe (a `Recipe`, or a module-level function) reaches."""
    if isinstance(fn, Recipe):
        return reached(fn.path, fn.name)
    return reached(inspect.getsourcefile(fn), fn.__name__)


def _run_roots(exp: Experiment) -> dict[str, list[Definition]]:
    """Per part, the definitions its runs reach. An experiment without parts is hashed whole: the class that
    defines its `run_one` (a subclass that only changes the analysis shares its runs)."""
    if exp.parts:
        return {p.name: recipe_definitions(p.run) for p in exp.parts}
    cls = next(k for k in type(exp).__mro__ if "run_one" in vars(k))
    return {"": reached(inspect.getsourcefile(cls), cls.__name__)}


def code_definitions(exp: Experiment) -> dict[str, dict[str, str]]:
    """Per part, each reached definition's digest by its qualified name (result.json's `code_definitions`):
    what `make check-results` compares to name the definitions that changed."""
    out: dict[str, dict[str, str]] = {}
    for part, defs in _run_roots(exp).items():
        digests: dict[str, list[str]] = {}
        for d in defs:  # a module's import-time statements share one name
            digests.setdefault(d.qualname, []).append(d.digest)
        out[part] = {q: v[0] if len(v) == 1 else sha("".join(sorted(v))) for q, v in sorted(digests.items())}
    return out


def reached_modules(exp: Experiment) -> list[str]:
    """The library modules whose definitions some run of the experiment reaches."""
    return sorted(
        {d.module for defs in _run_roots(exp).values() for d in defs if not d.module.endswith(".py")}
    )


def run_code_hash(exp: Experiment, cfg: dict) -> str:
    """The code hash of the run a config asks for (its part's recipe)."""
    if exp.parts:
        return code_digest(recipe_definitions(exp.part(cfg["part"]).run))
    return code_digest(_run_roots(exp)[""])


def code_hash(exp: Experiment) -> str:
    """One hash for a claim: its parts' code hashes together (result.json's `code_hash`)."""
    roots = _run_roots(exp)
    if not exp.parts:
        return code_digest(roots[""])
    return sha("\0".join(f"{p.name}:{code_digest(roots[p.name])}" for p in exp.parts))


def changed_definitions(committed: dict | None, now: dict[str, dict[str, str]]) -> list[str]:
    """The definitions whose digest is not among the committed ones (by today's qualified name), and the
    committed ones whose digest is gone (by their old name). A digest is module-independent: a definition
    that only moved to another module is not named."""
    if not committed:
        return []
    names = set()
    for part in committed.keys() | now.keys():
        a, b = committed.get(part, {}), now.get(part, {})
        old, new = set(a.values()), set(b.values())
        names |= {q for q, d in b.items() if d not in old} | {q for q, d in a.items() if d not in new}
    return sorted(names)


def config_hash(claim_id: str, cfg: dict, device) -> str:
    """A config's hash with the device type (a torch.device, or its type as a string)."""
    dtype = str(getattr(device, "type", device))
    return sha(json.dumps({"claim": claim_id, "config": cfg, "device": dtype}, sort_keys=True))


def run_id(cfg_hash: str, chash: str) -> str:
    """A run's record name: its config (with the device type) and the code that ran it."""
    return sha(cfg_hash + chash)


def expected_run_ids(exp: Experiment, p: dict, device, runs_dir: Path | None = None) -> list[str]:
    return sorted(grid_run_ids(exp, p, device, runs_dir))


def grid_run_ids(exp: Experiment, p: dict, device, runs_dir: Path | None = None) -> list[str]:
    """The run ids of a profile's grid, in grid order (the order an analysis receives its records). A staged
    grid grows from the ok records under `runs_dir` as the runner grew it (without them: its first round)."""
    hashes: dict[str, str] = {}

    def chash(cfg):
        key = cfg.get("part", "") if exp.parts else ""
        if key not in hashes:
            hashes[key] = run_code_hash(exp, cfg)
        return hashes[key]

    def ids(configs):
        return [run_id(config_hash(exp.claim_id, c, device), chash(c)) for c in configs]

    configs = exp.grid(p)
    while exp.staged and runs_dir is not None:
        done = [_ok_record(runs_dir / f"{r}.json") for r in ids(configs)]
        if not all(done):
            break
        grown = exp.grid(p, done)
        if grown == configs:
            break
        configs = grown
    return ids(configs)


def _ok_record(path: Path) -> dict | None:
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and rec.get("status") == "ok" else None


def result_problems(exp: Experiment, res: dict, results_root: Path, resolve_profile) -> list[str]:
    """Why a result no longer stands for the code under its own profile: changed code, parameters that are
    not the profile's (a --set or --seeds run, or an edited profile), missing run records."""
    cid, profile, problems = exp.claim_id, res.get("profile", "default"), []
    rerun = f"rerun `make experiment NAME={cid}" + ("`" if profile == "default" else f" PROFILE={profile}`")
    p = resolve_profile(exp, profile)
    if res.get("code_hash") != code_hash(exp):
        changed = changed_definitions(res.get("code_definitions"), code_definitions(exp))
        what = f": {', '.join(changed[:6])}{' …' if len(changed) > 6 else ''}" if changed else ""
        problems.append(f"stale (code its runs reach changed since its results were produced{what}; {rerun})")
    elif res.get("params") != json.loads(json.dumps(p)):  # as stored in result.json
        problems.append(
            f"stale (its parameters are not the {profile} profile's: a --set or --seeds run, or the profile "
            f"changed; {rerun})"
        )
    else:
        try:
            expected = expected_run_ids(exp, p, res.get("device", "cpu"), results_root / cid / "runs")
        except ConfigError as e:
            expected = [f"invalid: {e}"]
        if expected != sorted(res.get("run_ids", [])):
            problems.append(f"stale (its runs are not the {profile} profile's grid; {rerun})")
    missing = [r for r in res.get("run_ids", []) if not (results_root / cid / "runs" / f"{r}.json").exists()]
    if missing:
        problems.append(f"{len(missing)} run record(s) named in result.json are missing")
    return problems


# What re-analysis compares: the decisions and the numbers behind them, not timestamps or file lists.
REANALYSED_FIELDS = ("verdict", "key_number", "sub_verdicts", "evidence", "comparisons", "noise_floor")


def differences(committed: dict, fresh: dict) -> list[str]:
    """Where a fresh analysis of the same records disagrees with the committed one on REANALYSED_FIELDS, a
    line per field that names its first difference ("comparisons[3].diff: -1.7 → -1.71"); numbers are the
    same within `sameness`'s tolerance (another CPU's rounding is no difference)."""
    out = []
    for k in REANALYSED_FIELDS:
        a = json.loads(json.dumps(committed.get(k), sort_keys=True, default=str))
        b = json.loads(json.dumps(fresh.get(k), sort_keys=True, default=str))
        if (where := first_difference(a, b, k)) is not None:
            out.append(where)
    return out
