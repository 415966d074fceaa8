"""The steps of an attempt's life: claiming its objects, judging it, fencing it after.

Split from :mod:`agentrun.core.steps` (which decides *which* concern comes first) by
what they hold: each function here maps a :class:`~agentrun.core.worlds.World` whose
slot has an attempt in hand (Claiming, Active, or an ended prior) to the next write.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from agentrun.api import bounds, conditions, names
from agentrun.api.slots import Outcome
from agentrun.core import attempts, claims, guards, owners, retries, squats, transitions, worlds
from agentrun.core.observations import (
    LeaseStatus,
    LeaseView,
    lease_status,
    lease_view,
    pod_view,
)

GONE_WAIT = timedelta(seconds=2)  # how soon to look again for a leftover being collected


def policy(world: worlds.World) -> retries.Effective:
    run_retry = world.run.spec.retry if world.run else None
    return retries.effective(node=world.slot.spec.retry, run=run_retry)


def fence_step(world: worlds.World) -> worlds.Step | None:
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
        if found is None or not claims.matches_attempt(found, slot_uid=uid, attempt=number):
            return None
        return found

    pod = pod_view(ours(objects.pod))
    if pod.phase in attempts.LIVE:
        return worlds.DeletePod(name=objects.name, uid=pod.uid,
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
        return worlds.Tombstone(name=objects.name, annotations=annotations)
    return None


def claiming_step(world: worlds.World) -> worlds.Step:
    """Claiming: create the Lease, then the Pod, then record the attempt as Active."""
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
    for found, kind in ((objects.lease, "Lease"), (objects.pod, "Pod")):
        if found is None or (
                claims.matches_attempt(found, slot_uid=uid, attempt=number)
                and claims.same_content(found, kind=kind, worker=worker,
                                        launch_spec=world.launch_spec)):
            continue
        metadata = found.get("metadata") or {}
        if metadata.get("ownerReferences") and not owners.controlled_by(metadata, uid) and (
                any(ref.get("controller") for ref in metadata["ownerReferences"])):
            # Left by an earlier slot of the same name: the garbage collector removes it.
            return worlds.Wait(message=f"a {kind} {worker} of an earlier slot of this name "
                                       "is still being garbage-collected",
                               until=world.now + GONE_WAIT)
        return squats.slot_step(world, kind=kind, name=worker,
                                what=f"attempt {number} of slot {slot.metadata.name}")
    if objects.lease is None:
        return worlds.Create(claim=True, point="claim-lease", body=claims.lease_body(
            slot=slot, attempt=number, owner_actor=status.next_owner_actor, tenant=world.tenant,
            launch_spec=pinned, lease_duration_seconds=world.launch_spec.lease.duration_seconds))
    if objects.pod is None and world.pins_problem is not None:
        return claim_failed(world, message=world.pins_problem)
    if objects.pod is None:
        assert world.run is not None and world.run.status.pinned is not None
        return worlds.Create(claim=True, point="claim-pod", body=claims.pod_body(
            slot=slot, pins=world.run.status.pinned, launch_spec=world.launch_spec,
            pinned=pinned, attempt=number, owner_actor=status.next_owner_actor,
            tenant=world.tenant))
    owner = status.next_owner_actor
    message = (f"attempt {number} claimed: pod and lease {worker} from LaunchSpec "
               f"{pinned.name}@{pinned.generation}"
               + (f", owner {owner}" if owner else " (automatic claim)"))
    return worlds.WriteStatus(status=transitions.finish_claim(
        status, now=world.now, pod_uid=(objects.pod.get("metadata") or {}).get("uid")),
        event=guards.Event(type="Normal", reason="Claimed", message=message), point="active")


QUOTA_WAIT = timedelta(seconds=10)  # how soon to try a create refused by a quota again


def is_quota_refusal(*, status: int, message: str) -> bool:
    """A create refused by a ResourceQuota (403 "exceeded quota"), not by a policy."""
    return status == 403 and "exceeded quota" in message


def quota_refused(world: worlds.World, *, kind: str, message: str) -> worlds.Step:
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
        return worlds.WriteStatus(status=new, point="quota-exceeded", event=guards.Event(
            type="Warning", reason="QuotaExceeded", message=text))
    return worlds.Wait(message=text, until=world.now + QUOTA_WAIT)


def claim_failed(world: worlds.World, *, message: str) -> worlds.WriteStatus:
    """The attempt's objects cannot be created: it ends as ClaimFailed, its number spent."""
    status = world.slot.status
    full = f"attempt {status.pending_worker} could not be created: {message}"
    return worlds.WriteStatus(
        status=transitions.fail_claim(status, message=full, policy=policy(world), now=world.now),
        event=guards.Event(type="Warning", reason="ClaimFailed", message=full),
        point="claim-failed")


