"""The slot step of a lost node: say why the attempt cannot end, and what a person can do.

:func:`observe_step` sets the condition ``NodeLost`` (True) while the slot's attempt in
hand (the active one, else the prior one) has a *stuck pod* on a *lost node* (terms and
the reasons: :mod:`agentrun.core.attempts.lostnodes`), with a Warning Event, once per
change of what it says; and turns it False (``PodGone``, or ``NodeReady`` when the node
came back) once it no longer does. It decides nothing else: the attempt still ends only
when its pod is gone or finished (:mod:`agentrun.core.attempts.ending`), and the next
pass after that proceeds as always.
"""

from __future__ import annotations

from agentrun.api import conditions, names
from agentrun.core.attempts import lostnodes
from agentrun.core.base import actions, events, slotconditions
from agentrun.core.slots import attemptpods, inputs


def observe_step(world: inputs.World) -> actions.WriteStatus | None:
    """The condition's change, or None when it says what is true already (then the
    slot's step goes on: commands, deadlines and all are decided as ever)."""
    status = world.slot.status
    shown = conditions.find(status.conditions, names.NODE_LOST_CONDITION)
    objects = world.attempt
    stuck = None
    if objects is not None and world.node is not None and objects.name in (
            status.active_worker, status.prior_worker):
        phase = attemptpods.attempt_pod(world, objects=objects).phase
        if phase in lostnodes.STUCK and world.node.lost:
            stuck = lostnodes.explain(pod=objects.name, namespace=world.slot.metadata.namespace
                                      or "", phase=phase, node=world.node)
    if stuck is None:
        if shown is None or shown.status != "True":
            return None
        back = world.node is not None and not world.node.lost
        reason = "NodeReady" if back else "PodGone"
        message = (f"node {world.node.name} is Ready again" if back and world.node
                   else "the pod is gone or finished: the attempt ends as its pod and lease say")
        return actions.WriteStatus(status=slotconditions.set_condition(
            status, names.NODE_LOST_CONDITION, "False", reason, message, world.now))
    new = slotconditions.set_condition(status, names.NODE_LOST_CONDITION, "True",
                                       stuck.reason, stuck.message, world.now)
    if new == status:  # shown already: the rest of the slot's step goes on
        return None
    return actions.WriteStatus(status=new, event=events.Event(
        type="Warning", reason=names.NODE_LOST_CONDITION, message=stuck.message))
