"""The next write for a slot: one pure function over everything the operator read.

The operator reconciles a slot by repeating three moves: read the *world* (the slot, its
run, the attempt's pod and lease, ...), ask :func:`next_step`, and apply the one *step*
it returns, every write with a precondition. It stops at a :class:`Wait`. Because each
step is decided afresh from what is in the API server, a crash between any two writes
is harmless: the restarted operator reads where the last one stopped and takes the next
step. Names are deterministic, so a repeated create finds its own object. The steps of
an attempt in hand (claiming, judging, fencing) are in :mod:`agentrun.core.attemptsteps`.

Order of concerns, first match wins:
1. no live run to serve (gone, being deleted, not this slot's), or the slot being
   deleted: wind down (follow an Active attempt to its end, fence it), never claim;
2. an ended attempt not yet fenced: kill its live pod, tombstone its lease, so that a
   command is judged against the attempt's final record; an Active attempt whose end
   (pod finished, lease expired) is due is judged before any command;
3. a pending command (annotations): refused unless its stamping can be believed, then
   rejected when malformed (out of its bounds), else decided into the ledger; then removed;
4. the slot's first status (``observedGeneration``);
5. a finished slot: nothing more; the run's deadline: fail the slot;
6. by state: Pending (dependencies, launch spec), Ready/RetryWait (claim when claimable
   and the prior attempt is over), Claiming (Lease, Pod, then Active), Active (the
   attempt table).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from agentrun.api import conditions, names
from agentrun.api.slots import (
    TERMINAL_STATES,
    CommandKind,
    Predicate,
    SlotState,
    SlotStatus,
)
from agentrun.core import (
    attempts,
    attemptsteps,
    commands,
    guards,
    selection,
    snapshots,
    stamping,
    transitions,
    worlds,
)
from agentrun.core.observations import lease_status, lease_view, pod_view

COMMANDS_REFUSED = "CommandsRefused"
LAUNCH_SPEC_SELECTED = "LaunchSpecSelected"
ENDED_STATES = frozenset({SlotState.RETRY_WAIT, SlotState.SUCCEEDED, SlotState.FAILED})


def next_step(world: worlds.World) -> worlds.Step:
    """The one next write for this slot; when it is to wait, first its LaunchSpec label."""
    step = _next_step(world)
    labels = pinned_label(world)
    if isinstance(step, worlds.Wait) and labels is not None:
        return worlds.RemoveCommand(keys=(), labels=labels, point="label")
    return step


def pinned_label(world: worlds.World) -> dict[str, str] | None:
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


def _next_step(world: worlds.World) -> worlds.Step:
    """The one next write for this slot (see the module docstring for the order)."""
    status = world.slot.status
    if world.run is None or world.slot.metadata.deletion_timestamp is not None:
        return wind_down(world)
    if status.state in ENDED_STATES:
        fence = attemptsteps.fence_step(world)
        if fence is not None:
            return fence
    if status.state is SlotState.ACTIVE:
        # Judging the attempt comes before any command: no command, however bad, may
        # delay the end of an attempt whose pod has finished or whose lease expired.
        judged = attemptsteps.active_step(world)
        if not isinstance(judged, worlds.Wait):
            return judged
    pending = commands.pending(world.slot.metadata.annotations)
    if pending is not None:
        return command_step(world, pending)
    if status.observed_generation != world.slot.metadata.generation:
        # The first status a slot gets: its state is visible from creation on.
        return worlds.WriteStatus(status=status.model_copy(update={
            "observed_generation": world.slot.metadata.generation}), point="observed")
    if status.state in TERMINAL_STATES:
        return worlds.Wait(message=f"the slot has {status.state}")
    if deadline_passed(world):
        message = (f"the run's activeDeadlineSeconds ({world.run.spec.active_deadline_seconds})"
                   " has passed")
        return worlds.WriteStatus(
            status=transitions.fail(status, reason="DeadlineExceeded", message=message,
                                    now=world.now),
            event=guards.Event(type="Warning", reason="DeadlineExceeded", message=message))
    if status.state is SlotState.PENDING:
        return by_deadline(world, pending_step(world))
    if status.state in (SlotState.READY, SlotState.RETRY_WAIT):
        return by_deadline(world, claim_step(world))
    if status.state is SlotState.CLAIMING:
        return attemptsteps.claiming_step(world)
    return attemptsteps.active_step(world)


def wind_down(world: worlds.World) -> worlds.Step:
    """No run to serve, or the slot is being deleted: no claim and no command, only fencing.

    An Active attempt is followed to its end (the table of DESIGN.md section 4) so that its
    lease is tombstoned with a true outcome; a claim under way fails (its run is gone).
    """
    status = world.slot.status
    why = ("the slot is being deleted" if world.slot.metadata.deletion_timestamp is not None
           else "the slot's run is gone, being deleted, or not the run that owns this slot")
    if status.state is SlotState.ACTIVE:
        return attemptsteps.active_step(world)
    if status.state is SlotState.CLAIMING:
        return attemptsteps.claim_failed(world, message=why)
    return attemptsteps.fence_step(world) or worlds.Wait(message=f"{why}: nothing to start")


def deadline(world: worlds.World) -> datetime | None:
    run = world.run
    if run is None or run.spec.active_deadline_seconds is None or run.status.start_time is None:
        return None
    return run.status.start_time + timedelta(seconds=run.spec.active_deadline_seconds)


def deadline_passed(world: worlds.World) -> bool:
    limit = deadline(world)
    return limit is not None and world.now >= limit


def by_deadline(world: worlds.World, step: worlds.Step) -> worlds.Step:
    """A waiting open slot looks again at the run's deadline at the latest, to fail then."""
    limit = deadline(world)
    if not isinstance(step, worlds.Wait) or limit is None or (
            step.until is not None and step.until <= limit):
        return step
    return dataclasses.replace(step, until=limit)


