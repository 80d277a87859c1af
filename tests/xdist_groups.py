"""`--dist loadgroup` under pytest 9.2: the hook tests/conftest.py installs (checked by test_xdist_groups.py).

pytest-xdist sends the tests of one `xdist_group` to one worker by the `@group` its workers append to each
grouped test's id; pytest-xdist 3.8 writes it where pytest 9.2 no longer reads an id (`_nodeid`), so the
SLURM tests would spread over every worker, each bringing up a cluster of its own on the same ports.
"""

import pytest
from _pytest.nodeid import NodeId


def xdist_groups(item) -> list[str]:
    """The `xdist_group` names a test carries (its module's pytestmark included)."""
    marks = item.iter_markers("xdist_group")
    return sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in marks})


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Append `@group` to each grouped test's id, where pytest 9.2 keeps it, unless xdist already did."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        if (groups := xdist_groups(item)) and "@" not in item.nodeid:
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(groups)}")
