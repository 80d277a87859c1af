"""Re-key committed run records from the module-level run cache to the definition-level one, without rerunning.

A record may be re-keyed only if it stands for today's code under the scheme that filed it: the claim's
result.json carries the code hash that the old scheme (provenance.py at --before) computes for today's
code, its parameters are its profile's, and every run it names is on disk. Then each named record is
written under the run id the new scheme gives it, with `rekeyed` holding its old run id and code hash, and
the old file is removed; result.json gets the new run ids, code hash and per-definition digests.

    .venv/bin/python tools/rekey.py --before <commit>   # the commit whose provenance.py filed the records
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from tfclaims.io import atomic_write_json
from tfclaims.provenance import code_definitions, code_hash, grid_run_ids, run_code_hash, run_id
from tfclaims.registry import REPO_ROOT, load_all
from tfclaims.runner import resolve_profile


def old_provenance(commit: str):
    """provenance.py as it was at `commit`, loaded inside the package so that its relative imports work."""
    src = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "show", f"{commit}:lib/tfclaims/provenance.py"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    spec = importlib.util.spec_from_loader("tfclaims._provenance_before", loader=None)
    mod = importlib.util.module_from_spec(spec)
    mod.__package__ = "tfclaims"
    mod.__file__ = str(REPO_ROOT / "lib" / "tfclaims" / "provenance.py")  # its PKG_DIR: today's modules
    exec(compile(src, f"{commit}:provenance.py", "exec"), mod.__dict__)
    return mod


def rekey(cid, exp, old, root: Path, dry: bool) -> str:
    res_path = root / cid / "result.json"
    res = json.loads(res_path.read_text())
    problems = old.result_problems(exp, res, root, resolve_profile)
    if problems:
        return f"{cid}: not re-keyed ({'; '.join(problems)})"
    runs = root / cid / "runs"
    renamed = {}
    for rid in res["run_ids"]:
        rec = json.loads((runs / f"{rid}.json").read_text())
        new_code = run_code_hash(exp, rec["config"])
        new_rid = run_id(rec["config_hash"], new_code)
        rec["rekeyed"] = {"run_id": rid, "code_hash": rec["code_hash"], "by": "tools/rekey.py"}
        rec["run_id"], rec["code_hash"] = new_rid, new_code
        renamed[rid] = (new_rid, rec)
    expected = sorted(grid_run_ids(exp, res["params"], res["device"]))
    if sorted(r for r, _ in renamed.values()) != expected:
        return f"{cid}: not re-keyed (the new run ids are not the grid's)"
    if not dry:
        for rid, (new_rid, rec) in renamed.items():
            atomic_write_json(runs / f"{new_rid}.json", rec)
            if new_rid != rid:
                (runs / f"{rid}.json").unlink()
        fresh = {}
        for k, v in res.items():
            fresh[k] = v
            if k == "code_hash":
                fresh["code_definitions"] = code_definitions(exp)
        fresh.update(run_ids=expected, code_hash=code_hash(exp))
        atomic_write_json(res_path, fresh)
    return f"{cid}: {len(renamed)} records re-keyed (code hash {res['code_hash']} -> {code_hash(exp)})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="the commit whose provenance.py filed the records")
    ap.add_argument("--results-dir", default=str(REPO_ROOT / "results"))
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    old = old_provenance(args.before)
    lines = [rekey(cid, exp, old, Path(args.results_dir), args.dry_run) for cid, exp in load_all().items()]
    print("\n".join(lines))
    return 1 if any("not re-keyed" in line for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
