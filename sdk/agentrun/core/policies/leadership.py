"""Leader election on a Lease, decided purely: who may lead, and the Lease each move writes.

The rules are client-go's ``leaderelection`` (what controller-runtime and Argo run), so an
operator of several replicas behaves as platform engineers expect:

- the *leader Lease* (``agentrun-operator`` in the operator's namespace) names its holder
  (``holderIdentity``: the candidate's pod name), how long a claim lasts
  (``leaseDurationSeconds``), when it was taken and last renewed, and how many times it
  changed hands (``leaseTransitions``: the leader's *term*, which the fencing token
  carries);
- a candidate *creates* a missing Lease, *renews* its own, *takes* one that was released
  (holder empty) or that nobody renewed for its whole duration, and otherwise *waits*.
  "Nobody renewed" is judged as client-go judges it: the record unchanged (its
  resourceVersion: any write changes it) for the duration on the candidate's own
  *monotonic* clock since it first saw it, never by comparing the holder's timestamps
  with ours (another machine's clock may be minutes off, or stand still);
- every write is a PUT under the ``resourceVersion`` read (a create of a missing one): of
  two candidates taking at once one wins, the other meets a conflict and waits;
- a leader that cannot renew for ``renew_deadline`` stops leading (the process exits: a
  new process starts as a candidate, with fresh caches); one that stops gracefully
  *releases* (holder empty, duration 1 s), so its successor takes at once.

Leader election is not fencing: timing says who *should* lead, not who is still writing
(a paused or partitioned former leader does not know). The fencing is admission's
(:mod:`agentrun.core.policies.fencing`): the API server refuses the operator's writes
from any pod but the Lease's holder.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from agentrun.api import names
from agentrun.api.meta import micro_time

Object = dict[str, Any]
IDENTITY_CHARS = 253  # a pod's name, the identity a candidate runs as


@dataclass(frozen=True, kw_only=True)
class Timing:
    """client-go's three durations, in seconds: a claim lasts ``lease``, a leader that
    could not renew for ``renew_deadline`` stops, every candidate acts every ``retry``."""

    lease: float = 15.0
    renew_deadline: float = 10.0
    retry: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry < self.renew_deadline < self.lease:
            raise ValueError(f"leader election needs 0 < retry ({self.retry:g}) < renew "
                             f"deadline ({self.renew_deadline:g}) < lease ({self.lease:g})")


@dataclass(frozen=True, kw_only=True)
class Record:
    """The leader Lease as read (times kept as the raw strings the API returned)."""

    holder: str
    duration_seconds: int
    acquire_time: str | None
    renew_time: str | None
    transitions: int
    resource_version: str | None

    @property
    def mark(self) -> tuple[str, str | None, int, str | None]:
        """What changes whenever anyone writes it: a renewal, a take, a release. The
        resourceVersion alone would do; the rest says what changed in a log."""
        return (self.holder, self.renew_time, self.transitions, self.resource_version)


@dataclass(frozen=True, kw_only=True)
class Observed:
    """A candidate's memory of the Lease: its mark, and when (monotonic seconds) it was
    first seen with it."""

    mark: tuple[str, str | None, int, str | None]
    at: float


class Move(StrEnum):
    CREATE = "create"
    RENEW = "renew"
    TAKE = "take"
    WAIT = "wait"


def record(lease: Object | None) -> Record | None:
    """Read a Lease object (None when not found)."""
    if lease is None:
        return None
    spec = lease.get("spec") or {}
    return Record(holder=str(spec.get("holderIdentity") or ""),
                  duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
                  acquire_time=spec.get("acquireTime"), renew_time=spec.get("renewTime"),
                  transitions=int(spec.get("leaseTransitions") or 0),
                  resource_version=(lease.get("metadata") or {}).get("resourceVersion"))


def observe(found: Record | None, *, observed: Observed | None, now: float) -> Observed | None:
    """The memory after reading ``found`` at ``now``: kept while its mark is unchanged."""
    if found is None:
        return None
    if observed is not None and observed.mark == found.mark:
        return observed
    return Observed(mark=found.mark, at=now)


def decide(found: Record | None, *, observed: Observed | None, me: str, now: float) -> Move:
    """What candidate ``me`` does, having read ``found`` and remembering ``observed``
    (already updated by :func:`observe` for this read)."""
    if found is None:
        return Move.CREATE
    if found.holder == me:
        return Move.RENEW
    if not found.holder:
        return Move.TAKE  # released
    if observed is None or observed.mark != found.mark:
        return Move.WAIT  # (cannot happen after observe: a first sight starts the clock)
    if now - observed.at >= max(found.duration_seconds, 1):
        return Move.TAKE
    return Move.WAIT


def term(move: Move, *, found: Record | None, me: str, floor: int = -1) -> int:
    """The ``leaseTransitions`` ``move`` writes: the leader's term. A take starts a new
    one; every move writes a term above ``floor``, the term of a fencing token that names
    another pod (-1: none, or it names this one). Without it, a Lease deleted and made
    anew (the token kept) would start below the token, and the fence would refuse every
    new leader forever; holding the Lease proves that token's term is over."""
    if found is None:
        return max(0, floor + 1)
    base = found.transitions + (1 if move is Move.TAKE and found.holder != me else 0)
    return max(base, floor + 1)


def body(move: Move, *, found: Record | None, me: str, name: str, namespace: str,
         timing: Timing, now: datetime, floor: int = -1) -> Object:
    """The Lease ``move`` writes (a create's, or a PUT under the resourceVersion read);
    ``floor``: the fencing token's term (:func:`term`)."""
    assert move is not Move.WAIT
    stamp = micro_time(now)
    renewing = move is Move.RENEW and found is not None
    spec: Object = {
        "holderIdentity": me,
        # Never below the lease (a rounded-down duration could undercut the renew deadline).
        "leaseDurationSeconds": max(1, math.ceil(timing.lease)),
        "acquireTime": (found.acquire_time if renewing and found and found.acquire_time
                        else stamp),
        "renewTime": stamp,
        "leaseTransitions": term(move, found=found, me=me, floor=floor),
    }
    metadata: Object = {"name": name, "namespace": namespace,
                        "labels": {"app.kubernetes.io/name": names.OPERATOR_APP}}
    if found is not None and found.resource_version is not None:
        metadata["resourceVersion"] = found.resource_version
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata,
            "spec": spec}


def released(found: Record, *, name: str, namespace: str, now: datetime) -> Object:
    """The Lease a leader stopping gracefully writes: nobody holds it, and a successor
    takes it at once (client-go's ``ReleaseOnCancel``)."""
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace,
                         "resourceVersion": found.resource_version,
                         "labels": {"app.kubernetes.io/name": names.OPERATOR_APP}},
            "spec": {"holderIdentity": "", "leaseDurationSeconds": 1,
                     "acquireTime": micro_time(now), "renewTime": micro_time(now),
                     "leaseTransitions": found.transitions}}
