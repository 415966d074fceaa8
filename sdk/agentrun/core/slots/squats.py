"""Names someone else took: an object under a name the operator must create, not its own.

Every object the operator makes has a deterministic name, so anyone who may create that
kind in the namespace can take the name first (*squat* it). Such an object is never used
as is, and never costs an attempt: the slot or run says so (condition ``NameSquatted``,
a Warning Event naming the object and the command to delete it) and waits; once the
object is gone, the next look creates the operator's own and clears the condition.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from agentrun.api import conditions
from agentrun.api.runs import AgentRunStatus
from agentrun.core.base import actions, events
from agentrun.core.machine import transitions
from agentrun.core.slots import inputs

NAME_SQUATTED = transitions.NAME_SQUATTED
SQUAT_WAIT = timedelta(seconds=10)  # how soon to look again for the squatter to be gone


def message(*, kind: str, name: str, namespace: str | None, what: str) -> str:
    return (f"a {kind} named {name} exists that the operator did not create as {what} "
            f"(another owner or other content); it is never used, and nothing that needs it "
            f"starts until it is gone: delete it (kubectl -n {namespace} delete "
            f"{kind.lower()} {name})")


def slot_step(world: inputs.World, *, kind: str, name: str, what: str) -> actions.Step:
    """Say on the slot that ``name`` is squatted (once), then wait for it to be deleted."""
    status = world.slot.status
    text = message(kind=kind, name=name, namespace=world.slot.metadata.namespace, what=what)
    new = status.model_copy(update={"conditions": conditions.set_condition(
        status.conditions, type_=NAME_SQUATTED, status="True", reason="NameSquatted",
        message=text, now=world.now)})
    if new != status:
        return actions.WriteStatus(status=new, event=events.Event(
            type="Warning", reason="NameSquatted", message=text))
    return actions.Wait(message=text, until=world.now + SQUAT_WAIT)


def on_run(status: AgentRunStatus, *, message: str, now: datetime) -> AgentRunStatus:
    """A run's status saying that one of the names it needs is squatted."""
    return status.model_copy(update={"conditions": conditions.set_condition(
        status.conditions, type_=NAME_SQUATTED, status="True", reason="NameSquatted",
        message=message, now=now)})


def run_cleared(status: AgentRunStatus) -> AgentRunStatus:
    return status.model_copy(update={"conditions": conditions.remove(status.conditions,
                                                                     NAME_SQUATTED)})
