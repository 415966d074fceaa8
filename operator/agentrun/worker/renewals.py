"""The renewer's decisions, pure: how often to renew, and whether the lease is still ours.

Terms:
- *identity*: the worker pod's name. The operator writes it as the Lease's
  ``holderIdentity`` at the claim (the Lease and the Pod share the attempt's name), and
  clears the holder when it tombstones the attempt.
- *verdict*: ``Renew`` (the lease is ours: write ``renewTime``), ``Retry`` (could not
  tell, or the write lost a race: ask again after ``delay_seconds``) or ``Stop`` (no
  longer ours, or not renewed for a whole lease duration: never write again; the
  attempt is over, or may be, for the operator too).

A renewal changes ``spec.renewTime`` only, under the resourceVersion it read: a
concurrent tombstone makes the write a 409 and the next reading sees the tombstone.
The operator compares ``renewTime`` for change only (:mod:`agentrun.core.observations`),
so the worker's clock needs no agreement with anyone's.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from agentrun.core.observations import LeaseView

# The LaunchSpec's default lease duration, for a Lease that does not say (it always does
# when the operator made it).
DEFAULT_DURATION_SECONDS = 30
MIN_INTERVAL_SECONDS = 1.0
# Renewing more often than this gains nothing, and a tombstone is seen within it.
MAX_INTERVAL_SECONDS = 10.0


class Verdict(StrEnum):
    RENEW = "Renew"
    RETRY = "Retry"
    STOP = "Stop"


@dataclass(frozen=True, kw_only=True)
class Decision:
    verdict: Verdict
    reason: str
    delay_seconds: float


def interval(*, duration_seconds: int | None) -> float:
    """Seconds between renewals: a third of the lease, so two renewals in a row may fail
    (a slow API server, a token being rotated) before the operator sees it expire."""
    duration = duration_seconds if duration_seconds and duration_seconds > 0 \
        else DEFAULT_DURATION_SECONDS
    return min(max(duration / 3, MIN_INTERVAL_SECONDS), MAX_INTERVAL_SECONDS)


def judge(*, lease: LeaseView, identity: str) -> Decision:
    """Whether a lease as read is still this worker's to renew."""
    if not lease.exists:
        return Decision(verdict=Verdict.STOP, reason="the lease no longer exists",
                        delay_seconds=0.0)
    if lease.tombstoned:
        return Decision(verdict=Verdict.STOP, delay_seconds=0.0,
                        reason="the attempt has ended (its lease is tombstoned)")
    if lease.holder != identity:
        return Decision(verdict=Verdict.STOP, delay_seconds=0.0,
                        reason=f"the lease is held by {lease.holder!r}, not by {identity!r}")
    return Decision(verdict=Verdict.RENEW, reason="held by this worker",
                    delay_seconds=interval(duration_seconds=lease.duration_seconds))


def judge_error(*, status: int | None, duration_seconds: int | None) -> Decision:
    """What an API error (``status``; None when no answer came) says about the lease.

    404: the lease is gone. 403: this service account may no longer touch it. 409: the
    lease changed after it was read; read it again soon and let :func:`judge` decide.
    Anything else (no answer, 5xx, 401 while a token rotates, 429) may pass: retry at
    the normal interval; if it never passes, the operator sees the lease expire.
    """
    if status == 404:
        return Decision(verdict=Verdict.STOP, reason="the lease no longer exists (404)",
                        delay_seconds=0.0)
    if status == 403:
        return Decision(verdict=Verdict.STOP, delay_seconds=0.0,
                        reason="this service account may not renew the lease (403)")
    if status == 409:
        return Decision(verdict=Verdict.RETRY, delay_seconds=MIN_INTERVAL_SECONDS,
                        reason="the lease changed since it was read (409)")
    what = "no answer" if status is None else f"status {status}"
    return Decision(verdict=Verdict.RETRY, reason=f"renewal failed ({what})",
                    delay_seconds=interval(duration_seconds=duration_seconds))


def after_failure(*, decision: Decision, since_renewal_seconds: float,
                  duration_seconds: int | None) -> Decision:
    """A failed renewal (``decision`` is a Retry), judged against the last one that worked.

    Once that is a whole lease duration old (this process's monotonic clock), stop: the
    operator, which counts from when it *saw* that renewal, may now end the attempt and
    start another, and two workers must not run at once. Until then the retry comes no
    later than that moment.
    """
    duration = duration_seconds if duration_seconds and duration_seconds > 0 \
        else DEFAULT_DURATION_SECONDS
    left = duration - since_renewal_seconds
    if left <= 0:
        return Decision(verdict=Verdict.STOP, delay_seconds=0.0,
                        reason=f"no successful renewal for {since_renewal_seconds:.0f}s "
                               f"(lease duration {duration}s); last failure: {decision.reason}")
    return Decision(verdict=decision.verdict, reason=decision.reason,
                    delay_seconds=min(decision.delay_seconds, left))


def micro_time(moment: datetime) -> str:
    """A ``MicroTime`` as the API server writes it: UTC, six fractional digits, ``Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def renewed(lease: Mapping[str, Any], *, now: datetime) -> dict[str, Any]:
    """The lease as read, with ``spec.renewTime`` set to ``now`` and nothing else changed
    (its resourceVersion stays: the write is conditional on what was judged)."""
    body = copy.deepcopy(dict(lease))
    body["spec"] = {**(body.get("spec") or {}), "renewTime": micro_time(now)}
    return body
