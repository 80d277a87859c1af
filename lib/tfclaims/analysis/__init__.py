"""What several claims' analyses share (a claim's own analysis is `experiments/<id>/analysis.py`): the records
of one part, and (`lengths`) loss against context length.

Nothing here is reached by a run (tests/test_package.py): editing it re-analyses, never reruns."""


def part(runs: list[dict], name: str) -> list[dict]:
    """The records of one part."""
    return [r for r in runs if r["config"].get("part") == name]
