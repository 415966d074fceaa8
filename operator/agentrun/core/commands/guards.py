"""The guarded commands: reassignment, and claim, hold, release, give up.

The design, with its reasons: docs/design/commands-and-trust.md.

A *command* is a set of annotations a person put on a Slot, with the *actor* stamped by
admission from the authenticated user (never from the person's text) and ``override``
meaning that actor holds the RBAC verb ``override`` on ``slots`` (stamped too, decided by
the API server's authorizer with the requester's groups). The *ledger*
(``status.commands``) records every decision by request id; a request id already there
is a no-op (``Duplicate``), so a crash between the status write and the annotation
removal can never apply a command twice or flip a rejection into an acceptance.

A reassignment is accepted only if every predicate holds; the first that fails, in this
order, is the one reported (the ledger's ``predicate``):

1. ``WrongTenant``: the command names a tenant other than the namespace's;
2. ``WrongRun``: the command's run is not the slot's run (a missing run is wrong too);
3. ``NotRetryWait``: the slot is not in RetryWait;
4. ``Held``: the slot is held;
5. ``PriorNotTerminal``: the prior attempt's pod or lease is not terminal;
6. ``BlankReason``: the reason is empty, blank, or longer than 1 KiB;
7. ``NotOwner``: the prior attempt records an owner actor, the command's actor differs,
   and the actor has no ``override``;
8. ``AttemptLimitReached``: the slot has used ``bounds.MAX_ATTEMPT_NUMBER`` attempts;
9. ``UnknownWorkerClass`` / ``NoCompatibleLaunchSpec``: no LaunchSpec can serve the
   requested worker class for this run and node.

A resolve-effect is checked like a give-up (open slot, a reason, the
owner or ``override``), then by :mod:`agentrun.core.attempts.effectrecords` (the key names an open
unresolved effect); a claim command is rejected ``EffectUnresolved`` while one is open.

The decision is data: the exact new status, one Event, and (when accepted) the chosen
LaunchSpec to snapshot. A decision never creates an attempt.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
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
    SlotState,
    SlotStatus,
)
from agentrun.core.attempts import effectrecords, ending
from agentrun.core.attempts.observations import LeaseStatus, PodPhase
from agentrun.core.base.events import Event
from agentrun.core.launchspecs import launchpins, selection
from agentrun.core.machine import transitions


@dataclass(frozen=True, kw_only=True)
class Command:
    """One command read from a Slot's annotations, with the stamped actor."""

    kind: CommandKind
    request_id: str
    actor: str | None
    override: bool = False
    reason: str | None = None
    worker_class: str | None = None
    run: str | None = None
    tenant: str | None = None
    effect_key: str | None = None  # resolve-effect: the effect's key, outcome and result
    outcome: str | None = None
    result: str | None = None


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


def is_blank(reason: str | None) -> bool:
    """Empty, whitespace only, or longer than 1 KiB (UTF-8) counts as no usable reason."""
    return (reason is None or not reason.strip()
            or len(reason.encode()) > names.MAX_REASON_BYTES)


def owner_of(status: SlotStatus, worker: str | None) -> str | None:
    """The owner actor recorded on the attempt ``worker``, if any."""
    return next((a.owner_actor for a in status.attempts if a.pod == worker), None)


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


def _accept(*, command: Command, status: SlotStatus, message: str, reason: str,
            now: datetime) -> tuple[SlotStatus, Event]:
    new = _ledger(status, _record(command, outcome="Accepted", predicate=None,
                                  message=message, now=now))
    return new, Event(type="Normal", reason=reason, message=message)


def _overridden(status: SlotStatus, *, command: Command, owner: str | None) -> SlotStatus:
    """Mark the ledger entry just added when only ``override`` let the actor act on
    another person's attempt (the audited admin path)."""
    if owner is None or command.actor == owner:
        return status
    last = status.commands[-1].model_copy(update={"override": True})
    return status.model_copy(update={"commands": [*status.commands[:-1], last]})


def _give_up_owner(status: SlotStatus) -> str | None:
    """The owner a give-up is checked against: a claim under way has no attempt record
    yet, its owner is the one it serves."""
    if status.pending_worker is not None:
        return status.next_owner_actor
    return owner_of(status, status.active_worker or status.prior_worker)


def _tenancy(command: Command, *, slot: Slot, tenant: str | None) -> tuple[Predicate, str] | None:
    if command.tenant is not None and command.tenant != tenant:
        return (Predicate.WRONG_TENANT,
                f"the command names tenant {command.tenant!r} but slot "
                f"{slot.metadata.name!r} belongs to tenant {tenant!r} (its namespace's)")
    return None


