"""The steps of an attempt's life: claiming its objects, judging it, fencing it after.

:mod:`agentrun.core.slots.steps` decides *which* concern comes first; each function here
maps a :class:`~agentrun.core.slots.inputs.World` whose slot has an attempt in hand
(Claiming, Active, or an ended prior) to the next write.

The claim: 1. create the Lease
``<slot>-<n+1>`` (the commit point), 2. create the Pod, 3. one status write (Active and
the attempt record, and a claim command's ledger entry). No ``Claiming`` status is
written first: the slot's own untombstoned Lease of attempt n+1 *is* the claim under way,
and :func:`claiming_world` gives the core the slot as if Claiming (in memory), so every
decision about a claim (create the next object, fail it, wait on a quota) is the one it
always was. A slot left ``Claiming`` by an older operator goes through the same steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from agentrun.api import bounds, conditions, meta, names
from agentrun.api.slots import Outcome
from agentrun.core.attempts import attemptobjects, ending
from agentrun.core.attempts.observations import (
    LeaseStatus,
    LeaseView,
    lease_status,
    lease_view,
    pod_view,
)
from agentrun.core.base import actions, events, owners, refusals
from agentrun.core.commands import guards
from agentrun.core.machine import retries, transitions
from agentrun.core.slots import (
    attemptpods,
    budgetsteps,
    decisions,
    inputs,
    questionsteps,
    refusedclaims,
    squats,
)
from agentrun.core.slots.attemptpods import attempt_pod, recorded_pod_uid

GONE_WAIT = timedelta(seconds=2)  # how soon to look again for a leftover being collected


def policy(world: inputs.World) -> retries.Effective:
    run_retry = world.run.spec.retry if world.run else None
    return retries.effective(node=world.slot.spec.retry, run=run_retry)


def fence_step(world: inputs.World) -> actions.Step | None:
    """After an attempt ended (or was given up): kill a live pod, tombstone the lease."""
    status = world.slot.status
    objects = world.attempt
    if status.prior_worker is None or objects is None or objects.name != status.prior_worker:
        return None
    record = next((a for a in status.attempts if a.pod == objects.name), None)
    number = record.number if record is not None else status.attempt_count  # the last one
    uid = world.slot.metadata.uid or ""

    def ours(found: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        """Only this slot's own attempt objects are fenced (not a same-name leftover)."""
        if found is None or not attemptobjects.matches_attempt(found, slot_uid=uid, attempt=number):
            return None
        return found

    pod = attempt_pod(world, objects=dataclasses.replace(objects, pod=ours(objects.pod)))
    if pod.phase in ending.LIVE:
        return actions.DeletePod(name=objects.name, uid=pod.uid,
                                message=f"fencing attempt {objects.name}: the slot has moved on")
    lease = ours(objects.lease)
    if lease is not None and names.OUTCOME_ANNOTATION not in (
            (lease.get("metadata") or {}).get("annotations") or {}):
        outcome = record.outcome if record and record.outcome else Outcome.LOST
        annotations = {
            names.OUTCOME_ANNOTATION: str(outcome),
            names.ENDED_AT_ANNOTATION: iso(record.ended_at if record and record.ended_at
                                            else world.now),
        }
        if record is not None and record.owner_actor is not None:
            annotations[names.OWNER_ACTOR_ANNOTATION] = record.owner_actor
        if record is not None:
            annotations[names.LAUNCH_SPEC_ANNOTATION] = record.launch_spec
        if record is not None and record.pod_uid is not None:
            # What a successor compares the Lease's holder uid with (api.records.written_by).
            annotations[names.POD_UID_ANNOTATION] = record.pod_uid
        return actions.Tombstone(name=objects.name, annotations=annotations)
    return None


def run_creator(world: inputs.World) -> str | None:
    """The owner of the run's automatic attempts: its creator as the operator verified it
    when pinning the run (``status.creator``); None when it could not (then nobody owns
    them, and only someone granted ``override`` may act on them)."""
    return None if world.run is None else world.run.status.creator


