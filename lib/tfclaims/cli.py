"""Command line: `python -m tfclaims {run,reproduce,report,list,show,plan,check-results,bench}` and the
experiment scripts.

Exit codes: 0 ok, 1 a run failed (logged, the others kept), 2 bad input (one line on stderr).
`--help` (of any command), `list` and `show` import no torch: the harness modules are imported by the commands
that run, plan or analyse claims; what `list` and the options' help need from them is read from their source.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import json
import os
import shutil
import signal
import sys
import textwrap
import threading
import time
from dataclasses import dataclass
from multiprocessing import util as mp_util
from pathlib import Path
from typing import TYPE_CHECKING

from .harness.registry import REPO_ROOT, claim_file, claim_id_of, experiments_dir, read_each
from .nn.config import ConfigError
from .report.answers import answer_row

if TYPE_CHECKING:
    from .harness.experiment import Experiment
    from .harness.launch import Launcher
    from .harness.planner import Plan

PKG_DIR = Path(__file__).resolve().parent


class UsageError(Exception):
    """Bad input that the command line finds itself: one line, exit code 2 (as the harness's BadInput)."""


# The harness's user errors, by module. Each is caught once its module is loaded (a module never imported
# raised
# nothing), so that catching them imports nothing.
_USER_ERRORS = (
    ("harness.plan", "BadInput"),
    ("device", "DeviceError"),
    ("data.files", "CorpusError"),
    ("harness.launch", "LauncherError"),
)


def _user_errors() -> tuple[type[Exception], ...]:
    loaded = [(sys.modules.get(f"{__package__}.{m}"), name) for m, name in _USER_ERRORS]
    return (UsageError, ConfigError, *(getattr(mod, name) for mod, name in loaded if mod is not None))


_NOT_LITERAL = object()


def _literals(body: list[ast.stmt]) -> dict[str, object]:
    """The names some statements assign (`x = ...`, `x: T = ...`) with their literal values (_NOT_LITERAL for
    any other expression)."""
    out: dict[str, object] = {}
    for node in body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        for t in targets:
            if isinstance(t, ast.Name):
                try:
                    out[t.id] = ast.literal_eval(value)
                except (ValueError, TypeError, SyntaxError):
                    out[t.id] = _NOT_LITERAL
    return out


@functools.cache
def _source_literals(module: str, cls: str | None = None) -> dict[str, object]:
    """A package module's literal constants, or one of its classes' literal attributes, read from its source
    without importing it (the harness modules import torch)."""
    tree = ast.parse((PKG_DIR / Path(*module.split("."))).with_suffix(".py").read_bytes())
    if cls is None:
        return _literals(tree.body)
    return _literals(next(n.body for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls))


def _constant(module: str, name: str):
    """A harness constant (`harness.experiment.PROFILES`), unimported."""
    return _source_literals(module)[name]


@dataclass(frozen=True)
class Claim:
    """A registered claim as `list` shows it."""

    claim_id: str
    title: str
    order: int


def read_claim(path: Path) -> Claim:
    """The claim a claim file declares, read from its source: the class whose literal `claim_id` is the
    claim's id (its folder's name), with its `title` and `order` (or Experiment's). A file that does not
    compile fails with the error its import would raise; a file whose id, title or order is not a literal is
    imported (with torch), which also raises the registry's error for a file without exactly one such
    class."""
    source = path.read_bytes()
    compile(source, str(path), "exec", dont_inherit=True)  # every error its import meets before running it
    classes = [_literals(n.body) for n in ast.parse(source, str(path)).body if isinstance(n, ast.ClassDef)]
    cid = claim_id_of(path)
    found = [c for c in classes if c.get("claim_id") == cid]
    attrs = {**_source_literals("harness.experiment", "Experiment"), **(found[0] if found else {})}
    if len(found) != 1 or not isinstance(attrs["title"], str) or not isinstance(attrs["order"], int):
        from .harness.registry import load_file

        exp = load_file(path)
        return Claim(exp.claim_id, exp.title, exp.order)
    return Claim(cid, attrs["title"], attrs["order"])


def read_claims(broken: list) -> list[Claim]:
    """Every registered claim in report order (harness.registry.load_all's), read from the claim files'
    source; a file that cannot be read is appended to `broken` as (claim id, one-line reason) and skipped."""
    return sorted(read_each(read_claim, broken), key=lambda c: (c.order, c.claim_id))


def _unknown_claim(name: str) -> UsageError:
    ids = [c.claim_id for c in read_claims([])]
    return UsageError(f"unknown claim {name!r}; registered claims: {', '.join(ids)}")


def results_root(arg: str | None) -> Path:
    if arg is not None and not arg.strip():
        raise UsageError("--results-dir is empty; give a folder (default: results/)")
    return Path(arg or os.environ.get("TFCLAIMS_RESULTS") or REPO_ROOT / "results")


# The repository's published results folders and the report each one's is built into (harness.runner's
# PUBLISHED, named here without importing the harness).
PUBLISHED_REPORTS = {Path("results"): Path("report"), Path("results", "full"): Path("report", "full")}


def run_destination(arg: str | None, profile: str, custom: bool) -> Path:
    """Where `run` and `reproduce` write: --results-dir (or $TFCLAIMS_RESULTS) where given; else the folder
    the repository publishes the profile in (results/ for default, results/full/ for full), or, for a run it
    does not publish (the quick profile, any --set or --seeds run), the scratch folder .scratch/<profile>/."""
    if arg is not None or os.environ.get("TFCLAIMS_RESULTS"):
        return results_root(arg)
    if not custom and profile in ("default", "full"):
        return REPO_ROOT / ("results" if profile == "default" else "results/full")
    return REPO_ROOT / ".scratch" / profile


def report_root(arg: str | None, results: Path) -> Path:
    """The report follows the results it is built from: the repository's report/ for its results/
    (report/full/ for results/full/), else a folder beside the results folder (<results>-report). A
    published report is never built from other results."""
    own = {(REPO_ROOT / r).resolve(): REPO_ROOT / rep for r, rep in PUBLISHED_REPORTS.items()}
    if arg is not None or os.environ.get("TFCLAIMS_REPORT"):
        if arg is not None and not arg.strip():
            raise UsageError("--report-dir is empty; give a folder")
        chosen = Path(arg or os.environ["TFCLAIMS_REPORT"])
        for home, rep in own.items():
            if chosen.resolve() == rep.resolve() and results.resolve() != home:
                raise UsageError(
                    f"--report-dir {_shown(chosen)}: that is the report of {_shown(home)}, not of "
                    f"{_shown(results)}; leave it out (the report goes beside the results) or give "
                    "another folder"
                )
        return chosen
    if results.resolve() in own:
        return own[results.resolve()]
    return results.parent / f"{results.name}-report"


def check_writable(folder: Path, what: str) -> None:
    """Fail before any run when a folder cannot be written (created if missing)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise UsageError(f"cannot write {what} under {folder}: {e.strerror or e}") from None


def _seeds(text: str) -> list[int]:
    """'3' -> [0, 1, 2]; '0,4,7' -> [0, 4, 7]."""
    try:
        if "," in text:
            return [int(s) for s in text.split(",") if s.strip()]
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--seeds takes a count or a comma-separated list, got {text!r}"
        ) from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"--seeds count must be >= 1, got {n}")
    max_seeds = _constant("harness.plan", "MAX_SEEDS")
    if n > max_seeds:
        raise argparse.ArgumentTypeError(f"--seeds count must be <= {max_seeds}, got {n}")
    return list(range(n))


class Parser(argparse.ArgumentParser):
    """argparse that reports bad usage in one line (and exit code 2), like every other user error here."""

    def error(self, message):
        self.exit(2, f"error: {self.prog}: {message} (see --help)\n")


def _override(text: str) -> tuple[str, object]:
    """'k=v' with v read as a Python literal; 'nan' and 'inf' as floats (checked against the profile
    later)."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--set takes key=value, got {text!r}")
    k, v = text.split("=", 1)
    try:
        return k.strip(), ast.literal_eval(v)
    except (ValueError, SyntaxError):
        pass
    try:
        return k.strip(), float(v)
    except ValueError:
        return k.strip(), v


