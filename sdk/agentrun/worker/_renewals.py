"""The renewer's decisions, pure: how often to renew, and whether the lease is still ours.

Terms:
- *identity*: the worker pod's name. The operator writes it as the Lease's
  ``holderIdentity`` at the claim (the Lease and the Pod share the attempt's name), and
  clears the holder when it tombstones the attempt.
- *verdict*: ``Renew`` (the lease is ours: write ``renewTime``), ``Retry`` (could not
  tell, or the write lost a race: ask again after ``delay_seconds``) or ``Stop`` (no
  longer ours: never write again; the attempt is over for the operator too).
- *lapse point*: when the last successful renewal stops vouching for the lease, on the
  worker's own monotonic clock (:func:`lapse_at`); past it, the keeper starts no effect.

A renewal changes ``spec.renewTime`` only, under the resourceVersion it read: a
concurrent tombstone makes the write a 409 and the next reading sees the tombstone.
*Releasing* is the worker's last write as it ends: :data:`names.RELEASED_ANNOTATION` (when)
added the same way; admission then refuses every write of its own after it, and the
operator ends the attempt as soon as its pod has finished (not a lease duration later).
The operator compares ``renewTime`` for change only (:mod:`agentrun.core.attempts.observations`),
so the worker's clock needs no agreement with anyone's.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from agentrun.api import names
from agentrun.api.meta import micro_time
from agentrun.core.attempts.observations import LeaseView

# The LaunchSpec's default lease duration, for a Lease that does not say (it always does
# when the operator made it).
DEFAULT_DURATION_SECONDS = 30
MIN_INTERVAL_SECONDS = 1.0
# Renewing more often than this gains nothing, and a tombstone is seen within it.
MAX_INTERVAL_SECONDS = 10.0
# The keeper calls the lease lapsed this fraction of its duration before the operator
# could (see :func:`margin`).
MARGIN_FRACTION = 0.2
MIN_MARGIN_SECONDS = 1.0


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
    duration = _duration(duration_seconds)
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


def margin(*, duration_seconds: int | None) -> float:
    """How long before the operator could see the lease expire the keeper calls it lapsed.

    A fifth of the lease, at least :data:`MIN_MARGIN_SECONDS` and at most half of it. It
    covers what happens after :meth:`ensure_live` said yes and before an effect reaches its
    owner (the gap between check and send), and any difference in the two machines'
    monotonic clock rates; the operator counts from when it *saw* the renewal, which is
    never before its send, so nothing else needs covering.
    """
    duration = _duration(duration_seconds)
    return min(max(duration * MARGIN_FRACTION, MIN_MARGIN_SECONDS), duration / 2)


def lapse_at(*, sent_at: float, duration_seconds: int | None) -> float:
    """The moment (on the keeper's monotonic clock) a renewal *sent* at ``sent_at`` stops
    vouching for the lease: its duration later, minus the :func:`margin`.

    The send time, not the answer's: the API server may have written ``renewTime`` (and the
    operator seen it) any time after the request left, and an answer can come late.
    """
    return sent_at + _duration(duration_seconds) - margin(duration_seconds=duration_seconds)


def lapse_reason(*, since_renewal_seconds: float, duration_seconds: int | None,
                 last_failure: str | None) -> str:
    """Why the keeper calls its lease lapsed, for the worker's log and its callback."""
    return (f"no successful renewal for {since_renewal_seconds:.1f}s (lease duration "
            f"{_duration(duration_seconds)}s); last failure: "
            f"{last_failure or 'none yet (a request is still waiting for its answer)'}")


class Standing(StrEnum):
    """The keeper's view of its lease at a moment.

    ``Starting``: no renewal has succeeded yet. ``Live``: the last successful renewal's
    lapse point is ahead; effects may start. ``Lapsed``: it has passed (renewals failing:
    the API server unreachable, slow, refusing the token); effects wait, renewal goes on,
    and a later successful renewal makes it ``Live`` again. ``Lost``: the lease is no
    longer this worker's (tombstoned, another holder, deleted, renewal forbidden) or the
    keeper was stopped; final.
    """

    STARTING = "Starting"
    LIVE = "Live"
    LAPSED = "Lapsed"
    LOST = "Lost"


def standing(*, now: float, lapse: float | None, lost: bool) -> Standing:
    """The lease's :class:`Standing` at ``now``, given the current lapse point (None: no
    renewal yet) and whether it was lost."""
    if lost:
        return Standing.LOST
    if lapse is None:
        return Standing.STARTING
    return Standing.LIVE if now < lapse else Standing.LAPSED


def _duration(duration_seconds: int | None) -> int:
    return duration_seconds if duration_seconds and duration_seconds > 0 \
        else DEFAULT_DURATION_SECONDS




def renewed(lease: Mapping[str, Any], *, now: datetime) -> dict[str, Any]:
    """The lease as read, with ``spec.renewTime`` set to ``now`` and nothing else changed
    (its resourceVersion stays: the write is conditional on what was judged)."""
    body = copy.deepcopy(dict(lease))
    body["spec"] = {**(body.get("spec") or {}), "renewTime": micro_time(now)}
    return body


def released(lease: Mapping[str, Any], *, now: datetime) -> dict[str, Any]:
    """The lease as read, released by its holder at ``now`` and nothing else changed (its
    resourceVersion stays: the write is conditional on what was judged)."""
    body = copy.deepcopy(dict(lease))
    metadata = body["metadata"] = dict(body.get("metadata") or {})
    metadata["annotations"] = {**(metadata.get("annotations") or {}),
                               names.RELEASED_ANNOTATION: micro_time(now)}
    return body
