"""What approve and deny share: their checks, and counting an approval or a deny.

The decisions are :mod:`agentrun.core.attempts.approvalrecords`'s; this is their place
among the commands (each command's module stays its own: none imports another).
"""

from __future__ import annotations

from agentrun.api import names
from agentrun.core.attempts import approvalrecords, questionrecords
from agentrun.core.commands import ledger
from agentrun.core.commands.ledger import Context, Decision, Failure

STATE = ("variables.state == 'RetryWait'",
         "only a RetryWait slot whose last attempt asked for approval can be approved or denied")

def checked(context: Context, *, deny: bool) -> Failure | None:
    """The checks approve and deny share (see the module docstring)."""
    command, slot = context.command, context.slot
    status, name = slot.status, slot.metadata.name
    wrong = ledger.wrong_run(command, slot=slot,
                             annotation=f"{names.GROUP}/{str(command.kind).lower()}-run")
    if wrong is not None:
        return wrong
    if ledger.is_blank(command.reason):
        return ledger.blank_reason()
    return approvalrecords.failure(
        key=command.approval_key, digest=command.payload_digest, actor=command.actor,
        granted=command.granted, creator=context.creator, deny=deny, status=status,
        slot=name) or ledger.attempt_limit(status, name=name)


def decided(context: Context, *, deny: bool) -> Decision:
    """The approval (or deny) counted; the slot reopened once it is decided."""
    command, slot, now = context.command, context.slot, context.now
    assert command.approval_key is not None and command.actor is not None
    key = command.approval_key
    new, verdict = approvalrecords.decided(
        slot.status, key=key, actor=command.actor, deny=deny, reason=command.reason or "",
        slot=slot.metadata.name, now=now)
    entry = next(q for q in reversed(new.questions) if q.key == key and q.approvers)
    message = (f"effect key {key} (payload {command.payload_digest}) {verdict or 'approved'} by "
               f"{command.actor}: {command.reason}" + (
                   f"; {len(entry.approved_by)} of {entry.approvers} approvers so far"
                   if verdict is None else "; the next claim's attempt reads the decision"))
    new, event = ledger.accept(command=command, status=new, message=message, reason=(
        names.APPROVAL_DENIED_EVENT if deny else names.APPROVED_EVENT), now=now)
    if verdict is None:
        return Decision(accepted=True, event=event, status=new)
    owner = ledger.owner_of(slot.status, slot.status.prior_worker)
    return Decision(accepted=True, event=event, status=questionrecords.reopened(
        new, owner=owner.actor, message=message, now=now))
