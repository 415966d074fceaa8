"""Hold: stop a slot from starting attempts until it is released. It needs a reason."""

from __future__ import annotations

from agentrun.api.slots import CommandKind
from agentrun.core.commands import fields, ledger
from agentrun.core.commands.ledger import Context, Decision, Failure
from agentrun.core.commands.spec import TERMINAL, CommandSpec
from agentrun.core.machine import transitions


def check(context: Context) -> Failure | None:
    return ledger.blank_reason() if ledger.is_blank(context.command.reason) else None


def apply(context: Context) -> Decision:
    command, now = context.command, context.now
    message = f"held by {command.actor}: {command.reason}"
    new, event = ledger.accept(command=command, status=context.slot.status, message=message,
                               reason="Held", now=now)
    return Decision(accepted=True, status=transitions.hold(new, reason=message, now=now),
                    event=event)


SPEC = CommandSpec(
    kind=CommandKind.HOLD, word="hold", check=check, apply=apply, shown=3,
    help="stop the slot from starting attempts", takes=(fields.REASON,),
    state=(f"!(variables.state in {TERMINAL})",
           "the slot has already finished"),
    examples=('kubectl agentrun hold study-research-1a2b3c4d --reason "investigating the source"',))
