"""What every command's decision is made of: the command read, the decision, the ledger.

Shared by the per-command modules (:mod:`.reassign`, :mod:`.claim`, ...), which decide
one kind each, and by :mod:`.guards`, which answers duplicates and tenancy for all of them
first. The *ledger* (``status.commands``) records every decision by request id; a request
id already there is a no-op (``Duplicate``), so a crash between the status write and the
annotation removal can never apply a command twice or flip a rejection into an acceptance.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from agentrun.api import bounds, conditions, names
from agentrun.api.launchspecs import LaunchSpec
from agentrun.api.slots import (
    COMMANDS_KEPT,
    CommandKind,
    CommandRecord,
    Predicate,
    Slot,
    SlotStatus,
)
from agentrun.core.attempts import ending
from agentrun.core.attempts.observations import LeaseStatus, PodPhase
from agentrun.core.base.events import Event
from agentrun.core.launchspecs import selection
from agentrun.core.machine import transitions

# A failed predicate and the message a person reads (the ledger's and the Event's).
Failure = tuple[Predicate, str]


@dataclass(frozen=True, kw_only=True)
class Command:
    """One command read from a Slot's annotations, with the stamped actor."""

    kind: CommandKind
    request_id: str
    actor: str | None
    override: bool = False
    granted: frozenset[str] = frozenset()  # the spec's verbs admission found the actor holds
    reason: str | None = None
    worker_class: str | None = None
    run: str | None = None
    tenant: str | None = None
    effect_key: str | None = None  # resolve-effect: the effect's key, outcome and result
    outcome: str | None = None
    result: str | None = None
    question_key: str | None = None  # answer: the question's key, the answer (JSON text)
    value: str | None = None  # and the digest of the question it answers
    value_from: str | None = None  # an answer by reference: <configmap>/<key>@sha256:<hex>
    digest: str | None = None
    approval_key: str | None = None  # approve, deny: the effect's key and its payload's digest
    payload_digest: str | None = None
    from_step: str | None = None  # rerun: the committed step to redo from (None: the start)
    resend: str | None = None  # rerun: an applied effect to send again, and why
    resend_reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class Prior:
    """The prior attempt's pod phase and lease status, as observed now."""

    pod: PodPhase
    lease: LeaseStatus


@dataclass(frozen=True, kw_only=True)
class Decision:
    """The outcome of one command.

    ``status``: the exact new SlotStatus to write (with a resourceVersion precondition);
    for a duplicate, the unchanged status (write nothing). ``event``: the Event to emit
    (none for a duplicate). ``choice``: for an accepted reassignment, the LaunchSpec whose
    spec must be copied into the snapshot ``status.launchSpec.snapshot``. An accepted
    give-up makes the live attempt the prior worker; the fencing that follows is decided
    from the new status (``attemptlife.fence_step``), not carried here.
    """

    accepted: bool
    duplicate: bool = False
    predicate: Predicate | None = None
    status: SlotStatus
    event: Event | None = None
    choice: selection.Choice | None = None


@dataclass(frozen=True, kw_only=True)
class Context:
    """Everything one command is decided from: one argument, so every kind's check and
    apply have the same signature and the registry can hold them side by side.

    ``prior`` may be None only when the slot has no prior worker.
    """

    command: Command
    slot: Slot
    prior: Prior | None
    launch_specs: Iterable[LaunchSpec]
    now: datetime
    creator: str | None = None  # the run's verified creator (status.creator); None: none
    # ConfigMaps a command names by reference (an answer's value-from), read when it is
    # decided: name -> its data (None: not found).
    referenced: Mapping[str, Mapping[str, str] | None] = field(default_factory=dict)
    journaled: bool = True  # the run has a journal (an answer by reference needs one)
    # Where the records a rerun names were committed (its ``from_step``, the outcome of the
    # effect it sends again), by key (``api.cuts`` positions), read from the slot's journal
    # when the command is decided; a text: why it could not be read.
    commits: Mapping[str, tuple[tuple[int, int, int], ...]] | str | None = None
    # Why the run's journal cannot be read back at all (deleted, or being deleted by its
    # retention), None when it can or the run has none.
    journal_gone: str | None = None
    deadline_passed: bool = False  # the run's activeDeadlineSeconds has passed


