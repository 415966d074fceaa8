"""Release: let a held slot start attempts again (``NotHeld`` when it is not held)."""

from __future__ import annotations

from agentrun.api.slots import CommandKind, Predicate
from agentrun.core.commands import ledger
from agentrun.core.commands.ledger import Context, Decision, Failure
from agentrun.core.commands.spec import CommandSpec
from agentrun.core.machine import transitions


def check(context: Context) -> Failure | None:
    if not transitions.is_held(context.slot.status):
        return (Predicate.NOT_HELD,
                f"slot {context.slot.metadata.name!r} is not held: there is nothing to release")
    return None


def apply(context: Context) -> Decision:
    command, now = context.command, context.now
    message = f"released by {command.actor}"
    new, event = ledger.accept(command=command, status=context.slot.status, message=message,
                               reason="Released", now=now)
    return Decision(accepted=True, status=transitions.release(new, message=message, now=now),
                    event=event)


SPEC = CommandSpec(
    kind=CommandKind.RELEASE, word="release", check=check, apply=apply, shown=4, opens=True,
    help="let a held slot start attempts again",
    state=("variables.held", "only a held slot can be released"),
    examples=("kubectl agentrun release study-research-1a2b3c4d",))
