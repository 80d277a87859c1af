"""truncate_distill's runs and the fields its recipes share.

One `students` run per seed trains the teacher (the shared recipe at the profile's depth, from that seed, so a
run never depends on another run's state) and then every student the config lists on it: each is an arm
(`ARMS`: the teacher's first k blocks fine-tuned with or without distillation, or k fresh blocks trained from
scratch), a depth k and a learning rate. The sweep is `grids.sweep`'s, grown in the same rounds but bundled by
seed: first every arm × depth × rate on each selection seed, then (where an arm's choice sits at an end of
its sweep) the next rates, then each arm at its chosen rate on each fresh seed, with the arm without
distillation at the first depth trained again from another data order (seed s + NULL_OFFSET, same teacher):
the null pair.
The `counts` and `timing` parts read teacher and students at the trained size and at published sizes.
"""

from __future__ import annotations

from fractions import Fraction

from tfclaims.evidence.tuning import Sweep, capped, choose
from tfclaims.grids.sweep import profile_sweep
from tfclaims.nn.config import PRESETS, ConfigError, ModelConfig
from tfclaims.train.profiles import model_config, run_fields

NULL_OFFSET = (
    1000  # the null pair: the first depth's student without distillation, data order s + NULL_OFFSET
)
ARMS = {"distil": {"student": "distil"}, "plain": {"student": "plain"}, "scratch": {"student": "scratch"}}
ARM_LABELS = {"distil": "cut, with distillation", "plain": "cut, without distillation",
              "scratch": "k layers from scratch"}  # fmt: skip
STUDENT_KEYS = ("student_steps", "student_eval_every", "alpha", "tau")
AA = "teacher (again)"
VOCAB = 85  # the character corpus's symbols: the trained size's vocabulary in counts and timings


def depths(p: dict) -> list[int]:
    """The students' depths (`keep`), each in 1 .. n_layers − 1 and distinct; a configuration error
    otherwise."""
    ks = p["keep"]
    if not ks or len(set(ks)) != len(ks) or not all(isinstance(k, int) and 0 < k < p["n_layers"] for k in ks):
        raise ConfigError(f"keep: distinct depths in 1 .. {p['n_layers'] - 1}, got {ks!r}")
    return list(ks)


def scale_label(k: int, L: int) -> str:
    return f"k{k}-of-{L}"


def fraction_label(k: int, L: int) -> str:
    f = Fraction(k, L)
    return f"{f.numerator}/{f.denominator} of the layers"


def _entry(arm: str, k: int, lr: float, rerun: bool = False) -> dict:
    return {"student": arm, "keep": k, "lr": lr, **({"rerun": True} if rerun else {})}


def student_records(records: list[dict]) -> list[dict]:
    """One record per student of each `students` run: config = the run's scalar fields with the student's
    own (student, keep, lr; a rerun's seed is s + NULL_OFFSET), metrics = the student's with the run's unigram
    level, its teacher's final loss (`teacher_final`) and its loss at step 0 (`init_loss`), where a failed run
    counts in a sweep."""
    out = []
    for r in records:
        c, m = r["config"], r["metrics"]
        if c.get("part") != "students":
            continue
        base = {k: v for k, v in c.items() if k != "students"}
        for s, sm in zip(c["students"], m["students"]):
            cfg = {**base, **{k: v for k, v in s.items() if k != "rerun"}, "rerun": bool(s.get("rerun"))}
            if cfg["rerun"]:
                cfg["seed"] = c["seed"] + NULL_OFFSET
            init = sm["val_loss"][0]  # None: cut from a teacher that diverged; it counts at the unigram level
            met = {
                **sm,
                "unigram_xent": m["unigram_xent"],
                "teacher_final": m["teacher"]["final_val"],
                "init_loss": m["unigram_xent"] if init is None else init,
            }
            out.append({"config": cfg, "metrics": met, "run_id": r.get("run_id")})
    return out


def student_sweep(p: dict) -> Sweep:
    """The students' sweep: every depth sweeps the profile's `rates` (no later-scale factors)."""
    return profile_sweep({**p, "rate_factors": [1.0]})


