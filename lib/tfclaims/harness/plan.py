"""What a sweep would run, before anything runs: a profile resolved (--set and --seeds checked), the grid
checked, each config's run key, and the records already on disk.

It imports no torch: `tfclaims plan` builds a claim's grid and counts its cached runs with it. A device is
anything with a `type` ("cpu", "cuda") or that type as a string."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from ..nn.config import ConfigError
from .experiment import PROFILES, Experiment
from .provenance import config_hash, run_code_hash, run_id

MAX_SEED = 2**31 - 1
_BATCH = re.compile(r"(^|_)batch(es)?($|_)")  # a config field that counts samples or batches
MAX_SEEDS = 10_000


class BadInput(Exception):
    """User error: one line, exit code 2."""


def check_seeds(seeds) -> list[int]:
    """Seeds are distinct integers in [0, 2^31): a seed counted twice would deflate every p-value."""
    seeds = list(seeds)
    if not seeds:
        raise BadInput("--seeds: give at least one seed")
    if len(seeds) > MAX_SEEDS:
        raise BadInput(f"--seeds: {len(seeds)} seeds is more than {MAX_SEEDS}")
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= MAX_SEED:
            raise BadInput(f"--seeds: {s!r} is not an integer in [0, {MAX_SEED}]")
    dup = sorted({s for s in seeds if seeds.count(s) > 1})
    if dup:
        raise BadInput(f"--seeds: seed(s) {dup} given twice; each seed must be one independent run")
    return seeds


def _check_value(key: str, value, default, where: str | None = None) -> None:
    """A --set value must have its profile default's shape and types: int for int; int or float for float;
    finite; not negative. A list must be non-empty; a list of lists is a table of records (a [depth, lr]
    cell), each row checked position by position against the default's first row; a flat list of mixed
    kinds is one record; any other list is checked element by element, numbers as floats where any
    default element is a float."""
    where = where or f"--set {key}={value!r}"
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise BadInput(f"{where}: expected true/false (True or False)")
        return
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise BadInput(f"{where}: expected an integer")
        if value < 0:
            raise BadInput(f"{where}: must not be negative")
        return
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadInput(f"{where}: expected a number")
        if not math.isfinite(value):
            raise BadInput(f"{where}: must be a finite number")
        if value < 0:
            raise BadInput(f"{where}: must not be negative")
        return
    if isinstance(default, (list, tuple)):
        if not isinstance(value, (list, tuple)):
            raise BadInput(f"{where}: expected a list like {list(default)!r}")
        if not value:
            raise BadInput(f"{where}: the list must not be empty (the grid would have nothing to run)")
        if not default:
            return
        if all(isinstance(d, (list, tuple)) for d in default):
            for row in value:
                _check_record(key, row, default[0], where)
        elif len({_kind(d) for d in default}) > 1:
            _check_record(key, value, default, where)
        else:
            proto = 0.0 if any(isinstance(d, float) for d in default) else default[0]
            for v in value:
                _check_value(key, v, proto, where)
        return
    if isinstance(default, str) and not isinstance(value, str):
        raise BadInput(f"{where}: expected text")


def _check_record(key: str, value, default, where: str) -> None:
    if not isinstance(value, (list, tuple)) or len(value) != len(default):
        raise BadInput(f"{where}: expected records of {len(default)} elements like {list(default)!r}")
    for v, d in zip(value, default):
        _check_value(key, v, d, where)


def _kind(v) -> str:
    """int and float are one kind (numbers)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return type(v).__name__
    return "number"


