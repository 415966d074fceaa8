"""The parts ``make test`` runs the suite in, and which part a test belongs to.

Why: the driver (:mod:`tests.support.cluster.session`) runs the parts in turn or side by
side, and ``tests/conftest.py`` (``--part``) selects one; a ``last`` test asks whether
the whole suite ran before it. One module says it for all of them.
"""

from __future__ import annotations

import os

import pytest

PARTS = ("unit", "parallel", "serial", "alone")
# The paths of the tests ``--part`` deselected (they run in another part): with the
# session's items, what a ``last`` test asks to know whether the whole suite runs
# (tests/integration/test_operator_role_used.py).
PART_DESELECTED = pytest.StashKey[frozenset[str]]()
# Set by the driver for the serial part: the parallel part ran before it on this cluster.
AFTER_PARALLEL = "AGENTRUN_TEST_AFTER_PARALLEL"


def part_of(item: pytest.Item) -> str:
    """Which part of the suite a test belongs to.

    *unit*: under ``tests/unit``, it needs no cluster; *alone*: its module stops the
    session's cluster, so it needs a session of its own; *serial*: it changes cluster-wide
    objects or reads what the whole session did, so no other test on the cluster may run
    beside it; *parallel*: every other integration test, run concurrently.
    """
    if "tests/unit/" in str(item.path).replace(os.sep, "/"):
        return "unit"
    if getattr(getattr(item, "module", None), "STOPS_THE_SESSION_CLUSTER", False):
        return "alone"
    if item.get_closest_marker("serial") or item.get_closest_marker("last"):
        return "serial"
    return "parallel"
