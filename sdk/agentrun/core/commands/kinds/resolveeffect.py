"""Resolve-effect: a person records the owner's answer about an effect the worker could not
settle (the slot condition ``EffectUnresolved``).

Checked like a give-up (open slot, a reason, the owner or ``override``), then by
:mod:`agentrun.core.attempts.effectrecords` (the key names an open unresolved effect).
"""

from __future__ import annotations

from agentrun.api import names
from agentrun.api.slots import CommandKind
from agentrun.core.attempts import effectrecords
from agentrun.core.commands import fields, ledger
from agentrun.core.commands.ledger import Context, Decision, Failure
from agentrun.core.commands.spec import TERMINAL, CommandSpec


def check(context: Context) -> Failure | None:
    failed = ledger.ending_failure(context, what="resolve its effects")
    if failed is not None:
        return failed
    command, slot = context.command, context.slot
    return effectrecords.failure(key=command.effect_key, outcome=command.outcome,
                                 result=command.result, status=slot.status,
                                 slot=slot.metadata.name)


def apply(context: Context) -> Decision:
    """The owner's answer recorded: the effect's entry resolved, the condition updated."""
    command, slot, now = context.command, context.slot, context.now
    assert command.effect_key is not None and command.outcome is not None
    message = (f"effect key {command.effect_key} resolved {command.outcome} by "
               f"{command.actor}: {command.reason}")
    new, event = ledger.accept(command=command, status=slot.status, message=message,
                               reason=names.EFFECT_RESOLVED_EVENT, now=now)
    new = ledger.overridden(new, command=command, owner=ledger.live_owner(slot.status))
    return Decision(accepted=True, event=event, status=effectrecords.resolve(
        new, key=command.effect_key, outcome=command.outcome, reason=command.reason or "",
        actor=command.actor, result=command.result, slot=slot.metadata.name, now=now))


SPEC = CommandSpec(
    kind=CommandKind.RESOLVE_EFFECT, word="resolve-effect", check=check, apply=apply, shown=6,
    help="record the effect owner's answer about an unresolved effect (status.effects)",
    takes=(fields.EFFECT_KEY, fields.OUTCOME, fields.REASON, fields.RESULT), owner="live",
    state=(f"!(variables.state in {TERMINAL})", "the slot has already finished"),
    examples=("kubectl agentrun resolve-effect study-research-1a2b3c4d --key publish \\",
              '    --outcome applied --reason "the report is on the site" '
              """--result '{"id": 42}'"""))
