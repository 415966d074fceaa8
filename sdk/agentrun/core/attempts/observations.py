"""What the operator sees of an attempt's Pod and Lease, and what it remembers about them.

Terms:
- *pod phase*: the Pod's ``status.phase``, refined: ``Terminating`` when a deletion is
  under way and the pod has not finished, ``Gone`` when the pod does not exist.
- *lease view*: one reading of the attempt's Lease as it is (``renewTime`` kept as the raw
  string the API returned: it is compared for change, never parsed as a time).
- *lease observation*: the operator's memory of a Lease: the ``renewTime`` value it last
  saw and, on the operator's own clock, when it first saw that value. It exists only once
  the worker has renewed (the operator creates the Lease without ``renewTime``).
- *lease status*: ``Held``, ``Expired``, ``Released`` (tombstoned: holder cleared or an
  outcome recorded; or released by its holder, ``agentrun.dev/released``, its worker's
  last write as it ended, once its pod has finished) or ``Missing``.

Expiry follows client-go's leader election: a lease expires when the operator has not
*seen* ``renewTime`` change for the lease duration on its own *monotonic* clock (the
``ticks`` of :mod:`agentrun.rest.clocks`), so a step of the wall clock cannot end a
renewing attempt early. The duration is the one pinned in the slot's LaunchSpec, never
the Lease's own ``leaseDurationSeconds``: the holder can write that field. A worker's
clock may be minutes off; comparing its timestamps with ours would be wrong both ways.
The memory is lost when the operator restarts; the first reading afterwards starts a new
observation at ``now``, which can only lengthen a lease, never cut it short.
Until the first renewal, the start deadline (counted from the claim, a time the operator
wrote itself) governs instead of the lease duration.

Whose renewals: admission binds a Lease to the uid of the first pod that writes it as a
worker (``agentrun.dev/holder-uid``, :mod:`agentrun.core.policies.leasepolicy`). Renewals count only
while that uid is the one of the attempt's pod (:func:`renewals_count`; which pod that is:
:mod:`agentrun.core.slots.attemptpods`); a Lease bound to another pod (one run under the
attempt's name after its own pod was deleted) is judged as never renewed, however often.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from agentrun.api import names


class PodPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"
    TERMINATING = "Terminating"
    GONE = "Gone"


class LeaseStatus(StrEnum):
    HELD = "Held"
    EXPIRED = "Expired"
    RELEASED = "Released"
    MISSING = "Missing"


@dataclass(frozen=True, kw_only=True)
class PodView:
    """An attempt's pod as seen: its phase and, once finished, the worker's exit code."""

    phase: PodPhase
    exit_code: int | None = None
    uid: str | None = None


@dataclass(frozen=True, kw_only=True)
class LeaseView:
    """An attempt's Lease as read; ``exists=False`` when it was not found."""

    exists: bool
    holder: str | None = None
    renew_time: str | None = None
    duration_seconds: int | None = None
    tombstoned: bool = False  # sealed: no worker may write it again
    released: bool = False  # sealed by its holder, as its worker ended; not (yet) the operator
    bound_uid: str | None = None  # the pod uid admission bound the Lease to, if any


MISSING_LEASE = LeaseView(exists=False)
GONE_POD = PodView(phase=PodPhase.GONE)


@dataclass(frozen=True, kw_only=True)
class LeaseObservation:
    """The operator's memory of a lease: the last ``renewTime`` seen and when it was first seen."""

    renew_time: str
    observed_at: datetime


def pod_view(pod: Mapping[str, Any] | None) -> PodView:
    """Classify a Pod object (a dict as the API returns it, or None when not found).

    A finished pod (Succeeded or Failed) stays finished even while it is being deleted:
    its containers have stopped, which is what the attempt table asks. The exit code is
    the first non-zero terminated code among the containers, else 0 when all terminated.
    """
    if pod is None:
        return GONE_POD
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    raw = status.get("phase") or "Pending"
    phase = PodPhase(raw) if raw in PodPhase.__members__.values() else PodPhase.UNKNOWN
    if metadata.get("deletionTimestamp") and phase not in (PodPhase.SUCCEEDED, PodPhase.FAILED):
        phase = PodPhase.TERMINATING
    codes = [
        s["state"]["terminated"].get("exitCode")
        for s in status.get("containerStatuses") or []
        if (s.get("state") or {}).get("terminated")
    ]
    exit_code = next((c for c in codes if c), 0 if codes else None)
    return PodView(phase=phase, exit_code=exit_code, uid=metadata.get("uid"))


