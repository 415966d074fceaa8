"""The slot state machine: one pure function per legal transition, SlotStatus to SlotStatus.

States (docs/design/states.md): ``Pending`` (waiting for dependencies), ``Ready`` (a launch
spec pinned, no attempt yet), ``Claiming`` (``pendingWorker`` set: the next attempt's
objects are being created; mostly a state decided in memory, its Lease
being the claim's commit point, and written only while a claim waits), ``Active``
(``activeWorker`` set), ``RetryWait`` (the last attempt ended; ``priorWorker`` set),
``Succeeded``, ``Failed``. *Hold* is a condition, not a state: it blocks claims and
reassignment, and never interrupts an Active attempt.

Each function checks the state it starts from and raises :class:`IllegalTransition`
otherwise, so a bug or a stale read can never move a slot sideways. Only
:func:`start_claim` consumes an attempt number and only :func:`finish_claim` records a
started attempt: *only a claim creates an attempt*.
"""

from __future__ import annotations

from datetime import datetime

from agentrun.api import bounds, conditions, names
from agentrun.api.runs import ClaimPolicy
from agentrun.api.slots import (
    ATTEMPTS_KEPT,
    AttemptRecord,
    Outcome,
    PinnedLaunchSpec,
    QuestionEntry,
    QuestionState,
    SlotState,
    SlotStatus,
)
from agentrun.core.base import naming
from agentrun.core.machine import retries

# Slot condition types (docs/design/names.md).
HELD = "Held"
REOPENED = "Reopened"
AWAITING_REASSIGNMENT = "AwaitingReassignment"
COMMAND_REJECTED = "CommandRejected"
SUCCEEDED = "Succeeded"
QUOTA_EXCEEDED = "QuotaExceeded"  # a claim waits for a ResourceQuota (no attempt spent)
# A claim waits for a LaunchSpec that can make its pod (no attempt spent: core.slots.refusedclaims).
LAUNCH_SPEC_REFUSED = "LaunchSpecRefused"
CLAIM_WAITS = (QUOTA_EXCEEDED, LAUNCH_SPEC_REFUSED)  # what a claim's end clears
NAME_SQUATTED = "NameSquatted"  # an object under one of our names is not ours (core.slots.squats)

TERMINAL = (SlotState.SUCCEEDED, SlotState.FAILED)
RERUN = "Rerun"  # the reason of Reopened (the slot rerun) and of Superseded
# A dependency was rerun: this slot waits to run again after it (True until its next claim).
SUPERSEDED_CONDITION = "Superseded"
OPEN_STATES = frozenset({SlotState.PENDING, SlotState.READY, SlotState.CLAIMING,
                         SlotState.ACTIVE, SlotState.RETRY_WAIT})


class IllegalTransition(ValueError):
    """A transition was asked of a slot in a state it cannot start from."""

    def __init__(self, *, transition: str, state: SlotState, why: str = "") -> None:
        self.transition = transition
        self.state = state
        tail = f": {why}" if why else ""
        super().__init__(f"cannot {transition} a slot in state {state}{tail}")


def _without(found: conditions.Conditions, *types: str) -> conditions.Conditions:
    for type_ in types:
        found = conditions.remove(found, type_)
    return found


def _require(status: SlotStatus, transition: str, *allowed: SlotState) -> None:
    if status.state not in allowed:
        raise IllegalTransition(transition=transition, state=status.state,
                                why=f"allowed only from {', '.join(allowed)}")


def is_held(status: SlotStatus) -> bool:
    return conditions.is_true(status.conditions, HELD)


def is_reopened(status: SlotStatus) -> bool:
    return conditions.is_true(status.conditions, REOPENED)


def launch_spec_ref(pinned: PinnedLaunchSpec) -> str:
    """``name@generation``: how an attempt record and a tombstone name the spec it used."""
    return f"{pinned.name}@{pinned.generation}"


def is_claimable(status: SlotStatus, *, now: datetime, claim_policy: ClaimPolicy) -> bool:
    """May the operator claim the next attempt by itself now (docs/design/states.md)?

    Only under ``Automatic`` policy, and when :func:`may_be_claimed`; a claim command
    (under either policy) is judged by :func:`may_be_claimed` alone.
    """
    return claim_policy == "Automatic" and may_be_claimed(status, now=now)


