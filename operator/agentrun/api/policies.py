"""Retry policy: how many attempt numbers a slot may consume, and how long it waits between.

An *attempt number* is consumed by every claim, including one whose objects could
not be created (``ClaimFailed``): the count is of tries, not of pods that ran.
"""

from __future__ import annotations

from pydantic import Field

from agentrun.api.models import Model


class Backoff(Model):
    """Exponential backoff: ``initialSeconds * factor**(n-1)``, capped at ``maxSeconds``."""

    initial_seconds: int = Field(default=10, ge=0, le=86400)
    factor: float = Field(default=2.0, ge=1.0, le=10.0)
    max_seconds: int = Field(default=300, ge=0, le=86400)


class RetryPolicy(Model):
    max_attempts: int | None = Field(default=None, ge=1, le=1000)
    backoff: Backoff | None = None
