"""`tfclaims smoke`: every claim's quick profile on one device, each in a process of its own and a scratch
results folder (never results/): which claims run there, how long each took, the device it recorded.

A claim runs in a child process so that what breaks on a device ends that claim only: a CUDA error (a
device-side assert leaves the process's context unusable), a crash in a kernel, or a hang (its process
group is killed at the timeout, workers included)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

TAIL_LINES = 15  # of a failed claim's output, printed under its line


@dataclass(frozen=True)
class Outcome:
    claim: str
    rc: int | None  # the child's exit status; None: killed at the timeout
    seconds: float
    verdict: str | None  # from the result.json it wrote
    device: str | None  # the device its result.json records
    tail: str  # the last lines of its output, kept when it failed

    @property
    def ok(self) -> bool:
        return self.rc == 0 and self.verdict is not None


def command(claim: str, device: str, results: Path) -> list[str]:
    """The child's command line: the quick profile of one claim into `results`, no report."""
    return [
        sys.executable,
        "-m",
        "tfclaims",
        "run",
        claim,
        "--profile",
        "quick",
        "--device",
        device,
        "--results-dir",
        str(results),
        "--no-report",
        "--no-progress",
    ]


def _tail(text: str, n: int = TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])


def run_claim(claim: str, device: str, results: Path, timeout: float) -> Outcome:
    """One claim's quick profile in a child process (its own session, so a timeout kills its workers too)."""
    t0 = time.perf_counter()
    with subprocess.Popen(
        command(claim, device, results),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    ) as p:
        try:
            out, _ = p.communicate(timeout=timeout)
            rc: int | None = p.returncode
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
            rc = None
        except BaseException:  # Ctrl-C reaches this process only (the child has its own session)
            os.killpg(p.pid, signal.SIGKILL)
            raise
    seconds = time.perf_counter() - t0
    verdict = dev = None
    res = results / claim / "result.json"
    if rc == 0 and res.is_file():
        r = json.loads(res.read_text())
        verdict, dev = r.get("verdict"), r.get("device")
    ok = rc == 0 and verdict is not None
    return Outcome(claim, rc, seconds, verdict, dev, "" if ok else _tail(out or ""))


def line(o: Outcome, width: int) -> str:
    """One claim's line: id, ok / FAILED (exit status) / TIMEOUT, seconds, verdict, device."""
    state = "ok" if o.ok else ("TIMEOUT" if o.rc is None else f"FAILED rc {o.rc}")
    return f"  {o.claim:{width}s}  {state:12s} {o.seconds:7.1f} s  {o.verdict or '—':13s} {o.device or '—'}"


def smoke(
    claims: Sequence[str],
    device: str,
    results: Path,
    timeout: float,
    say: Callable[[str], None] = print,
    runner: Callable[[str, str, Path, float], Outcome] = run_claim,
) -> list[Outcome]:
    """Each claim in turn; its line (and a failure's last output lines) said as soon as it ends."""
    width = max((len(c) for c in claims), default=0)
    out = []
    for c in claims:
        o = runner(c, device, results, timeout)
        say(line(o, width))
        if o.tail:
            say("\n".join(f"      | {x}" for x in o.tail.splitlines()))
        out.append(o)
    return out


def summary(outcomes: Sequence[Outcome], device: str, seconds: float) -> str:
    failed = [o.claim for o in outcomes if not o.ok]
    head = f"smoke: {len(outcomes) - len(failed)}/{len(outcomes)} claims ran their quick profile on {device}"
    return head + f" in {seconds / 60:.1f} min" + (f"; failed: {', '.join(failed)}" if failed else "")
