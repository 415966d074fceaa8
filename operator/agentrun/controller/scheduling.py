"""When to reconcile what: coalesced work per object, and the one timer loop.

*Coalescing*: at most one reconciliation of an object runs at a time; triggers that
arrive meanwhile mark it dirty and it runs once more afterwards, so a burst of events
costs one extra pass, not one per event. *The timer loop*: one task for the whole
operator (not a timer per object) wakes every ``tick`` seconds and reconciles the
objects whose ``Wait`` has come due, plus every Active slot, because a lease renewal
is only seen by looking (leases are read for Active slots only, never watched).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from agentrun.api.slots import SlotState
from agentrun.core import clocks

Key = tuple[str, str, str]  # kind, namespace, name


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

    def __init__(self) -> None:
        self.due: dict[Key, datetime] = {}
        self.active: set[Key] = set()

    def note(self, key: Key, *, state: SlotState | None, until: datetime | None) -> None:
        if state in (SlotState.ACTIVE, SlotState.CLAIMING):
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

    def take_due(self, now: datetime) -> set[Key]:
        ready = {key for key, at in self.due.items() if at <= now}
        for key in ready:
            del self.due[key]
        return ready | set(self.active)


async def timer_loop(*, schedule: Schedule, coalescer: Coalescer, tick: float,
                     clock: clocks.Clock = clocks.system) -> None:
    while True:
        await asyncio.sleep(tick)
        keys = schedule.take_due(clock())
        if keys:
            await asyncio.gather(*(coalescer.trigger(key) for key in keys))
