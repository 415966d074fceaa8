"""Names derived from identity: they fit, are deterministic, and never collide across nodes."""

from __future__ import annotations

import pytest

from agentrun.api import names
from agentrun.core.base import naming


def test_names_fit_and_are_deterministic() -> None:
    run = "r" * names.MAX_RUN_NAME
    slot = naming.slot_name(run=run, node="n" * 63)
    assert len(slot) == 58 and slot == naming.slot_name(run=run, node="n" * 63)
    assert len(naming.attempt_name(slot=slot, number=9999)) == 63
    with pytest.raises(ValueError, match="longer than"):
        naming.slot_name(run=run + "x", node="n")
    with pytest.raises(ValueError, match="start at 1"):
        naming.attempt_name(slot=slot, number=0)
    assert naming.config_snapshot_name(run="r", kind="package", sha256="abcdef0123456789") == (
        "r-package-abcdef0123")


def test_no_collisions_for_distinct_nodes() -> None:
    nodes = [f"node-{i}" for i in range(5000)] + ["a", "a-", "a" * 63]
    assert len({naming.slot_name(run="r", node=n) for n in nodes}) == len(nodes)
