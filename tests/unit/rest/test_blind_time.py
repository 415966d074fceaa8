"""``rest.Health``: the operator's blind time, on a fake monotonic clock.

Covers: a failure opens a stretch back to the last prompt answer and the next prompt one
closes it; a request hung longer than ``slow`` counts while it waits and, answered late
(a paused API server resumed), counts from its onset to its answer; overlapping stretches
count once; memory stays bounded and only overcounts; which answers are the server's.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agentrun import rest


class FakeTicks:
    def __init__(self) -> None:
        self.now = datetime(2030, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


def seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


def test_blind_time_counts_from_the_last_prompt_answer_to_the_next_one() -> None:
    ticks = FakeTicks()
    health = rest.Health(clock=ticks)
    start = ticks.now
    health.answered(started=ticks.advance(1))  # t=1: prompt
    assert health.blind_time(since=start) == timedelta(0)
    health.failed(started=ticks.advance(1))  # sent at t=2; nothing seen since t=1
    ticks.advance(20)  # t=22: still blind, and counting
    assert health.blind() and health.blind_time(since=start) == seconds(21)
    health.answered(started=start + seconds(1.5))  # answered 20.5 s late: proves nothing
    assert health.blind()
    health.answered(started=ticks.advance(3))  # t=25: prompt, the stretch closes
    ticks.advance(100)
    assert not health.blind() and health.blind_time(since=start) == seconds(24)
    assert health.blind_time(since=start + seconds(12)) == seconds(13)
    assert health.blind_time(since=ticks.now) == timedelta(0)


def test_a_paused_server_is_blind_time_though_no_request_failed() -> None:
    """SIGSTOP at t=10 to SIGCONT at t=35: the requests in flight neither fail nor time
    out (a 40 s timeout here); they are all answered at t=35. Blind: t=10 (the last
    prompt answer's send time) to t=36 (the first prompt one after)."""
    ticks = FakeTicks()
    health = rest.Health(clock=ticks, slow=seconds(2))
    start = ticks.now
    ticks.advance(10)
    health.answered(started=health.sending())  # t=10, prompt; the server stops now
    ticks.advance(1)
    hung = [health.sending(), health.sending()]  # t=11, twice
    ticks.advance(1.5)  # t=12.5: waiting 1.5 s is not blind yet
    assert not health.blind() and health.blind_time(since=start) == timedelta(0)
    ticks.advance(7.5)  # t=20: waiting 9 s is, from the onset (t=10), counted once
    assert health.blind() and health.blind_time(since=start) == seconds(10)
    later = ticks.advance(5)
    health.sending()  # t=25, will fail
    ticks.advance(10)  # t=35: SIGCONT; every waiting request is answered at once
    for started in hung:
        health.answered(started=started)
    health.failed(started=later)  # (its answer a 5xx, say)
    assert health.blind_time(since=start) == seconds(25)
    ticks.advance(1)
    health.answered(started=health.sending())  # t=36: prompt, it closes
    ticks.advance(60)
    assert not health.blind() and health.blind_time(since=start) == seconds(26)
    assert health.blind_time(since=start + seconds(30)) == seconds(6)


def test_an_answer_within_slow_of_its_request_is_prompt() -> None:
    ticks = FakeTicks()
    health = rest.Health(clock=ticks, slow=seconds(2))
    start = ticks.now
    sent = health.sending()
    ticks.advance(2)
    health.answered(started=sent)  # exactly slow: prompt
    sent = health.sending()
    ticks.advance(2.5)
    health.answered(started=sent)  # late: blind from the onset (the prompt one's send)
    assert health.blind_time(since=start) == seconds(4.5)
    assert not health.blind()  # a late answer opens nothing: the stretch is closed


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
