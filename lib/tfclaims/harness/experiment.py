"""What a claim's experiment declares, and what its analysis returns.

A claim file (`experiments/<id>/claim.py`) subclasses `Experiment` and declares:
  claim_id, title, statement (the claim in our words), notes_say, anchors, method, profiles {quick, default,
  full}; parts: the kinds of run it makes, each a `Part(name, grid, run)`: grid(p) -> run configs (plain JSON
  dicts, each with its own 'seed' where seeds matter) and run(cfg, ctx) -> metrics, a recipe that lives in the
  claim's folder (`recipes.py`, or a module-level function of the claim file) or in the library; declare(p) ->
  `evidence.declare.Declaration`, its sub-claims as data, fixed before running (the rule text is rendered from
  it); and analyse(runs, p, out)
  -> Verdict: observation tables from the records, `evidence.evaluate` over them, the claim's own tables and
  figures, `verdict_from` the evaluation.
The runner does the rest: caching (keyed by the code each part's recipe reaches), atomic records,
progress, staged publication of result.json with its tables and figures, the report.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..evidence.declare import Declaration
from ..evidence.evaluate import Evaluation
from ..evidence.rules import render
from . import prose
from .folders import PACKAGE, experiments_dir, install_package
from .reach import PKG, module_file, top_level_functions

if TYPE_CHECKING:
    import torch

VERDICTS = ("supported", "refuted", "mixed", "inconclusive")
PROFILES = ("quick", "default", "full")


@dataclass
class RunContext:
    """What run_one gets beside its config."""

    device: torch.device
    progress: bool = True


@dataclass(frozen=True)
class Recipe:
    """A recipe named without importing its module: the module (and torch) loads on the first run. So a
    claim file, its grid and its declarations load without torch (`tfclaims plan`), and the code hash reads
    the recipe's source file as it reads any other (`reach`)."""

    module: str  # dotted: a claim's module ("experiments.kv_cache.recipes") or the library's ("tfclaims.…")
    name: str

    @property
    def path(self) -> Path:
        return _source_file(self.module)

    def load(self) -> Callable[[dict, RunContext], dict]:
        """The function itself (imports its module)."""
        if self.module.startswith(PACKAGE + "."):
            install_package()
        return getattr(importlib.import_module(self.module), self.name)

    def __call__(self, cfg: dict, ctx: RunContext) -> dict:
        return self.load()(cfg, ctx)


def _source_file(module: str) -> Path:
    """The source file of a dotted module of a claim's folder or of the library."""
    top, _, rest = module.partition(".")
    if top == PACKAGE:
        return experiments_dir().joinpath(*rest.split(".")).with_suffix(".py")
    return module_file(rest)


def recipes(module: str) -> Recipes:
    """The recipes of one module, by attribute: `recipes("experiments.kv_cache.recipes").run_steps` is a
    `Recipe`. A name that is not one of the module's top-level functions fails when the claim file loads, as
    a mistyped import would."""
    return Recipes(module)


class Recipes:
    """See `recipes`."""

    def __init__(self, module: str):
        path = _source_file(module) if module.partition(".")[0] in (PKG, PACKAGE) else None
        if path is None or not path.is_file():
            raise ValueError(f"recipes: {module!r} is not a module of {PACKAGE}/ or of {PKG}")
        self._module = module
        self._names = top_level_functions(path)

    def __getattr__(self, name: str) -> Recipe:
        if name.startswith("_") or name not in self._names:
            raise AttributeError(f"{self._module} has no recipe {name!r}")
        return Recipe(self._module, name)


@dataclass(frozen=True)
class Part:
    """One kind of run: `grid(p)` gives its configs, `run(cfg, ctx)` turns one config into metrics.

    `run` is a `Recipe` or a module-level function of the claim file: the run cache is keyed by
    the code it reaches, so editing an analysis or another part's recipe reruns nothing here."""

    name: str
    grid: Callable[..., list[dict]]
    run: Recipe | Callable[[dict, RunContext], dict]
    # staged: grid(p, done) also reads `done`, the ok records of the runs made so far (a learning-rate
    # sweep's selection seeds choose the rate its fresh seeds run at); the runner grows the grid until it
    # stops changing. Its configs may name another part ("part": "train"): that part's recipe runs them
    staged: bool = False
    # timed: its runs measure wall-clock time, so the `auto` launcher runs them in process, one at a time,
    # before the claim's other runs (which may then share the cores); `Experiment.times_code` times every part
    timed: bool = False

    def __post_init__(self):
        if isinstance(self.run, Recipe):
            return
        if "." in getattr(self.run, "__qualname__", ".") or "<" in self.run.__qualname__:
            raise TypeError(f"part {self.name!r}: run must be a module-level function, got {self.run!r}")


