"""Helpers shared by the rule tests (tests/test_rules_*.py): build synthetic records (and the timings they
hold), run a claim's analysis on them, and read the verdict it returns."""

from __future__ import annotations

import math
import os
from collections.abc import Callable

import numpy as np

from tfclaims.harness.experiment import Experiment, Output
from tfclaims.harness.registry import load

# `make test-fast` sets TFCLAIMS_TEST_FIGURES=skip: its rule tests build no figure (a third of their time);
# the full suite builds every figure of every rule test, on the synthetic edge cases too.
DRAW = os.environ.get("TFCLAIMS_TEST_FIGURES", "draw") != "skip"

# Synthetic timing rounds: a load shared by every callable of a round, and each callable's own jitter.
ROUNDS = 8
LOAD = np.array([0.00, 0.20, -0.10, 0.35, 0.05, -0.15, 0.25, 0.10])
OWN = np.array([0.004, -0.003, 0.002, -0.001, 0.003, -0.004, 0.001, -0.002])


def record(config: dict, metrics: dict, run_id: str) -> dict:
    """A finished run as the analysis reads it."""
    return {"config": config, "metrics": metrics, "status": "ok", "run_id": run_id}


def grown(exp: Experiment, params: dict, metrics: Callable[[dict], dict]) -> list[dict]:
    """The records of a staged grid, grown as the runner grows it: every config of the grid so far gets
    `metrics(config)`, and the grid is asked again with those records until it stops growing."""
    grid, recs = None, []
    while (g := exp.grid(params, recs)) != grid:
        grid, recs = g, [record(c, metrics(c), f"r{i}") for i, c in enumerate(g)]
    return recs


def analyse(claim: str | Experiment, records, params: dict | str, tmp_path, render: bool = False):
    """The claim's verdict on `records`; `params` is the profile's settings, or the name of one of its
    profiles. Figures are built but written only with `render` (png + svg take seconds; every claim's figures
    are written in its end-to-end quick test), and not even built in the fast tier (DRAW)."""
    exp = load(claim) if isinstance(claim, str) else claim
    params = exp.profiles[params] if isinstance(params, str) else params
    out = Output(claim_dir=tmp_path, claim_id=exp.claim_id, render=render, draw=render or DRAW)
    return exp.analyse(records, params, out)


def decisions(verdict, prefix: str = "") -> dict:
    """comparison id -> decision, for the comparisons whose id starts with `prefix`."""
    return {c.id: c.decision for c in verdict.comparisons if c.id.startswith(prefix)}


def comparisons(verdict) -> dict:
    """comparison id -> the comparison."""
    return {c.id: c for c in verdict.comparisons}


def comparison(verdict, cid: str):
    """The comparison with id `cid`."""
    return next(c for c in verdict.comparisons if c.id == cid)


def find_sub(verdict, prefix: str, *, exact: bool = False):
    """The first sub-verdict whose name starts with `prefix` (is `prefix`, if `exact`)."""
    return next(s for s in verdict.sub_verdicts if (s.name == prefix if exact else s.name.startswith(prefix)))


def sub(verdict, id: str):
    """The sub-verdict of the declared sub-claim `id`."""
    return next(s for s in verdict.sub_verdicts if s.id == id)


def verdicts(verdict) -> dict:
    """sub-claim id -> its verdict."""
    return {s.id: s.verdict for s in verdict.sub_verdicts}


def sub_verdict(verdict, prefix: str) -> str:
    """The verdict of the first sub-verdict whose name starts with `prefix`."""
    return find_sub(verdict, prefix).verdict


def subs(verdict, key=None) -> dict:
    """sub-verdict name (or `key(name)`) -> its verdict."""
    return {(key(s.name) if key else s.name): s.verdict for s in verdict.sub_verdicts}


def times(base: float, log_ratio: float = 0.0, k: int = 0) -> list[float]:
    """Per-round seconds of one callable: base · exp(load + own jitter + log_ratio); `k` shifts the jitter."""
    own = np.roll(OWN, k)
    return [float(base * math.exp(LOAD[i] + own[i] + log_ratio)) for i in range(ROUNDS)]


def timed(base: float, log_ratio: float = 0.0, k: int = 0) -> dict:
    """One callable's timing record, from `times`: the median, the range as quartiles, every round."""
    ts = times(base, log_ratio, k)
    return {"median": float(np.median(ts)), "q25": min(ts), "q75": max(ts), "times": ts}


def quartiles(ts) -> dict:
    """A timing record from measured seconds: the median, the quartiles and every time."""
    q = np.quantile(ts, [0.25, 0.5, 0.75])
    return {"median": float(q[1]), "q25": float(q[0]), "q75": float(q[2]), "times": [float(t) for t in ts]}
