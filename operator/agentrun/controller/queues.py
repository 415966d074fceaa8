"""The work queue: handlers add keys and return; a fixed set of workers reconciles them.

Terms (client-go's workqueue, which this follows):

- *key*: what is reconciled, ``(kind, namespace, name)``; never the object itself, so a
  worker always decides from what it reads then, not from what an event once said.
- *queued*: waiting for a worker. A key queued twice is taken once (de-duplication).
- *processing*: a worker (or a reconcile abandoned at its timeout, see below) has it. A
  key added while processing is marked *dirty* and queued once more when it ends, so no
  change seen meanwhile is lost and no key is ever reconciled twice at once.
- *due*: a key scheduled by :meth:`Queue.add_after` (the earliest pending time is kept);
  one timer task queues each when its time comes, however many keys wait.
- *backoff*: after an error or a timeout a key is queued again after
  ``base * 2**(failures-1)``, capped at ``cap``; a success resets it.
- *resync*: once per period every known key is queued again, spread evenly over the
  period (never all at once), so a missed wake-up delays a key by at most one period.
- *timeout*: a reconcile that takes longer than ``timeout`` frees its worker (which takes
  the next key) and is requeued with backoff; the key stays *processing* until the
  abandoned reconcile really ends, so it never runs twice at once. A hung key therefore
  stops nobody but itself.
- *waited*, *retried*: what metrics are told (a key's time queued before a worker took
  it; each backoff), when given.
- *stop*: the workers, the timer and every reconcile still running (an abandoned one
  too) are cancelled and awaited, so none goes on using what its owner shuts down next
  (the operator's thread pool) after :meth:`Queue.stop` returns.

Time is the event loop's clock (``loop.time()``), so tests drive it with looptime.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import heapq
import logging
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, kw_only=True)
class Next:
    """When to look at a key again, as a reconcile decided it.

    ``retry``: it stopped on an error, back off; ``after``: seconds from now (a Wait's
    time); neither: not until something changes (an event) or the resync.
    """

    retry: bool = False
    after: float | None = None


@dataclass(frozen=True, kw_only=True)
class Backoff:
    base: float = 0.5
    cap: float = 30.0

    def delay(self, failures: int) -> float:
        return float(min(self.cap, self.base * 2 ** min(failures - 1, 32)))


class Queue(Generic[K]):
    def __init__(self, *, work: Callable[[K], Awaitable[Next]], workers: int,
                 timeout: float, resync: float, logger: logging.Logger,
                 backoff: Backoff = Backoff(),
                 waited: Callable[[K, float], None] | None = None,
                 retried: Callable[[K], None] | None = None) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        self.work = work
        self.workers = workers
        self.timeout = timeout
        self.resync = resync
        self.backoff = backoff
        self.logger = logger
        # Told, for metrics: how long a key waited queued before a worker took it, and each
        # retry (an error or a timeout backing a key off).
        self.waited = waited
        self.retried = retried
        self._since: dict[K, float] = {}  # when each queued key was queued
        self.known: set[K] = set()
        self.failures: dict[K, int] = {}
        self._order: collections.deque[K] = collections.deque()
        self._queued: set[K] = set()
        self._processing: set[K] = set()
        self._dirty: set[K] = set()
        self._due: dict[K, float] = {}
        self._heap: list[tuple[float, int, K]] = []
        self._count = 0  # heap tie-breaker: keys need not be orderable
        self._ready = asyncio.Event()
        self._timer_changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._reconciles: set[asyncio.Future[Next]] = set()  # running, abandoned ones too

    @property
    def depth(self) -> int:
        """Keys queued now and waiting for a worker (not those waiting on a timer)."""
        return len(self._order)

    # -- adding ---------------------------------------------------------------------

    def add(self, key: K) -> None:
        """Queue ``key`` now (once, however often it is added before a worker takes it)."""
        self.known.add(key)
        if key in self._processing:
            self._dirty.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._order.append(key)
            self._since[key] = self._now()
            self._ready.set()

    def add_after(self, key: K, delay: float) -> None:
        """Queue ``key`` in ``delay`` seconds, unless an earlier time is already pending."""
        if delay <= 0:
            self.add(key)
            return
        self.known.add(key)
        at = self._now() + delay
        if key in self._due and self._due[key] <= at:
            return
        self._due[key] = at
        self._count += 1
        heapq.heappush(self._heap, (at, self._count, key))
        self._timer_changed.set()

    def forget(self, key: K) -> None:
        """The object is gone: no backoff, no pending time, no resync (a queued or
        running pass still runs, and finds nothing)."""
        self.known.discard(key)
        self.failures.pop(key, None)
        self._due.pop(key, None)

    # -- running --------------------------------------------------------------------

    def start(self) -> None:
        if self._tasks:
            return
        now = self._now()  # keys queued before (a standby's) waited for no worker until now
        self._since = dict.fromkeys(self._since, now)
        self._tasks = [asyncio.create_task(self._worker(), name=f"worker-{i}")
                       for i in range(self.workers)]
        self._tasks.append(asyncio.create_task(self._timer(), name="queue-timer"))
        if self.resync > 0:
            self._tasks.append(asyncio.create_task(self._resyncer(), name="queue-resync"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        # asyncio.wait does not cancel what it waits on: a worker's reconcile outlives it
        running = list(self._reconciles)
        for reconcile in running:
            reconcile.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    async def _take(self) -> K:
        while not self._order:
            self._ready.clear()
            await self._ready.wait()
        key = self._order.popleft()
        self._queued.discard(key)
        self._processing.add(key)
        since = self._since.pop(key, None)
        if since is not None and self.waited is not None:
            self._told(self.waited, key, max(0.0, self._now() - since))
        return key

    def _told(self, hook: Callable[..., None], *args: object) -> None:
        """Tell a metrics hook; whatever it raises is logged, never the queue's."""
        try:
            hook(*args)
        except Exception:
            self.logger.exception("a work queue's metrics hook failed (the queue goes on)")

    async def _worker(self) -> None:
        while True:
            key = await self._take()
            task = asyncio.ensure_future(self.work(key))
            self._reconciles.add(task)
            task.add_done_callback(self._reconciles.discard)
            done, _ = await asyncio.wait({task}, timeout=self.timeout)
            if not done:
                self.logger.error("reconciling %s took over %.0f s; the others go on, and it "
                                  "is looked at again once it ends", key, self.timeout)
                self._failed(key)
                task.add_done_callback(functools.partial(self._ended, key, timed_out=True))
                continue
            self._ended(key, task, timed_out=False)

    def _ended(self, key: K, task: asyncio.Future[Next], *, timed_out: bool = False) -> None:
        self._processing.discard(key)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self.logger.error("reconciling %s failed; backing off", key, exc_info=error)
            if not timed_out:
                self._failed(key)
        elif not timed_out:
            self._settled(key, task.result())
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def _failed(self, key: K) -> None:
        if self.retried is not None:
            self._told(self.retried, key)
        failures = self.failures.get(key, 0) + 1
        self.failures[key] = failures
        self.add_after(key, self.backoff.delay(failures))

    def _settled(self, key: K, following: Next) -> None:
        if following.retry:
            self._failed(key)
            return
        self.failures.pop(key, None)
        if following.after is not None:
            self.add_after(key, following.after)

    async def _timer(self) -> None:
        """One task for every due key: sleep until the earliest, queue what came due."""
        while True:
            now = self._now()
            while self._heap and self._heap[0][0] <= now:
                at, _, key = heapq.heappop(self._heap)
                if self._due.get(key) == at:  # else superseded by an earlier time, or forgotten
                    del self._due[key]
                    self.add(key)
            self._timer_changed.clear()
            wait = self._heap[0][0] - now if self._heap else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._timer_changed.wait(), timeout=wait)

    async def _resyncer(self) -> None:
        while True:
            await asyncio.sleep(self.resync)
            keys = list(self.known)
            for index, key in enumerate(keys):
                self.add_after(key, self.resync * index / len(keys))
