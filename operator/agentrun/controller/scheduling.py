"""When to reconcile what: coalesced work per object, and the one timer loop.

*Coalescing*: at most one reconciliation of an object runs at a time; triggers that
arrive meanwhile mark it dirty and it runs once more afterwards, so a burst of events
costs one extra pass, not one per event. *The timer loop*: one task for the whole
operator (not a timer per object) wakes every ``tick`` seconds and reconciles the
objects whose ``Wait`` has come due, plus every Active slot, because a lease renewal
is only seen by looking (leases are read for Active slots only, never watched).
*Resync*: every :data:`RESYNC` (on the monotonic clock) it also reconciles every object it
knows, so a missed wake-up (a dropped watch event, a dependency that finished while no
one was told) can delay an object by at most that long, never leave it waiting forever.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from agentrun.api.slots import SlotState
from agentrun.core import clocks

Key = tuple[str, str, str]  # kind, namespace, name
RESYNC = timedelta(seconds=60)


class Coalescer:
    def __init__(self, work: Callable[[Key], Awaitable[None]],
                 logger: logging.Logger) -> None:
        self.work = work
        self.logger = logger
        self.running: set[Key] = set()
        self.dirty: set[Key] = set()

    async def trigger(self, key: Key) -> None:
        if key in self.running:
            self.dirty.add(key)
            return
        self.running.add(key)
        try:
            while True:
                self.dirty.discard(key)
                try:
                    await self.work(key)
                except Exception:
                    self.logger.exception("reconciling %s %s/%s failed", *key)
                if key not in self.dirty:
                    break
        finally:
            self.running.discard(key)


class Schedule:
    """What the timer loop must look at: due times and the slots that are Active."""

    def __init__(self, *, resync: timedelta = RESYNC, ticks: clocks.Clock = clocks.ticks) -> None:
        self.due: dict[Key, datetime] = {}
        self.active: set[Key] = set()
        self.known: set[Key] = set()
        self.resync = resync
        self.ticks = ticks
        self.resynced_at = ticks()

    def note(self, key: Key, *, state: SlotState | None, until: datetime | None) -> None:
        self.known.add(key)
        # A Claiming slot that waits (a quota, a leftover being collected) waits its time.
        if state is SlotState.ACTIVE or (state is SlotState.CLAIMING and until is None):
            self.active.add(key)
        else:
            self.active.discard(key)
        if until is None:
            self.due.pop(key, None)
        else:
            self.due[key] = until

    def forget(self, key: Key) -> None:
        self.due.pop(key, None)
        self.active.discard(key)
        self.known.discard(key)

    def take_due(self, now: datetime) -> set[Key]:
        ready = {key for key, at in self.due.items() if at <= now}
        for key in ready:
            del self.due[key]
        ticks = self.ticks()
        if ticks - self.resynced_at >= self.resync:
            self.resynced_at = ticks
            ready |= self.known
        return ready | set(self.active)


async def timer_loop(*, schedule: Schedule, coalescer: Coalescer, tick: float,
                     clock: clocks.Clock = clocks.system) -> None:
    while True:
        await asyncio.sleep(tick)
        keys = schedule.take_due(clock())
        if keys:
            await asyncio.gather(*(coalescer.trigger(key) for key in keys))
