"""Whether a profile parameter does anything: `--set` of one that changes no run and no rule is refused.

A parameter acts through the runs it asks for (the grid, grown from the records on disk as the runner grows
it) or through the declaration the analysis decides with (its rendered rule). One that changes neither
changes nothing a sweep would make or decide; a user's `--set` of it would run to a verdict that silently
ignores it. A test walks every claim's profiles with `variants` of each value so that every parameter a
profile holds is one that acts; at run time `refusal` checks the user's own values.

Torch-free, like `plan`.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable
from pathlib import Path

from ..nn.config import ConfigError
from .experiment import Experiment
from .plan import BadInput, read_json
from .provenance import config_hash, run_code_hash, run_id


class Records:
    """The ok run records of a claim by run id, read lazily from one or more runs folders (the first that
    holds a record wins) and kept: growing a staged grid several times reads each record once, and hashes
    each part's code once."""

    def __init__(self, *folders: Path):
        self.folders, self._seen, self._code = folders, {}, {}

    def run_ids(self, exp: Experiment, configs: list[dict], device) -> list[str]:
        """Each config's run id (as `plan.run_keys` names it)."""
        out = []
        for cfg in configs:
            part = cfg.get("part", "") if exp.parts else ""
            if part not in self._code:
                self._code[part] = run_code_hash(exp, cfg)
            out.append(run_id(config_hash(exp.claim_id, cfg, device), self._code[part]))
        return out

    def get(self, run_id: str) -> dict | None:
        if run_id not in self._seen:
            recs = (read_json(f / f"{run_id}.json") for f in self.folders)
            ok = (r for r in recs if isinstance(r, dict) and r.get("status") == "ok")
            self._seen[run_id] = next(ok, None)
        return self._seen[run_id]


def grown(exp: Experiment, p: dict, records: Records, device) -> tuple[list[dict], bool]:
    """The grid of `p` grown from the records as the runner grows it, and whether it is complete: False when
    a staged grid waits on a run that has no record yet (its later rounds are unknown)."""
    configs = exp.grid(p)
    while exp.staged:
        done = [records.get(r) for r in records.run_ids(exp, configs, device)]
        if not all(done):
            return configs, False
        more = exp.grid(p, done)
        if more == configs:
            break
        configs = more
    return configs, True


def footprint(exp: Experiment, p: dict, records: Records, device) -> tuple[str, str, bool]:
    """What a profile's parameters act through: its grid (as JSON), its rule text, and whether the grid is
    complete (see `grown`)."""
    configs, complete = grown(exp, p, records, device)
    return json.dumps(configs, sort_keys=True), exp.rule_text(p), complete


def acts(exp: Experiment, p: dict, key: str, value, records: Records, device, *, base=None) -> bool | None:
    """Whether setting `key` to `value` in `p` changes its grid or rule: True, False, or None where it cannot
    be told (a staged grid not yet grown to its end, on either side, and nothing else changed). A value the
    claim refuses (a configuration error) acts: the claim read it."""
    base = base or footprint(exp, p, records, device)
    try:
        new = footprint(exp, {**p, key: value}, records, device)
    except Exception:  # noqa: BLE001 - whatever the claim raised, it read the value
        return True
    if new[:2] != base[:2]:
        return True
    return False if base[2] and new[2] else None


@contextlib.contextmanager
def user_values(exp: Experiment, overrides: dict | None):
    """Where a profile carries a user's --set values, any error building its grid or rule is bad input (one
    line), not a traceback: the claim's own checks raise ConfigError, but a value of the right type can still
    break a grid in ways no check foresaw (an empty list it indexes, a zero it divides by). Without --set
    values an error is the claim's bug and propagates."""
    try:
        yield
    except ConfigError as e:
        raise BadInput(f"{exp.claim_id}: invalid configuration: {e}") from None
    except BadInput:
        raise
    except Exception as e:
        if not overrides:
            raise
        keys = ", ".join(f"--set {k}" for k in overrides)
        first = str(e).splitlines()[0] if str(e) else ""
        raise BadInput(
            f"{exp.claim_id}: {keys} makes no valid runs or rule ({type(e).__name__}: {first})"
        ) from None


def refusal(exp: Experiment, profile: str, p: dict, overrides: dict, records: Records, device) -> str | None:
    """Why a sweep with `--set` overrides would ignore one of them (one line), None when each acts: one equal
    to the profile's own value, or one that changes neither the grid nor the rule given the others."""
    if not overrides:
        return None
    for k, v in overrides.items():
        if _stored(v) == _stored(exp.profiles[profile][k]):
            return f"--set {k}={v!r}: that is the {profile} profile's own value; nothing would change"
    with user_values(exp, overrides):
        base = footprint(exp, p, records, device)
    for k in overrides:
        if acts(exp, p, k, exp.profiles[profile][k], records, device, base=base) is False:
            return (
                f"--set {k}: {exp.claim_id} reads {k!r} nowhere that the {profile} profile's runs or rule "
                "depend on, so it would change nothing; see `plan` for the parameters that act"
            )
    return None


def _stored(v):
    return json.loads(json.dumps(v))


def variants(value) -> list:
    """Other values of a parameter's kind, to find out whether it acts: numbers moved both ways and zero (a
    cap that the profile's value does not reach acts below it), lists shortened at either end or each number
    in them moved, texts and flags changed."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [x for x in (value + 1, 2 * value + 1, value // 2, 0) if x != value]
    if isinstance(value, float):
        return (
            [x for x in (value * 1.5 + 0.1, value / 2, 0.0) if x != value] if math.isfinite(value) else [1.0]
        )
    if isinstance(value, str):
        return [value + "_other"]
    if isinstance(value, (list, tuple)):
        out = [list(value[:-1]), list(value[1:])] if len(value) > 1 else []
        return out + [[_moved(x) for x in value]]
    return []


def _moved(x):
    if isinstance(x, (list, tuple)):
        return [_moved(y) for y in x]
    kinds: dict[type, Callable] = {
        bool: lambda v: not v,
        int: lambda v: 2 * v + 1,
        float: lambda v: v * 1.5 + 0.1,
        str: lambda v: v + "_other",
    }
    return kinds.get(type(x), lambda v: v)(x)