def active_step(world: worlds.World) -> worlds.Step:
    """Active: the ended-attempt table of DESIGN.md section 4."""
    status = world.slot.status
    objects = world.attempt
    assert objects is not None and objects.name == status.active_worker
    pod = pod_view(objects.pod)
    lease = lease_view(objects.lease)
    started = started_at(world, objects.name)
    deadline = start_deadline(world)
    duration = lease_duration(world, lease)
    judged = lease_status(observation=world.observation, lease=lease, now=world.now,
                          claimed_at=started, start_deadline_seconds=deadline,
                          lease_duration_seconds=duration, ticks=world.ticks)
    verdict = attempts.judge(pod=pod, lease=judged, renewed=world.observation is not None)
    if verdict.delete_pod:
        return worlds.DeletePod(name=objects.name, uid=pod.uid, message=verdict.message)
    if not verdict.ended:
        if judged is not LeaseStatus.HELD:
            return worlds.Wait(message=verdict.message)
        if world.observation is None:
            until = started + timedelta(seconds=deadline)
        else:  # the expiry on the monotonic clock, said as a wall time for the scheduler
            left = (world.observation.observed_at + timedelta(seconds=duration)
                    - (world.ticks or world.now))
            until = world.now + left
        return worlds.Wait(message=verdict.message, until=until)
    assert verdict.outcome is not None
    message = f"attempt {objects.name} ended {verdict.outcome}: {verdict.message}"
    return worlds.WriteStatus(
        status=transitions.end_attempt(status, outcome=verdict.outcome, message=verdict.message,
                                       exit_code=verdict.exit_code, policy=policy(world),
                                       now=world.now),
        event=guards.Event(type="Normal" if verdict.outcome is Outcome.SUCCEEDED else "Warning",
                           reason="AttemptEnded", message=message),
        point="attempt-ended")


def lease_duration(world: worlds.World, lease: LeaseView) -> int:
    """The pinned lease duration; the Lease's own field only if no pinned spec is readable.

    The holder can write ``leaseDurationSeconds``; even then it is held to the bounds a
    LaunchSpec may set, so a Lease cannot keep an attempt alive longer than any spec could.
    """
    if world.launch_spec is not None:
        return world.launch_spec.lease.duration_seconds
    own = lease.duration_seconds or bounds.MIN_LEASE_SECONDS
    return min(max(own, bounds.MIN_LEASE_SECONDS), bounds.MAX_LEASE_SECONDS)


def start_deadline(world: worlds.World) -> int:
    return world.launch_spec.start_deadline_seconds if world.launch_spec else 300


def started_at(world: worlds.World, worker: str) -> datetime:
    """When the start deadline counts from: the claim, or later if this process saw it later.

    The claim time was written by whichever operator claimed, on its clock; after a
    restart on another machine whose clock runs ahead, counting from it could kill a
    healthy starting pod. Counting from this process's first sight only lengthens.
    """
    claimed = next((a.started_at for a in world.slot.status.attempts if a.pod == worker),
                   world.now)
    return max(claimed, world.first_seen) if world.first_seen is not None else claimed


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")
