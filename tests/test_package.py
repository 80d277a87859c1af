"""The package's shape: no import cycle among its modules (lazy imports inside functions included)."""

from pathlib import Path

import tfclaims
from tfclaims.reach import imported_modules

PKG = Path(tfclaims.__file__).parent


def _graph() -> dict[str, set[str]]:
    return {p.stem: imported_modules(p.stem) for p in PKG.glob("*.py")}


def test_the_package_has_no_import_cycle():
    graph, state, cycles = _graph(), {}, []

    def visit(m, path):
        state[m] = "open"
        for n in sorted(graph.get(m, ())):
            if state.get(n) == "open":
                cycles.append(path[path.index(n) :] + [n])
            elif n not in state:
                visit(n, path + [n])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert cycles == []


def test_the_graph_sees_imports():
    g = _graph()
    assert "provenance" in g["runner"] and "experiment" in g["registry"]
    assert "cli" not in g["experiment"]
