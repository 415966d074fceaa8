"""Give up: end the slot Failed (``GaveUp``), in any open state.

Owner-checked like a reassignment, against the live attempt's owner (a claim under way:
the owner it serves); its live attempt becomes the prior, fenced next.
"""

from __future__ import annotations

from agentrun.api.slots import CommandKind
from agentrun.core.commands import fields, ledger
from agentrun.core.commands.ledger import Context, Decision, Failure
from agentrun.core.commands.spec import TERMINAL, CommandSpec
from agentrun.core.machine import transitions


def check(context: Context) -> Failure | None:
    return ledger.ending_failure(context, what="give up")


def apply(context: Context) -> Decision:
    command, status, now = context.command, context.slot.status, context.now
    message = f"given up by {command.actor}: {command.reason}"
    new, event = ledger.accept(command=command, status=status, message=message,
                               reason="GaveUp", now=now)
    new = ledger.overridden(new, command=command, owner=ledger.live_owner(status))
    return Decision(accepted=True, status=transitions.fail(new, reason="GaveUp",
                                                           message=message, now=now),
                    event=event)


SPEC = CommandSpec(
    kind=CommandKind.GIVE_UP, word="give-up", check=check, apply=apply, shown=5,
    help="end the slot Failed (GaveUp)", takes=(fields.REASON,), owner="live",
    state=(f"!(variables.state in {TERMINAL})", "the slot has already finished"),
    examples=('kubectl agentrun give-up study-research-1a2b3c4d --reason "the source is gone"',))
