"""What only one claim's analysis needs, one module per claim id: its observation tables (records → tidy rows
the declarations are evaluated on), its own tables and its particular figures.

Nothing here is reached by a run (tests/test_package.py): editing it re-analyses, never reruns."""


def part(runs: list[dict], name: str) -> list[dict]:
    """The records of one part."""
    return [r for r in runs if r["config"].get("part") == name]
