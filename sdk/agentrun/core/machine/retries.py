"""Retry policy: how many attempt numbers a slot may consume and how long it waits.

The *effective policy* takes each setting from the workflow node, else the run's
defaults, else the operator's (3 attempts; 10 s, doubling, capped at 300 s). Every
consumed attempt number counts, including a claim that could not create its objects
(``ClaimFailed``). When none remain the slot is *exhausted*: it waits in RetryWait with no
``retryAt`` and condition ``AwaitingReassignment`` until a person reassigns or gives up.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from agentrun.api.policies import Backoff, RetryPolicy

DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_BACKOFF = Backoff(initial_seconds=10, factor=2.0, max_seconds=300)


@dataclass(frozen=True, kw_only=True)
class Effective:
    """A retry policy with every setting resolved."""

    max_attempts: int
    backoff: Backoff


DEFAULT = Effective(max_attempts=DEFAULT_MAX_ATTEMPTS, backoff=DEFAULT_BACKOFF)


def effective(
    *, node: RetryPolicy | None, run: RetryPolicy | None, operator: Effective = DEFAULT,
) -> Effective:
    """Resolve each setting separately: node, else run, else operator."""
    layers = [p for p in (node, run) if p is not None]
    max_attempts = next((p.max_attempts for p in layers if p.max_attempts is not None),
                        operator.max_attempts)
    backoff = next((p.backoff for p in layers if p.backoff is not None), operator.backoff)
    return Effective(max_attempts=max_attempts, backoff=backoff)


def delay(*, backoff: Backoff, consumed: int) -> timedelta:
    """The wait after ``consumed`` attempts: ``initial * factor**(consumed-1)``, capped."""
    if consumed < 1:
        return timedelta(0)
    exponent = min(consumed - 1, 64)  # far past any cap; keeps the float finite
    seconds = min(backoff.initial_seconds * backoff.factor ** exponent, backoff.max_seconds)
    return timedelta(seconds=seconds)


def is_exhausted(*, policy: Effective, consumed: int) -> bool:
    """No automatic attempt remains once ``consumed`` reaches ``maxAttempts``."""
    return consumed >= policy.max_attempts


def retry_at(*, policy: Effective, consumed: int, now: datetime) -> datetime | None:
    """When the next automatic attempt may be claimed, or None when exhausted."""
    if is_exhausted(policy=policy, consumed=consumed):
        return None
    return now + delay(backoff=policy.backoff, consumed=consumed)