def claiming_world(world: inputs.World, *,
                   lease: Mapping[str, Any] | None) -> inputs.World:
    """The world with attempt n+1 consumed in memory: the slot as if ``Claiming``.

    ``lease``: the claim's Lease when it exists (a claim under way): its owner actor is
    the attempt's, and a claim command's request id on it puts the command's ledger entry
    back (it is written with the claim's one status write). Without it, a claim about to
    start: the status as decided (for a claim command, with its ledger entry already).
    The attempt objects are the ones read for attempt n+1. A claim nobody asked for (no
    owner decided yet) is owned by the run's creator (:func:`run_creator`).
    """
    status = world.slot.status
    if lease is not None:
        owner = meta.annotation(lease, names.OWNER_ACTOR_ANNOTATION)
        request_id = meta.annotation(lease, names.CLAIM_ID)
        if request_id is not None and guards.seen(status, request_id) is None:
            status = guards.claim_accepted(status, request_id=request_id, actor=owner,
                                           now=world.now)
        status = status.model_copy(update={"next_owner_actor": owner})
    elif status.next_owner_actor is None:  # nobody asked: an automatic claim
        status = status.model_copy(update={"next_owner_actor": run_creator(world)})
    status = transitions.start_claim(status, slot=world.slot.metadata.name, now=world.now)
    objects = world.next_attempt or inputs.AttemptObjects(
        name=status.pending_worker or "", pod=None, lease=None)
    return dataclasses.replace(inputs.with_status(world, status), attempt=objects)


def under_way(world: inputs.World) -> inputs.World | None:
    """The claiming world when a claim is under way (``attemptobjects.under_way``), else
    None."""
    status = world.slot.status
    objects = world.next_attempt
    if (objects is None or status.state not in inputs.CLAIM_OPEN
            or status.launch_spec is None or not attemptobjects.under_way(
                objects.lease, slot_uid=world.slot.metadata.uid or "",
                attempt=status.attempt_count + 1)):
        return None
    return claiming_world(world, lease=objects.lease)


def claiming_step(world: inputs.World, *,
                  request_id: str | None = None) -> decisions.Decided:
    """Claiming: create the Lease, then the Pod, then record the attempt as Active.

    ``request_id``: the claim command being served (it goes on the Lease). A Lease of
    this attempt found tombstoned while its Pod does not exist never leads to a Pod: the
    attempt ended (an operator that fell behind, or a person, closed it), so its number
    is spent as ClaimFailed and the next claim takes a new one. Likewise a Lease naming
    another LaunchSpec than the one pinned now (the pin was re-chosen after a crash),
    unless the claim waits on its LaunchSpec and was re-pinned (``core.slots.refusedclaims``):
    then the Lease is made to name the new one.
    """
    status = world.slot.status
    slot = world.slot
    objects = world.attempt
    worker = status.pending_worker
    assert worker is not None and objects is not None and objects.name == worker
    pinned = status.launch_spec
    if pinned is None or world.launch_spec is None:
        return claim_failed(world, message=world.launch_spec_error
                            or "no launch spec is pinned to build the pod from")
    number = status.attempt_count
    uid = slot.metadata.uid or ""
    own_lease = objects.lease is not None and attemptobjects.matches_attempt(
        objects.lease, slot_uid=uid, attempt=number)
    if own_lease and objects.pod is None:
        assert objects.lease is not None
        if lease_view(objects.lease).tombstoned:
            return claim_failed(world, message=f"its Lease {worker} was found ended before "
                                               "its pod was created; no pod is started")
        recorded = meta.annotation(objects.lease, names.LAUNCH_SPEC_ANNOTATION)
        if recorded not in (None, transitions.launch_spec_ref(pinned)):
            return refusedclaims.lease_step(world) or claim_failed(
                world, message=f"its Lease records LaunchSpec {recorded}, not "
                               f"{transitions.launch_spec_ref(pinned)} pinned now; no pod is "
                               "started")
    for found, kind in ((objects.lease, "Lease"), (objects.pod, "Pod")):
        if found is None or (
                attemptobjects.matches_attempt(found, slot_uid=uid, attempt=number)
                and attemptobjects.same_content(found, kind=kind, worker=worker,
                                        launch_spec=world.launch_spec)):
            continue
        metadata = found.get("metadata") or {}
        if metadata.get("ownerReferences") and not owners.controlled_by(metadata, uid) and (
                any(ref.get("controller") for ref in metadata["ownerReferences"])):
            # Left by an earlier slot of the same name: the garbage collector removes it.
            return actions.Wait(message=f"a {kind} {worker} of an earlier slot of this name "
                                       "is still being garbage-collected",
                               until=world.now + GONE_WAIT)
        return squats.slot_step(world, kind=kind, name=worker,
                                what=f"attempt {number} of slot {slot.metadata.name}")
    if objects.lease is None:
        return decisions.Decision(world=world, step=actions.Create(
            claim=True, point="claim-lease", body=attemptobjects.lease_body(
            slot=slot, attempt=number, owner_actor=status.next_owner_actor, tenant=world.tenant,
            launch_spec=pinned, lease_duration_seconds=world.launch_spec.lease.duration_seconds,
            request_id=request_id, budget=budgetsteps.limits(world))))
    if objects.pod is None and world.pins_problem is not None:
        # Read from caches: another operator may have pinned the run a moment ago.
        return claim_failed(world, message=world.pins_problem, fresh=True)
    if objects.pod is None:
        assert world.run is not None and world.run.status.pinned is not None
        repinned = refusedclaims.repin_step(world)
        if repinned is not None:
            return repinned
        return decisions.Decision(world=world, step=actions.Create(
            claim=True, point="claim-pod", body=attemptobjects.pod_body(
                slot=slot, pins=world.run.status.pinned, launch_spec=world.launch_spec,
                pinned=pinned, attempt=number, owner_actor=status.next_owner_actor,
                tenant=world.tenant)))
    owner = status.next_owner_actor
    # One Event at most per pod on a first claim: only a claim a person asked for (a claim
    # command, or the claim after someone other than the creator reopened the slot) says
    # so; an automatic one, owned by the run's creator, is in status.
    asked = meta.annotation(objects.lease, names.CLAIM_ID) is not None
    event = None if owner is None or (owner == run_creator(world) and not asked) else (
        events.Event(type="Normal", reason="Claimed",
                     message=f"attempt {number} claimed: pod and lease {worker} from "
                             f"LaunchSpec {pinned.name}@{pinned.generation}, owner {owner}"))
    return actions.WriteStatus(status=transitions.finish_claim(
        status, now=world.now, pod_uid=(objects.pod.get("metadata") or {}).get("uid")),
        event=event, point="active")


