"""What a claim's experiment declares, and what its analysis returns.

An experiment file subclasses `Experiment` and declares:
  claim_id, title, statement (the claim in our words), notes_say, anchors, method, rule (the
  pre-registered verdict rule, fixed before running), profiles {quick, default, full},
  grid(p) -> list of run configs (plain JSON dicts, each with its own 'seed' where seeds matter),
  run_one(cfg, ctx) -> metrics (a JSON dict), and analyse(runs, p, out) -> Verdict.
The runner does the rest: caching, atomic records, progress, result.json, figures, report.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

VERDICTS = ("supported", "refuted", "mixed", "inconclusive")
PROFILES = ("quick", "default", "full")


@dataclass
class RunContext:
    """What run_one gets beside its config."""

    device: torch.device
    progress: bool = True


@dataclass
class SubVerdict:
    name: str
    verdict: str
    detail: str

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

    def table(
        self, name: str, df: pd.DataFrame, title: str, *, in_report: bool = True, floatfmt: str = ".4g"
    ) -> None:
        from .io import atomic_write_text

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
        from .plotting import save_figure

        paths = save_figure(fig, self.claim_dir / "figures", name)
        fig_id = f"fig-{self.claim_id}-{name}"
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
    claim_id: str = ""
    title: str = ""
    order: int = 100  # position in the report
    statement: str = ""
    notes_say: str = ""
    anchors: list[str] = []
    anchor_number: str = ""
    method: str = ""
    rule: str = ""
    profiles: dict[str, dict] = {}

    def grid(self, p: dict) -> list[dict]:
        raise NotImplementedError

    def run_one(self, cfg: dict, ctx: RunContext) -> dict:
        raise NotImplementedError

    def analyse(self, runs: list[dict], p: dict, out: Output) -> Verdict:
        raise NotImplementedError

    @staticmethod
    def with_seeds(configs: list[dict], seeds) -> list[dict]:
        return [{**c, "seed": s} for c in configs for s in seeds]

    @classmethod
    def main(cls, argv=None) -> None:
        """Entry point of `python experiments/<claim_id>.py`."""
        from .cli import experiment_main

        sys.exit(experiment_main(cls(), argv))