def command_step(world: worlds.World, pending: commands.Pending) -> worlds.Step:
    """Decide a pending command into the ledger; once it is there, remove its annotations."""
    status = world.slot.status
    command = pending.command
    seen = guards.seen(status, command.request_id)
    if seen is not None:
        if seen.kind is command.kind:
            return worlds.RemoveCommand(keys=pending.keys, labels=pinned_label(world))
        return worlds.RemoveCommand(keys=pending.keys, event=guards.Event(
            type="Warning", reason="CommandRejected",
            message=(f"{command.kind} {command.request_id} not processed: the request id was "
                     f"already used by a {seen.kind} command; use a new request id")))
    refused = stamping.refusal(pending, world.stamping)
    if refused is not None:
        decision = guards.reject(command=command, status=status, predicate=refused.predicate,
                                 message=refused.message, now=world.now)
        new = decision.status
        if refused.not_in_force:
            new = _set(new, COMMANDS_REFUSED, "True", refused.reason, refused.message,
                       world.now)
        return worlds.WriteStatus(status=new, event=decision.event, point="command-ledger")
    if conditions.is_true(status.conditions, COMMANDS_REFUSED):
        status = _set(status, COMMANDS_REFUSED, "False", "StampingInForce",
                      "the actor-stamping admission policy is in force", world.now)
    if pending.malformed is not None:
        # After the stamping check: an out-of-bounds command is rejected into the ledger
        # only once its actor can be believed (else it is refused as unstamped/stale).
        decision = guards.reject(command=command, status=status, predicate=pending.predicate,
                                 message=f"{pending.malformed}; fix the command and re-issue "
                                         "it with a new request id", now=world.now)
        return worlds.WriteStatus(status=decision.status, event=decision.event,
                                  point="command-ledger")
    slot = world.slot.model_copy(update={"status": status})
    assert world.run is not None
    limit = world.run.spec.max_active
    busy = limit is not None and world.active_in_run >= limit
    if command.kind is CommandKind.CLAIM and (world.run.spec.suspend or busy):
        why = ("the run is suspended (spec.suspend); resume it first" if world.run.spec.suspend
               else f"the run already has {world.active_in_run} attempts Claiming or Active, "
                    f"its spec.maxActive ({limit}); claim again when one has ended")
        decision = guards.reject(command=command, status=status,
                                 predicate=Predicate.NOT_CLAIMABLE, message=why, now=world.now)
        return worlds.WriteStatus(status=decision.status, event=decision.event,
                                  point="command-ledger")
    try:
        decision = guards.decide(
            command=command,
            slot=slot, tenant=world.tenant, prior=prior(world),
            launch_specs=world.launch_specs, now=world.now)
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
            return worlds.Create(body=snapshots.body(slot=world.slot, pinned=pinned,
                                              spec=decision.choice.spec.spec,
                                              tenant=world.tenant),
                          point="launch-spec-snapshot")
    if decision.accepted and command.kind is CommandKind.CLAIM:
        new = transitions.start_claim(new, slot=world.slot.metadata.name, now=world.now)
    return worlds.WriteStatus(status=new, event=decision.event, point="command-ledger")


def prior(world: worlds.World) -> guards.Prior | None:
    """The prior attempt's pod phase and lease status, for the reassignment guard."""
    status = world.slot.status
    objects = world.attempt
    if status.prior_worker is None or objects is None or objects.name != status.prior_worker:
        return None
    pod = pod_view(objects.pod)
    lease = lease_view(objects.lease)
    return guards.Prior(pod=pod.phase, lease=lease_status(
        observation=world.observation, lease=lease, now=world.now,
        claimed_at=attemptsteps.started_at(world, objects.name),
        start_deadline_seconds=attemptsteps.start_deadline(world),
        lease_duration_seconds=attemptsteps.lease_duration(world, lease), ticks=world.ticks))


