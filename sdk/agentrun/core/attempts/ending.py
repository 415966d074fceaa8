"""When has an attempt ended? The truth table of docs/design/states.md, and nothing else.

An attempt *has ended* when both its pod and its lease are terminal: no process of it
can still run, and no process of it can still believe it owns the slot. Only then may a
successor be admitted (automatically after a retry wait, or by a reassignment). Lease
statuses come from :func:`agentrun.core.attempts.observations.lease_status`, so "expired" already
means "no renewal observed for its duration" (or, before the first renewal, "past the
start deadline").

=====================  ======  ===============================  ========  ==================
pod \\ lease            held    expired                          released  missing
=====================  ======  ===============================  ========  ==================
Pending / Running       no      no: delete the pod, wait         no        no: delete the pod
Unknown / Terminating   no      no: wait for the pod to be gone  no        no
Succeeded / Failed      no      yes                              yes       yes
Gone                    no      yes                              yes (*)   yes
=====================  ======  ===============================  ========  ==================

(*) Released by the operator's tombstone. One only its holder released is ``Released`` with
a pod that exited (Succeeded or Failed) and ``Held`` otherwise, until it would have
expired (:func:`~agentrun.core.attempts.observations.lease_status`).

Deleting the pod *fences* the attempt: a worker that stopped renewing is killed before
anyone else may own its slot.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentrun.api.slots import Outcome
from agentrun.core.attempts.observations import LeaseStatus, PodPhase, PodView

FINISHED = frozenset({PodPhase.SUCCEEDED, PodPhase.FAILED, PodPhase.GONE})
"""Pod phases in which no container of the attempt can run again."""

EXITED = frozenset({PodPhase.SUCCEEDED, PodPhase.FAILED})
"""Pod phases in which its kubelet saw every container exit: a lease its holder released
ends the attempt only then (a pod gone without it may still run on a lost node)."""

LIVE = frozenset({PodPhase.PENDING, PodPhase.RUNNING})
"""Pod phases in which a container may run: the operator can fence them by deletion."""

RELINQUISHED = frozenset({LeaseStatus.EXPIRED, LeaseStatus.RELEASED, LeaseStatus.MISSING})
"""Lease statuses under which no worker may believe it still owns the slot."""


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """What to do about an Active attempt now.

    ``ended``: the attempt is over (pod and lease terminal) with ``outcome``.
    ``delete_pod``: fence the attempt by deleting its pod (it may still run but may no
    longer own the slot); the attempt ends on a later reading, once the pod is gone.
    """

    ended: bool
    outcome: Outcome | None = None
    delete_pod: bool = False
    exit_code: int | None = None
    message: str


def is_terminal(*, pod: PodPhase, lease: LeaseStatus) -> bool:
    """The table's "yes" cells: the pod finished or is gone, and the lease is not held."""
    return pod in FINISHED and lease in RELINQUISHED


def judge(*, pod: PodView, lease: LeaseStatus, renewed: bool) -> Verdict:
    """Decide for an Active attempt from its pod and lease (the table above).

    ``renewed`` says whether the worker was ever seen renewing. A lease is *held* only
    once renewed ("renewed within its duration, as observed"); before the first
    renewal the start deadline governs, and a pod that has already finished or is gone
    without ever renewing ends its attempt at once: no worker ever took ownership, and
    none can now. Outcomes: pod Succeeded → Succeeded; pod Failed → Failed; pod gone →
    StartTimeout when the start deadline passed without a renewal (the operator deleted
    it), else Lost.
    """
    if lease is LeaseStatus.HELD and (renewed or pod.phase not in FINISHED):
        return Verdict(ended=False, message=f"the lease is held; the pod is {pod.phase}")
    if pod.phase in LIVE:
        fence = lease in (LeaseStatus.EXPIRED, LeaseStatus.MISSING)
        return Verdict(
            ended=False,
            delete_pod=fence,
            message=(f"the lease is {str(lease).lower()} but the pod is still {pod.phase}: "
                     + ("deleting the pod to fence the attempt" if fence
                        else "waiting for the pod to finish")),
        )
    if pod.phase not in FINISHED:
        return Verdict(ended=False,
                       message=f"the pod is {pod.phase} (being deleted, or on a lost node): "
                               "waiting until it is gone")
    if pod.phase is PodPhase.SUCCEEDED:
        outcome = Outcome.SUCCEEDED
    elif pod.phase is PodPhase.FAILED:
        outcome = Outcome.FAILED
    elif lease is LeaseStatus.EXPIRED and not renewed:
        outcome = Outcome.START_TIMEOUT
    else:
        outcome = Outcome.LOST
    return Verdict(
        ended=True,
        outcome=outcome,
        exit_code=pod.exit_code,
        message=_ended_message(pod=pod, lease=lease, outcome=outcome),
    )


def _ended_message(*, pod: PodView, lease: LeaseStatus, outcome: Outcome) -> str:
    if outcome is Outcome.START_TIMEOUT:
        return "the worker never renewed its lease within the start deadline"
    code = f" with exit code {pod.exit_code}" if pod.exit_code is not None else ""
    state = "was deleted or lost" if pod.phase is PodPhase.GONE else f"{pod.phase}{code}"
    return f"the pod {state}; the lease is {str(lease).lower()}"