def is_blank(reason: str | None) -> bool:
    """Empty, whitespace only, or longer than 1 KiB (UTF-8) counts as no usable reason."""
    return (reason is None or not reason.strip()
            or len(reason.encode()) > names.MAX_REASON_BYTES)


@dataclass(frozen=True, kw_only=True)
class Owner:
    """Who owns the attempt a command acts on.

    ``exists``: there is such an attempt (False: no attempt, nothing to own, no check).
    ``actor``: its owner: the person whose command led to it, or for an automatic attempt
    the run's creator as verified at pinning; None: no one owns it (a run without a
    verified creator), so only someone granted ``override`` may act on it.
    """

    exists: bool
    actor: str | None

    def refusal(self, command: Command, *, whose: str, what: str) -> Failure | None:
        """``NotOwner`` unless the command's actor owns the attempt or has ``override``."""
        if not self.exists or command.override or (
                self.actor is not None and command.actor == self.actor):
            return None
        held = (f"owned by {self.actor!r}" if self.actor is not None else
                "owned by no one (its run has no verified creator: run condition "
                "CreatorVerified)")
        return (Predicate.NOT_OWNER,
                f"{whose} is {held}, not {command.actor!r}; only the owner, or an admin "
                f"with the 'override' verb on slots, may {what}")


def owner_of(status: SlotStatus, worker: str | None) -> Owner:
    """The owner of the attempt ``worker``, if there is one."""
    record = next((a for a in status.attempts if a.pod == worker), None) if worker else None
    return Owner(exists=record is not None,
                 actor=None if record is None else record.owner_actor)


def seen(status: SlotStatus, request_id: str) -> CommandRecord | None:
    return next((c for c in status.commands if c.request_id == request_id), None)


def _record(command: Command, *, outcome: Literal["Accepted", "Rejected"],
            predicate: Predicate | None, message: str, now: datetime) -> CommandRecord:
    clip = bounds.clip
    return CommandRecord(
        request_id=command.request_id[:bounds.REQUEST_ID_CHARS], kind=command.kind,
        actor=bounds.optional_clip(command.actor, limit=bounds.ACTOR_CHARS),
        reason=None if command.reason is None else bounds.clip_bytes(
            command.reason, limit=bounds.REASON_BYTES),
        worker_class=bounds.optional_clip(command.worker_class, limit=names.MAX_NAME),
        run=bounds.optional_clip(command.run, limit=names.MAX_NAME),
        outcome=outcome, predicate=predicate,
        message=clip(message, limit=bounds.RECORD_MESSAGE_CHARS), time=now)


def _ledger(status: SlotStatus, record: CommandRecord) -> SlotStatus:
    return status.model_copy(update={"commands": [*status.commands, record][-COMMANDS_KEPT:]})


def reject(*, command: Command, status: SlotStatus, predicate: Predicate, message: str,
           now: datetime) -> Decision:
    """Ledger entry, condition CommandRejected and a Warning Event; nothing else changes."""
    new = _ledger(status, _record(command, outcome="Rejected", predicate=predicate,
                                  message=message, now=now))
    new = new.model_copy(update={"conditions": conditions.set_condition(
        new.conditions, type_=transitions.COMMAND_REJECTED, status="True",
        reason=str(predicate), message=f"{command.kind} {command.request_id}: {message}",
        now=now)})
    return Decision(accepted=False, predicate=predicate, status=new,
                    event=Event(type="Warning", reason="CommandRejected",
                                message=f"{command.kind} {command.request_id} rejected "
                                        f"({predicate}): {message}"))


def accept(*, command: Command, status: SlotStatus, message: str, reason: str,
           now: datetime) -> tuple[SlotStatus, Event]:
    """The ledger entry of an accepted command and its Normal Event (``reason``)."""
    new = _ledger(status, _record(command, outcome="Accepted", predicate=None,
                                  message=message, now=now))
    return new, Event(type="Normal", reason=reason, message=message)


