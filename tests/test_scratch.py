"""A run the repository does not publish never writes its results/, report/ or README: the quick profile
and any --set or --seeds run go to a scratch folder and say so; a full result goes beside the default one."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tfclaims.cli import report_root, run_destination
from tfclaims.harness.registry import REPO_ROOT
from tfclaims.report.build import banner


def _git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    out = subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True, env=env)
    return out.stdout


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """This checkout as a fresh clone would hold it: its tracked and unignored files, committed."""
    if not shutil.which("git"):
        pytest.skip("git not installed")
    root = tmp_path_factory.mktemp("clone")
    files = _git(REPO_ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for name in filter(None, files):
        src = REPO_ROOT / name
        if src.is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, root / name)
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "clone")
    return root


def _run(clone: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(clone / "lib")}  # the clone's package, not this checkout's
    for var in ("TFCLAIMS_RESULTS", "TFCLAIMS_REPORT", "TFCLAIMS_EXPERIMENTS"):
        env.pop(var, None)
    cmd = [sys.executable, "-m", "tfclaims", *args, "--no-progress"]
    return subprocess.run(cmd, cwd=clone, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_quick_run_in_a_clean_clone_leaves_the_tree_as_it_was(clone):
    out = _run(clone, "run", "ffn_share", "--profile", "quick")
    assert out.returncode == 0, out.stderr
    assert "results go to .scratch/quick and its report to .scratch/quick-report" in out.stderr
    assert _git(clone, "status", "--porcelain", "--untracked-files=all") == ""
    res = clone / ".scratch" / "quick" / "ffn_share" / "result.json"
    assert res.is_file()
    report = (clone / ".scratch" / "quick-report" / "report.md").read_text()
    assert (
        "**Not the published results.** This report shows the quick profile's results in `.scratch/quick/`"
        in (report)
    )


@pytest.mark.slow
def test_a_quick_run_into_the_published_folders_is_refused_in_one_line(clone):
    for args in (["--results-dir", "results"], ["--report-dir", "report"]):
        out = _run(clone, "run", "ffn_share", "--profile", "quick", *args)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert out.stderr.startswith("error: ")
    assert _git(clone, "status", "--porcelain", "--untracked-files=all") == ""


@pytest.mark.parametrize(
    "profile, custom, where, report",
    [
        ("default", False, "results", "report"),
        ("full", False, "results/full", "report/full"),
        ("quick", False, ".scratch/quick", ".scratch/quick-report"),
        ("default", True, ".scratch/default", ".scratch/default-report"),
        ("full", True, ".scratch/full", ".scratch/full-report"),
    ],
)
def test_where_each_run_goes(profile, custom, where, report, monkeypatch):
    monkeypatch.delenv("TFCLAIMS_RESULTS", raising=False)
    monkeypatch.delenv("TFCLAIMS_REPORT", raising=False)
    root = run_destination(None, profile, custom)
    assert root == REPO_ROOT / where and report_root(None, root) == REPO_ROOT / report


def test_only_the_published_default_results_have_no_banner(tmp_path):
    default = [{"profile": "default"}]
    assert banner(default, REPO_ROOT / "results") is None
    assert banner(
        [{**default[0], "stale": ["stale (its parameters are not the default profile's…)"]}],
        REPO_ROOT / "results",
    ).startswith("**Not the published results.**")
    assert banner([{"profile": "full"}], REPO_ROOT / "results" / "full").startswith("**Full profile.**")
    assert "quick profile's results in `" in banner([{"profile": "quick"}], tmp_path)
    assert "default, quick profiles' results" in banner([{"profile": "quick"}, *default], tmp_path)
