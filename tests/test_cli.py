"""The command line: bad input gives one line and exit 2; every registered claim runs end to end (quick)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tfclaims.cli import main
from tfclaims.registry import REPO_ROOT, load_all

CLAIMS = list(load_all())


def one_line_error(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_unknown_claim(capsys):
    assert "unknown claim 'nonexistent'" in one_line_error(capsys, ["run", "nonexistent"])


def test_unknown_profile(capsys):
    assert "unknown profile" in one_line_error(capsys, ["run", "ffn_share", "--profile", "huge"])


def test_invalid_model_config(capsys):
    line = one_line_error(
        capsys, ["run", "dk_scaling", "--profile", "quick", "--set", "n_layers=0", "--no-progress"]
    )
    assert "n_layers must be a positive integer" in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_cuda_without_gpu(capsys):
    assert "no CUDA GPU" in one_line_error(capsys, ["run", "ffn_share", "--device", "cuda"])


def test_unwritable_results_folder(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert "cannot write results" in one_line_error(
        capsys, ["run", "ffn_share", "--profile", "quick", "--results-dir", str(blocker), "--no-progress"]
    )


def test_experiment_script_help():
    out = subprocess.run(
        [sys.executable, str(REPO_ROOT / "experiments" / "dk_scaling.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and "--profile" in out.stdout and "--seeds" in out.stdout


@pytest.mark.parametrize("claim", CLAIMS)
def test_quick_profile_end_to_end(claim, tmp_path):
    results, report = tmp_path / "results", tmp_path / "report"
    args = [
        "run",
        claim,
        "--profile",
        "quick",
        "--results-dir",
        str(results),
        "--report-dir",
        str(report),
        "--no-progress",
    ]
    assert main(args) == 0
    res = json.loads((results / claim / "result.json").read_text())
    assert res["verdict"] in ("supported", "refuted", "mixed", "inconclusive") and res["profile"] == "quick"
    assert res["figures"], "every claim draws at least one figure"
    for fig in res["figures"].values():
        assert (results / claim / fig["png"]).stat().st_size > 1000 and (
            results / claim / fig["svg"]
        ).exists()
    html = (report / "index.html").read_text()
    for src in __import__("re").findall(r'<img src="([^"]+)"', html):
        assert (report / src).resolve().exists(), src  # the HTML opens from disk with every image
    assert (
        claim in (report / "report.md").read_text()
        and f"fig-{claim}-" in (report / "figures.bib").read_text()
    )
    mtimes = {p: p.stat().st_mtime_ns for p in (results / claim / "runs").glob("*.json")}
    assert main(args) == 0  # the second run reuses every record
    assert {p: p.stat().st_mtime_ns for p in (results / claim / "runs").glob("*.json")} == mtimes


def test_committed_readme_commands():
    readme = (REPO_ROOT / "README.md").read_text()
    for cmd in ("make reproduce", "make test", "make experiment NAME="):
        assert cmd in readme
    assert "make test" in Path(REPO_ROOT / ".ci" / "run").read_text().splitlines()
