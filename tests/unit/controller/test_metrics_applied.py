"""The slot reconciler tallies a status write only once it was written (for the metrics).

The real ``SlotReconciler.apply`` (the applier under it) over a writer that refuses (409)
or accepts the write: a refused write counts nothing, so the retry that follows (reading
the slot again) is the only one that counts.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentrun.api.slots import Outcome, SlotState, SlotStatus
from agentrun.controller import metrics, slots
from agentrun.core.base import actions
from agentrun.core.slots import decisions
from agentrun.kube import writes
from tests.unit.core import corefakes as f


class Writer:
    """A writer whose status writes conflict while ``conflicts`` is above zero."""

    def __init__(self, *, conflicts: int) -> None:
        self.conflicts = conflicts
        self.written: list[SlotStatus] = []

    def slot_status(self, slot: Any, status: SlotStatus, *, point: str) -> None:
        if self.conflicts:
            self.conflicts -= 1
            raise writes.Conflict("409: the object has been modified")
        self.written.append(status)


def applier(writer: Writer) -> slots.SlotReconciler:
    return slots.SlotReconciler(reader=None, writer=writer)  # type: ignore[arg-type]


def test_a_refused_write_counts_nothing_and_its_retry_counts_once() -> None:
    writer = Writer(conflicts=1)
    reconciler = applier(writer)
    world = f.world(f.active())
    step = actions.WriteStatus(status=f.finished(SlotState.RETRY_WAIT).model_copy(
        update={"attempts": [f.attempt(1, outcome=Outcome.LOST)]}))
    refused = slots.Result()
    with pytest.raises(writes.Conflict):
        reconciler.apply(world, decisions.Decision(step=step, world=world), refused)
    assert refused.tallies == []
    applied = slots.Result()
    assert reconciler.apply(world, decisions.Decision(step=step, world=world), applied) is False
    assert len(writer.written) == 1
    meters = metrics.Metrics()
    for tally in [*refused.tallies, *applied.tallies]:
        meters.count(tally)
    get = meters.registry.get_sample_value
    assert get("agentrun_transitions_total", {"kind": "Slot", "outcome": "RetryWait"}) == 1
    assert get("agentrun_transitions_total", {"kind": "Attempt", "outcome": "Lost"}) == 1
    assert get("agentrun_lease_expiries_total") == 1
    assert get("agentrun_attempt_duration_seconds_sum", {"outcome": "Lost"}) == 60


def test_a_write_that_changes_nothing_counted_is_tallied_empty() -> None:
    reconciler = applier(Writer(conflicts=0))
    world = f.world(f.active())
    result = slots.Result()
    reconciler.apply(world, decisions.Decision(step=actions.WriteStatus(status=f.active()),
                                               world=world), result)
    assert [t.transitions for t in result.tallies] == [[]]