@dataclass
class SubVerdict:
    name: str
    verdict: str
    detail: str
    comparisons: list[str] = field(default_factory=list)  # ids of the comparisons it aggregates
    id: str = ""
    kind: str = "effect"  # 'effect' (evidence) or 'check' (an identity the harness relies on)
    counts: bool = True  # in the overall verdict, or reported beside it
    reported: list[str] = field(default_factory=list)  # comparisons in cells reported, not counted
    holds: list[str] = field(default_factory=list)  # the cells (scales, settings) where it holds
    claimed: str = ""  # the decision that supports it: 'a_better', 'b_better' or 'inside' (an interval)
    roles: dict[str, str] = field(default_factory=dict)  # counted comparison id -> 'support', 'refute', …
    # its first readout's smallest effect of interest (None: exact bounds, no sampling error), in `unit`: a
    # direction's ±margin, or an interval's distance from its bounds; with where it comes from
    sesoi: float | None = None
    unit: str = ""
    sesoi_source: str = ""

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")


@dataclass
class Verdict:
    verdict: str
    summary: str  # one or two sentences: what the data says, with numbers
    key_number: str  # the headline number for the summary table
    evidence: dict = field(default_factory=dict)  # the numbers the rule used
    sub_verdicts: list[SubVerdict] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)
    comparisons: list = field(default_factory=list)  # evidence.Comparison: every decision the rule used
    noise_floor: list = field(default_factory=list)  # evidence.Comparison: null pairs (training claims)
    arms: Any = None  # DataFrame (`evidence.summary.arm_summary`): each compared arm per cell and readout

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")


@dataclass
class Output:
    """Where analyse() puts tables and figures; records them for result.json and the report."""

    claim_dir: Path
    claim_id: str
    figures: dict = field(default_factory=dict)
    tables: list = field(default_factory=list)
    render: bool = True  # False: figures are built but not written (rule tests on synthetic records)
    draw: bool = True  # False: the functions marked `evidence.plots.drawing` build no figure at all

    def table(
        self, name: str, df: pd.DataFrame, title: str, *, in_report: bool = True, floatfmt: str = ".4g"
    ) -> None:
        from ..io import atomic_write_text

        path = self.claim_dir / f"{name}.csv"
        atomic_write_text(path, df.to_csv(index=False))
        self.tables.append(
            {
                "name": name,
                "title": title,
                "csv": path.name,
                "markdown": _markdown(df, floatfmt) if in_report else None,
            }
        )

    def figure(self, name: str, fig, caption: str) -> None:
        from ..plotting import plt, save_figure

        fig_id = f"fig-{self.claim_id}-{name}"
        if not self.render:
            plt.close(fig)
            self.figures[fig_id] = {"png": None, "svg": None, "caption": caption}
            return
        paths = save_figure(fig, self.claim_dir / "figures", name)
        self.figures[fig_id] = {
            "png": f"figures/{paths[0].name}",
            "svg": f"figures/{paths[1].name}",
            "caption": caption,
        }


def _markdown(df: pd.DataFrame, floatfmt: str) -> str:
    def fmt(v):
        if isinstance(v, float):
            return "—" if v != v else format(v, floatfmt)
        return "—" if v is None else str(v)

    head = "| " + " | ".join(map(str, df.columns)) + " |"
    sep = "|" + "|".join("---" for _ in df.columns) + "|"
    rows = ["| " + " | ".join(fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, sep, *rows])