def _reassign_failure(
    *, command: Command, slot: Slot, tenant: str | None, prior: Prior | None,
) -> tuple[Predicate, str] | None:
    """The first failed reassignment predicate up to NotOwner (classes are checked after)."""
    status = slot.status
    name = slot.metadata.name
    failed = _tenancy(command, slot=slot, tenant=tenant)
    if failed:
        return failed
    if command.run != slot.spec.run:
        return (Predicate.WRONG_RUN,
                f"the command names run {command.run!r} but slot {name!r} belongs to run "
                f"{slot.spec.run!r}; set agentrun.dev/reassign-run to the slot's run")
    if status.state is not SlotState.RETRY_WAIT:
        return (Predicate.NOT_RETRY_WAIT,
                f"slot {name!r} is {status.state}, not RetryWait: only a slot whose last "
                "attempt ended can be reassigned")
    if transitions.is_held(status):
        return (Predicate.HELD,
                f"slot {name!r} is held; release it (agentrun.dev/release-id) first")
    if status.prior_worker is not None and (
            prior is None or not ending.is_terminal(pod=prior.pod, lease=prior.lease)):
        seen_as = f"pod {prior.pod}, lease {prior.lease}" if prior else "not observed"
        return (Predicate.PRIOR_NOT_TERMINAL,
                f"the prior attempt {status.prior_worker!r} is not terminal ({seen_as}); "
                "wait until its pod has finished and its lease is released or expired")
    if is_blank(command.reason):
        return (Predicate.BLANK_REASON,
                "the reason (agentrun.dev/reassign-reason) must be non-blank and at most "
                f"{names.MAX_REASON_BYTES} bytes")
    owner = owner_of(status, status.prior_worker)
    if owner is not None and command.actor != owner and not command.override:
        return (Predicate.NOT_OWNER,
                f"the prior attempt is owned by {owner!r}, not {command.actor!r}; only the "
                "owner, or an admin with the 'override' verb on slots, may reassign it")
    return attempt_limit(status, name=name)


def attempt_limit(status: SlotStatus, *, name: str) -> tuple[Predicate, str] | None:
    """Every attempt leaves a Lease record: a slot has at most ``MAX_ATTEMPT_NUMBER``."""
    if status.attempt_count < bounds.MAX_ATTEMPT_NUMBER:
        return None
    return (Predicate.ATTEMPT_LIMIT,
            f"slot {name!r} has used all {bounds.MAX_ATTEMPT_NUMBER} attempt numbers a slot "
            "may have; give it up (agentrun.dev/give-up-*) and start a new run")


def reassign(
    *, command: Command, slot: Slot, tenant: str | None, prior: Prior | None,
    launch_specs: Iterable[LaunchSpec], now: datetime,
) -> Decision:
    """Decide a reassignment (called by :func:`decide`, which answers duplicates first).

    ``prior`` may be None only when the slot has no prior worker.
    """
    status = slot.status
    failed = _reassign_failure(command=command, slot=slot, tenant=tenant, prior=prior)
    if failed:
        return reject(command=command, status=status, predicate=failed[0], message=failed[1],
                      now=now)
    worker_class = command.worker_class or status.worker_class or slot.spec.worker_class
    chosen = selection.select(specs=launch_specs, namespace=slot.metadata.namespace,
                              run=slot.spec.run, node=slot.spec.node, worker_class=worker_class)
    if isinstance(chosen, selection.NoChoice):
        return reject(command=command, status=status, predicate=chosen.predicate,
                      message=chosen.message, now=now)
    pinned = launchpins.pin(run=slot.spec.run, choice=chosen)
    message = (f"reassigned by {command.actor} to worker class {worker_class!r} "
               f"({chosen.reason}); reason: {command.reason}; the next claim creates "
               f"attempt {status.attempt_count + 1}")
    new, event = _accept(command=command, status=status, message=message, reason="Reassigned",
                         now=now)
    new = _overridden(new, command=command, owner=owner_of(status, status.prior_worker))
    new = transitions.reopen(new, worker_class=worker_class, launch_spec=pinned,
                             owner_actor=command.actor, message=message, now=now)
    return Decision(accepted=True, status=new, event=event, choice=chosen)


def decide(
    *, command: Command, slot: Slot, tenant: str | None, prior: Prior | None,
    launch_specs: Iterable[LaunchSpec], now: datetime,
) -> Decision:
    """Decide any command by its kind (reassign, claim, hold, release, give up).

    Claim: accepted when the slot is claimable on request (``NotClaimable`` otherwise);
    the caller then starts the claim (its Lease first), and the actor becomes the
    attempt's owner. Hold needs a reason. Give up is owner-checked like a reassignment
    and accepted in any open state (its live attempt becomes the prior, fenced next). A
    claim command is judged as the manual request it is, whatever the run's policy.
    """
    status = slot.status
    if seen(status, command.request_id) is not None:
        return Decision(accepted=False, duplicate=True, predicate=Predicate.DUPLICATE,
                        status=status)
    if command.kind is CommandKind.REASSIGN:
        return reassign(command=command, slot=slot, tenant=tenant, prior=prior,
                        launch_specs=launch_specs, now=now)
    failed = _tenancy(command, slot=slot, tenant=tenant)
    if failed is None:
        failed = _other_failure(command=command, slot=slot, now=now)
    if failed:
        return reject(command=command, status=status, predicate=failed[0], message=failed[1],
                      now=now)
    return _apply_other(command=command, slot=slot, now=now)


