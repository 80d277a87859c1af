"""Re-key committed run records after a change to code they reach, when rerunning some of them shows the
change does not move their numbers.

A refactor (a definition moved, two copies merged, a helper extracted) changes the code hash of every run that
reaches it, and so its run id: the cache would rerun the claim. When the refactor does not change what a run
computes, its records can stand for today's code. This tool shows it part by part and re-keys only what it
shows:

- the claim's result.json is the one committed at --since (where `make check-results` passed), its parameters
  are today's profile, and its runs are today's grid (the same config hashes);
- for every part whose code hash changed, the --verify fastest records are rerun with today's code, on the
  device and with the threads that filed them, and their metrics must equal the committed ones exactly
  (wall-clock fields aside);
- then every record of a verified part is written under its new run id, with `rekeyed` listing its earlier run
  ids and code hashes, the commit and the records rerun to verify it. A part whose reruns differ (timings
  never repeat) is left alone: `make experiment` reruns exactly those runs, and re-analyses the claim. The
  records those reruns supersede stay in runs/ (no longer named by result.json) until they are removed; git
  keeps them.

A change that does move some runs' numbers (one arm's module fixed) names them with `--leave key=value` (a
config field; repeatable): those records are not re-keyed, and `make experiment` reruns them.

    .venv/bin/python tools/rekey.py --since <commit> [--verify 2] [--leave key=value] [--dry-run] [claim ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch

from tfclaims.harness.plan import record_seconds, resolve_profile
from tfclaims.harness.provenance import config_hash, grid_run_ids, run_code_hash, run_id
from tfclaims.harness.registry import REPO_ROOT, claim_file, load_all
from tfclaims.harness.runner import RunTask, execute_run
from tfclaims.io import atomic_write_json

# Metrics that measure the machine, not the computation: left out when reruns are compared.
WALL_CLOCK = frozenset({"seconds", "steps_per_s", "wall_s"})


def computed(metrics):
    """The metrics less wall-clock fields, at every depth, as JSON stores them."""
    if isinstance(metrics, dict):
        return {k: computed(v) for k, v in metrics.items() if k not in WALL_CLOCK}
    if isinstance(metrics, list):
        return [computed(v) for v in metrics]
    return metrics


def _seconds(rec: dict) -> float:
    """A record's duration for choosing the fastest ones; unknown sorts last."""
    s = record_seconds(rec)
    return float("inf") if s is None else s


def committed_at(commit: str, path: Path) -> str | None:
    rel = path.resolve().relative_to(REPO_ROOT)
    out = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "show", f"{commit}:{rel}"], capture_output=True, text=True
    )
    return out.stdout if out.returncode == 0 else None


def rerun_equal(exp, rec: dict, scratch: Path) -> tuple[bool, str]:
    """Rerun one record's config with today's code; (same numbers, the rerun's run id)."""
    cfg, device = rec["config"], rec["device"]
    chash = run_code_hash(exp, cfg)
    rid = run_id(config_hash(exp.claim_id, cfg, device), chash)
    path = scratch / f"{rid}.json"
    task = RunTask(
        experiment_file=str(claim_file(exp.claim_id)),
        claim_id=exp.claim_id,
        config=cfg,
        config_hash=rec["config_hash"],
        code_hash=chash,
        run_id=rid,
        device=device,
        path=str(path),
    )
    torch.set_num_threads(rec.get("threads") or torch.get_num_threads())  # as filed: reductions follow it
    execute_run(task, exp)
    fresh = json.loads(path.read_text())
    same = fresh.get("status") == "ok" and computed(fresh["metrics"]) == computed(rec["metrics"])
    return same, rid


