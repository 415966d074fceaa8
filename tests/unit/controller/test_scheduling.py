"""When to look next, from a reconcile's end: an error backs off, a Wait's time is
scheduled (never in the past), and a Wait without a time schedules nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agentrun.controller import queues, scheduling

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def test_an_error_backs_off_whatever_the_wait_said() -> None:
    assert scheduling.next_look(retry=True, until=T0, now=T0) == queues.Next(retry=True)


def test_a_wait_until_is_scheduled_from_now() -> None:
    found = scheduling.next_look(retry=False, until=T0 + timedelta(seconds=12.5), now=T0)
    assert found == queues.Next(after=12.5)


def test_a_time_already_past_is_due_at_once() -> None:
    found = scheduling.next_look(retry=False, until=T0 - timedelta(seconds=3), now=T0)
    assert found == queues.Next(after=0.0)


def test_a_wait_without_a_time_schedules_nothing() -> None:
    assert scheduling.next_look(retry=False, until=None, now=T0) == queues.Next()
