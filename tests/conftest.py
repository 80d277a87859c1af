import os

import pytest
import torch
from xdist_groups import pytest_collection_modifyitems  # noqa: F401 (a hook)

from tfclaims.harness.registry import install_package

install_package()  # tests import a claim's modules as experiments.<claim>.<module>


def pytest_configure(config):
    # Under pytest-xdist the workers share the cores: one intra-op thread pool each, sized to its share.
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """Tests never write into the committed results/ or report/."""
    monkeypatch.setenv("TFCLAIMS_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("TFCLAIMS_REPORT", str(tmp_path / "report"))
    # quick profiles run in seconds, where spawning a worker per core costs more than it saves
    monkeypatch.setenv("TFCLAIMS_LAUNCHER", "local")
    torch.manual_seed(0)
