"""How a stream's requests ride out a store that does not answer: :class:`Patience`.

Unlike the rest of the client, a stream's requests are retried here, a bounded number of
times with a doubling wait: the caller cannot retry them, since a stream's source is read
once. How long is the caller's to say (:func:`retries_within`: as long as its own commits
wait), and so is whom to tell of an outage while it lasts (``told``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from agentrun.objectstore._client import S3Unavailable

RETRIES = 3  # requests after the first: 4 in all, over 0.5 + 1 + 2 s of waiting
BACKOFF = 0.5  # seconds before the first retry, doubled before each next one
BACKOFF_CAP = 8.0
T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Patience:
    """How a stream's request rides out a store that does not answer: ``retries`` more
    tries, waiting ``backoff`` seconds, then twice as long each time (capped at 8 s), and,
    with ``within``, no try begun past that many seconds of an outage (failures in a row,
    from the first failed try's start, each try's own time counted: a store that
    black-holes costs a timeout a try; the last try may end up to its timeout later). ``told``, if
    given, is told each failure before its wait (a caller shows the outage while it lasts,
    as the journal does on the Lease). ``clock`` and ``sleep``: the monotonic clock's."""

    retries: int = RETRIES
    backoff: float = BACKOFF
    within: float | None = None
    told: Callable[[str], object] | None = None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    def pause(self, attempt: int) -> float:
        """The wait after failed try ``attempt`` (from 0)."""
        return min(self.backoff * 2.0 ** min(attempt, 32), BACKOFF_CAP)

    def gives_up(self, attempt: int, *, since: float) -> bool:
        """After failed try ``attempt`` (from 0) of an outage that began at ``since`` (on
        :attr:`clock`): no retry left, or the next would begin past :attr:`within`."""
        return attempt >= self.retries or (
            self.within is not None and self.clock() - since + self.pause(attempt) > self.within)

    def wait(self, attempt: int, failure: str) -> None:
        if self.told is not None:
            self.told(failure)
        self.sleep(self.pause(attempt))


def retrying(call: Callable[[], T], *, patience: Patience,
             unanswered: list[bool] | None = None) -> T:
    """``call()``, again after an :class:`S3Unavailable` as ``patience`` says.
    ``unanswered``: one ``True`` appended per attempt that got no answer at all (status
    0), after which the store may have done what was asked."""
    since: float | None = None
    for attempt in range(patience.retries + 1):
        tried = patience.clock()
        try:
            return call()
        except S3Unavailable as error:
            if unanswered is not None and error.status == 0:
                unanswered.append(True)
            since = tried if since is None else since  # from the first failed try's start
            if patience.gives_up(attempt, since=since):
                raise
            patience.wait(attempt, str(error))
    raise AssertionError("unreachable: the last attempt returns or raises")


def retries_within(seconds: float, *, backoff: float = BACKOFF) -> int:
    """The fewest retries whose waits (``backoff``, doubled each time, capped at 8 s) add
    up to ``seconds`` at least: a stream that rides out an outage as long as a caller's."""
    if not 0 <= seconds <= 86_400 or backoff <= 0:
        raise ValueError(f"retries_within: {seconds} s with a backoff of {backoff} s")
    patience, count, waited = Patience(backoff=backoff), 0, 0.0
    while waited < seconds:
        waited += patience.pause(count)
        count += 1
    return count