def add_grid_options(ap: argparse.ArgumentParser) -> None:
    """The options that choose a claim's runs (`run` and `plan`)."""
    profiles = _constant("harness.experiment", "PROFILES")
    ap.add_argument("--profile", default="default", help=f"one of {', '.join(profiles)} (default: default)")
    ap.add_argument(
        "--seeds",
        type=_seeds,
        default=None,
        help="number of seeds or a list like 0,1,2 (default: the profile's)",
    )
    ap.add_argument(
        "--device", default="auto", help="auto (CUDA if present, else CPU), cpu or cuda (default: auto)"
    )
    ap.add_argument(
        "--set",
        dest="overrides",
        type=_override,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a profile parameter, e.g. --set steps=100 (repeatable)",
    )
    ap.add_argument(
        "--results-dir", default=None, help="results folder (default: results/, or $TFCLAIMS_RESULTS)"
    )


def add_run_options(ap: argparse.ArgumentParser) -> None:
    add_grid_options(ap)
    ap.add_argument("--force", action="store_true", help="rerun runs even when a cached record exists")
    ap.add_argument(
        "--allow-dirty",
        action="store_true",
        help="publish a default or full result into results/ although the code has uncommitted changes "
        "(recorded as <commit>-dirty); refused without it",
    )
    ap.add_argument(
        "--report-dir", default=None, help="report folder (default: report/, or $TFCLAIMS_REPORT)"
    )
    ap.add_argument("--no-report", action="store_true", help="do not rebuild the report afterwards")
    ap.add_argument("--no-progress", action="store_true", help="hide progress bars")
    g = ap.add_argument_group("where runs execute (see README: Running on a cluster)")
    add_launcher_option(g)
    g.add_argument(
        "--workers",
        type=int,
        default=None,
        help="local-parallel: worker processes (default: one per GPU, else cores/2)",
    )
    add_slurm_options(g)


