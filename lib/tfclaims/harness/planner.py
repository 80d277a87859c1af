"""The one planner: the grid a sweep makes from a profile, --set and --seeds (what `run` sweeps and `plan`
counts), and the plan `tfclaims plan` prints: that grid's cached records and the time the others took.

It imports no torch. A device is anything with a `type` ("cpu", "cuda") or that type as a string."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from .experiment import Experiment
from .overrides import Records, refusal, user_values
from .plan import BadInput, check_grid, durations, load_record, ok, resolve_profile, run_keys


def sweep_grid(
    exp: Experiment, profile: str, seeds, overrides: dict | None, records: Records, device
) -> tuple[dict, list[dict]]:
    """(the profile's parameters with --seeds and --set applied, its checked grid); a --set that would change
    nothing (`overrides.refusal`, judged against `records`) is refused as BadInput."""
    p = resolve_profile(exp, profile, seeds, overrides)
    with user_values(exp, overrides):
        configs = exp.grid(p)
    check_grid(exp, configs)
    why = refusal(exp, profile, p, overrides or {}, records, getattr(device, "type", device))
    if why is not None:
        raise BadInput(why)
    return p, configs


@dataclass(frozen=True)
class PartPlan:
    """One part of a claim's grid: its runs, how many are cached, and the time the others took on record."""

    part: str
    runs: int = 0
    cached: int = 0
    seconds: float = 0.0  # the missing runs' durations on record
    unestimated: int = 0  # missing runs with no duration on record

    @property
    def missing(self) -> int:
        return self.runs - self.cached


@dataclass(frozen=True)
class Plan:
    """What `run <claim>` with the same options would need."""

    claim_id: str
    profile: str
    device: str
    parts: tuple[PartPlan, ...]
    staged: tuple[str, ...]  # the parts whose grid grows from finished runs
    grows: bool  # runs are missing from a stage, so later stages may add runs
    params: dict  # the profile's parameters, --set and --seeds applied
    overridden: tuple[str, ...]


def make_plan(
    exp: Experiment, profile: str, device, runs_dir: Path, *, seeds=None, overrides=None, published=()
) -> Plan:
    """The grid `run` would make, with its cached records and the durations on record of the missing runs; a
    staged grid grown, as the runner grows it, for as long as every run of a stage is cached. `published`: the
    published records' folders, which a --set equal to their values is refused against."""
    p, configs = sweep_grid(exp, profile, seeds, overrides, Records(runs_dir, *published), device)
    while True:
        keys = run_keys(exp, configs, device)
        done = [ok(load_record(runs_dir / f"{k.run_id}.json")) for k in keys]
        if not exp.staged or not all(done):
            break
        grown = exp.grid(p, done)
        if grown == configs:
            break
        check_grid(exp, grown)
        configs = grown
    known = durations(runs_dir, device)  # by config hash, else by part (what SLURM packs jobs by)
    parts: dict[str, PartPlan] = {}
    for cfg, key, rec in zip(configs, keys, done):
        name = str(cfg.get("part", ""))
        part = parts.get(name, PartPlan(name))
        seconds = None if rec else known.get(key.config_hash, known.get(("part", cfg.get("part"))))
        parts[name] = replace(
            part,
            runs=part.runs + 1,
            cached=part.cached + (rec is not None),
            seconds=part.seconds + (seconds or 0.0),
            unestimated=part.unestimated + (rec is None and seconds is None),
        )
    return Plan(
        exp.claim_id,
        profile,
        str(getattr(device, "type", device)),
        tuple(parts.values()),
        tuple(part.name for part in exp.parts if part.staged),
        exp.staged and not all(done),
        p,
        tuple(sorted(overrides or {})),
    )
