"""The work queue on fake time (looptime): what each of its promises means in practice.

Covers: de-duplication (queued twice runs once; re-added while running runs once more
after), several workers, exponential backoff per key (capped, reset on success),
``add_after`` keeping the earliest time, a Wait's time and "no timer", the resync (each
known key once per period, spread), and a hung reconcile that stops no other key and is
requeued with backoff after its timeout without ever running twice at once; and a stop
that ends every reconcile still running, an abandoned one too.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable

import pytest

from agentrun.controller import queues

LOGGER = logging.getLogger("test.queues")
Key = str


class Recorder:
    """A reconcile that records (key, loop time) and answers what ``plan`` says."""

    def __init__(self, plan: Callable[[Key, int], Awaitable[queues.Next]] | None = None) -> None:
        self.calls: list[tuple[Key, float]] = []
        self.running: set[Key] = set()
        self.overlaps = 0
        self.plan = plan

    async def __call__(self, key: Key) -> queues.Next:
        if key in self.running:
            self.overlaps += 1
        self.running.add(key)
        try:
            self.calls.append((key, asyncio.get_running_loop().time()))
            if self.plan is None:
                return queues.Next()
            return await self.plan(key, self.count(key))
        finally:
            self.running.discard(key)

    def count(self, key: Key) -> int:
        return sum(1 for k, _ in self.calls if k == key)

    def times(self, key: Key) -> list[float]:
        return [round(t, 3) for k, t in self.calls if k == key]


BACKOFF = queues.Backoff(base=1, cap=8)


def queue_of(work: Recorder, *, workers: int = 2, timeout: float = 60.0,
             resync: float = 0.0, backoff: queues.Backoff = BACKOFF) -> queues.Queue[Key]:
    return queues.Queue(work=work, workers=workers, timeout=timeout, resync=resync,
                        logger=LOGGER, backoff=backoff)


@pytest.mark.looptime
async def test_a_key_queued_twice_runs_once() -> None:
    work = Recorder()
    queue = queue_of(work)
    queue.add("a")
    queue.add("a")
    queue.add("b")
    queue.start()
    # Fake time (looptime): every ready callback runs before the clock moves, so a second
    # of it is the queue drained, deterministically; what a real second would be is moot.
    await asyncio.sleep(1)
    await queue.stop()
    assert work.count("a") == 1
    assert work.count("b") == 1


@pytest.mark.looptime
async def test_the_depth_is_what_waits_for_a_worker_not_for_a_timer() -> None:
    queue = queue_of(Recorder())
    queue.add("a")
    queue.add("a")
    queue.add("b")
    queue.add_after("c", 30)
    assert queue.depth == 2  # a once, b; c waits on its timer


@pytest.mark.looptime
async def test_a_key_added_while_running_runs_once_more_after() -> None:
    gate = asyncio.Event()

    async def plan(key: Key, n: int) -> queues.Next:
        if n == 1:
            await gate.wait()
        return queues.Next()

    work = Recorder(plan)
    queue = queue_of(work, workers=3)
    queue.add("a")
    queue.start()
    await asyncio.sleep(1)
    for _ in range(5):
        queue.add("a")  # while it runs: marked dirty, not run alongside
    await asyncio.sleep(1)
    assert work.count("a") == 1
    gate.set()
    await asyncio.sleep(1)
    await queue.stop()
    assert work.count("a") == 2
    assert work.overlaps == 0


@pytest.mark.looptime
async def test_errors_back_off_exponentially_capped_and_reset_on_success() -> None:
    async def plan(key: Key, n: int) -> queues.Next:
        if n <= 5:
            raise RuntimeError("500")
        return queues.Next(retry=n == 7)

    work = Recorder(plan)
    queue = queue_of(work, backoff=queues.Backoff(base=1, cap=4))
    queue.add("a")
    queue.start()
    await asyncio.sleep(100)
    # 5 failures: 1, 2, 4, 4 (capped), 4; then a success; a later retry starts at 1 again.
    first = work.times("a")[:6]
    assert [b - a for a, b in itertools.pairwise(first)] == [1, 2, 4, 4, 4]
    queue.add("a")
    await asyncio.sleep(10)
    await queue.stop()
    later = work.times("a")[6:]
    assert later[1] - later[0] == 1  # the 7th said retry: backoff from scratch
    assert queue.failures == {}


@pytest.mark.looptime
async def test_a_wait_schedules_the_key_and_nothing_schedules_nothing() -> None:
    async def plan(key: Key, n: int) -> queues.Next:
        return queues.Next(after=30.0) if key == "waits" and n == 1 else queues.Next()

    work = Recorder(plan)
    queue = queue_of(work)
    queue.add("waits")
    queue.add("idle")
    queue.start()
    await asyncio.sleep(100)
    await queue.stop()
    assert work.times("waits") == [0.0, 30.0]
    assert work.times("idle") == [0.0]


@pytest.mark.looptime
async def test_add_after_keeps_the_earliest_time() -> None:
    work = Recorder()
    queue = queue_of(work)
    queue.start()
    queue.add_after("a", 10)
    queue.add_after("a", 50)  # later: ignored
    queue.add_after("a", 5)  # earlier: wins
    await asyncio.sleep(100)
    await queue.stop()
    assert work.times("a") == [5.0]


@pytest.mark.looptime
async def test_a_forgotten_key_is_not_due_and_not_resynced() -> None:
    work = Recorder()
    queue = queue_of(work, resync=10)
    queue.add_after("a", 5)
    queue.forget("a")
    queue.start()
    await asyncio.sleep(35)
    await queue.stop()
    assert work.calls == []


@pytest.mark.looptime
async def test_resync_adds_every_known_key_once_a_period_spread_over_it() -> None:
    work = Recorder()
    queue = queue_of(work, workers=4, resync=40)
    for key in "abcd":
        queue.add(key)
    queue.start()
    await asyncio.sleep(79.5)  # one full resync pass (starting at 40, spread to 70)
    await queue.stop()
    assert {key: work.count(key) for key in "abcd"} == {key: 2 for key in "abcd"}
    resynced = sorted(t for _, t in work.calls if t > 0)
    assert resynced == [40.0, 50.0, 60.0, 70.0]  # spread, not all at once


@pytest.mark.looptime
async def test_a_hung_reconcile_stops_no_other_key_and_is_requeued_after_it_ends() -> None:
    hang = asyncio.Event()

    async def plan(key: Key, n: int) -> queues.Next:
        if key == "stuck" and n == 1:
            await hang.wait()
        return queues.Next(after=1.0) if key != "stuck" else queues.Next()

    work = Recorder(plan)
    queue = queue_of(work, workers=1, timeout=5, backoff=queues.Backoff(base=2, cap=2))
    queue.add("stuck")
    queue.add("other")
    queue.start()
    await asyncio.sleep(20)
    # The one worker was freed at 5 s: "other" runs every second from then on.
    assert work.times("other")[:3] == [5.0, 6.0, 7.0]
    assert work.count("stuck") == 1  # its requeue (at 7 s) waits for the hung pass
    assert queue.failures == {"stuck": 1}
    hang.set()
    await asyncio.sleep(1)
    await queue.stop()
    assert work.count("stuck") == 2
    assert work.times("stuck")[1] == 20.0
    assert work.overlaps == 0


@pytest.mark.looptime
async def test_several_workers_run_different_keys_at_once() -> None:
    async def plan(key: Key, n: int) -> queues.Next:
        await asyncio.sleep(10)
        return queues.Next()

    work = Recorder(plan)
    queue = queue_of(work, workers=3)
    for key in "abcdef":
        queue.add(key)
    queue.start()
    await asyncio.sleep(25)
    await queue.stop()
    starts = sorted(t for _, t in work.calls)
    assert starts == [0.0, 0.0, 0.0, 10.0, 10.0, 10.0]


@pytest.mark.looptime
async def test_stop_ends_every_running_reconcile_the_abandoned_one_too() -> None:
    # The operator shuts its thread pool down right after the stop: a reconcile that
    # went on would then fail ("cannot schedule new futures after shutdown").
    ended: dict[Key, str] = {}

    async def plan(key: Key, n: int) -> queues.Next:
        try:
            await asyncio.sleep(1000)
        except asyncio.CancelledError:
            ended[key] = "cancelled"
            raise
        ended[key] = "went on"
        return queues.Next()

    queue = queue_of(Recorder(plan), workers=2, timeout=5)
    queue.add("abandoned")
    queue.start()
    await asyncio.sleep(6)  # past the timeout: its worker freed, the reconcile running
    queue.add("running")
    await asyncio.sleep(1)
    await queue.stop()
    assert ended == {"abandoned": "cancelled", "running": "cancelled"}


def test_a_queue_needs_a_worker() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        queue_of(Recorder(), workers=0)


@pytest.mark.looptime
async def test_the_queue_tells_how_long_each_key_waited_and_each_retry() -> None:
    """What the metrics are told: a key's wait for a worker (here one worker, busy for 3
    s with another key) and every backoff."""
    waited: list[tuple[Key, float]] = []
    retried: list[Key] = []

    async def plan(key: Key, n: int) -> queues.Next:
        if key == "slow":
            await asyncio.sleep(3)
            return queues.Next()
        if n == 1:
            raise RuntimeError("500")
        return queues.Next()

    queue = queues.Queue(work=Recorder(plan), workers=1, timeout=60.0, resync=0.0,
                         logger=LOGGER, backoff=BACKOFF,
                         waited=lambda key, seconds: waited.append((key, round(seconds, 3))),
                         retried=retried.append)
    queue.add("slow")
    queue.add("fails")
    queue.start()
    await asyncio.sleep(10)
    await queue.stop()
    assert waited[:2] == [("slow", 0.0), ("fails", 3.0)]  # queued behind the slow one
    assert retried == ["fails"]
    assert [k for k, _ in waited] == ["slow", "fails", "fails"]  # its retry waited too


@pytest.mark.looptime
async def test_a_key_queued_before_the_start_waited_from_the_start_and_a_failing_hook_stops_nothing(
        ) -> None:
    """A standby queues keys it does not work on: their wait counts from when it starts
    (takes the lead), not from when they came. A hook that raises is logged; the queue goes
    on, and the key backs off as ever."""
    waited: list[float] = []

    def broken(key: Key) -> None:
        raise RuntimeError("a metrics hook's bug")

    async def plan(key: Key, n: int) -> queues.Next:
        if n == 1:
            raise RuntimeError("500")
        return queues.Next()

    work = Recorder(plan)
    queue = queues.Queue(work=work, workers=1, timeout=60.0, resync=0.0, logger=LOGGER,
                         backoff=BACKOFF, waited=lambda key, seconds: waited.append(seconds),
                         retried=broken)
    queue.add("a")
    await asyncio.sleep(100)  # standing by
    queue.start()
    await asyncio.sleep(5)
    await queue.stop()
    assert waited[0] == 0.0
    assert work.count("a") == 2  # its retry came, though the retry hook raised
