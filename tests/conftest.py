import pytest
import torch


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """Tests never write into the committed results/ or report/."""
    monkeypatch.setenv("TFCLAIMS_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("TFCLAIMS_REPORT", str(tmp_path / "report"))
    # quick profiles run in seconds, where spawning a worker per core costs more than it saves
    monkeypatch.setenv("TFCLAIMS_LAUNCHER", "local")
    torch.manual_seed(0)