def _other_failure(*, command: Command, slot: Slot,
                   now: datetime) -> tuple[Predicate, str] | None:
    status = slot.status
    name = slot.metadata.name
    kind = command.kind
    if kind is CommandKind.CLAIM and effectrecords.blocking(status, slot=name):
        return (Predicate.EFFECT_UNRESOLVED, effectrecords.blocking(status, slot=name) or "")
    if kind is CommandKind.CLAIM and not transitions.may_be_claimed(status, now=now):
        held = " and held" if transitions.is_held(status) else ""
        return (Predicate.NOT_CLAIMABLE,
                f"slot {name!r} is {status.state}{held}: a claim needs a Ready slot, or a "
                "RetryWait slot that was reassigned or whose retry time has come")
    if kind is CommandKind.CLAIM and attempt_limit(status, name=name) is not None:
        return attempt_limit(status, name=name)
    if kind is CommandKind.RELEASE and not transitions.is_held(status):
        return (Predicate.NOT_HELD, f"slot {name!r} is not held: there is nothing to release")
    if kind in ENDING and status.state not in transitions.OPEN_STATES:
        return (Predicate.NOT_RETRY_WAIT,
                f"slot {name!r} has already finished ({status.state}); nothing to give up")
    if kind in (CommandKind.HOLD, *ENDING) and is_blank(command.reason):
        return (Predicate.BLANK_REASON,
                f"the reason must be non-blank and at most {names.MAX_REASON_BYTES} bytes")
    if kind in ENDING:
        owner = _give_up_owner(status)
        if owner is not None and command.actor != owner and not command.override:
            what = "give up" if kind is CommandKind.GIVE_UP else "resolve its effects"
            return (Predicate.NOT_OWNER,
                    f"the attempt is owned by {owner!r}, not {command.actor!r}; only the "
                    f"owner, or an admin with the 'override' verb on slots, may {what}")
    if kind is CommandKind.RESOLVE_EFFECT:
        return effectrecords.failure(key=command.effect_key, outcome=command.outcome,
                                     result=command.result, status=status, slot=name)
    return None


# The commands checked like a give-up: open slot, a reason, the owner (or override).
ENDING = (CommandKind.GIVE_UP, CommandKind.RESOLVE_EFFECT)


def _apply_other(*, command: Command, slot: Slot, now: datetime) -> Decision:
    status = slot.status
    actor = command.actor
    if command.kind is CommandKind.CLAIM:
        new = claim_accepted(status, request_id=command.request_id, actor=actor, now=now)
        return Decision(accepted=True, status=new, event=Event(
            type="Normal", reason="Claimed", message=new.commands[-1].message))
    if command.kind is CommandKind.HOLD:
        message = f"held by {actor}: {command.reason}"
        new, event = _accept(command=command, status=status, message=message,
                             reason="Held", now=now)
        return Decision(accepted=True, status=transitions.hold(new, reason=message, now=now),
                        event=event)
    if command.kind is CommandKind.RELEASE:
        message = f"released by {actor}"
        new, event = _accept(command=command, status=status, message=message,
                             reason="Released", now=now)
        return Decision(accepted=True, status=transitions.release(new, message=message, now=now),
                        event=event)
    if command.kind is CommandKind.RESOLVE_EFFECT:
        return _resolve_effect(command=command, slot=slot, now=now)
    message = f"given up by {actor}: {command.reason}"
    new, event = _accept(command=command, status=status, message=message, reason="GaveUp",
                         now=now)
    new = _overridden(new, command=command, owner=_give_up_owner(status))
    return Decision(accepted=True, status=transitions.fail(new, reason="GaveUp",
                                                           message=message, now=now),
                    event=event)


def _resolve_effect(*, command: Command, slot: Slot, now: datetime) -> Decision:
    """The owner's answer recorded: the effect's entry resolved, the condition updated."""
    assert command.effect_key is not None and command.outcome is not None
    message = (f"effect key {command.effect_key} resolved {command.outcome} by "
               f"{command.actor}: {command.reason}")
    new, event = _accept(command=command, status=slot.status, message=message,
                         reason=names.EFFECT_RESOLVED_EVENT, now=now)
    new = _overridden(new, command=command, owner=_give_up_owner(slot.status))
    return Decision(accepted=True, event=event, status=effectrecords.resolve(
        new, key=command.effect_key, outcome=command.outcome, reason=command.reason or "",
        actor=command.actor, result=command.result, slot=slot.metadata.name, now=now))


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
