"""``rest.Health``: the operator's blind time, on a fake monotonic clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agentrun.kube import rest


class FakeTicks:
    def __init__(self) -> None:
        self.now = datetime(2030, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


def test_blind_time_counts_from_a_failed_request_to_the_next_answered_one() -> None:
    ticks = FakeTicks()
    health = rest.Health(clock=ticks)
    start = ticks.now
    health.answered(started=ticks.advance(1))
    assert health.blind_time(since=start) == timedelta(0)
    health.failed(started=ticks.advance(1))  # t=2
    ticks.advance(20)  # t=22: it timed out; still blind, and counting
    assert health.blind() and health.blind_time(since=start) == timedelta(seconds=20)
    health.answered(started=start + timedelta(seconds=1.5))  # sent before: proves nothing
    assert health.blind()
    health.answered(started=ticks.advance(3))  # t=25
    ticks.advance(100)
    assert not health.blind() and health.blind_time(since=start) == timedelta(seconds=23)
    assert health.blind_time(since=start + timedelta(seconds=12)) == timedelta(seconds=13)
    assert health.blind_time(since=ticks.now) == timedelta(0)


def test_blind_time_memory_is_bounded_and_only_overcounts() -> None:
    ticks = FakeTicks()
    health = rest.Health(clock=ticks, limit=4)
    start = ticks.now
    for _ in range(10):
        health.failed(started=ticks.advance(1))
        health.answered(started=ticks.advance(1))
    assert len(health._closed) <= 4
    assert health.blind_time(since=start) >= timedelta(seconds=10)


def test_unhealthy_answers_are_the_servers_not_the_requests() -> None:
    assert rest.unhealthy(503) and rest.unhealthy(429) and rest.unhealthy(500)
    assert not any(rest.unhealthy(s) for s in (200, 404, 409, 422))
