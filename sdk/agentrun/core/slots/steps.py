"""The next write for a slot: one pure function over everything the operator read.

The operator reconciles a slot by repeating three moves: read the *world* (the slot, its
run, the attempt's pod and lease, ...), ask :func:`decide`, and apply the one *step*
it returns (``core.base.actions``), every write with a precondition. It stops at a
``Wait``. :func:`decide` hands the step out with the world it was decided in (a claim's:
its claiming world), which the loop gives back to :func:`on_exists` or
``attemptlife.on_rejected`` should the create fail; :func:`next_step` is its step alone.
Because each step is decided afresh from what is in the API server, a crash between any
two writes is harmless: the restarted operator reads where the last one stopped and takes
the next step. Names are deterministic, so a repeated create finds its own object. The steps of
an attempt in hand (claiming, judging, fencing) are in :mod:`agentrun.core.slots.attemptlife`.

Order of concerns, first match wins:
1. no live run to serve (gone, being deleted, not this slot's), or the slot being
   deleted: wind down (follow an Active attempt to its end, fence it), never claim;
2. an ended attempt not yet fenced: kill its live pod, tombstone its lease, so that a
   command is judged against the attempt's final record; an Active attempt whose end
   (pod finished, lease expired) is due is judged before any command; then an effect
   the latest attempt recorded unresolved is shown (``core.slots.effectsteps``), so no
   command or claim is decided without it, and so is its journal's store not answering
   (``core.slots.journalsteps``), and an attempt whose pod is stuck on a lost node
   (``core.slots.nodesteps``);
3. a pending command (annotations): refused unless its stamping can be believed, then
   rejected when malformed (out of its bounds), else decided into the ledger; then removed;
4. the slot's first status (``observedGeneration``);
5. a finished slot: nothing more; the run's deadline: fail the slot;
6. by state: Pending (dependencies, launch spec), Ready/RetryWait (claim when claimable,
   the prior attempt is over and no effect is unresolved), Claiming (Lease, Pod, then
   Active), Active (the attempt table).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from agentrun.api import conditions
from agentrun.api.slots import (
    TERMINAL_STATES,
    SlotState,
)
from agentrun.core.attempts import attemptobjects, ending, usagerecords
from agentrun.core.base import actions, events, slotconditions
from agentrun.core.commands import parsing
from agentrun.core.launchspecs import launchpins, selection
from agentrun.core.machine import transitions
from agentrun.core.slots import (
    attemptlife,
    attemptpods,
    budgetsteps,
    commandsteps,
    decisions,
    effectsteps,
    inputs,
    journalsteps,
    nodesteps,
    questionsteps,
    rerunsteps,
    specsnapshots,
    squats,
)

LAUNCH_SPEC_SELECTED = "LaunchSpecSelected"
ENDED_STATES = frozenset({SlotState.RETRY_WAIT, SlotState.SUCCEEDED, SlotState.FAILED})


def decide(world: inputs.World) -> decisions.Decision:
    """The one next write for this slot, with the world it was decided in (a claim's: its
    claiming world, for what follows a failed create); when it is to wait, first its
    LaunchSpec label."""
    decided = decisions.settled(_next_step(world), world=world)
    step = decided.step
    if isinstance(step, actions.WriteStatus) and world.attempt is not None:
        # The attempt's model usage rides on any status write that sees its Lease.
        step = dataclasses.replace(step, status=usagerecords.observed(
            step.status, name=world.attempt.name, lease=world.attempt.lease))
        decided = dataclasses.replace(decided, step=step)
    if isinstance(step, actions.WriteStatus) and step.status == world.slot.status:
        return decisions.Decision(step=actions.Wait(
            message="nothing to write: the status is as decided"), world=world)
    labels = commandsteps.pinned_label(world)
    if (isinstance(step, actions.Wait) and labels is not None
            and world.slot.status.state is SlotState.READY):
        # Only a slot that waits Ready (not claimed at once) gets it on its own; otherwise
        # it rides on a command's annotation removal (no write of its own).
        return decisions.Decision(step=actions.RemoveCommand(
            keys=(), labels=labels, point="label"), world=world)
    return decided


def next_step(world: inputs.World) -> actions.Step:
    """The one next write for this slot (:func:`decide`'s step)."""
    return decide(world).step


def _next_step(world: inputs.World) -> decisions.Decided:
    """The one next write for this slot (see the module docstring for the order)."""
    status = world.slot.status
    if world.run is None or world.slot.metadata.deletion_timestamp is not None:
        return wind_down(world)
    if status.state in ENDED_STATES or status.state is SlotState.PENDING:
        fence = attemptlife.fence_step(world)  # Pending: a superseded attempt
        if fence is not None:
            return fence
    if status.state is SlotState.ACTIVE:
        # Judging the attempt comes before any command: no command, however bad, may
        # delay the end of an attempt whose pod has finished or whose lease expired.
        judged = attemptlife.active_step(world)
        if not isinstance(judged, actions.Wait):
            return judged
    # An effect the worker left unresolved is shown before anything else is decided, so
    # that neither a command nor a claim is decided without it (see core.slots.effectsteps).
    observed = (effectsteps.observe_step(world) or journalsteps.observe_step(world)
                or nodesteps.observe_step(world))
    if observed is not None:
        return observed
    # The slot's first status is written with the next status write, or on its own
    # when the slot is to wait (its state is visible from creation on).
    seen = world
    if status.observed_generation != world.slot.metadata.generation:
        world = inputs.with_status(world, status.model_copy(update={
            "observed_generation": world.slot.metadata.generation}))
    # A claim under way (its Lease exists) is finished before any command, like an end.
    claiming = under_way(world)
    if claiming is not None:
        return claiming if not isinstance(claiming, inputs.World) else (
            attemptlife.claiming_step(claiming))
    superseded = rerunsteps.supersede_step(world)
    if superseded is not None:
        return superseded
    step = _decide(world)
    if isinstance(step, actions.Wait) and world.slot.status != seen.slot.status:
        return actions.WriteStatus(status=world.slot.status, point="observed")
    return step


def _decide(world: inputs.World) -> decisions.Decided:
    status = world.slot.status
    assert world.run is not None
    pending = parsing.pending(world.slot.metadata.annotations)
    if pending is not None:
        return commandsteps.command_step(world, pending)
    if status.state in TERMINAL_STATES:
        return actions.Wait(message=f"the slot has {status.state}")
    if inputs.deadline_passed(world):
        message = (f"the run's activeDeadlineSeconds ({world.run.spec.active_deadline_seconds})"
                   " has passed")
        return actions.WriteStatus(
            status=transitions.fail(status, reason="DeadlineExceeded", message=message,
                                    now=world.now),
            event=events.Event(type="Warning", reason="DeadlineExceeded", message=message))
    if status.state is SlotState.PENDING:  # (rerun with an effect open: its claim waits)
        return by_deadline(world, effectsteps.gate(world) or budgetsteps.gate(world)
                           or pending_step(world))
    if status.state in (SlotState.READY, SlotState.RETRY_WAIT):
        expired = questionsteps.expiry_step(world)
        if expired is not None:
            return expired
        return by_deadline(world, effectsteps.gate(world) or questionsteps.gate(world)
                           or budgetsteps.gate(world) or claim_step(world))
    # Every open slot that waits looks again at the run's deadline at the latest: nothing
    # else would wake an Active one whose lease is renewed until then.
    if status.state is SlotState.CLAIMING:
        return by_deadline(world, attemptlife.claiming_step(world))
    return by_deadline(world, attemptlife.active_step(world))


def under_way(world: inputs.World) -> inputs.World | actions.Step | None:
    """The claiming world when a claim of attempt n+1 is under way, else None.

    A Pending slot's claim started from its Ready status decided in memory: it is
    decided again (the same pin, unless the LaunchSpecs changed meanwhile: then the
    selection's step, or a ClaimFailed when the Lease names another spec).
    """
    objects = world.next_attempt
    status = world.slot.status
    if objects is None or not attemptobjects.under_way(objects.lease,
                                               slot_uid=world.slot.metadata.uid or "",
                                               attempt=status.attempt_count + 1):
        return None
    if status.state is SlotState.PENDING:
        opened = ready_world(world)
        if not isinstance(opened, inputs.World):
            return opened
        world = opened
    return attemptlife.under_way(world)


def wind_down(world: inputs.World) -> actions.Step:
    """No run to serve, or the slot is being deleted: no claim and no command, only fencing.

    An Active attempt is followed to its end (the table of docs/design/states.md) so that its
    lease is tombstoned with a true outcome; a claim under way fails (its run is gone): no
    Pod, the attempt is recorded as ClaimFailed, and its Lease is then tombstoned.
    """
    status = world.slot.status
    why = ("the slot is being deleted" if world.slot.metadata.deletion_timestamp is not None
           else "the slot's run is gone, being deleted, or not the run that owns this slot")
    if status.state is SlotState.ACTIVE:
        return attemptlife.active_step(world)
    if status.state is SlotState.CLAIMING:
        return attemptlife.claim_failed(world, message=why)
    objects = world.next_attempt
    if objects is not None and attemptobjects.under_way(
            objects.lease, slot_uid=world.slot.metadata.uid or "",
            attempt=status.attempt_count + 1):
        # A Pending slot's claim started from its Ready status decided in memory.
        opened = ready_world(world) if status.state is SlotState.PENDING else world
        if isinstance(opened, inputs.World):
            return attemptlife.claim_failed(
                attemptlife.claiming_world(opened, lease=objects.lease), message=why)
    return attemptlife.fence_step(world) or actions.Wait(message=f"{why}: nothing to start")


def by_deadline(world: inputs.World, step: decisions.Decided) -> decisions.Decided:
    """A waiting open slot looks again at the run's deadline at the latest, to fail then."""
    limit = inputs.deadline(world)
    if not isinstance(step, actions.Wait) or limit is None or (
            step.until is not None and step.until <= limit):
        return step
    return dataclasses.replace(step, until=limit)


def pending_step(world: inputs.World) -> decisions.Decided:
    """Pending: once every dependency succeeded and a launch spec is pinned, claim.

    The Ready status (pin, worker class) is decided in memory and written with the
    claim's one status write; it is written on its own only when the slot is to wait
    (not claimable now: Manual policy, suspended, maxActive reached).
    """
    opened = ready_world(world)
    if not isinstance(opened, inputs.World):
        return opened
    step = claim_step(opened)
    if isinstance(step, actions.Wait):
        return actions.WriteStatus(status=opened.slot.status)
    return step


def ready_world(world: inputs.World) -> inputs.World | actions.Step:
    """The world with the Pending slot made Ready in memory, or the step before that."""
    status = world.slot.status
    spec = world.slot.spec
    failed = [node for node in spec.depends_on
              if world.dependencies.get(node) is SlotState.FAILED]
    if failed:
        message = f"dependency {', '.join(failed)} failed; this slot cannot run"
        return actions.WriteStatus(
            status=transitions.fail(status, reason="DependencyFailed", message=message,
                                    now=world.now),
            event=events.Event(type="Warning", reason="DependencyFailed", message=message))
    waiting = [node for node in spec.depends_on
               if world.dependencies.get(node) is not SlotState.SUCCEEDED]
    if waiting:
        return actions.Wait(message=f"waiting for {', '.join(waiting)} to succeed")
    worker_class = status.worker_class or spec.worker_class
    reruns = world.dependency_reruns or 0
    if status.launch_spec is not None:
        # Pending again after a rerun or a supersede: its pin stays (pinned once).
        return inputs.with_status(world, transitions.deps_met(
            status, worker_class=worker_class, launch_spec=status.launch_spec,
            dependency_reruns=reruns, now=world.now))
    chosen = selection.select(specs=world.launch_specs,
                              namespace=world.slot.metadata.namespace or "",
                              run=spec.run, node=spec.node, worker_class=worker_class)
    if isinstance(chosen, selection.NoChoice):
        new = slotconditions.set_condition(status, LAUNCH_SPEC_SELECTED, "False",
                                         str(chosen.predicate), chosen.message, world.now)
        if new == status:
            return actions.Wait(message=chosen.message)
        return actions.WriteStatus(status=new, event=events.Event(
            type="Warning", reason=str(chosen.predicate), message=chosen.message))
    pinned = launchpins.pin(run=spec.run, choice=chosen)
    if pinned.snapshot not in world.snapshots and world.run is not None:
        # (Without a run, in wind-down, the pin is only recorded: nothing more is made.)
        return specsnapshots.create(world, pinned=pinned, spec=chosen.spec.spec)
    ready = transitions.deps_met(status, worker_class=worker_class, launch_spec=pinned,
                                 dependency_reruns=reruns, now=world.now)
    ready = slotconditions.set_condition(ready, LAUNCH_SPEC_SELECTED, "True", "Selected",
                                       chosen.reason, world.now)
    return dataclasses.replace(inputs.with_status(world, ready), launch_spec=chosen.spec.spec,
                               launch_spec_error=None)


def claim_step(world: inputs.World) -> decisions.Decided:
    """Ready or RetryWait: start a claim when claimable, else wait (for retryAt)."""
    status = world.slot.status
    assert world.run is not None
    if world.run.spec.suspend:
        return actions.Wait(message="the run is suspended")
    prior = None if status.prior_worker is None or world.attempt is None else \
        attemptpods.attempt_pod(world, objects=world.attempt)
    if prior is not None and prior.phase not in ending.FINISHED:
        # A replacement only once the predecessor's pod is gone or finished (its lease is
        # tombstoned by then): a pod still Terminating on a lost node may still act.
        return actions.Wait(message=f"waiting until the pod of {status.prior_worker} is gone "
                                   f"(it is {prior.phase})")
    limit = world.run.spec.max_active
    if limit is not None and world.active_in_run >= limit and transitions.may_be_claimed(
            status, now=world.now):
        return actions.Wait(message=f"the run has {world.active_in_run} attempts Claiming or "
                                   f"Active, its spec.maxActive ({limit}): waiting for one "
                                   "to end")
    if transitions.is_claimable(status, now=world.now, claim_policy=world.run.spec.claim_policy):
        return attemptlife.claiming_step(attemptlife.claiming_world(world, lease=None))
    if conditions.is_true(status.conditions, transitions.AWAITING_REASSIGNMENT):
        return actions.Wait(message="attempts exhausted: awaiting reassignment or give-up")
    if status.retry_at is not None and status.retry_at > world.now:
        return actions.Wait(message="waiting to retry", until=status.retry_at)
    # Not claimable although no retry time is ahead: waiting for a person, never for a past
    # time (a past ``until`` is due again on every tick of the scheduler).
    if transitions.is_held(status):
        return actions.Wait(message="the slot is held; release it (agentrun.dev/release-id)")
    if world.run.spec.claim_policy == "Manual":
        return actions.Wait(message="waiting for a claim command (claimPolicy Manual)")
    return actions.Wait(message="not claimable: no launch spec is pinned")


def on_exists(world: inputs.World, *, create: actions.Create,
              found: Mapping[str, Any]) -> decisions.Decided | None:
    """A create met AlreadyExists with ``found`` under the name: what next (None: it is
    ours, read again and go on), decided in ``world``, the world the create was decided in
    (:attr:`Decision.world <agentrun.core.slots.decisions.Decision.world>`). A claim's
    create comes back as a :class:`~agentrun.core.slots.decisions.Decision` (with its
    claiming world); any other step bare, as :func:`decide` would settle it in the world
    read.

    A claim's Lease or Pod: the claim is decided again in its claiming world with the
    object found in it, so a tombstoned or foreign Lease never leads to a Pod (the same
    rules as when the world had it). The run's LaunchSpec snapshot: ours when the run
    controls it with the same content, else squatted.
    """
    kind = create.body["kind"]
    name = create.body["metadata"]["name"]
    if create.claim:
        return attemptlife.claiming_step(inputs.with_found(world, kind=kind, found=found))
    run_uid = (world.run.metadata.uid or "") if world.run is not None else ""
    if specsnapshots.is_own(found, body=create.body, owner_uid=run_uid):
        return None
    return squats.slot_step(world, kind=kind, name=name,
                            what=f"run {world.slot.spec.run}'s LaunchSpec snapshot")