def overridden(status: SlotStatus, *, command: Command, owner: Owner) -> SlotStatus:
    """Mark the ledger entry just added when only ``override`` let the actor act on
    another person's attempt, or on one no one owns (the audited admin path)."""
    if not owner.exists or (owner.actor is not None and command.actor == owner.actor):
        return status
    last = status.commands[-1].model_copy(update={"override": True})
    return status.model_copy(update={"commands": [*status.commands[:-1], last]})


def live_owner(status: SlotStatus) -> Owner:
    """The owner a give-up is checked against: a claim under way has no attempt record
    yet, its owner is the one it serves."""
    if status.pending_worker is not None:
        return Owner(exists=True, actor=status.next_owner_actor)
    return owner_of(status, status.active_worker or status.prior_worker)


def tenancy(command: Command, *, slot: Slot, tenant: str | None) -> Failure | None:
    """``WrongTenant``, checked first for every kind: a command naming another tenant."""
    if command.tenant is not None and command.tenant != tenant:
        return (Predicate.WRONG_TENANT,
                f"the command names tenant {command.tenant!r} but slot "
                f"{slot.metadata.name!r} belongs to tenant {tenant!r} (its namespace's)")
    return None


def attempt_limit(status: SlotStatus, *, name: str) -> Failure | None:
    """Every attempt leaves a Lease record: a slot has at most ``MAX_ATTEMPT_NUMBER``."""
    if status.attempt_count < bounds.MAX_ATTEMPT_NUMBER:
        return None
    return (Predicate.ATTEMPT_LIMIT,
            f"slot {name!r} has used all {bounds.MAX_ATTEMPT_NUMBER} attempt numbers a slot "
            "may have; give it up (agentrun.dev/give-up-*) and start a new run")


def ending_failure(context: Context, *, what: str) -> Failure | None:
    """The checks of a command that ends or settles the live attempt (give-up,
    resolve-effect): an open slot, a reason, and the owner (or ``override``)."""
    command, status, name = context.command, context.slot.status, context.slot.metadata.name
    if status.state not in transitions.OPEN_STATES:
        return (Predicate.NOT_RETRY_WAIT,
                f"slot {name!r} has already finished ({status.state}); nothing to give up")
    if is_blank(command.reason):
        return blank_reason()
    return live_owner(status).refusal(command, whose="the attempt", what=what)


def prior_live(status: SlotStatus, *, prior: Prior | None) -> Failure | None:
    """``PriorNotTerminal``: the prior attempt's pod or lease may still be live (the rule a
    reassignment and a rerun share: no attempt can be live when the slot is reopened)."""
    if status.prior_worker is None or (
            prior is not None and ending.is_terminal(pod=prior.pod, lease=prior.lease)):
        return None
    seen_as = f"pod {prior.pod}, lease {prior.lease}" if prior else "not observed"
    return (Predicate.PRIOR_NOT_TERMINAL,
            f"the prior attempt {status.prior_worker!r} is not terminal ({seen_as}); "
            "wait until its pod has finished and its lease is released or expired")


def wrong_run(command: Command, *, slot: Slot, annotation: str) -> Failure | None:
    """``WrongRun``: the command names another run than the slot's (``annotation``: where
    the command names it, for the message)."""
    if command.run == slot.spec.run:
        return None
    return (Predicate.WRONG_RUN,
            f"the command names run {command.run!r} but slot {slot.metadata.name!r} belongs "
            f"to run {slot.spec.run!r}; set {annotation} to the slot's run")


def blank_reason() -> Failure:
    return (Predicate.BLANK_REASON,
            f"the reason must be non-blank and at most {names.MAX_REASON_BYTES} bytes")


def claim_accepted(status: SlotStatus, *, request_id: str, actor: str | None,
                   now: datetime) -> SlotStatus:
    """The ledger entry of an accepted claim command, its actor the next attempt's owner.

    Written in the claim's one status write (with Active, or with ClaimFailed); until then
    the claim's Lease carries the request id and the actor, so the entry is rebuilt from
    the Lease after a crash (``attemptlife.claiming_world``).
    """
    command = Command(kind=CommandKind.CLAIM, request_id=request_id, actor=actor)
    message = f"claim requested by {actor}: attempt {status.attempt_count + 1} is next"
    new = _ledger(status, _record(command, outcome="Accepted", predicate=None,
                                  message=message, now=now))
    return new.model_copy(update={"next_owner_actor": actor})