QUOTA_WAIT = timedelta(seconds=10)  # how soon to try a create refused by a quota again


def quota_refused(world: inputs.World, *, kind: str, message: str) -> actions.Step:
    """A claim's create refused by a quota: wait under ``QuotaExceeded``, spend no attempt.

    The attempt number stays pending (Claiming) and the create is tried again; a quota is
    a namespace's limit on what runs at once, not a fault of this attempt.
    """
    status = world.slot.status
    text = (f"creating the {kind} of attempt {status.pending_worker} was refused by a "
            f"ResourceQuota; it is tried again every {int(QUOTA_WAIT.total_seconds())} s "
            f"until the quota allows it: {message}")
    new = status.model_copy(update={"conditions": conditions.set_condition(
        status.conditions, type_=transitions.QUOTA_EXCEEDED, status="True",
        reason="QuotaExceeded", message=text, now=world.now)})
    if new != status:
        return actions.WriteStatus(status=new, point="quota-exceeded", event=events.Event(
            type="Warning", reason="QuotaExceeded", message=text))
    return actions.Wait(message=text, until=world.now + QUOTA_WAIT)


def on_rejected(world: inputs.World, *, create: actions.Create, status: int,
                message: str) -> actions.Step | events.Event:
    """A create the API server refused: what next, decided in ``world``, the world the
    create was decided in (``decisions.Decision.world``); the applier only reports the refusal.

    A claim's Lease or Pod (``core.base.refusals``): a full quota waits (no attempt spent), a
    Pod refused for the LaunchSpec's reason waits too (``core.slots.refusedclaims``), anything
    else ends the attempt as ClaimFailed. Any other object (the run's LaunchSpec snapshot):
    the Warning Event to post; the error stands (the reconcile is retried with a backoff).
    """
    kind = create.body["kind"]
    if not create.claim:
        return events.Event(type="Warning", reason="CreateFailed",
                            message=f"could not create {kind} "
                                    f"{create.body['metadata']['name']}: {message}")
    refusal = refusals.of(status=status, message=message)
    if refusal is refusals.Refusal.QUOTA_FULL:
        return quota_refused(world, kind=kind, message=message)
    if refusal is refusals.Refusal.LAUNCH_SPEC and kind == "Pod":
        return refusedclaims.refused(world, message=message)
    return claim_failed(world, message=message)


def claim_failed(world: inputs.World, *, message: str,
                 fresh: bool = False) -> actions.WriteStatus:
    """The attempt's objects cannot be created: it ends as ClaimFailed, its number spent.

    ``fresh``: the reason was read from caches (the run's pins, its snapshots), so it is
    decided again from quorum reads first; a cache that has not yet seen the run pinned
    must not spend an attempt.
    """
    status = world.slot.status
    full = f"attempt {status.pending_worker} could not be created: {message}"
    return actions.WriteStatus(
        status=transitions.fail_claim(status, message=full, policy=policy(world), now=world.now),
        event=events.Event(type="Warning", reason="ClaimFailed", message=full),
        point="claim-failed", fresh=fresh)