def resolve_profile(exp: Experiment, profile: str, seeds=None, overrides: dict | None = None) -> dict:
    """The profile's parameters with --set overrides (typed and range-checked) and --seeds applied."""
    if profile not in PROFILES:
        raise BadInput(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
    p = dict(exp.profiles[profile])
    for k, v in (overrides or {}).items():
        if k == "seeds" and "seeds" in p:
            raise BadInput("--set seeds=...: use --seeds (e.g. --seeds 5 or --seeds 0,3,7)")
        if k not in p:
            raise BadInput(
                f"--set {k}: {exp.claim_id} profile {profile!r} has no parameter {k!r} (it has: "
                f"{', '.join(sorted(p))})"
            )
        _check_value(k, v, p[k])
        p[k] = v
    if seeds is not None:
        if "seeds" not in p:
            raise BadInput(f"{exp.claim_id} takes no seeds (its runs are deterministic)")
        p["seeds"] = check_seeds(seeds)
    return p


def check_grid(exp: Experiment, configs: list[dict]) -> None:
    """Before any run: the grid is not empty, its seeds are distinct per config, and every model and training
    schedule it implies is valid (the fields a config shares with ModelConfig, and those it shares with
    TrainConfig, are validated together: `--set steps=0` is refused here, not by every run failing)."""
    from ..nn.config import ModelConfig, TrainConfig

    if not configs:
        raise BadInput(f"{exp.claim_id}: the grid is empty; nothing would run")
    keys = [json.dumps(c, sort_keys=True) for c in configs]
    if len(set(keys)) != len(keys):
        raise BadInput(f"{exp.claim_id}: the grid repeats a run (a seed or setting given twice)")
    shape = ("d_model", "n_heads", "n_layers", "n_kv_heads", "head_dim", "d_ff", "vocab_size")
    for cfg in configs:
        shared = {k: v for k, v in cfg.items() if k in shape}
        if "d_model" in shared or "n_heads" in shared:
            try:
                ModelConfig(**shared)
            except ConfigError as e:
                raise BadInput(f"{exp.claim_id}: invalid configuration: {e}") from None
            except TypeError:
                continue  # a field of the same name with another meaning in this claim
    for cfg in configs:
        for k, v in cfg.items():  # `batch`, `batch_timing`, `probe_batches`, …: a count of samples
            if _BATCH.search(k) and isinstance(v, int) and not isinstance(v, bool) and v < 1:
                raise BadInput(
                    f"{exp.claim_id}: invalid configuration: {k} = {v}: a batch needs at least 1 sample"
                )
    train_fields = {f.name for f in dataclasses.fields(TrainConfig)} - {"seed"}
    for cfg in configs:
        shared = {k: v for k, v in cfg.items() if k in train_fields}
        if "warmup" in shared and "steps" not in shared:
            del shared["warmup"]  # checked against steps only where the config has both
        try:
            TrainConfig(**shared)
        except ConfigError as e:
            raise BadInput(f"{exp.claim_id}: invalid training setting: {e}") from None
        except (TypeError, ValueError):
            continue  # a field of the same name with another meaning in this claim


@dataclass(frozen=True)
class RunKey:
    """What names one run's record: its config hash (with the device type), its part's code hash, its run
    id."""

    config_hash: str
    code_hash: str
    run_id: str


def run_keys(exp: Experiment, configs: list[dict], device) -> list[RunKey]:
    """Each config's RunKey, in grid order (a part's code hash is computed once)."""
    part_hash: dict[str, str] = {}
    keys = []
    for cfg in configs:
        cfg_h = config_hash(exp.claim_id, cfg, device)
        part = cfg.get("part", "") if exp.parts else ""
        if part not in part_hash:
            part_hash[part] = run_code_hash(exp, cfg)
        keys.append(RunKey(cfg_h, part_hash[part], run_id(cfg_h, part_hash[part])))
    return keys


def record_seconds(rec: dict) -> float | None:
    """How long a recorded run took: its `wall_s`, else finished − started (records filed before `wall_s`)."""
    if rec.get("wall_s") is not None:
        return float(rec["wall_s"])
    try:
        t = dt.datetime.fromisoformat(rec["finished_at"]) - dt.datetime.fromisoformat(rec["started_at"])
    except (KeyError, TypeError, ValueError):
        return None
    return t.total_seconds()


def durations(runs_dir: Path, device) -> dict:
    """Run durations known from the records in a runs folder: by config hash (the same run, under any code),
    and the median by part on the same device (for runs of that kind not yet run)."""
    by_cfg, by_part = {}, {}
    for path in runs_dir.glob("*.json"):
        rec = read_json(path)
        if (
            not isinstance(rec, dict)
            or rec.get("status") != "ok"
            or rec.get("device") != getattr(device, "type", device)
        ):
            continue
        s = record_seconds(rec)
        if s is None:
            continue
        by_cfg[rec.get("config_hash")] = s
        by_part.setdefault(("part", (rec.get("config") or {}).get("part")), []).append(float(s))
    return {**by_cfg, **{k: statistics.median(v) for k, v in by_part.items()}}


def read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def load_record(path: Path, force: bool = False) -> dict | None:
    """A record, or None when absent. An unreadable or malformed one is bad input (nothing overwrites it)
    unless forced."""
    if not path.exists():
        return None
    try:
        rec = json.loads(path.read_text())
        problem = record_problem(rec)
    except (OSError, ValueError) as e:
        problem = type(e).__name__
    if problem is None:
        return rec
    if force:
        return None
    raise BadInput(
        f"corrupt run record {path} ({problem}); delete it (or pass --force) to rerun that run"
    ) from None


def record_problem(rec) -> str | None:
    if not isinstance(rec, dict):
        return f"a JSON {type(rec).__name__}, not an object"
    if rec.get("status") not in ("ok", "failed"):
        return "no status"
    if rec["status"] == "ok" and not (
        isinstance(rec.get("metrics"), dict) and isinstance(rec.get("config"), dict)
    ):
        return "an ok record without metrics or config"
    return None


def ok(rec: dict | None) -> dict | None:
    return rec if rec is not None and rec.get("status") == "ok" else None