def lease_view(lease: Mapping[str, Any] | None) -> LeaseView:
    """Read a Lease object (a dict as the API returns it, or None when not found)."""
    if lease is None:
        return MISSING_LEASE
    spec = lease.get("spec") or {}
    annotations = (lease.get("metadata") or {}).get("annotations") or {}
    holder = spec.get("holderIdentity") or None
    ended = holder is None or names.OUTCOME_ANNOTATION in annotations
    released = names.RELEASED_ANNOTATION in annotations
    return LeaseView(
        exists=True,
        holder=holder,
        renew_time=spec.get("renewTime") or None,
        duration_seconds=spec.get("leaseDurationSeconds"),
        tombstoned=ended or released,
        released=released and not ended,
        bound_uid=annotations.get(names.HOLDER_UID_ANNOTATION) or None,
    )


def renewals_count(*, lease: LeaseView, pod_uid: str | None) -> bool:
    """Whether renewals of ``lease`` are its attempt's pod's (``pod_uid``: the uid of the
    attempt's pod, ``attemptpods.expected_pod_uid``; None: none known). A Lease not bound to any pod
    counts (written before admission bound Leases, or without that policy: then nothing
    tells pods apart and only the name was ever checked); one bound to another pod never.
    """
    return lease.bound_uid is None or lease.bound_uid == pod_uid


def observe(
    *, previous: LeaseObservation | None, lease: LeaseView, now: datetime,
) -> LeaseObservation | None:
    """Update the memory with one reading: a changed ``renewTime`` restarts the clock.

    Returns None until the worker's first renewal (no ``renewTime`` on the Lease). The
    value is compared as an opaque string, so a worker clock far ahead or behind changes
    nothing: only *that it changed* matters, and *when* is our clock.
    """
    if not lease.exists or lease.renew_time is None:
        return None
    if previous is not None and previous.renew_time == lease.renew_time:
        return previous
    return LeaseObservation(renew_time=lease.renew_time, observed_at=now)


def lease_status(
    *,
    observation: LeaseObservation | None,
    lease: LeaseView,
    now: datetime,
    claimed_at: datetime,
    start_deadline_seconds: int,
    lease_duration_seconds: int,
    ticks: datetime | None = None,
    blind: timedelta = timedelta(0),
    pod_finished: bool = False,
) -> LeaseStatus:
    """Judge a lease: ``Missing``, ``Released``, ``Held`` or ``Expired``.

    ``observation`` must be the result of :func:`observe` on this same reading, its
    ``observed_at`` on the clock of ``ticks`` (the monotonic clock; ``now`` when None).
    Before the first renewal a lease is held until ``claimed_at + start_deadline_seconds``
    (on the clock of ``now``: see ``attemptlife.start_window``) plus ``blind``, and
    expired after; once renewed, held until ``lease_duration_seconds`` (the pinned
    duration) after the operator saw the last change, plus ``blind``. ``blind`` is how
    long since that change (before the first: since this process first read the lease)
    the operator itself was blind (its API requests failing, its watch silent): a renewal
    it could not have seen then, or a first one the worker could not make against a
    paused server, is not the worker's fault, so that time never counts.
    ``renewTime`` and ``leaseDurationSeconds`` of the Lease are never used.

    A Lease its holder released (``lease.released``: no worker may write it again) is
    ``Released`` once its pod has finished (``pod_finished``: Succeeded or Failed, every
    container seen exited by its kubelet), so the attempt ends at once. Until then it is
    ``Held`` for as long as it would have been, then ``Expired``: a pod still running after
    its worker let go (ending, or stuck on its way out) is left to finish until then and
    fenced after, and a pod gone without a finish (force-deleted: on a lost node its
    containers may still run) is waited out like any held lease.
    """
    if not lease.exists:
        return LeaseStatus.MISSING
    if lease.tombstoned and not lease.released:
        return LeaseStatus.RELEASED
    if observation is None:
        live = now < claimed_at + timedelta(seconds=start_deadline_seconds) + blind
    else:
        expiry = observation.observed_at + timedelta(seconds=lease_duration_seconds) + blind
        live = (ticks or now) < expiry
    if not live:
        return LeaseStatus.EXPIRED
    return LeaseStatus.RELEASED if lease.released and pod_finished else LeaseStatus.HELD