def active_step(world: inputs.World) -> actions.Step:
    """Active: the ended-attempt table of docs/design/states.md."""
    status = world.slot.status
    objects = world.attempt
    assert objects is not None and objects.name == status.active_worker
    pod = attempt_pod(world, objects=objects)
    lease = lease_view(objects.lease)
    observation, impostor = attemptpods.own_renewals(world, objects=objects, lease=lease)
    started, now = start_window(world, objects.name)
    deadline = start_deadline(world)
    duration = lease_duration(world, lease)
    judged = lease_status(observation=observation, lease=lease, now=now,
                          claimed_at=started, start_deadline_seconds=deadline,
                          lease_duration_seconds=duration, ticks=world.ticks,
                          blind=world.blind, pod_finished=pod.phase in ending.EXITED)
    verdict = ending.judge(pod=pod, lease=judged, renewed=observation is not None)
    seen = pod_view(objects.pod)
    stranger = None if seen.uid in (None, pod.uid) else (
        f"the pod now named {objects.name} is another pod (uid {seen.uid}), not the "
        f"attempt's (uid {recorded_pod_uid(world, objects.name)})")
    said = "; ".join(n for n in (verdict.message, stranger, impostor) if n)
    if verdict.delete_pod:
        return actions.DeletePod(name=objects.name, uid=pod.uid, message=said)
    if not verdict.ended:
        if judged is not LeaseStatus.HELD:
            return actions.Wait(message=said)
        if observation is None:  # on the start window's clock, said as a wall time
            until = world.now + (started + timedelta(seconds=deadline) + world.blind - now)
        else:  # the expiry on the monotonic clock, said as a wall time for the scheduler
            left = (observation.observed_at + timedelta(seconds=duration)
                    + world.blind - (world.ticks or world.now))
            until = world.now + left
        return actions.Wait(message=said, until=until)
    assert verdict.outcome is not None
    stopped = budgetsteps.stopped(world)
    if stopped is not None:  # it stopped at its run's budget: a person decides what next
        return budgetsteps.ended(world, stop=stopped, exit_code=verdict.exit_code,
                                 policy=policy(world), message=said)
    entries = questionsteps.asked(world)
    if entries:  # it asked a person: neither a failure nor a use of maxAttempts
        return questionsteps.ended(world, entries=entries, exit_code=verdict.exit_code,
                                   policy=policy(world),
                                   message=f"it asked a question; {said}")
    message = f"attempt {objects.name} ended {verdict.outcome}: {said}"
    return actions.WriteStatus(
        status=transitions.end_attempt(status, outcome=verdict.outcome, message=said,
                                       exit_code=verdict.exit_code, policy=policy(world),
                                       now=world.now),
        event=events.Event(type="Normal" if verdict.outcome is Outcome.SUCCEEDED else "Warning",
                           reason="AttemptEnded", message=message),
        point="attempt-ended", fresh=True)  # ends the attempt: never on a cache's word


def lease_duration(world: inputs.World, lease: LeaseView) -> int:
    """The pinned lease duration; the Lease's own field only if no pinned spec is readable.

    The holder can write ``leaseDurationSeconds``; even then it is held to the bounds a
    LaunchSpec may set, so a Lease cannot keep an attempt alive longer than any spec could.
    """
    if world.launch_spec is not None:
        return world.launch_spec.lease.duration_seconds
    own = lease.duration_seconds or bounds.MIN_LEASE_SECONDS
    return min(max(own, bounds.MIN_LEASE_SECONDS), bounds.MAX_LEASE_SECONDS)


def start_deadline(world: inputs.World) -> int:
    return world.launch_spec.start_deadline_seconds if world.launch_spec else 300


def started_at(world: inputs.World, worker: str) -> datetime:
    """When the start deadline counts from: the claim, or later if this process saw it later.

    The claim time was written by whichever operator claimed, on its clock; after a
    restart on another machine whose clock runs ahead, counting from it could kill a
    healthy starting pod. Counting from this process's first sight only lengthens.
    """
    claimed = next((a.started_at for a in world.slot.status.attempts if a.pod == worker),
                   world.now)
    return max(claimed, world.first_seen) if world.first_seen is not None else claimed


def start_window(world: inputs.World, worker: str) -> tuple[datetime, datetime]:
    """When the start deadline counts from, and now, on one clock.

    Once this process has read the lease, on its monotonic clock: :func:`started_at`
    moved onto it by the wall-to-monotonic offset at that first sight. A wall clock
    stepped after that (an NTP correction, a VM resumed) then neither kills a starting pod
    early (stepped forward) nor leaves a dead start waiting (stepped back); before it,
    the wall clock is all there is (the claim time is a wall time).
    """
    started = started_at(world, worker)
    if world.first_seen is None or world.first_ticks is None or world.ticks is None:
        return started, world.now
    return world.first_ticks + (started - world.first_seen), world.ticks


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")