class Experiment:
    """A claim's experiment. Its prose (statement, notes_say, anchors, anchor_number, method) lives in
    `claim.md` beside its file (`harness.prose`), read when the subclass is defined."""

    claim_id: str = ""
    title: str = ""
    order: int = 100  # position in the report
    times_code: bool = (
        False  # True: every run measures wall-clock time (else only `Part.timed` parts'), one at a time
    )
    statement: str = ""
    notes_say: str = ""
    anchors: list[str] = []
    anchor_number: str = ""
    method: str = ""
    regime: str = ""  # whether the committed profile reaches the claim's regime (the answers table)
    headline: str = (
        ""  # the sub-claim whose comparisons give the answers table's number (default: first counted)
    )
    rule: str = ""  # rendered from declare(p) where the experiment declares its sub-claims
    profiles: dict[str, dict] = {}
    parts: tuple[Part, ...] = ()
    caveat_templates: tuple[str, ...] = ()  # claim.md's `## Caveats`, filled by `caveats`

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        module = sys.modules.get(cls.__module__)
        md = Path(getattr(module, "__file__", "") or "").with_suffix(".md")
        if not md.is_file():
            return  # a class defined elsewhere (a test's toy) declares its prose itself
        fields = prose.read(md, vars(module))
        twice = sorted(set(fields) & set(vars(cls)))
        if twice:
            raise prose.ProseError(f"{cls.__name__}: {twice} given both in the class and in {md.name}")
        for k, v in fields.items():
            setattr(cls, k, v)

    def caveats(self, p: dict, **facts) -> list[str]:
        """The caveats of `## Caveats` in the claim's markdown, each filled from the claim module's constants,
        the profile's settings (`{p[steps]}`) and the numbers the analysis passes as `facts` (`{drop}`)."""
        names = {**vars(sys.modules[type(self).__module__]), "p": p, **facts}
        where = f"{self.claim_id}: ## Caveats"
        return [prose.fill(t, names, where) for t in self.caveat_templates]

    def grid(self, p: dict, done: list[dict] | tuple = ()) -> list[dict]:
        """Every part's configs, each tagged with its part's name. A staged part is given `done`, the ok
        records of the runs made so far, and its configs that another part already makes are dropped (a tuned
        rate that is one of the fixed-rate cells reuses their runs)."""
        out, seen = [], set()
        for part in self.parts:
            for c in part.grid(p, list(done)) if part.staged else part.grid(p):
                key = json.dumps({"part": part.name, **c}, sort_keys=True)
                if not (part.staged and key in seen):
                    seen.add(key)
                    out.append({"part": part.name, **c})
        return out

    @property
    def staged(self) -> bool:
        """Whether the grid depends on runs already made (see `Part.staged`)."""
        return any(part.staged for part in self.parts)

    def part(self, name: str) -> Part:
        for part in self.parts:
            if part.name == name:
                return part
        raise KeyError(f"{self.claim_id} has no part {name!r}")

    def timed(self, cfg: dict) -> bool:
        """Whether the run of `cfg` measures wall-clock time: the claim's `times_code`, or its part's
        `timed`."""
        return self.times_code or (bool(self.parts) and self.part(cfg.get("part", self.parts[0].name)).timed)

    def run_one(self, cfg: dict, ctx: RunContext) -> dict:
        return self.part(cfg["part"]).run(cfg, ctx)

    def declare(self, p: dict) -> Declaration | None:
        """The sub-claims as data (see `evidence.declare`); None for an experiment that writes its rule."""
        return None

    def rule_text(self, p: dict) -> str:
        """The rule, rendered from the declarations the analysis runs."""
        decl = self.declare(p)
        return self.rule if decl is None else render(decl)

    def analyse(self, runs: list[dict], p: dict, out: Output) -> Verdict:
        raise NotImplementedError

    @staticmethod
    def runs_of(runs: list[dict], part: str) -> list[dict]:
        """The records of one part."""
        return [r for r in runs if r["config"].get("part") == part]

    @staticmethod
    def with_seeds(configs: list[dict], seeds) -> list[dict]:
        return [{**c, "seed": s} for c in configs for s in seeds]


def _sesoi_of(sc) -> dict:
    """A sub-claim's SESOI as its SubVerdict records it (its first readout's)."""
    r = sc.readouts[0]
    return {"sesoi": sc.sesoi_for(r), "unit": r.unit, "sesoi_source": sc.sesoi_text}


def verdict_from(
    result: Evaluation,
    *,
    key_number: str,
    summary: str = "",
    caveats: list[str] | None = None,
    evidence: dict | None = None,
) -> Verdict:
    """The Verdict of an evaluation: its sub-verdicts (checks and effects), comparisons and null pairs; the
    summary starts with what each counted effect found."""
    subs = [
        SubVerdict(
            s.statement,
            s.verdict,
            s.detail,
            s.comparisons,
            id=s.id,
            kind=s.kind,
            counts=s.counts,
            reported=s.reported,
            holds=s.holds,
            claimed=result.declaration.sub(s.id).claimed,
            roles=s.roles,
            **_sesoi_of(result.declaration.sub(s.id)),
        )
        for s in result.subs
    ]
    found = "; ".join(
        f"({s.id}) {s.statement}: {s.verdict}" for s in result.subs if s.kind == "effect" and s.counts
    )
    return Verdict(
        verdict=result.verdict,
        summary=(found + ". " if found else "") + summary,
        key_number=key_number,
        evidence={"sub_verdicts": result.verdicts(), **(evidence or {})},
        sub_verdicts=subs,
        caveats=list(caveats or []),
        comparisons=list(result.comparisons),
        noise_floor=list(result.floors),
        arms=result.arms,
    )
