"""Retry policy: how many attempt numbers a slot may consume, and how long it waits between.

An *attempt number* is consumed by every claim, including one whose objects could
not be created (``ClaimFailed``): the count is of tries, not of pods that ran.
"""

from __future__ import annotations

from pydantic import Field

from agentrun.api.models import Model


class Backoff(Model):
    """Exponential backoff: ``initialSeconds * factor**(n-1)``, capped at ``maxSeconds``."""

    initial_seconds: int = Field(default=10, ge=0, le=86400,
                                 description="seconds to wait after the first attempt")
    factor: float = Field(default=2.0, ge=1.0, le=10.0,
                          description="what each further wait is multiplied by")
    max_seconds: int = Field(default=300, ge=0, le=86400,
                             description="the longest wait, in seconds")


class RetryPolicy(Model):
    """How many attempts a slot may use before a person decides, and the wait between
    them. Each setting is taken from the workflow node, else the run, else the operator
    (3 attempts; 10 s, doubling, at most 300 s)."""

    max_attempts: int | None = Field(
        default=None, ge=1, le=1000,
        description="attempts before a person must reassign the slot or give it up (every "
                    "claim counts, ClaimFailed too; not one that ended asking a person)")
    backoff: Backoff | None = Field(default=None, description=(
        "the wait before each automatic retry; one given replaces the inherited one whole "
        "(its unset fields take their defaults)"))