def add_slurm_options(g) -> None:
    """The SLURM launcher's options (each with its environment variable)."""
    g.add_argument("--slurm-partition", default=None, help="SLURM partition ($TFCLAIMS_SLURM_PARTITION)")
    g.add_argument("--slurm-account", default=None, help="SLURM account ($TFCLAIMS_SLURM_ACCOUNT)")
    g.add_argument("--slurm-qos", default=None, help="SLURM QOS ($TFCLAIMS_SLURM_QOS)")
    g.add_argument(
        "--slurm-time",
        type=int,
        default=None,
        help="time limit per job, minutes (default 120; $TFCLAIMS_SLURM_TIME_MIN)",
    )
    g.add_argument(
        "--slurm-job-min",
        type=float,
        default=None,
        help="pack runs whose duration is on record into jobs of about this many minutes (default 10; "
        "$TFCLAIMS_SLURM_JOB_MIN)",
    )
    g.add_argument(
        "--slurm-gpus",
        type=int,
        default=None,
        help="GPUs per job (default: 1 with --device cuda, else 0; --device auto uses CUDA when this is > 0; "
        "$TFCLAIMS_SLURM_GPUS)",
    )
    g.add_argument(
        "--slurm-cpus",
        type=int,
        default=None,
        help="CPUs per job, and the threads a run uses (default: 1 for CPU runs, 4 for CUDA runs; "
        "$TFCLAIMS_SLURM_CPUS)",
    )
    g.add_argument(
        "--slurm-mem-gb",
        type=float,
        default=None,
        help="memory per job (default: 4 for CPU runs, 16 for CUDA runs; $TFCLAIMS_SLURM_MEM_GB)",
    )
    g.add_argument(
        "--slurm-poll",
        type=float,
        default=None,
        help="seconds between two looks at the jobs' states (one sacct call; default 15; "
        "$TFCLAIMS_SLURM_POLL_S)",
    )
    g.add_argument(
        "--slurm-array-parallelism",
        type=int,
        default=None,
        help="jobs of one array at once (default 64; $TFCLAIMS_SLURM_ARRAY_PARALLELISM)",
    )
    g.add_argument(
        "--submitit-cluster",
        default=None,
        help="submitit backend for --launcher slurm: slurm (default), or local to run the jobs on "
        "this machine",
    )
    g.add_argument("--log-dir", default=None, help="job logs (default: logs/)")
    g.add_argument(
        "--slurm-cancel",
        action="store_const",
        const=True,
        default=None,
        help="when the sweep is interrupted (Ctrl-C, SIGTERM), cancel its SLURM jobs; by default they run "
        "on, record their runs, and are named with the scancel line ($TFCLAIMS_SLURM_CANCEL=1)",
    )


