"""Clocks: the one place the operator reads the time; the core only receives it.

The core takes ``now`` as an argument; the operator passes ``clock()`` from a
:class:`Clock`. *Ticks* are the operator's monotonic clock, as an aware ``datetime``
anchored at the wall time this process started: it never steps when the wall clock is
set, so durations measured on it (how long since a lease renewal was seen) are true.
Tests inject fake clocks to move time (for example, to judge leases of a worker whose
own clock is ten minutes off, or to step the wall clock alone).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Anything callable that returns an aware ``datetime`` in UTC."""

    def __call__(self) -> datetime: ...


def system() -> datetime:
    """The default clock: the operator's wall clock, in UTC."""
    return datetime.now(UTC)


_ANCHOR_WALL = datetime.now(UTC)
_ANCHOR_TICKS = time.monotonic()


def ticks() -> datetime:
    """The monotonic clock: the start's wall time plus the monotonic seconds since."""
    return _ANCHOR_WALL + timedelta(seconds=time.monotonic() - _ANCHOR_TICKS)