def may_be_claimed(status: SlotStatus, *, now: datetime) -> bool:
    """Is the slot open to a claim, whatever the policy that would make it?

    ``Ready``, or ``RetryWait`` with no pending or active worker and either ``retryAt``
    passed or the slot reopened by a reassignment; never while held or without a pinned
    launch spec.
    """
    if is_held(status) or status.launch_spec is None:
        return False
    if status.state is SlotState.READY:
        return True
    if status.state is not SlotState.RETRY_WAIT:
        return False
    if status.pending_worker is not None or status.active_worker is not None:
        return False
    return is_reopened(status) or (status.retry_at is not None and status.retry_at <= now)


def deps_met(
    status: SlotStatus, *, worker_class: str, launch_spec: PinnedLaunchSpec, now: datetime,
    dependency_reruns: int = 0,
) -> SlotStatus:
    """Pending → Ready: dependencies succeeded and a launch spec is pinned; records the
    sum of their reruns (``dependency_reruns``) it runs after."""
    _require(status, "mark ready", SlotState.PENDING)
    return status.model_copy(update={
        "state": SlotState.READY, "worker_class": worker_class, "launch_spec": launch_spec,
        "dependency_reruns": dependency_reruns,
        "conditions": conditions.remove(status.conditions, NAME_SQUATTED)})


def start_claim(status: SlotStatus, *, slot: str, now: datetime) -> SlotStatus:
    """Ready or RetryWait → Claiming: consume attempt number n+1 (``pendingWorker``).

    The caller checks :func:`is_claimable` (or, for a claim command,
    :func:`may_be_claimed`) first; this only checks the state and that no
    worker is pending or active. ``Reopened`` is cleared: the reassignment is served.
    """
    _require(status, "start a claim on", SlotState.READY, SlotState.RETRY_WAIT)
    if status.pending_worker is not None or status.active_worker is not None:
        raise IllegalTransition(transition="start a claim on", state=status.state,
                                why="a worker is already pending or active")
    if status.launch_spec is None:
        raise IllegalTransition(transition="start a claim on", state=status.state,
                                why="no launch spec is pinned")
    number = status.attempt_count + 1
    return status.model_copy(update={
        "state": SlotState.CLAIMING,
        "pending_worker": naming.attempt_name(slot=slot, number=number),
        "attempt_count": number,
        "retry_at": None,
        "conditions": _without(status.conditions, REOPENED, SUPERSEDED_CONDITION),
    })


def _append_attempt(status: SlotStatus, record: AttemptRecord) -> list[AttemptRecord]:
    return [*status.attempts, record][-ATTEMPTS_KEPT:]


def _new_record(status: SlotStatus, *, worker: str, now: datetime,
                pod_uid: str | None = None) -> AttemptRecord:
    assert status.launch_spec is not None  # checked by start_claim
    return AttemptRecord(
        number=status.attempt_count,
        pod=worker,
        lease=worker,
        pod_uid=pod_uid,
        worker_class=status.worker_class or "",
        launch_spec=launch_spec_ref(status.launch_spec),
        owner_actor=status.next_owner_actor,
        started_at=now,
    )


def finish_claim(status: SlotStatus, *, now: datetime, pod_uid: str | None = None) -> SlotStatus:
    """Claiming → Active: the Lease and Pod exist; record the attempt as started.

    The attempt's owner actor is ``nextOwnerActor`` (the person whose command led here),
    or none for an automatic claim; it is consumed.
    """
    _require(status, "finish a claim on", SlotState.CLAIMING)
    worker = status.pending_worker
    assert worker is not None
    return status.model_copy(update={
        "conditions": _without(status.conditions, *CLAIM_WAITS, NAME_SQUATTED),
        "state": SlotState.ACTIVE,
        "active_worker": worker,
        "pending_worker": None,
        "next_owner_actor": None,
        "attempts": _append_attempt(status, _new_record(status, worker=worker, now=now,
                                                        pod_uid=pod_uid)),
    })


