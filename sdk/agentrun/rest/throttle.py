"""The client-side rate limit: one token bucket for every request the process makes.

*Token bucket* (client-go's ``flowcontrol`` limiter): ``burst`` tokens at most, refilled at
``qps`` per second; each request takes one, waiting when none is left. One bucket is shared
by our synchronous REST client (called from worker threads) and the operator's Kopf
session (its lists and watches, on the event loop: ``agentrun.controller.sessions`` hooks
it in), so the whole process stays under ``--qps`` whoever asks. A waiter *reserves* its
token under a lock and then sleeps outside it (the bucket may go below zero: the deficit is
the queue), so threads and coroutines wait in arrival order and neither blocks the other
while waiting.

A watch takes one token when it starts (as in client-go): its stream is one request.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

Clock = Callable[[], float]


class Bucket:
    def __init__(self, *, qps: float, burst: int, clock: Clock = time.monotonic) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"a bucket needs qps > 0 and burst >= 1, not {qps}/{burst}")
        self.qps = qps
        self.burst = burst
        self.clock = clock
        self._tokens = float(burst)
        self._at = clock()
        self._lock = threading.Lock()
        self.taken = 0  # tokens handed out, for tests and logs

    def reserve(self) -> float:
        """Take a token; the seconds to wait before using it (0 when one was there)."""
        with self._lock:
            now = self.clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.qps)
            self._at = now
            self._tokens -= 1
            self.taken += 1
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def acquire(self) -> None:
        """Blocking: for the synchronous client, in a worker thread."""
        delay = self.reserve()
        if delay > 0:
            time.sleep(delay)

    async def wait(self) -> None:
        """For the event loop: waits without blocking the other coroutines."""
        delay = self.reserve()
        if delay > 0:
            import asyncio  # here: a worker's threads never wait on the event loop's side

            await asyncio.sleep(delay)


def take(bucket: Bucket | None) -> None:
    """Take a token from ``bucket``, blocking; nothing when there is no limit (None)."""
    if bucket is not None:
        bucket.acquire()
