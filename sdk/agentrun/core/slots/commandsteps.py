"""The steps of a pending command (annotations): refused, rejected, or decided into the ledger.

:mod:`agentrun.core.slots.steps` decides *when* a command is looked at; here, what it
becomes: a command is refused unless its stamping can be believed, rejected when malformed
(out of its bounds) or when a claim is not possible now, else decided by
:mod:`agentrun.core.commands.guards` into the ledger; once it is there its annotations are
removed (with the slot's LaunchSpec label riding on that patch). An accepted claim command
starts the claim itself: its first write is the claim's Lease
(``attemptlife.claiming_step``).
"""

from __future__ import annotations

from agentrun.api import conditions, names
from agentrun.api.slots import Predicate, SlotStatus
from agentrun.core.attempts import ending
from agentrun.core.attempts.observations import LeaseStatus, lease_status, lease_view
from agentrun.core.base import actions, events, slotconditions
from agentrun.core.commands import guards, parsing, registry
from agentrun.core.policies import stamping
from agentrun.core.slots import attemptlife, attemptpods, decisions, inputs, specsnapshots

COMMANDS_REFUSED = "CommandsRefused"


def pinned_label(world: inputs.World) -> dict[str, str] | None:
    """The label naming the slot's pinned LaunchSpec, when it must change (else None).

    ``kubectl get slots -l agentrun.dev/launch-spec=<name>`` lists the slots that pin a
    spec. It rides on the annotation removal after a reassignment (no write of its own
    there) and otherwise is written only when the slot has nothing else to do. A name
    longer than a label value allows (63) is not labelled.
    """
    pinned = world.slot.status.launch_spec
    if pinned is None or len(pinned.name) > names.MAX_NAME:
        return None
    if world.slot.metadata.labels.get(names.LAUNCH_SPEC_LABEL) == pinned.name:
        return None
    return {names.LAUNCH_SPEC_LABEL: pinned.name}


def command_step(world: inputs.World, pending: parsing.Pending) -> decisions.Decided:
    """Decide a pending command into the ledger; once it is there, remove its annotations."""
    status = world.slot.status
    command = pending.command
    seen = guards.seen(status, command.request_id)
    if seen is not None:
        if seen.kind is command.kind:
            # The LaunchSpec label rides on an accepted command's removal (no write of its
            # own); a rejected command's removal changes nothing else on the slot.
            return actions.RemoveCommand(keys=pending.keys, labels=pinned_label(world)
                                        if seen.outcome == "Accepted" else None)
        return actions.RemoveCommand(keys=pending.keys, event=events.Event(
            type="Warning", reason="CommandRejected",
            message=(f"{command.kind} {command.request_id} not processed: the request id was "
                     f"already used by a {seen.kind} command; use a new request id")))
    refused = stamping.refusal(pending, world.stamping)
    if refused is not None:
        decision = guards.reject(command=command, status=status, predicate=refused.predicate,
                                 message=refused.message, now=world.now)
        new = decision.status
        if refused.not_in_force:
            new = slotconditions.set_condition(new, COMMANDS_REFUSED, "True", refused.reason,
                                               refused.message, world.now)
        return ledger(world, status=new, event=decision.event)
    if conditions.is_true(status.conditions, COMMANDS_REFUSED):
        status = slotconditions.set_condition(status, COMMANDS_REFUSED, "False", "StampingInForce",
                      "the actor-stamping admission policy is in force", world.now)
    if pending.malformed is not None:
        # After the stamping check: an out-of-bounds command is rejected into the ledger
        # only once its actor can be believed (else it is refused as unstamped/stale).
        decision = guards.reject(command=command, status=status, predicate=pending.predicate,
                                 message=f"{pending.malformed}; fix the command and re-issue "
                                         "it with a new request id", now=world.now)
        return ledger(world, status=decision.status, event=decision.event)
    slot = world.slot.model_copy(update={"status": status})
    assert world.run is not None
    limit = world.run.spec.max_active
    busy = limit is not None and world.active_in_run >= limit
    claims = registry.BY_KIND[command.kind].claims
    if claims and (world.run.spec.suspend or busy):
        why = ("the run is suspended (spec.suspend); resume it first" if world.run.spec.suspend
               else f"the run already has {world.active_in_run} attempts Claiming or Active, "
                    f"its spec.maxActive ({limit}); claim again when one has ended")
        decision = guards.reject(command=command, status=status,
                                 predicate=Predicate.NOT_CLAIMABLE, message=why, now=world.now)
        return ledger(world, status=decision.status, event=decision.event)
    try:
        decision = guards.decide(
            command=command,
            slot=slot, tenant=world.tenant, prior=prior(world),
            launch_specs=world.launch_specs, now=world.now,
            creator=attemptlife.run_creator(world), referenced=world.referenced,
            journaled=world.run is not None and world.run.status.pinned is not None
            and world.run.status.pinned.journal is not None, commits=world.commits,
            journal_gone=world.journal_gone, deadline_passed=inputs.deadline_passed(world))
    except ValueError as error:  # includes a model's ValidationError, IllegalTransition
        # A command that cannot be decided is rejected into the ledger, never retried forever.
        decision = guards.reject(command=command, status=status, predicate=Predicate.MALFORMED,
                                 message=f"the command could not be decided ({error})",
                                 now=world.now)
    new = decision.status
    if decision.accepted and decision.choice is not None:
        pinned = new.launch_spec
        assert pinned is not None
        if pinned.snapshot not in world.snapshots:
            return specsnapshots.create(world, pinned=pinned, spec=decision.choice.spec.spec)
    if decision.accepted and claims:
        # The claim's first write is its Lease (carrying the request id); the ledger
        # entry goes with the claim's one status write (Active, or ClaimFailed).
        return attemptlife.claiming_step(attemptlife.claiming_world(
            inputs.with_status(world, new), lease=None), request_id=command.request_id)
    return ledger(world, status=new, event=decision.event)


def ledger(world: inputs.World, *, status: SlotStatus,
           event: events.Event | None) -> actions.WriteStatus:
    """The status write recording a command in the ledger.

    It is ``fresh`` (decided again from a quorum read first) when the prior attempt's lease
    is judged expired: a cache that stopped receiving events must never let a command be
    accepted on a lease it only believes expired.
    """
    judged = prior(world)
    return actions.WriteStatus(status=status, event=event, point="command-ledger",
                               fresh=judged is not None and judged.lease is LeaseStatus.EXPIRED)


def prior(world: inputs.World) -> guards.Prior | None:
    """The prior attempt's pod phase and lease status, for the reassignment guard."""
    status = world.slot.status
    objects = world.attempt
    if status.prior_worker is None or objects is None or objects.name != status.prior_worker:
        return None
    pod = attemptpods.attempt_pod(world, objects=objects)
    lease = lease_view(objects.lease)
    observation, _ = attemptpods.own_renewals(world, objects=objects, lease=lease)
    started, now = attemptlife.start_window(world, objects.name)
    return guards.Prior(pod=pod.phase, lease=lease_status(
        observation=observation, lease=lease, now=now, claimed_at=started,
        start_deadline_seconds=attemptlife.start_deadline(world),
        lease_duration_seconds=attemptlife.lease_duration(world, lease), ticks=world.ticks,
        blind=world.blind, pod_finished=pod.phase in ending.EXITED))