def _close(status: SlotStatus, *, worker: str, outcome: Outcome, message: str,
           exit_code: int | None, now: datetime) -> list[AttemptRecord]:
    """Close the record of ``worker`` (adding one if it was never started)."""
    if not any(a.pod == worker for a in status.attempts):
        attempts = _append_attempt(status, _new_record(status, worker=worker, now=now))
    else:
        attempts = list(status.attempts)
    reason = bounds.clip(message, limit=bounds.RECORD_MESSAGE_CHARS)
    return [a.model_copy(update={"ended_at": now, "outcome": outcome, "reason": reason,
                                 "exit_code": exit_code})
            if a.pod == worker and a.ended_at is None else a for a in attempts]


def _wait_or_exhaust(status: SlotStatus, *, policy: retries.Effective, now: datetime,
                     update: dict[str, object]) -> SlotStatus:
    # An attempt that ended asking a question (``Asked``) is not counted: asking is not a failure.
    at = retries.retry_at(policy=policy, consumed=status.attempt_count - status.asked_attempts
                          - status.attempts_before_rerun,
                          now=now) if status.attempt_count < bounds.MAX_ATTEMPT_NUMBER else None
    conds = status.conditions
    if at is None and status.attempt_count >= bounds.MAX_ATTEMPT_NUMBER:
        conds = conditions.set_condition(
            conds, type_=AWAITING_REASSIGNMENT, status="True", reason="AttemptNumbersExhausted",
            message=(f"the slot has used all {bounds.MAX_ATTEMPT_NUMBER} attempt numbers a "
                     "slot may have: nothing can be claimed or reassigned; give it up "
                     "(agentrun.dev/give-up-*) and start a new run"), now=now)
    elif at is None:
        conds = conditions.set_condition(
            conds, type_=AWAITING_REASSIGNMENT, status="True", reason="AttemptsExhausted",
            message=(f"all {policy.max_attempts} automatic attempts are used; reassign the "
                     "slot (agentrun.dev/reassign-*) or give up (agentrun.dev/give-up-*)"),
            now=now)
    return status.model_copy(update={**update, "state": SlotState.RETRY_WAIT, "retry_at": at,
                                      "conditions": conds})


def fail_claim(status: SlotStatus, *, message: str, policy: retries.Effective,
               now: datetime) -> SlotStatus:
    """Claiming → RetryWait: the attempt's objects could not be created (``ClaimFailed``).

    The attempt number stays consumed and counts against ``maxAttempts``.
    """
    _require(status, "fail a claim on", SlotState.CLAIMING)
    worker = status.pending_worker
    assert worker is not None
    return _wait_or_exhaust(status.model_copy(update={"conditions": _without(
        status.conditions, *CLAIM_WAITS)}), policy=policy, now=now, update={
        "pending_worker": None,
        "prior_worker": worker,
        "next_owner_actor": None,
        "attempts": _close(status, worker=worker, outcome=Outcome.CLAIM_FAILED, message=message,
                           exit_code=None, now=now),
    })


def end_attempt(status: SlotStatus, *, outcome: Outcome, message: str, exit_code: int | None,
                policy: retries.Effective, now: datetime) -> SlotStatus:
    """Active → Succeeded, or RetryWait (with ``retryAt``, or exhausted and awaiting a person).

    ``activeWorker`` becomes ``priorWorker`` and the attempt record is closed. The caller
    tombstones the Lease (outcome, end time, owner actor, launch spec) in its next write.
    ``Asked`` (a question) or ``OverBudget`` (its run's budget): RetryWait with no ``retryAt``,
    not counted against ``maxAttempts`` (``askedAttempts``); the answer (a raise) reopens it
    (:func:`reopen`), and the caller adds the question (``core.attempts.questionrecords``).
    """
    _require(status, "end the attempt of", SlotState.ACTIVE)
    worker = status.active_worker
    assert worker is not None
    update: dict[str, object] = {
        "active_worker": None,
        "prior_worker": worker,
        "attempts": _close(status, worker=worker, outcome=outcome, message=message,
                           exit_code=exit_code, now=now),
    }
    if outcome is Outcome.SUCCEEDED:
        conds = conditions.set_condition(status.conditions, type_=SUCCEEDED, status="True",
                                         reason="AttemptSucceeded", message=message, now=now)
        return status.model_copy(update={**update, "state": SlotState.SUCCEEDED,
                                          "retry_at": None, "conditions": conds})
    if outcome in (Outcome.ASKED, Outcome.OVER_BUDGET):  # a person decides: not a failure
        return status.model_copy(update={**update, "state": SlotState.RETRY_WAIT,
                                          "retry_at": None,
                                          "asked_attempts": status.asked_attempts + 1})
    return _wait_or_exhaust(status, policy=policy, now=now, update=update)


