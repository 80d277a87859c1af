"""The tests of one `xdist_group` run on one pytest-xdist worker under `--dist loadgroup` (make test), as the
SLURM tests' single cluster needs: checked on a throwaway suite with the hook of tests/xdist_groups.py."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).parent


def _suite(folder: Path, hook: bool) -> Path:
    """Six grouped tests and six others, each writing the worker it ran on; returns the workers' file."""
    out = folder / "workers.txt"
    body = f"""
        import os, pytest
        def _note(name):
            with open({str(out)!r}, "a") as f:
                f.write(f"{{name}} {{os.environ['PYTEST_XDIST_WORKER']}}\\n")
    """
    (folder / "test_grouped.py").write_text(
        textwrap.dedent(body)
        + "pytestmark = pytest.mark.xdist_group('g')\n"
        + "@pytest.mark.parametrize('i', range(6))\ndef test_g(i):\n    _note(f'g{i}')\n"
    )
    (folder / "test_other.py").write_text(
        textwrap.dedent(body)
        + "@pytest.mark.parametrize('i', range(6))\ndef test_o(i):\n    _note(f'o{i}')\n"
    )
    if hook:
        (folder / "conftest.py").write_text(
            f"import sys\nsys.path.insert(0, {str(TESTS)!r})\n"
            "from xdist_groups import pytest_collection_modifyitems  # noqa: F401\n"
        )
    return out


def _run(folder: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "3", "--dist", "loadgroup", "-v"]
    run = subprocess.run([*cmd, str(folder)], cwd=folder, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    return run


@pytest.mark.slow
def test_a_group_runs_on_one_worker_under_loadgroup(tmp_path):
    out = _suite(tmp_path, hook=True)
    run = _run(tmp_path)
    ran = dict(line.split() for line in out.read_text().split("\n") if line)
    assert len(ran) == 12 and "test_g[0]@g" in run.stdout
    assert len({w for name, w in ran.items() if name.startswith("g")}) == 1, ran


@pytest.mark.slow
def test_the_hook_is_still_needed(tmp_path):
    """pytest-xdist alone leaves the group out of the ids here: once it no longer does, remove the hook."""
    _suite(tmp_path, hook=False)
    assert "@g" not in _run(tmp_path).stdout