def pending_step(world: worlds.World) -> worlds.Step:
    """Pending → Ready once every dependency succeeded and a launch spec is pinned."""
    status = world.slot.status
    spec = world.slot.spec
    failed = [node for node in spec.depends_on
              if world.dependencies.get(node) is SlotState.FAILED]
    if failed:
        message = f"dependency {', '.join(failed)} failed; this slot cannot run"
        return worlds.WriteStatus(
            status=transitions.fail(status, reason="DependencyFailed", message=message,
                                    now=world.now),
            event=guards.Event(type="Warning", reason="DependencyFailed", message=message))
    waiting = [node for node in spec.depends_on
               if world.dependencies.get(node) is not SlotState.SUCCEEDED]
    if waiting:
        return worlds.Wait(message=f"waiting for {', '.join(waiting)} to succeed")
    worker_class = status.worker_class or spec.worker_class
    chosen = selection.select(specs=world.launch_specs,
                              namespace=world.slot.metadata.namespace or "",
                              run=spec.run, node=spec.node, worker_class=worker_class)
    if isinstance(chosen, selection.NoChoice):
        new = _set(status, LAUNCH_SPEC_SELECTED, "False", str(chosen.predicate),
                   chosen.message, world.now)
        if new == status:
            return worlds.Wait(message=chosen.message)
        return worlds.WriteStatus(status=new, event=guards.Event(
            type="Warning", reason=str(chosen.predicate), message=chosen.message))
    pinned = guards.pin(slot=world.slot.metadata.name, choice=chosen)
    if pinned.snapshot not in world.snapshots:
        return worlds.Create(body=snapshots.body(slot=world.slot, pinned=pinned,
                                                 spec=chosen.spec.spec, tenant=world.tenant),
                             point="launch-spec-snapshot")
    ready = transitions.deps_met(status, worker_class=worker_class, launch_spec=pinned,
                                 now=world.now)
    ready = _set(ready, LAUNCH_SPEC_SELECTED, "True", "Selected", chosen.reason, world.now)
    return worlds.WriteStatus(status=ready, event=guards.Event(
        type="Normal", reason="Ready", message=f"ready to claim: {chosen.reason}"))


def claim_step(world: worlds.World) -> worlds.Step:
    """Ready or RetryWait: start a claim when claimable, else wait (for retryAt)."""
    status = world.slot.status
    assert world.run is not None
    if world.run.spec.suspend:
        return worlds.Wait(message="the run is suspended")
    if status.prior_worker is not None and world.attempt is not None and (
            pod_view(world.attempt.pod).phase not in attempts.FINISHED):
        # A replacement only once the predecessor's pod is gone or finished (its lease is
        # tombstoned by then): a pod still Terminating on a lost node may still act.
        return worlds.Wait(message=f"waiting until the pod of {status.prior_worker} is gone "
                                   f"(it is {pod_view(world.attempt.pod).phase})")
    limit = world.run.spec.max_active
    if limit is not None and world.active_in_run >= limit and transitions.may_be_claimed(
            status, now=world.now):
        return worlds.Wait(message=f"the run has {world.active_in_run} attempts Claiming or "
                                   f"Active, its spec.maxActive ({limit}): waiting for one "
                                   "to end")
    if transitions.is_claimable(status, now=world.now, claim_policy=world.run.spec.claim_policy):
        return worlds.WriteStatus(status=transitions.start_claim(
            status, slot=world.slot.metadata.name, now=world.now), point="claiming")
    if conditions.is_true(status.conditions, transitions.AWAITING_REASSIGNMENT):
        return worlds.Wait(message="attempts exhausted: awaiting reassignment or give-up")
    if status.retry_at is not None and status.retry_at > world.now:
        return worlds.Wait(message="waiting to retry", until=status.retry_at)
    # Not claimable although no retry time is ahead: waiting for a person, never for a past
    # time (a past ``until`` is due again on every tick of the scheduler).
    if transitions.is_held(status):
        return worlds.Wait(message="the slot is held; release it (agentrun.dev/release-id)")
    if world.run.spec.claim_policy == "Manual":
        return worlds.Wait(message="waiting for a claim command (claimPolicy Manual)")
    return worlds.Wait(message="not claimable: no launch spec is pinned")


def needs_attempt_objects(status: SlotStatus) -> str | None:
    """Which attempt's pod and lease the world must include: pending, active, else prior."""
    return status.pending_worker or status.active_worker or status.prior_worker


def _set(status: SlotStatus, type_: str, value: conditions.ConditionStatus, reason: str,
         message: str, now: datetime) -> SlotStatus:
    return status.model_copy(update={"conditions": conditions.set_condition(
        status.conditions, type_=type_, status=value, reason=reason, message=message, now=now)})