def grid_students(p: dict, done) -> list[dict]:
    """The staged sweep's runs that can be named given `done` (see the module's docstring)."""
    sweep, ks = student_sweep(p), depths(p)
    if max(*sweep.fresh, *sweep.selection) >= NULL_OFFSET:
        raise ConfigError(f"seeds must lie below {NULL_OFFSET} (the null pair's offset)")
    base = {"part": "students", **run_fields(p), **{k: p[k] for k in STUDENT_KEYS}}
    res = {}
    for r in student_records(list(done)):
        c, m = r["config"], r["metrics"]
        if not c["rerun"]:
            res[(c["student"], c["keep"], c["lr"], c["seed"])] = (m["final_val"], m["init_loss"])
    rates = {(a, k): list(sweep.rates) for a in ARMS for k in ks}
    first = [_entry(a, k, lr) for (a, k), rs in rates.items() for lr in rs]
    out = [{**base, "students": first, "seed": s} for s in sweep.selection]
    best: dict[tuple[str, int], float] = {}
    for stage in range(1, sweep.extend + 2):
        new = []
        for (a, k), rs in rates.items():
            if (a, k) in best:
                continue
            got = {lr: [res.get((a, k, lr, s)) for s in sweep.selection] for lr in rs}
            if any(v is None for vs in got.values() for v in vs):
                return out  # an unfinished round chooses nothing
            chosen = choose({lr: [capped(*v) for v in vs] for lr, vs in got.items()})
            wider = sweep.widened(rs, chosen) if stage <= sweep.extend else None
            if wider is None:
                best[(a, k)] = chosen
            else:
                new += [_entry(a, k, lr) for lr in wider if lr not in rs]
                rates[(a, k)] = wider
        if new:
            out += [{**base, "students": new, "seed": s} for s in sweep.selection]
    fresh = [_entry(a, k, best[(a, k)]) for a in ARMS for k in ks]
    null = _entry("plain", ks[0], best[("plain", ks[0])], rerun=True)
    return out + [{**base, "students": [*fresh, null], "seed": s} for s in sweep.fresh]


# ------------------------------------------------------------------ sizes read by the counts and timing parts
def size_config(name: str, p: dict, layers: int | None = None) -> tuple[ModelConfig, str]:
    """A counted or timed size's model config and kind: "trained" is the teacher of the profile's recipe (a
    decoder LM over the characters), a preset name (e.g. "bert-base") that preset (an encoder, as BERT);
    `layers` replaces its depth."""
    if name == "trained":
        c, kind = model_config(p, VOCAB), "lm"
    elif name in PRESETS:
        c, kind = PRESETS[name], "encoder"
    else:
        raise ConfigError(f"timed: 'trained' or one of {sorted(PRESETS)}, got {name!r}")
    return (c if layers is None else c.replace(n_layers=layers)), kind


def size_depths(name: str, p: dict) -> list[tuple[str, int]]:
    """(model label, depth) at a size: the teacher's depth, then each student depth at the same fraction of it
    (the trained students' k / L; a fraction that does not divide the size's depth is a configuration
    error)."""
    L = size_config(name, p)[0].n_layers
    out = [("teacher", L)]
    for k in depths(p):
        f = Fraction(k, p["n_layers"]) * L
        if f.denominator != 1:
            raise ConfigError(f"timed: {name} has {L} layers, not a multiple of {Fraction(k, p['n_layers'])}")
        out.append((fraction_label(k, p["n_layers"]), int(f)))
    return out


def counts_grid(p: dict) -> list[dict]:
    """One run: parameters and forward FLOPs of teacher and students at each size of `timed`."""
    return [{"sizes": p["timed"], **run_fields(p), "keep": p["keep"], "seed": 0}]


def timing_grid(p: dict) -> list[dict]:
    """One timed run: a forward of teacher and students at each size of `timed`, on windows of the training
    length."""
    keys = ("batch_timing", "threads", "repeats", "warmup")
    return [{"sizes": p["timed"], **run_fields(p), "keep": p["keep"], **{k: p[k] for k in keys}, "seed": 0}]
