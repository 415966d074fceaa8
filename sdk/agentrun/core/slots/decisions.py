"""A step together with the world it was decided in (:class:`Decision`).

Most steps are decided in the world the operator read. A claim's Lease and Pod are decided
in its *claiming world* (the slot made Claiming in memory, with its next attempt's objects:
``attemptlife.claiming_world``), and what follows a failed create of either (AlreadyExists,
a refusal) must be decided in that same world, not the one read. So the core hands the
step out with its world, and the reconcile loop gives that world back with what the write
found (``steps.on_exists``, ``attemptlife.on_rejected``); the step itself carries none.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentrun.core.base import actions
from agentrun.core.slots import inputs


@dataclass(frozen=True, kw_only=True)
class Decision:
    """``step``, and ``world``: the world it was decided in (for a claim, its claiming
    world; else the world the decision was given)."""

    step: actions.Step
    world: inputs.World = field(repr=False, compare=False)


Decided = actions.Step | Decision
"""What a decision returns inside the core: a step decided in the world it was given, or
a :class:`Decision` when it was decided in another (a claim's create)."""


def settled(decided: Decided, *, world: inputs.World) -> Decision:
    """``decided`` as a :class:`Decision`; a bare step was decided in ``world``."""
    if isinstance(decided, Decision):
        return decided
    return Decision(step=decided, world=world)
