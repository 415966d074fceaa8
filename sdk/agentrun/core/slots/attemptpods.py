"""Which pod is an attempt's own, and whose renewals of its Lease count.

Admission binds an attempt Lease to the uid of the first pod that writes it as a worker
(``agentrun.dev/holder-uid``, :mod:`agentrun.core.policies.leasepolicy`). The operator records the
uid of the pod it created for an attempt in the attempt's record (``pod_uid``) when the
claim ends, and judges by it: a pod of the attempt's name with another uid is someone
else's (read by name, it is not watched), and a Lease bound to another pod is judged as
never renewed.

An attempt claimed before the operator recorded pod uids has none: its pod is then the
pod of its name that this slot controls (the one it created, unless someone who may edit
the namespace forged that too), and a Lease bound to that pod is its own. Without that,
an upgrade would end every live attempt whose Lease its own pod binds at its next renewal.
"""

from __future__ import annotations

from agentrun.api import bounds
from agentrun.core.attempts.observations import (
    GONE_POD,
    LeaseObservation,
    LeaseView,
    PodView,
    pod_view,
    renewals_count,
)
from agentrun.core.base import owners
from agentrun.core.slots import inputs

UID_CHARS = 64  # of a uid quoted in a message (a real one has 36)


def recorded_pod_uid(world: inputs.World, worker: str) -> str | None:
    """The uid of the pod the operator created for attempt ``worker`` (its record's)."""
    return next((a.pod_uid for a in world.slot.status.attempts if a.pod == worker), None)


def expected_pod_uid(world: inputs.World, *, objects: inputs.AttemptObjects) -> str | None:
    """The uid of the attempt's own pod: the recorded one; with none recorded, the pod of
    the attempt's name if this slot controls it; else None (unknown)."""
    recorded = recorded_pod_uid(world, objects.name)
    if recorded is not None or objects.pod is None:
        return recorded
    metadata = objects.pod.get("metadata") or {}
    uid = metadata.get("uid")
    controlled = owners.controlled_by(metadata, world.slot.metadata.uid or "")
    return str(uid) if uid and controlled else None


def attempt_pod(world: inputs.World, *, objects: inputs.AttemptObjects) -> PodView:
    """The attempt's own pod as seen: the pod of its name, unless that pod's uid is not
    the one recorded when the operator created it. Then it is someone else's pod run
    under the name after the attempt's own was deleted (the operator reads a pod it does
    not watch by name): the attempt's pod is gone, and that one is neither waited for nor
    fenced (it is not the operator's)."""
    pod = pod_view(objects.pod)
    recorded = recorded_pod_uid(world, objects.name)
    return GONE_POD if None not in (recorded, pod.uid) and pod.uid != recorded else pod


def own_renewals(world: inputs.World, *, objects: inputs.AttemptObjects,
                 lease: LeaseView) -> tuple[LeaseObservation | None, str | None]:
    """The renewals of the attempt's Lease that count, and why the others do not (or None).

    Only its own pod's count (``observations.renewals_count``, against
    :func:`expected_pod_uid`). A Lease bound to another pod is judged as never renewed:
    with the attempt's pod gone its attempt ends, whoever renews it.
    """
    pod_uid = expected_pod_uid(world, objects=objects)
    if renewals_count(lease=lease, pod_uid=pod_uid):
        return world.observation, None
    bound = bounds.clip(lease.bound_uid or "", limit=UID_CHARS)  # its writer's, unchecked
    return None, (f"its Lease is bound to the pod of uid {bound}, not to the "
                  f"attempt's pod (uid {pod_uid or 'unknown'}): a pod of the same name run "
                  "by someone else renews it, and its renewals are not counted")
