"""A claim whose Pod was refused for the LaunchSpec's reason: no attempt is spent.

The Pod as the pinned LaunchSpec makes it can never be created in this namespace
(``core.base.refusals``: invalid, or lacking the limits or requests a ResourceQuota counts).
That is not the attempt's fault, and spending attempts on it would only burn them all
(``ClaimFailed`` each time, then ``AwaitingReassignment``). So the claim stays under way:
the slot stays Claiming with its attempt number pending (the number is not spent on a
pod that never existed, and no retry is counted), under condition ``LaunchSpecRefused``
naming the LaunchSpec and quoting the API server, and:

- its Pod is asked for again every :data:`REFUSED_WAIT` (the namespace's quota may change,
  a LimitRange may give defaults); once it is made, the condition goes (``finish_claim``);
- when the LaunchSpec the slot would choose now is not the one pinned (a new generation,
  the fix; or another LaunchSpec), the claim takes it: its snapshot is made, the slot is
  re-pinned, the claim's Lease records the new one (:func:`lease_step`), and the Pod is
  made from it. A pin keeps GitOps edits from moving a slot's attempts under them; a pin
  that cannot make a pod holds nothing worth keeping;
- a give-up ends it (``GaveUp``), as any claim under way.
"""

from __future__ import annotations

from datetime import timedelta

from agentrun.api import conditions, names
from agentrun.core.base import actions, events
from agentrun.core.launchspecs import launchpins, selection
from agentrun.core.machine import transitions as t
from agentrun.core.slots import inputs, specsnapshots

REFUSED_WAIT = timedelta(seconds=30)  # how soon to ask again for a pod refused as made


def waiting(world: inputs.World) -> bool:
    """Does this slot's claim wait on its LaunchSpec (``LaunchSpecRefused``)?"""
    return conditions.is_true(world.slot.status.conditions, t.LAUNCH_SPEC_REFUSED)


def refused(world: inputs.World, *, message: str) -> actions.Step:
    """The claim's Pod was refused for the LaunchSpec's reason: wait, spend nothing.

    Decided in the claiming world the create came from (the slot Claiming in memory).
    """
    status = world.slot.status
    pinned = status.launch_spec
    spec = t.launch_spec_ref(pinned) if pinned is not None else "?"
    text = (f"the pod of attempt {status.pending_worker} was refused by the API server as "
            f"LaunchSpec {spec} makes it, so it can never be created; no attempt is spent: "
            f"the claim waits, asks again every {int(REFUSED_WAIT.total_seconds())} s, and "
            "takes the LaunchSpec again once it changes (fix its spec.template or "
            f"spec.sidecar.resources, or the namespace's ResourceQuota or LimitRange): "
            f"{message}")
    new = status.model_copy(update={"conditions": conditions.set_condition(
        status.conditions, type_=t.LAUNCH_SPEC_REFUSED, status="True", reason="PodRefused",
        message=text, now=world.now)})
    if new != status:
        return actions.WriteStatus(status=new, point="launch-spec-refused", event=events.Event(
            type="Warning", reason=t.LAUNCH_SPEC_REFUSED, message=text))
    return actions.Wait(message=text, until=world.now + REFUSED_WAIT)


def repin_step(world: inputs.World) -> actions.Step | None:
    """Before the Pod is asked for again: the LaunchSpec chosen now, when it is not the
    one pinned (its snapshot first, then the slot's pin), else None (ask again as pinned).
    """
    if not waiting(world):
        return None
    status = world.slot.status
    slot = world.slot
    pinned = status.launch_spec
    chosen = selection.select(specs=world.launch_specs, namespace=slot.metadata.namespace,
                              run=slot.spec.run, node=slot.spec.node,
                              worker_class=status.worker_class or slot.spec.worker_class)
    if isinstance(chosen, selection.NoChoice) or pinned is None:
        return None
    new = launchpins.pin(run=slot.spec.run, choice=chosen)
    if new.digest == pinned.digest:
        return None
    if new.snapshot not in world.snapshots:
        return specsnapshots.create(world, pinned=new, spec=chosen.spec.spec)
    message = (f"the claim of attempt {status.pending_worker} takes LaunchSpec "
               f"{t.launch_spec_ref(new)} ({chosen.reason}): {t.launch_spec_ref(pinned)} "
               "could not make its pod")
    return actions.WriteStatus(
        status=status.model_copy(update={"launch_spec": new}), point="launch-spec-repinned",
        event=events.Event(type="Normal", reason="LaunchSpecRepinned", message=message))


def lease_step(world: inputs.World) -> actions.Step | None:
    """The claim's Lease records another LaunchSpec than the one pinned now: after a
    re-pin, it is made to record the new one (an AnnotateLease); otherwise None (the pin
    moved for another reason: the claim fails, as before)."""
    objects = world.attempt
    pinned = world.slot.status.launch_spec
    if not waiting(world) or objects is None or objects.lease is None or pinned is None:
        return None
    ref = t.launch_spec_ref(pinned)
    return actions.AnnotateLease(lease=objects.lease,
                                 annotations={names.LAUNCH_SPEC_ANNOTATION: ref})