def add_launcher_option(ap) -> None:
    launchers = _constant("harness.launch", "LAUNCHERS")
    ap.add_argument(
        "--launcher",
        default=os.environ.get("TFCLAIMS_LAUNCHER", "auto"),
        help=f"one of {', '.join(launchers)} (default: auto = one single-threaded worker per core for "
        "training runs on the CPU, in process for timing claims and on a GPU; or $TFCLAIMS_LAUNCHER)",
    )


def launcher_from(args) -> Launcher:
    from .harness.launch import Launcher

    return Launcher.from_options(
        args.launcher,
        workers=args.workers,
        partition=args.slurm_partition,
        account=args.slurm_account,
        qos=args.slurm_qos,
        time_min=args.slurm_time,
        job_min=args.slurm_job_min,
        poll_s=args.slurm_poll,
        gpus=args.slurm_gpus,
        cpus=args.slurm_cpus,
        mem_gb=args.slurm_mem_gb,
        array_parallelism=args.slurm_array_parallelism,
        cluster=args.submitit_cluster,
        log_dir=args.log_dir,
        cancel=args.slurm_cancel,
    )


def _run(exps: list[Experiment], args) -> int:
    from .harness.runner import run_experiment

    launcher = launcher_from(args)
    device = launcher.device(args.device)
    custom = bool(args.overrides) or args.seeds is not None
    root = run_destination(args.results_dir, args.profile, custom)
    report = None if args.no_report else report_root(args.report_dir, root)
    if root.resolve().is_relative_to((REPO_ROOT / ".scratch").resolve()):
        what = f"the {args.profile} profile" + (" with --set or --seeds" if custom else "")
        print(
            f"{what} is not published: its results go to {_shown(root)}"
            + (f" and its report to {_shown(report)}" if report is not None else "")
            + " (never results/ or report/; --results-dir chooses another folder)",
            file=sys.stderr,
        )
    if report is not None:
        check_writable(report, "the report")
    code = 0
    for exp in exps:
        rc, _ = run_experiment(
            exp,
            profile=args.profile,
            device=device,
            results_root=root,
            seeds=args.seeds,
            overrides=dict(args.overrides),
            force=args.force,
            progress=not args.no_progress,
            log=lambda m: print(m, file=sys.stderr),
            launcher=launcher,
            allow_dirty=args.allow_dirty,
        )
        code = max(code, rc)
    if report is not None and any(root.glob("*/result.json")):
        from .report.build import build_report

        build_report(root, report)
    return code


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _guard(fn) -> int:
    """Turn user errors into one line on stderr and exit code 2; SIGTERM is handled like Ctrl-C."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        return fn()
    except _user_errors() as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished runs are kept; rerun the same command to resume", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        # Locks, staging folders and workers were released on the way here; exit now rather than wait in
        # interpreter shutdown for a process pool's threads to notice that their workers were terminated.
        # os._exit skips atexit, so first release the pool's semaphores as multiprocessing's own exit hook
        # would (else its resource tracker warns of "leaked semaphore objects").
        mp_util._run_finalizers(0)
        os._exit(130)
    except BrokenPipeError:  # the reader stopped (`tfclaims show x | head`): no message, the shell's status
        with contextlib.suppress(OSError, ValueError):  # and no second error when exit flushes stdout
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except OSError as e:  # disk full, a folder that vanished or turned read-only mid-sweep
        where = f" ({e.filename})" if e.filename else ""
        print(f"error: {e.strerror or e}{where}; finished runs are kept", file=sys.stderr)
        return 2


def experiment_main(exp: Experiment, argv=None) -> int:
    ap = Parser(prog=f"experiments/{exp.claim_id}/claim.py", description=f"{exp.title}. {exp.statement}")
    add_run_options(ap)
    args = ap.parse_args(argv)
    return _guard(lambda: _run([exp], args))


def script_main(cls: type[Experiment], argv=None) -> None:
    """Entry point of `python experiments/<claim_id>/claim.py`."""
    sys.exit(experiment_main(cls(), argv))


# -- the readers: list, show, plan ---------------------------------------------------------------------------


def _width() -> int:
    return max(40, shutil.get_terminal_size().columns)


def _fill(text: str, width: int, indent: str = "", hang: str = "") -> str:
    return textwrap.fill(
        text,
        width,
        initial_indent=indent,
        subsequent_indent=hang,
        break_long_words=False,
        break_on_hyphens=False,
    )


def _shown(path: Path) -> str:
    """A path relative to the working folder where it lies under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _plain(name: str) -> bool:
    """A name that can be a claim's: one file name, no folder."""
    return name not in ("", ".", "..") and Path(name).name == name