def fail(status: SlotStatus, *, reason: str, message: str, now: datetime) -> SlotStatus:
    """Any open state → Failed (a give-up command, the run's deadline, a failed dependency).

    ``reason`` is the condition reason (``GaveUp``, ``DeadlineExceeded``,
    ``DependencyFailed``). A live attempt (pending or active) is closed with outcome
    ``GaveUp`` and becomes the prior worker; the caller fences it (deletes its pod,
    tombstones its lease).
    """
    _require(status, "fail", *OPEN_STATES)
    live = status.active_worker or status.pending_worker
    update: dict[str, object] = {}
    if live is not None:
        update = {
            "prior_worker": live,
            "attempts": _close(status, worker=live, outcome=Outcome.GAVE_UP, message=message,
                               exit_code=None, now=now),
        }
    conds = _without(status.conditions, AWAITING_REASSIGNMENT, *CLAIM_WAITS, REOPENED,
                     SUPERSEDED_CONDITION,
                     names.QUESTION_PENDING_CONDITION)  # nothing waits for an answer now
    conds = conditions.set_condition(conds, type_=SUCCEEDED, status="False", reason=reason,
                                     message=message, now=now)
    return status.model_copy(update={
        **update, "state": SlotState.FAILED, "active_worker": None, "pending_worker": None,
        "retry_at": None, "next_owner_actor": None, "conditions": conds,
        "questions": _closed(status.questions)})


def _closed(found: list[QuestionEntry]) -> list[QuestionEntry]:
    """Questions no longer waiting for an answer (the slot reopened or ended): Closed."""
    return [q.model_copy(update={"state": QuestionState.CLOSED})
            if q.state is QuestionState.PENDING else q for q in found]


def reopen(status: SlotStatus, *, worker_class: str, launch_spec: PinnedLaunchSpec,
           owner_actor: str | None, message: str, now: datetime,
           reason: str = "Reassigned") -> SlotStatus:
    """RetryWait → RetryWait, reopened: the accepted reassignment (or answer: ``reason``).

    See docs/design/commands-and-trust.md.

    Pins ``launch_spec``, sets the worker class, clears pending/active workers and
    ``retryAt``, keeps ``priorWorker`` and identity, sets ``Reopened`` and clears
    ``AwaitingReassignment``. No attempt is created: the next claim does that, and
    records ``owner_actor`` on it.
    """
    _require(status, "reassign", SlotState.RETRY_WAIT)
    conds = conditions.remove(conditions.remove(status.conditions, AWAITING_REASSIGNMENT),
                              NAME_SQUATTED)
    conds = conditions.set_condition(conds, type_=REOPENED, status="True", reason=reason,
                                     message=message, now=now)
    if conditions.is_true(conds, names.QUESTION_PENDING_CONDITION):  # reassigned unanswered
        conds = conditions.set_condition(
            conds, type_=names.QUESTION_PENDING_CONDITION, status="False", reason=reason,
            message=f"{message}; the next attempt asks its question again", now=now)
    return status.model_copy(update={
        "worker_class": worker_class, "launch_spec": launch_spec, "pending_worker": None,
        "active_worker": None, "retry_at": None, "next_owner_actor": owner_actor,
        "conditions": conds, "questions": _closed(status.questions)})


