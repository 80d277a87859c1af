"""`tfclaims smoke`: each claim's quick profile in a child process, its outcome read back; what fails, hangs
or crashes ends that claim only, and nothing is written under results/."""

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tfclaims import cli
from tfclaims.harness import smoke


def fake_command(script: str):
    """A `smoke.command` stand-in: the child runs `script` (claim, results folder as argv[1:])."""
    return lambda claim, device, results: [sys.executable, "-c", script, claim, str(results)]


WRITES_RESULT = """
import json, sys, pathlib
d = pathlib.Path(sys.argv[2]) / sys.argv[1]
d.mkdir(parents=True)
(d / "result.json").write_text(json.dumps({"verdict": "supported", "device": "cpu"}))
"""
FAILS = "import sys\nfor i in range(40): print('line', i)\nsys.exit(3)"
HANGS_WITH_A_WORKER = """
import subprocess, sys, time, pathlib
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
pathlib.Path(sys.argv[2], "worker.pid").write_text(str(child.pid))
time.sleep(60)
"""


def test_a_claim_that_finishes_reports_its_verdict_and_device(tmp_path, monkeypatch):
    monkeypatch.setattr(smoke, "command", fake_command(WRITES_RESULT))
    o = smoke.run_claim("dk_scaling", "cpu", tmp_path, timeout=60)
    assert o.ok and (o.rc, o.verdict, o.device, o.tail) == (0, "supported", "cpu", "")


def test_a_failed_claim_keeps_the_last_lines_of_its_output(tmp_path, monkeypatch):
    monkeypatch.setattr(smoke, "command", fake_command(FAILS))
    o = smoke.run_claim("dk_scaling", "cpu", tmp_path, timeout=60)
    assert not o.ok and o.rc == 3 and o.verdict is None
    assert o.tail.splitlines() == [f"line {i}" for i in range(40 - smoke.TAIL_LINES, 40)]


def test_a_zero_exit_without_a_result_is_a_failure(tmp_path, monkeypatch):
    monkeypatch.setattr(smoke, "command", fake_command("print('nothing written')"))
    o = smoke.run_claim("dk_scaling", "cpu", tmp_path, timeout=60)
    assert o.rc == 0 and not o.ok and "nothing written" in o.tail


@pytest.mark.slow
def test_a_hung_claim_is_killed_at_the_timeout_with_its_workers(tmp_path, monkeypatch):
    monkeypatch.setattr(smoke, "command", fake_command(HANGS_WITH_A_WORKER))
    t0 = time.perf_counter()
    o = smoke.run_claim("dk_scaling", "cpu", tmp_path, timeout=3)
    assert o.rc is None and not o.ok and time.perf_counter() - t0 < 20
    assert _gone(int((tmp_path / "worker.pid").read_text())), "the claim's worker outlived the timeout"
    assert "TIMEOUT" in smoke.line(o, 10)


def _gone(pid: int) -> bool:
    for _ in range(50):  # a killed process is reaped by init; wait until it is gone
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
def test_an_interrupt_kills_the_running_claim_and_its_workers(tmp_path, monkeypatch):
    monkeypatch.setattr(smoke, "command", fake_command(HANGS_WITH_A_WORKER))

    def interrupt(signum, frame):  # stands for Ctrl-C, which reaches the parent only
        raise RuntimeError("interrupted")

    old = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 2.0)
    try:
        with pytest.raises(RuntimeError, match="interrupted"):
            smoke.run_claim("dk_scaling", "cpu", tmp_path, timeout=60)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert _gone(int((tmp_path / "worker.pid").read_text()))


def test_every_claim_is_tried_and_the_summary_names_the_failures():
    said: list[str] = []
    verdicts = {"a": "supported", "bb": None, "c": "mixed"}

    def runner(claim, device, results, timeout):
        v = verdicts[claim]
        return smoke.Outcome(claim, 0 if v else 1, 1.5, v, device if v else None, "" if v else "boom\ntrace")

    out = smoke.smoke(list(verdicts), "cuda", Path("/nowhere"), 10, say=said.append, runner=runner)
    assert [o.claim for o in out] == ["a", "bb", "c"]
    assert said[0].split() == ["a", "ok", "1.5", "s", "supported", "cuda"]
    assert "FAILED rc 1" in said[1] and said[2] == "      | boom\n      | trace"
    text = smoke.summary(out, "cuda", 90)
    assert text == "smoke: 2/3 claims ran their quick profile on cuda in 1.5 min; failed: bb"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--claims", "dk_scaling,nope"], "unknown claim 'nope'"),
        (["--timeout", "0"], "--timeout must be positive"),
        (["--keep", "results"], "the committed results' folder"),
        (["--device", "tpu"], "unknown device 'tpu'"),
    ],
)
def test_bad_options_get_one_line_and_exit_2(argv, message, capsys, monkeypatch):
    monkeypatch.chdir(cli.REPO_ROOT)
    monkeypatch.delenv("TFCLAIMS_RESULTS", raising=False)
    monkeypatch.setattr(smoke, "run_claim", lambda *a: pytest.fail("nothing may run"))
    assert cli.main(["smoke", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


@pytest.mark.slow
def test_one_real_claim_end_to_end_into_a_kept_folder(tmp_path, capsys):
    rc = cli.main(["smoke", "--claims", "online_softmax", "--device", "cpu", "--keep", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    res = json.loads((tmp_path / "online_softmax" / "result.json").read_text())
    assert res["profile"] == "quick" and res["device"] == "cpu"
    assert "smoke: 1/1 claims ran their quick profile on cpu" in out
