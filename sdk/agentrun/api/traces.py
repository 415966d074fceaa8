"""Trace and span ids derived from what they describe, and the span a writer reports.

Why derived: a run lasts hours or days and outlives operator restarts and worker pods, so
no process can hold its span open or remember the ids it handed out. Each id is instead
a digest of the object it names (*derived*): the run's trace id of its uid, the run's,
a slot's and an attempt's span ids of their uids (and the attempt's number), a step's
of its attempt's span and its key. Whoever reports a span (the operator when an attempt
ends, a worker for its step, a restarted operator for the next attempt) names the same
parent as every other reporter, with no state shared but the objects themselves.

- *traceparent*: the W3C Trace Context header (``00-<trace>-<span>-<flags>``), passed to a
  worker pod as the ``TRACEPARENT`` environment variable (its attempt's span as parent);
- *span record*: a span already finished, as plain data (:class:`SpanRecord`): the
  operator's pure core says which spans a write completed, and an exporter sends them.

The digests are SHA-256, cut to the W3C widths (16 bytes for a trace, 8 for a span); an
all-zero id, invalid in W3C, is never produced (a zero cut is replaced by 1).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

TRACEPARENT_ENV = "TRACEPARENT"
TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
SAMPLED = 0x01
Attribute = str | int | bool | float


def _digest(*parts: str, size: int) -> int:
    value = int.from_bytes(hashlib.sha256("\x00".join(parts).encode()).digest()[:size], "big")
    return value or 1


def trace_id(run_uid: str) -> int:
    """The run's trace: every span of the run, its slots and their attempts is in it."""
    return _digest("agentrun.dev/trace", run_uid, size=16)


def run_span(run_uid: str) -> int:
    return _digest("agentrun.dev/run", run_uid, size=8)


def slot_span(slot_uid: str) -> int:
    return _digest("agentrun.dev/slot", slot_uid, size=8)


def attempt_span(slot_uid: str, attempt: int) -> int:
    return _digest("agentrun.dev/attempt", slot_uid, str(attempt), size=8)


def child_span(parent: int, *names: str) -> int:
    """A span under ``parent`` named by ``names`` (a step's key, a claim, a command's
    request id): the same names under the same parent are the same span."""
    return _digest("agentrun.dev/child", f"{parent:016x}", *names, size=8)


def traceparent(*, trace: int, span: int) -> str:
    """The W3C ``traceparent`` of ``span`` in ``trace``, sampled."""
    return f"00-{trace:032x}-{span:016x}-{SAMPLED:02x}"


@dataclass(frozen=True)
class Parent:
    """A parsed ``traceparent``: the trace and the span to report children under."""

    trace: int
    span: int


def parse_traceparent(value: str) -> Parent | None:
    """``value`` as a W3C traceparent of version 00; None when it is not one (too long,
    malformed, or an all-zero id, which W3C says to ignore)."""
    found = TRACEPARENT.match(value.strip()) if len(value) <= 64 else None
    if found is None:
        return None
    trace, span = int(found[1], 16), int(found[2], 16)
    return Parent(trace=trace, span=span) if trace and span else None


@dataclass(frozen=True, kw_only=True)
class SpanEvent:
    """Something that happened at one moment of a span (a lease's expiry)."""

    name: str
    time: datetime
    attributes: Mapping[str, Attribute] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class SpanRecord:
    """A finished span, ids derived (module docstring); ``parent`` None for the run's.
    ``error``: the span's status is ERROR with this description."""

    trace: int
    span: int
    parent: int | None
    name: str
    start: datetime
    end: datetime
    attributes: Mapping[str, Attribute] = field(default_factory=dict)
    events: tuple[SpanEvent, ...] = ()
    error: str | None = None