def rerun(status: SlotStatus, *, cuts: list[str], owner_actor: str | None, message: str,
          now: datetime, resends: list[str] | None = None,
          has_dependencies: bool = False) -> SlotStatus:
    """RetryWait, Succeeded or Failed → reopened: an accepted rerun (docs/design/reruns.md).

    Like :func:`reopen` (no attempt is created: the next claim does, owned by
    ``owner_actor``), and more: ``cuts`` replaces the slot's cuts (the next attempt's
    prefix stops where the rerun starts) and ``resends`` its effects sent again (None:
    unchanged), ``reruns`` grows (so its dependents run again
    after it), ``maxAttempts`` counts afresh, and a finished slot is open again: RetryWait
    when it has no dependencies and a LaunchSpec is pinned, else Pending (its
    dependencies are looked at again: they may have failed or be rerun themselves; the
    pin, if any, is kept when it leaves Pending).
    """
    _require(status, "rerun", SlotState.RETRY_WAIT, *TERMINAL)
    conds = _without(status.conditions, AWAITING_REASSIGNMENT, NAME_SQUATTED, SUCCEEDED,
                     *CLAIM_WAITS)
    conds = conditions.set_condition(conds, type_=REOPENED, status="True", reason=RERUN,
                                     message=message, now=now)
    return status.model_copy(update={
        "state": SlotState.RETRY_WAIT if status.launch_spec is not None
        and not has_dependencies else SlotState.PENDING,
        "pending_worker": None, "active_worker": None, "retry_at": None,
        "next_owner_actor": owner_actor, "conditions": conds, "cuts": cuts,
        "resends": status.resends if resends is None else resends,
        "reruns": status.reruns + 1,
        "attempts_before_rerun": status.attempt_count - status.asked_attempts,
        "questions": _closed(status.questions)})


def supersede(status: SlotStatus, *, cuts: list[str], message: str, now: datetime,
              dependency_reruns: int) -> SlotStatus:
    """Any state → Pending: a dependency was rerun, so this slot runs again after it, from
    its start (``cuts`` takes its whole prefix out).

    A live attempt (pending or active) is closed ``Superseded`` and becomes the prior
    worker, fenced next as a given-up one is; its records stay in the journal. The pinned
    LaunchSpec stays; ``maxAttempts`` counts afresh, as after a rerun. The dependencies'
    reruns it now follows (``dependency_reruns``) are recorded at once, so a slot that
    fails before it leaves Pending again (a dependency failed, the deadline) is not
    superseded a second time for the same rerun.
    """
    live = status.active_worker or status.pending_worker
    update: dict[str, object] = {}
    if live is not None:
        update = {"prior_worker": live, "attempts": _close(
            status, worker=live, outcome=Outcome.SUPERSEDED, message=message, exit_code=None,
            now=now)}
    conds = _without(status.conditions, AWAITING_REASSIGNMENT, NAME_SQUATTED, SUCCEEDED,
                     REOPENED, *CLAIM_WAITS, names.QUESTION_PENDING_CONDITION)
    conds = conditions.set_condition(conds, type_=SUPERSEDED_CONDITION, status="True",
                                     reason=RERUN, message=message, now=now)
    return status.model_copy(update={
        **update, "state": SlotState.PENDING, "pending_worker": None, "active_worker": None,
        "retry_at": None, "next_owner_actor": None, "conditions": conds, "cuts": cuts,
        "reruns": status.reruns + 1, "dependency_reruns": dependency_reruns,
        "attempts_before_rerun": status.attempt_count - status.asked_attempts,
        "questions": _closed(status.questions)})


def hold(status: SlotStatus, *, reason: str, now: datetime) -> SlotStatus:
    """Set ``Held``: no claim or reassignment until released; an Active attempt runs on."""
    return status.model_copy(update={"conditions": conditions.set_condition(
        status.conditions, type_=HELD, status="True", reason="HoldRequested", message=reason,
        now=now)})


def release(status: SlotStatus, *, message: str, now: datetime) -> SlotStatus:
    """Clear ``Held`` (to False, so the release stays visible)."""
    return status.model_copy(update={"conditions": conditions.set_condition(
        status.conditions, type_=HELD, status="False", reason="Released", message=message,
        now=now)})
