"""A dependent runs again after a rerun dependency: the slot's side of a rerun.

The design, with its reasons: docs/design/reruns.md.

A rerun command changes one slot. Its dependents learn of it by level, not by a write to
them: each slot records, when it leaves Pending, the sum of its dependencies' ``reruns``
(``status.dependencyReruns``); reruns only grow, so a larger sum read later means some
dependency was rerun since, and what this slot did was built on work that is being
redone. It is then *superseded*: whatever its state, it goes back to Pending with its
whole prefix cut (it runs again from its start once its dependencies succeed again), a
live attempt closed ``Superseded`` and fenced as a given-up one is, its own ``reruns``
grown so that its dependents follow in turn. A held slot is superseded once released (a
hold never interrupts an attempt). Nothing is deleted: its earlier attempts and
their records stay in the status and the journal's history.
"""

from __future__ import annotations

from agentrun.api import cuts
from agentrun.api.slots import SlotState
from agentrun.core.base import actions, events
from agentrun.core.machine import transitions
from agentrun.core.slots import inputs


def whole_prefix(status_cuts: list[str], *, attempts: int) -> list[str]:
    """The slot's cuts with everything its ``attempts`` committed taken out."""
    if attempts == 0:
        return list(status_cuts)
    every = (*cuts.parse_all(status_cuts), cuts.Cut(start=cuts.START, through=attempts))
    return [c.text() for c in cuts.merged(every)]


def supersede_step(world: inputs.World) -> actions.Step | None:
    """Pending again, from its start, when a dependency was rerun since it left Pending."""
    status, spec = world.slot.status, world.slot.spec
    if (not spec.depends_on or world.dependency_reruns is None
            or status.state is SlotState.PENDING
            or world.dependency_reruns <= status.dependency_reruns
            or transitions.is_held(status)):  # a hold never interrupts: once released
        return None
    live = status.active_worker or status.pending_worker
    message = (f"a dependency ({', '.join(spec.depends_on)}) was rerun: this slot runs "
               "again after it, from its start"
               + (f"; attempt {live} is ended and fenced" if live else "")
               + "; earlier attempts stay in the history")
    new = transitions.supersede(status, cuts=whole_prefix(status.cuts,
                                                          attempts=status.attempt_count),
                                message=message, now=world.now,
                                dependency_reruns=world.dependency_reruns)
    return actions.WriteStatus(status=new, event=events.Event(
        type="Normal", reason=transitions.SUPERSEDED_CONDITION, message=message))
