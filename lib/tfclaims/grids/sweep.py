"""The configs of a learning-rate sweep per arm and scale, grown in rounds (a staged `Part`).

Round 1: every arm's sweep at the first scale on the selection seeds. Where an arm's choice sits at an end of
its sweep, the next rate beyond joins it (up to `Sweep.extend` times). Once an arm's sweep there is settled,
its chosen rate runs on the fresh seeds, and its sweep at each later scale starts around that rate (widened
the same way); once that is settled, the later scale's choice runs on the fresh seeds. The choice is
`evidence.tuning.choose`, the same function the analysis reads the runs with.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence

from ..evidence.decisions import EvidenceError
from ..evidence.tuning import Sweep, capped, choose
from ..nn.config import ConfigError
from ..train.profiles import model_config

# make(arm_fields, scale_fields, lr, seed) -> a run config (with "part" naming the part whose recipe runs it)
Make = Callable[[dict, dict, float, int], dict]


def _key(cfg: dict) -> str:
    return json.dumps(cfg, sort_keys=True)


def profile_sweep(p: dict, fresh: str = "seeds") -> Sweep:
    """The sweep a profile declares: `rates`, `selection_seeds`, the fresh seeds (under the key `fresh`),
    `rate_factors` and `rate_extend`; a malformed one is a configuration error (one line, before any run)."""
    try:
        seeds = tuple(p["selection_seeds"]), tuple(p[fresh])
        return Sweep(tuple(p["rates"]), *seeds, tuple(p["rate_factors"]), p["rate_extend"])
    except EvidenceError as e:
        raise ConfigError(str(e)) from None


def model_scales(p: dict, keys: tuple[str, str] = ("d_model", "n_layers")) -> list[dict]:
    """A profile's `scales`, each [width, depth], as the run-config fields `keys`; validated: positive
    integers, distinct, at least one (a configuration error otherwise, one line before any run)."""
    out = []
    for s in p["scales"]:
        if not (
            isinstance(s, (list, tuple)) and len(s) == 2 and all(isinstance(x, int) and x > 0 for x in s)
        ):
            raise ConfigError(f"scales: each is [{', '.join(keys)}], positive integers, got {s!r}")
        out.append(dict(zip(keys, s)))
    if not out or len({tuple(s) for s in p["scales"]}) != len(out):
        raise ConfigError(f"scales: give distinct [{', '.join(keys)}] scales, got {p['scales']!r}")
    return out


def model_config_scales(p: dict) -> list[dict]:
    """`model_scales` over [d_model, n_layers], each checked to make a valid model of the profile's shared
    recipe (`train.profiles.model_config`) before anything runs."""
    out = model_scales(p)
    for s in out:
        model_config({**p, **s}, 96)
    return out


def scale_label(s: dict, keys: tuple[str, str] = ("d_model", "n_layers")) -> str:
    """A scale's label in tables and comparison ids: d<width>-L<depth>, read from `keys`."""
    return f"d{s[keys[0]]}-L{s[keys[1]]}"


def null_reruns(out: list[dict], sweep: Sweep, first: dict, fields: dict, offset: int) -> list[dict]:
    """A tuned comparison's null pair: the runs in `out` (a sweep's configs) on the fresh seeds at the first
    scale whose config has `fields` (the baseline arm, at its chosen rate), rerun at seeds s + offset; every
    sweep seed must lie below the offset."""
    if max(*sweep.fresh, *sweep.selection) >= offset:
        raise ConfigError(f"seeds must lie below {offset} (the null pairs' offset)")
    at = {**first, **fields}
    return [
        {**c, "seed": c["seed"] + offset}
        for c in out
        if c["seed"] in sweep.fresh and all(c.get(k) == v for k, v in at.items())
    ]


def final_and_init(m: dict) -> tuple[float | None, float]:
    """A training record's (final validation loss, None if it diverged; validation loss at step 0, before any
    update): what `train.loop.train_lm` and `additive_vs_dot`'s retrieval recipe record."""
    return (m["final_val"] if m.get("diverged_at") is None else None), m["val_loss"][0]


def sweep_grid(
    sweep: Sweep,
    arms: Mapping[str, dict],
    scales: Sequence[dict],
    make: Make,
    done: Sequence[dict],
    read: Callable[[dict], tuple[float | None, float]] = final_and_init,
) -> list[dict]:
    """The sweep's configs that can be named given `done` (ok records); `read(metrics)` gives a run's (final
    loss, loss at initialisation)."""
    by_cfg = {_key(r["config"]): r for r in done}
    out: list[dict] = []
    first: dict[str, float] = {}
    for i, scale in enumerate(scales):
        for name, arm in arms.items():
            if i and name not in first:
                continue  # a later scale waits for the first scale's choice
            rates, best = list(sweep.rates if i == 0 else sweep.later(first[name])), None
            for step in range(sweep.extend + 1):
                recs = {
                    lr: [by_cfg.get(_key(make(arm, scale, lr, s))) for s in sweep.selection] for lr in rates
                }
                if any(r is None for rs in recs.values() for r in rs):
                    break  # an unfinished sweep chooses nothing
                best = choose({lr: [capped(*read(r["metrics"])) for r in rs] for lr, rs in recs.items()})
                wider = sweep.widened(rates, best) if step < sweep.extend else None
                if wider is None:
                    break
                rates, best = wider, None
            out += [make(arm, scale, lr, s) for lr in rates for s in sweep.selection]
            if best is not None:
                if i == 0:
                    first[name] = best
                out += [make(arm, scale, best, s) for s in sweep.fresh]
    return out