def _claim_shown(claim_id: str) -> str:
    """A claim's file as the reader knows it: experiments/<id>/claim.py (or a one-file claim's)."""
    path = claim_file(claim_id)
    return (
        f"experiments/{path.relative_to(experiments_dir()).as_posix()}" if path else f"experiments/{claim_id}"
    )


def read_result(root: Path, claim: str) -> dict:
    """A claim's result.json, read as JSON alone; an unknown claim, a missing or a corrupt file is bad
    input."""
    path = root / claim / "result.json"
    if not _plain(claim) or not path.is_file():
        if claim_file(claim) is None:
            raise _unknown_claim(claim)
        raise UsageError(f"no result for {claim} under {root}; run it first: python -m tfclaims run {claim}")
    try:
        res = json.loads(path.read_text())
        ok = isinstance(res, dict) and all(k in res for k in ("claim_id", "verdict", "profile"))
        problem = None if ok else "not a result: it lacks claim_id, verdict or profile"
    except (OSError, ValueError) as e:
        problem = type(e).__name__
    if problem:  # as harness.runner.load_result says it
        raise UsageError(f"corrupt result file {path} ({problem}); rerun that claim to regenerate it")
    return res


def show_lines(res: dict, root: Path, width: int = 100) -> list[str]:
    """What `show` prints of a result: its answer, verdict, what the notes say, the key and anchor numbers,
    each effect sub-claim and check, the caveats, and where it came from and is reported."""
    row, lines = answer_row(res), []
    cid = row["claim_id"]

    def field(label: str, text) -> None:
        if text not in (None, ""):
            lines.append(_fill(f"{label:<14}{text}", width, hang=" " * 14))

    lines += [_fill(f"{cid}: {row['title']}", width), ""]
    field("Answer", row["answer"])
    field("Verdict", row["verdict"])
    field("Notes say", row["note"])
    field("Key number", row["number"])
    field("Anchor", row["anchor"])
    field("Regime", row["regime"])
    field("Second scale", row["second_scale"])
    if row["subs"]:
        lines += ["", f"Effect sub-claims ({len(row['subs'])}):"]
        for s in row["subs"]:
            head = f"  {s['verdict']:<13} {'counted' if s['counts'] else 'reported':<9}"
            lines.append(_fill(f"{head}{s['statement']}", width, hang=" " * len(head)))
            if s["design"]:
                lines.append(
                    _fill(f"SESOI {s['design']}", width, indent=" " * len(head), hang=" " * len(head))
                )
    checks = [s for s in res.get("sub_verdicts") or [] if s.get("kind") == "check"]
    if checks:
        lines += ["", f"Checks ({len(checks)}):"]
        lines += [_fill(f"  {s['verdict']:<13} {s['name']}", width, hang=" " * 16) for s in checks]
    if res.get("caveats"):
        lines += ["", "Caveats:"]
        lines += [_fill(c, width, indent="  - ", hang="    ") for c in res["caveats"]]
    lines.append("")
    field("Commit", res.get("git_commit") or "not recorded")
    runs = f", {res['n_runs']} runs" if "n_runs" in res else ""
    field(
        "Profile",
        f"{res['profile']} (device {res.get('device', '?')}{runs}, finished {res.get('finished_at', '?')})",
    )
    report = report_root(None, root)
    md = report / "report.md"
    if md.is_file() and f'<a id="{cid}"></a>' in md.read_text(encoding="utf-8"):
        field("Report", f"{_shown(md)}#{cid} and {_shown(report / 'index.html')}#{cid}")
    else:
        field("Report", f"not in {_shown(md)} yet (build it: python -m tfclaims report)")
    figures = [f.get("png") or f.get("svg") for f in (res.get("figures") or {}).values()]
    for i, f in enumerate(f for f in figures if f):
        field("Figures" if i == 0 else "", _shown(root / cid / f))
    return lines


