"""The example's fault hook: block an attempt at a named point so a test can kill it there.

``AGENTRUN_EXAMPLE_PAUSE=<point>@<attempt>[,<point>@<attempt>...]`` makes that attempt
print a marker line (``{"event": "paused", "point": ..., "attempt": ...}``) when it
reaches the point and then block (its lease keeper goes on renewing), so the test can
SIGKILL the container exactly there. Points (a *key* is a step's key, e.g. ``source-2``):

- ``start``: the lease is renewed once (the operator sees the worker started), no step ran;
- ``before-commit:<key>``: the step's result (a tool's answer) is obtained, not committed;
- ``after-step:<key>``: the step is committed;
- ``after-intent:<effect>``: the effect's intent is committed, the owner not yet called;
- ``after-call:<effect>``: the owner answered, the outcome is not yet committed;
- ``after-ask:<question>``: the question is committed on the Lease, the attempt not yet ended;
- ``superstep:<n>``: the LangGraph example (:mod:`langgraph_agent`) starts a node in
  superstep ``n``: every earlier superstep's checkpoint is committed, this one's is not.

Other attempts pass every point. A pause that nobody ends lasts at most
:data:`PAUSE_SECONDS`, then the attempt exits non-zero (a test that forgot to kill it
must not leave it looking like it succeeded). A malformed value is refused before
anything runs, with what is wrong (:class:`FaultSpecError`).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from agentrun.api import bounds

ENV_PAUSE = "AGENTRUN_EXAMPLE_PAUSE"
MAX_SPEC_CHARS = 1024
PAUSE_SECONDS = 600.0
PLAIN_POINTS = ("start",)
KEYED_POINTS = ("before-commit", "after-step", "after-intent", "after-call", "after-ask",
                "superstep")
_KEY = re.compile(bounds.STEP_KEY_PATTERN)


class FaultSpecError(ValueError):
    """``AGENTRUN_EXAMPLE_PAUSE`` cannot be read; the message says what is wrong."""


class PausedTooLong(RuntimeError):
    """A pause outlasted :data:`PAUSE_SECONDS`: nobody killed the attempt."""


def environ_spec() -> str:
    """The fault hook's value in this process's environment ("" when unset)."""
    return os.environ.get(ENV_PAUSE, "")


def parse(spec: str) -> dict[str, set[int]]:
    """The points to pause at, each with the attempts that pause there."""
    if len(spec) > MAX_SPEC_CHARS:
        raise FaultSpecError(f"${ENV_PAUSE} is {len(spec)} characters; at most "
                             f"{MAX_SPEC_CHARS}")
    found: dict[str, set[int]] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        point, at, attempt = item.rpartition("@")
        if not at or not (attempt.isascii() and attempt.isdigit()) or not (
                1 <= int(attempt) <= bounds.MAX_ATTEMPT_NUMBER):
            raise FaultSpecError(f"${ENV_PAUSE}: {item[:80]!r} is not <point>@<attempt> "
                                 f"(attempt 1..{bounds.MAX_ATTEMPT_NUMBER}), e.g. start@1")
        kind, colon, key = point.partition(":")
        plain = kind in PLAIN_POINTS and not colon
        keyed = (kind in KEYED_POINTS and len(key) <= bounds.STEP_KEY_CHARS
                 and _KEY.fullmatch(key) is not None
                 and (kind != "superstep" or (key.isascii() and key.isdigit())))
        if not (plain or keyed):
            raise FaultSpecError(
                f"${ENV_PAUSE}: {point[:80]!r} is not a point; points are "
                f"{', '.join(PLAIN_POINTS)} or <kind>:<step key> with kind one of "
                f"{', '.join(KEYED_POINTS)} (a superstep's key is its number)")
        found.setdefault(point, set()).add(int(attempt))
    return found


@dataclass(kw_only=True)
class Pauses:
    """The pauses of attempt ``attempt``; :meth:`at` is called at every point."""

    attempt: int
    points: dict[str, set[int]] = field(default_factory=dict)
    announce: Callable[[str], None] = print
    seconds: float = PAUSE_SECONDS
    _never: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def from_spec(cls, spec: str, *, attempt: int,
                  announce: Callable[[str], None]) -> Pauses:
        return cls(attempt=attempt, points=parse(spec), announce=announce)

    def at(self, point: str) -> None:
        """Block here if this attempt pauses at ``point`` (after announcing it)."""
        if self.attempt not in self.points.get(point, set()):
            return
        self.announce(point)
        if not self._never.wait(self.seconds):
            raise PausedTooLong(f"paused at {point} for {self.seconds:.0f}s and nobody "
                                "killed the attempt")