def rekey(cid: str, exp, since: str, root: Path, *, n_verify: int, dry: bool, leave: Sequence = ()) -> str:
    res_path = root / cid / "result.json"
    if not res_path.exists():
        return f"{cid}: no result"
    text = res_path.read_text()
    if committed_at(since, res_path) != text:
        return f"{cid}: not re-keyed (result.json is not the one committed at {since})"
    res = json.loads(text)
    p = resolve_profile(exp, res.get("profile", "default"))
    if res.get("params") != json.loads(json.dumps(p)):
        return f"{cid}: not re-keyed (its parameters are not today's profile)"
    runs = root / cid / "runs"
    recs = {r: json.loads((runs / f"{r}.json").read_text()) for r in res["run_ids"]}
    grid = sorted(grid_run_ids(exp, p, res["device"]))
    if sorted(recs) == grid:
        return f"{cid}: up to date (nothing to re-key)"
    ok = [r for r in recs.values() if r.get("status") == "ok"]
    grid_now = exp.grid(p, ok) if exp.staged else exp.grid(p)  # a staged grid grows from the records
    cfg_hashes = sorted(config_hash(cid, c, res["device"]) for c in grid_now)
    if sorted(r["config_hash"] for r in recs.values()) != cfg_hashes:
        return f"{cid}: not re-keyed (its runs are not today's grid)"
    by_part: dict[str, list[dict]] = {}
    left = 0
    for rec in recs.values():
        if any(str(rec["config"].get(k)) == v for k, v in leave):  # leave: (key, value) pairs
            left += 1  # its computation changed: rerun, never re-keyed
        elif run_code_hash(exp, rec["config"]) != rec["code_hash"]:
            by_part.setdefault(rec["config"].get("part", ""), []).append(rec)
    lines, moved = ([f"  {left} records left to rerun (--leave)"] if left else []), 0
    with tempfile.TemporaryDirectory() as scratch:
        for part, part_recs in sorted(by_part.items()):
            sample = sorted(part_recs, key=_seconds)[:n_verify]
            checks = [rerun_equal(exp, rec, Path(scratch)) for rec in sample]
            if not all(same for same, _ in checks):
                lines.append(
                    f"  {part or '-'}: {len(part_recs)} records left to rerun (a rerun gave other numbers)"
                )
                continue
            verified = [rid for _, rid in checks]
            lines.append(
                f"  {part or '-'}: {len(part_recs)} records re-keyed ({len(sample)} rerun, the same numbers)"
            )
            for rec in part_recs:
                old_rid, new_code = rec["run_id"], run_code_hash(exp, rec["config"])
                history = rec.get("rekeyed", [])
                history = history if isinstance(history, list) else [history]
                entry = {
                    "run_id": old_rid,
                    "code_hash": rec["code_hash"],
                    "since": since,
                    "verified_by": verified,
                }
                rec["rekeyed"] = [*history, entry]
                rec["code_hash"], rec["run_id"] = new_code, run_id(rec["config_hash"], new_code)
                if not dry:
                    atomic_write_json(runs / f"{rec['run_id']}.json", rec)
                    (runs / f"{old_rid}.json").unlink()
                moved += 1
    return "\n".join([f"{cid}: {moved} records re-keyed{' (dry run)' if dry else ''}", *lines])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--since", required=True, help="the commit whose committed results were up to date")
    ap.add_argument("--verify", type=int, default=2, help="records rerun per changed part (default 2)")
    ap.add_argument("--results-dir", default=str(REPO_ROOT / "results"))
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument(
        "--leave",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="leave records whose config has this field to be rerun (repeatable)",
    )
    ap.add_argument("claims", nargs="*", help="claim ids (default: all)")
    args = ap.parse_args()
    if any("=" not in x for x in args.leave):
        ap.error("--leave takes key=value")
    leave = [tuple(x.split("=", 1)) for x in args.leave]  # pairs: one key may name several values
    if args.verify < 1:
        ap.error("--verify must be at least 1: a re-key is shown by rerunning, never assumed")
    exps = load_all()
    unknown = sorted(set(args.claims) - exps.keys())
    if unknown:
        ap.error(f"unknown claim(s): {', '.join(unknown)}")
    git = ["git", "-C", str(REPO_ROOT), "rev-parse", "--verify", f"{args.since}^{{commit}}"]
    since = subprocess.run(git, capture_output=True, text=True)
    if since.returncode != 0:
        ap.error(f"--since {args.since!r} is not a commit of this repository")
    for cid in args.claims or sorted(exps):
        line = rekey(
            cid,
            exps[cid],
            since.stdout.strip(),
            Path(args.results_dir),
            n_verify=args.verify,
            dry=args.dry_run,
            leave=leave,
        )
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