def _duration(s: float) -> str:
    if s < 10:
        return f"{s:.1f} s"
    if s < 90:
        return f"{s:.0f} s"
    return f"{s / 60:.1f} min" if s < 5400 else f"{s / 3600:.1f} h"


def _eta(part) -> str:
    if not part.missing:
        return "-"
    if part.unestimated == part.missing:
        return "unknown (none on record)"
    more = f" + {part.unestimated} run(s) not on record" if part.unestimated else ""
    return f"about {_duration(part.seconds)}{more}"


def plan_lines(plan: Plan, runs_dir: Path, width: int = 100) -> list[str]:
    """What `plan` prints: the runs per part, cached and to run, the time the missing ones took on record, and
    the --set keys with their values."""
    from .harness.planner import PartPlan

    total = PartPlan(
        "total",
        sum(p.runs for p in plan.parts),
        sum(p.cached for p in plan.parts),
        sum(p.seconds for p in plan.parts),
        sum(p.unestimated for p in plan.parts),
    )
    rows = [*plan.parts, total] if len(plan.parts) > 1 else list(plan.parts)
    w = max(len(p.part or "-") for p in [*rows, PartPlan("part")])
    lines = [
        _fill(
            f"{plan.claim_id}, profile {plan.profile}, device {plan.device}: {total.runs} runs, "
            f"{total.cached} cached, {total.missing} to run (records: {_shown(runs_dir)})",
            width,
        ),
        "",
        f"  {'part':<{w}}  {'runs':>6}  {'cached':>6}  {'to run':>6}  time to run",
    ]
    lines += [f"  {p.part or '-':<{w}}  {p.runs:>6}  {p.cached:>6}  {p.missing:>6}  {_eta(p)}" for p in rows]
    notes = []
    if plan.grows:
        notes.append(
            f"Staged ({', '.join(plan.staged)}): the grid grows from finished runs. Counted here up to the "
            "first stage with runs to make; later stages are added as those finish, so more runs may follow."
        )
    elif not total.missing:
        notes.append(
            f"Every run is cached: `run {plan.claim_id}` with these options would only analyse them."
        )
    if total.missing:
        notes.append(
            f"Time to run: the durations on record of the same configs on {plan.device} (else the median of "
            "their part's records), one run after another; parallel workers divide it."
        )
    lines += [""] + [_fill(n, width) for n in notes]
    lines += ["", f"--set keys (profile {plan.profile}; KEY=VALUE, a Python literal of the same type):"]
    for k, v in plan.params.items():
        if k != "seeds":
            mark = "   (--set)" if k in plan.overridden else ""
            lines.append(_fill(f"  {k} = {v!r}{mark}", width, hang="      "))
    seeds = plan.params.get("seeds")
    if seeds is None:
        lines.append("--seeds: none (its runs are deterministic)")
    else:
        lines.append(_fill(f"--seeds: {', '.join(map(str, seeds))} ({len(seeds)} seeds)", width, hang="    "))
    return lines


