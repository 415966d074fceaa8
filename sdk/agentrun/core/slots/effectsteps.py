"""The slot steps of unresolved effects: observe them, and hold claims.

:func:`observe_step` writes an effect the slot's latest attempt recorded as unresolved
(``<key>.unresolved`` on its Lease) into ``status.effects`` with the condition
``EffectUnresolved`` and a Warning Event, once; those that do not fit are counted
(``status.effectsNotShown``) and told in the condition and the Event. :func:`gate` keeps
a Ready or RetryWait slot from claiming while one is open. The decisions are
:mod:`agentrun.core.attempts.effectrecords`'s.

Why nothing is missed before a claim: a claim of a slot whose attempt ended starts only
after that attempt's Lease was tombstoned (``attemptlife.fence_step``), under a
``resourceVersion`` precondition on the Lease read; records are write-once and the
tombstone seals them, so the Lease the claim is decided on holds every record the worker
committed, and this step, ahead of the claim in :func:`agentrun.core.slots.steps.next_step`,
has seen them.
"""

from __future__ import annotations

from agentrun.api import bounds, names
from agentrun.core.attempts import effectrecords
from agentrun.core.base import actions, events
from agentrun.core.slots import inputs


def observe_step(world: inputs.World) -> actions.WriteStatus | None:
    """Record the latest attempt's newly seen unresolved effects, or None."""
    status = world.slot.status
    objects = world.attempt
    if objects is None or objects.name not in (status.active_worker, status.prior_worker):
        return None  # (a finished slot's too: a given-up attempt may have stopped on one,
        # and a rerun must not be how it is forgotten)
    name = world.slot.metadata.name
    new, found = effectrecords.observed(status, lease=objects.lease, slot=name, now=world.now)
    if new == status:
        return None
    told = [effectrecords.describe(entry, slot=name) for entry in found]
    if new.effects_not_shown > status.effects_not_shown:
        told.append(effectrecords.not_shown(new))
    event = events.Event(type="Warning", reason=names.EFFECT_UNRESOLVED_CONDITION,
                         message=bounds.clip("; ".join(told))) if told else None
    return actions.WriteStatus(status=new, point="effect-unresolved", event=event)


def gate(world: inputs.World) -> actions.Wait | None:
    """A Wait while an effect is open (no automatic claim), else None."""
    why = effectrecords.blocking(world.slot.status, slot=world.slot.metadata.name)
    return None if why is None else actions.Wait(message=why)
