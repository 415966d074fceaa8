"""The timer loop's schedule: due objects, Active slots, and the bounded resync.

A missed wake-up delays an object by at most ``RESYNC``: every known object comes due
again once per period of the (injected) monotonic clock, whatever its ``Wait`` said.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agentrun.api.slots import SlotState
from agentrun.controller import scheduling

T0 = datetime(2030, 1, 1, tzinfo=UTC)
PENDING = ("Slot", "ns", "waiting-forever")
ACTIVE = ("Slot", "ns", "running")


class Ticks:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def test_a_slot_waiting_on_nothing_is_resynced_once_per_period() -> None:
    ticks = Ticks()
    schedule = scheduling.Schedule(resync=timedelta(seconds=60), ticks=ticks)
    schedule.note(PENDING, state=SlotState.PENDING, until=None)
    schedule.note(ACTIVE, state=SlotState.ACTIVE, until=None)
    assert schedule.take_due(T0) == {ACTIVE}
    ticks.now = T0 + timedelta(seconds=59)
    assert schedule.take_due(T0) == {ACTIVE}
    ticks.now = T0 + timedelta(seconds=60)
    assert schedule.take_due(T0) == {ACTIVE, PENDING}
    assert schedule.take_due(T0) == {ACTIVE}  # once per period, not on every tick


def test_a_forgotten_object_is_not_resynced() -> None:
    ticks = Ticks()
    schedule = scheduling.Schedule(resync=timedelta(seconds=1), ticks=ticks)
    schedule.note(PENDING, state=SlotState.PENDING, until=None)
    schedule.forget(PENDING)
    ticks.now = T0 + timedelta(seconds=5)
    assert schedule.take_due(T0) == set()


def test_a_due_wait_comes_due_by_the_wall_clock() -> None:
    schedule = scheduling.Schedule(ticks=Ticks())
    schedule.note(PENDING, state=SlotState.RETRY_WAIT, until=T0 + timedelta(seconds=10))
    assert schedule.take_due(T0) == set()
    assert schedule.take_due(T0 + timedelta(seconds=10)) == {PENDING}


def test_a_claiming_slot_that_waits_is_not_ticked() -> None:
    """A claim refused by a quota is tried again at its own pace, not on every tick."""
    schedule = scheduling.Schedule(ticks=Ticks())
    schedule.note(ACTIVE, state=SlotState.CLAIMING, until=T0 + timedelta(seconds=10))
    assert schedule.take_due(T0) == set()
    schedule.note(ACTIVE, state=SlotState.CLAIMING, until=None)
    assert schedule.take_due(T0) == {ACTIVE}