def _list(args) -> int:
    broken: list[tuple[str, str]] = []
    claims = read_claims(broken)
    for cid, why in broken:
        print(f"error: {_claim_shown(cid)} cannot be loaded ({why}); skipped", file=sys.stderr)
    for c in claims:
        print(f"{c.claim_id:22s} {c.title}")
    return 1 if broken else 0


def _show(args) -> int:
    root = results_root(args.results_dir)
    print("\n".join(show_lines(read_result(root, args.name), root, _width())))
    return 0


def _plan(args) -> int:
    from .harness.launch import Launcher
    from .harness.planner import make_plan
    from .harness.registry import load_file

    path = claim_file(args.name)
    if path is None:
        raise _unknown_claim(args.name)
    try:
        exp = load_file(path)
    except Exception as e:
        first = str(e).splitlines()[0] if str(e) else ""
        raise UsageError(f"claim {args.name!r} cannot be loaded: {type(e).__name__}: {first}") from None
    device = Launcher.from_options(args.launcher, gpus=args.slurm_gpus).device_type(args.device)
    custom = bool(args.overrides) or args.seeds is not None
    runs_dir = run_destination(args.results_dir, args.profile, custom) / exp.claim_id / "runs"
    published = [REPO_ROOT / r / exp.claim_id / "runs" for r in PUBLISHED_REPORTS]
    plan = make_plan(
        exp,
        args.profile,
        device,
        runs_dir,
        seeds=args.seeds,
        overrides=dict(args.overrides),
        published=published,
    )
    print("\n".join(plan_lines(plan, runs_dir, _width())))
    return 0


# -- smoke: every claim's quick profile on a device
# -------------------------------------------------------------


def _smoke(args) -> int:
    import tempfile

    from .device import device_type
    from .harness import smoke

    known = [c.claim_id for c in read_claims([])]
    claims = [c for c in args.claims.split(",") if c] if args.claims else known
    if unknown := [c for c in claims if c not in known]:
        raise UsageError(f"unknown claim {unknown[0]!r}; registered claims: {', '.join(known)}")
    if args.timeout <= 0:
        raise UsageError(f"--timeout must be positive, got {args.timeout:g}")
    device = device_type(args.device)
    with tempfile.TemporaryDirectory(prefix="tfclaims-smoke-") as scratch:
        results = Path(args.keep) if args.keep else Path(scratch)
        if args.keep:
            if results.resolve() == results_root(None).resolve():
                raise UsageError(f"--keep {args.keep}: the committed results' folder; give another")
            check_writable(results, "--keep")
        print(f"smoke: {len(claims)} claims' quick profile on {device}, one process each, into {results}")
        t0 = time.perf_counter()
        outcomes = smoke.smoke(claims, device, results, args.timeout)
        print(smoke.summary(outcomes, device, time.perf_counter() - t0))
    return 0 if all(o.ok for o in outcomes) else 1


READERS = {"list": _list, "show": _show, "plan": _plan}


