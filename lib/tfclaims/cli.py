"""Command line: `python -m tfclaims {run,reproduce,report,list,check-results,bench}` and the experiment scripts.

Exit codes: 0 ok, 1 a run failed (logged, the others kept), 2 bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import ast
import os
import signal
import sys
import threading
from multiprocessing import util as mp_util
from pathlib import Path

from .data.corpus import CorpusError
from .device import DeviceError
from .harness.experiment import PROFILES, Experiment
from .harness.launch import LAUNCHERS, Launcher, LauncherError
from .harness.registry import REPO_ROOT
from .harness.runner import MAX_SEEDS, BadInput, run_experiment
from .nn.config import ConfigError


def results_root(arg: str | None) -> Path:
    if arg is not None and not arg.strip():
        raise BadInput("--results-dir is empty; give a folder (default: results/)")
    return Path(arg or os.environ.get("TFCLAIMS_RESULTS") or REPO_ROOT / "results")


def report_root(arg: str | None, results: Path) -> Path:
    """The report follows the results it is built from: the repository's report/ for its results/, else a
    folder beside the results folder (<results>-report), never the committed report for other results."""
    if arg is not None:
        if not arg.strip():
            raise BadInput("--report-dir is empty; give a folder")
        return Path(arg)
    if os.environ.get("TFCLAIMS_REPORT"):
        return Path(os.environ["TFCLAIMS_REPORT"])
    if results.resolve() == (REPO_ROOT / "results").resolve():
        return REPO_ROOT / "report"
    return results.parent / f"{results.name}-report"


def check_writable(folder: Path, what: str) -> None:
    """Fail before any run when a folder cannot be written (created if missing)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise BadInput(f"cannot write {what} under {folder}: {e.strerror or e}") from None


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
    if n > MAX_SEEDS:
        raise argparse.ArgumentTypeError(f"--seeds count must be <= {MAX_SEEDS}, got {n}")
    return list(range(n))


class Parser(argparse.ArgumentParser):
    """argparse that reports bad usage in one line (and exit code 2), like every other user error here."""

    def error(self, message):
        self.exit(2, f"error: {self.prog}: {message} (see --help)\n")


def _override(text: str) -> tuple[str, object]:
    """'k=v' with v read as a Python literal; 'nan' and 'inf' as floats (checked against the profile later)."""
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


def add_run_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--profile", default="default", help=f"one of {', '.join(PROFILES)} (default: default)")
    ap.add_argument(
        "--seeds",
        type=_seeds,
        default=None,
        help="number of seeds or a list like 0,1,2 (default: the profile's)",
    )
    ap.add_argument(
        "--device", default="auto", help="auto (CUDA if present, else CPU), cpu or cuda (default: auto)"
    )
    ap.add_argument("--force", action="store_true", help="rerun runs even when a cached record exists")
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
    ap.add_argument(
        "--report-dir", default=None, help="report folder (default: report/, or $TFCLAIMS_REPORT)"
    )
    ap.add_argument("--no-report", action="store_true", help="do not rebuild the report afterwards")
    ap.add_argument("--no-progress", action="store_true", help="hide progress bars")
    g = ap.add_argument_group("where runs execute (see README: Running on a cluster)")
    g.add_argument(
        "--launcher",
        default=os.environ.get("TFCLAIMS_LAUNCHER", "auto"),
        help=f"one of {', '.join(LAUNCHERS)} (default: auto = one single-threaded worker per core for training "
        "runs on the CPU, in process for timing claims and on a GPU; or $TFCLAIMS_LAUNCHER)",
    )
    g.add_argument(
        "--workers",
        type=int,
        default=None,
        help="local-parallel: worker processes (default: one per GPU, else cores/2)",
    )
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
        help="seconds between two looks at the jobs' states (one sacct call; default 15; $TFCLAIMS_SLURM_POLL_S)",
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
        help="submitit backend for --launcher slurm: slurm (default), or local to run the jobs on this machine",
    )
    g.add_argument("--log-dir", default=None, help="job logs (default: logs/)")


def launcher_from(args) -> Launcher:
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
    )


def _run(exps: list[Experiment], args) -> int:
    launcher = launcher_from(args)
    device = launcher.device(args.device)
    root = results_root(args.results_dir)
    report = None if args.no_report else report_root(args.report_dir, root)
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
    except (BadInput, ConfigError, DeviceError, CorpusError, LauncherError) as e:
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
    except OSError as e:  # disk full, a folder that vanished or turned read-only mid-sweep
        where = f" ({e.filename})" if e.filename else ""
        print(f"error: {e.strerror or e}{where}; finished runs are kept", file=sys.stderr)
        return 2


def experiment_main(exp: Experiment, argv=None) -> int:
    ap = Parser(prog=f"experiments/{exp.claim_id}.py", description=f"{exp.title}. {exp.statement}")
    add_run_options(ap)
    args = ap.parse_args(argv)
    return _guard(lambda: _run([exp], args))


def script_main(cls: type[Experiment], argv=None) -> None:
    """Entry point of `python experiments/<claim_id>.py`."""
    sys.exit(experiment_main(cls(), argv))


def main(argv=None) -> int:
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
    p_chk = sub.add_parser("check-results", help="fail if any committed result is stale or missing")
    p_chk.add_argument("--results-dir", default=None)
    sub.add_parser("bench", help="library speed against an independent implementation")
    args = ap.parse_args(argv)

    from .harness.registry import load_all

    def go() -> int:
        broken: list[tuple[str, str]] = []
        exps = load_all(broken)
        if args.cmd != "run":  # `run x` speaks only of x
            for cid, why in broken:
                print(f"error: experiments/{cid}.py cannot be loaded ({why}); skipped", file=sys.stderr)
        if args.cmd == "list":
            for cid, e in exps.items():
                print(f"{cid:22s} {e.title}")
            return 1 if broken else 0
        if args.cmd == "run":
            if args.name in dict(broken):
                raise BadInput(f"claim {args.name!r} cannot be loaded: {dict(broken)[args.name]}")
            if args.name not in exps:
                raise BadInput(f"unknown claim {args.name!r}; registered claims: {', '.join(exps)}")
            return _run([exps[args.name]], args)
        if args.cmd == "reproduce":
            if not exps:
                raise BadInput("no claims found under experiments/: nothing to reproduce")
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
                f"check-results: {len(exps) - len({p.split(':')[0] for p in problems})}/{len(exps)} claims up to date"
            )
            return 1 if problems else 0
        if args.cmd == "bench":
            from .harness.bench import main as bench_main

            return bench_main()
        return 2

    return _guard(go)


if __name__ == "__main__":
    sys.exit(main())
