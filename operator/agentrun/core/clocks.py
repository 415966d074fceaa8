"""Clocks: the one place the operator reads the time; the core only receives it.

The core takes ``now`` as an argument; the operator passes ``clock()`` from a
:class:`Clock`. Tests inject a fake clock to move time (for example, to judge leases of a
worker whose own clock is ten minutes off).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """Anything callable that returns an aware ``datetime`` in UTC."""

    def __call__(self) -> datetime: ...


def system() -> datetime:
    """The default clock: the operator's wall clock, in UTC."""
    return datetime.now(UTC)