def build_parser() -> Parser:
    """The command line: one subcommand per action (`tfclaims --help`)."""
    ap = Parser(prog="tfclaims", description="Test claims about Transformers, claim by claim.")
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=Parser)
    p_run = sub.add_parser("run", help="run one claim's experiment and refresh the report")
    p_run.add_argument("name", help="claim id (see `list`)")
    add_run_options(p_run)
    p_all = sub.add_parser("reproduce", help="run every registered claim and build the report")
    add_run_options(p_all)
    p_rep = sub.add_parser("report", help="rebuild report/ and the README's verdict table from results/")
    p_rep.add_argument("--results-dir", default=None)
    p_rep.add_argument("--report-dir", default=None)
    sub.add_parser("list", help="list the registered claims")
    p_show = sub.add_parser(
        "show", help="one claim's answer, verdict, sub-claims, caveats and provenance, from its result.json"
    )
    p_show.add_argument("name", help="claim id (see `list`)")
    p_show.add_argument(
        "--results-dir", default=None, help="results folder (default: results/, or $TFCLAIMS_RESULTS)"
    )
    plan_help = (
        "the runs `run` with the same options would need: per part, how many are cached and how long the "
        "others took on record; the --set keys with their values (imports torch to build the grid)"
    )
    p_plan = sub.add_parser("plan", help=plan_help, description=plan_help[0].upper() + plan_help[1:] + ".")
    p_plan.add_argument("name", help="claim id (see `list`)")
    add_grid_options(p_plan)
    g = p_plan.add_argument_group("the device, chosen as `run` chooses it")
    add_launcher_option(g)
    g.add_argument(
        "--slurm-gpus",
        type=int,
        default=None,
        help="GPUs per SLURM job: --device auto with --launcher slurm means CUDA when this is > 0 "
        "($TFCLAIMS_SLURM_GPUS)",
    )
    p_chk = sub.add_parser("check-results", help="fail if any committed result is stale or missing")
    p_chk.add_argument("--results-dir", default=None)
    sub.add_parser("bench", help="library speed against an independent implementation")
    smoke_help = (
        "every claim's quick profile on one device, each in its own process and a scratch results folder "
        "(never results/): one line per claim, and the last lines of each failure's output"
    )
    p_smoke = sub.add_parser(
        "smoke", help=smoke_help, description=smoke_help[0].upper() + smoke_help[1:] + "."
    )
    p_smoke.add_argument("--device", default="auto", help="auto (CUDA if present, else CPU), cpu or cuda")
    p_smoke.add_argument("--claims", default=None, help="comma-separated claim ids (default: every claim)")
    p_smoke.add_argument(
        "--timeout", type=float, default=900, help="seconds one claim may take (default 900)"
    )
    p_smoke.add_argument("--keep", default=None, help="a results folder to keep (default: a scratch folder)")
    return ap


def _dispatch(args) -> int:
    """The commands that load the claim files: run, reproduce, report, check-results, bench."""
    from .harness.registry import load_all

    broken: list[tuple[str, str]] = []
    exps = load_all(broken)
    if args.cmd != "run":  # `run x` speaks only of x
        for cid, why in broken:
            print(f"error: {_claim_shown(cid)} cannot be loaded ({why}); skipped", file=sys.stderr)
    if args.cmd == "run":
        if args.name in dict(broken):
            raise UsageError(f"claim {args.name!r} cannot be loaded: {dict(broken)[args.name]}")
        if args.name not in exps:
            raise UsageError(f"unknown claim {args.name!r}; registered claims: {', '.join(exps)}")
        return _run([exps[args.name]], args)
    if args.cmd == "reproduce":
        if not exps:
            raise UsageError("no claims found under experiments/: nothing to reproduce")
        return max(_run(list(exps.values()), args), 1 if broken else 0)
    if args.cmd == "report":
        from .report.build import build_report

        root = results_root(args.results_dir)
        build_report(root, report_root(args.report_dir, root))
        return 0
    if args.cmd == "check-results":
        from .harness.runner import stale_results

        problems = stale_results(exps, results_root(args.results_dir), reanalyse=True)
        for line in problems:
            print(line, file=sys.stderr)
        print(
            f"check-results: {len(exps) - len({p.split(':')[0] for p in problems})}/{len(exps)} claims "
            "up to date"
        )
        return 1 if problems else 0
    if args.cmd == "bench":
        from .harness.bench import main as bench_main

        return bench_main()
    return 2


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.cmd in READERS:
        return _guard(lambda: READERS[args.cmd](args))
    if args.cmd == "smoke":  # each claim runs in a child process: this one loads no experiment
        return _guard(lambda: _smoke(args))

    return _guard(lambda: _dispatch(args))


if __name__ == "__main__":
    sys.exit(main())
