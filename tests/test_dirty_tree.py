"""A default or full result is published into its folder (results/, results/full/) only from committed code,
unless --allow-dirty; nothing else is ever written there (another profile, a --set or --seeds run), and any
other results folder is never refused."""

import os
import shutil
import subprocess
import textwrap

import pytest
import torch

from tfclaims.cli import main
from tfclaims.harness import provenance, runner
from tfclaims.harness.registry import load_file
from tfclaims.harness.runner import BadInput, check_clean_tree, run_experiment

TOY = textwrap.dedent(
    """
    from tfclaims.harness.experiment import Experiment, SubVerdict, Verdict


    class Toy(Experiment):
        claim_id = "toy"
        title = "toy"
        statement = "toy"
        rule = "toy"
        profiles = {name: {"seeds": [0, 1]} for name in ("quick", "default", "full")}

        def grid(self, p):
            return self.with_seeds([{"i": 0}], p["seeds"])

        def run_one(self, cfg, ctx):
            return {"value": float(cfg["seed"])}

        def analyse(self, runs, p, out):
            return Verdict("supported", "toy", "toy", {}, [SubVerdict("x", "supported", "y")])
    """
)


DIRTY = "0123456789abcdef0123456789abcdef01234567-dirty"


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A repository root in tmp_path whose code has uncommitted changes (the probe says so)."""
    monkeypatch.setattr(runner, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(runner, "git_commit", lambda root=None: DIRTY)
    return tmp_path


def run(root, profile, **kw):
    """The toy claim (its file written beside `root`, loaded as the registry loads one) run into `root`."""
    path = runner.REPO_ROOT / "toy_experiment" / "toy.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(TOY)
    return run_experiment(
        load_file(path),
        profile=profile,
        device=torch.device("cpu"),
        results_root=root,
        progress=False,
        log=lambda m: None,
        **kw,
    )


HOME = {"default": ("results",), "full": ("results", "full")}


@pytest.mark.parametrize("profile", ["default", "full"])
def test_dirty_tree_refuses_before_anything_is_written(repo, profile):
    with pytest.raises(BadInput, match="uncommitted code changes.*--allow-dirty"):
        run(repo.joinpath(*HOME[profile]), profile)
    assert not (repo / "results").exists()


@pytest.mark.parametrize(
    "profile, folder, kw",
    [
        ("quick", ("results",), {}),
        ("quick", ("results", "full"), {}),
        ("full", ("results",), {}),
        ("default", ("results", "full"), {}),
        ("default", ("results",), {"seeds": [0, 1, 2]}),
        ("full", ("results", "full"), {"seeds": [0]}),
    ],
)
def test_a_published_folder_takes_only_its_own_profile_as_declared(repo, profile, folder, kw, monkeypatch):
    monkeypatch.setattr(runner, "git_commit", lambda root=None: "0" * 40)  # a clean tree: refused anyway
    with pytest.raises(BadInput, match="holds the published .* leave out --results-dir"):
        run(repo.joinpath(*folder), profile, **kw)
    assert not (repo / "results").exists()


def test_allow_dirty_publishes_marked_dirty(repo):
    rc, res = run(repo / "results", "default", allow_dirty=True)
    assert rc == 0 and res["git_commit"] == DIRTY and (repo / "results" / "toy" / "result.json").exists()


def test_quick_profile_and_other_results_folders_are_not_refused(repo):
    assert run(repo / ".scratch" / "quick", "quick")[0] == 0
    assert run(repo / "elsewhere", "default")[0] == 0


def test_clean_tree_or_no_git_publishes(repo, monkeypatch):
    monkeypatch.setattr(runner, "git_commit", lambda root=None: DIRTY.removesuffix("-dirty"))
    assert run(repo / "results", "default")[0] == 0
    monkeypatch.setattr(runner, "git_commit", lambda root=None: None)  # no git: the state is unknown
    assert run(repo / "results" / "full", "full")[0] == 0


def test_cli_refuses_in_one_line_and_allow_dirty_runs(repo, monkeypatch, capsys):
    exps = repo / "experiments"
    exps.mkdir()
    (exps / "toy.py").write_text(TOY)
    monkeypatch.setenv("TFCLAIMS_EXPERIMENTS", str(exps))
    args = ["--results-dir", str(repo / "results"), "--no-progress", "--no-report"]
    for cmd in (["run", "toy"], ["reproduce"]):
        assert main([*cmd, *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: the working tree has uncommitted code changes")
        assert not (repo / "results").exists()
    assert main(["run", "toy", *args, "--allow-dirty"]) == 0
    capsys.readouterr()
    assert main(["run", "toy", *args, "--profile", "quick"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds the published default profile's results" in err[0]


def _git(root, *args):
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t"}
    env.update(GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, env=env)


def test_the_probe_counts_tracked_code_only(tmp_path, monkeypatch):
    """With a real repository: untracked files and changes under results/ are not code; a modified tracked
    source file is."""
    if not shutil.which("git"):
        pytest.skip("git not installed")
    monkeypatch.setattr(runner, "REPO_ROOT", tmp_path)
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "results" / "toy").mkdir(parents=True)
    (tmp_path / "results" / "toy" / "result.json").write_text("{}")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "x")

    def check():
        provenance.git_commit.cache_clear()  # read once per process; here once per state
        try:
            check_clean_tree("default", tmp_path / "results")
        finally:
            provenance.git_commit.cache_clear()

    (tmp_path / "results" / "toy" / "runs").mkdir()
    (tmp_path / "results" / "toy" / "runs" / "r.json").write_text("{}")  # a sweep's new record
    (tmp_path / "results" / "toy" / "result.json").write_text('{"new": 1}')  # an output, not code
    (tmp_path / "scratch.py").write_text("")  # untracked
    check()
    (tmp_path / "code.py").write_text("x = 2\n")
    with pytest.raises(BadInput, match="uncommitted code changes"):
        check()
    check_clean_tree("default", tmp_path / "results", allow_dirty=True)
