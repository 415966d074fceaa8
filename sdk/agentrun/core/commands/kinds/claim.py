"""Claim: start the slot's next attempt now (a Manual run's, or after a reassignment).

Accepted when the slot is claimable on request (``NotClaimable`` otherwise), no effect of
it is unresolved (``EffectUnresolved``) and it has attempt numbers left; the caller then
starts the claim (its Lease first), and the actor becomes the attempt's owner. A claim
command is judged as the manual request it is, whatever the run's policy.
"""

from __future__ import annotations

from agentrun.api import conditions, names
from agentrun.api.slots import CommandKind, Predicate
from agentrun.core.attempts import effectrecords, questionrecords
from agentrun.core.base.events import Event
from agentrun.core.commands import ledger
from agentrun.core.commands.ledger import Context, Decision, Failure
from agentrun.core.commands.spec import CommandSpec, key
from agentrun.core.machine import transitions


def check(context: Context) -> Failure | None:
    status, name, now = context.slot.status, context.slot.metadata.name, context.now
    if effectrecords.blocking(status, slot=name):
        return (Predicate.EFFECT_UNRESOLVED, effectrecords.blocking(status, slot=name) or "")
    if conditions.is_true(status.conditions, names.BUDGET_EXCEEDED_CONDITION):
        return (Predicate.NOT_CLAIMABLE,
                f"slot {name!r} waits for its run's budget to be raised (condition "
                f"{names.BUDGET_EXCEEDED_CONDITION}): kubectl agentrun budget <run> --add N "
                "--reason R, then claim")
    if not transitions.may_be_claimed(status, now=now):
        held = " and held" if transitions.is_held(status) else ""
        asked = questionrecords.waiting(status)
        why = (f"; its question {asked[0].key} waits for an answer (kubectl agentrun answer)"
               if asked else "")
        return (Predicate.NOT_CLAIMABLE,
                f"slot {name!r} is {status.state}{held}: a claim needs a Ready slot, or a "
                f"RetryWait slot that was reassigned, answered or whose retry time has come"
                f"{why}")
    return ledger.attempt_limit(status, name=name)


def apply(context: Context) -> Decision:
    new = ledger.claim_accepted(context.slot.status, request_id=context.command.request_id,
                                actor=context.command.actor, now=context.now)
    return Decision(accepted=True, status=new, event=Event(
        type="Normal", reason="Claimed", message=new.commands[-1].message))


SPEC = CommandSpec(
    kind=CommandKind.CLAIM, word="claim", check=check, apply=apply, shown=2,
    claims=True, opens=True,
    help="start the slot's next attempt now (Manual runs, or after reassign)",
    state=("variables.state in ['Ready', 'RetryWait'] && !variables.held",
           "a claim needs a Ready or RetryWait slot that is not held"),
    admission=((
        "oldObject == null || !variables.unresolved",
        f"{key('claim', 'id')}: an effect of this slot is unresolved (condition "
        f"{names.EFFECT_UNRESOLVED_CONDITION}, status.effects): no attempt may start "
        f"until its owner's answer is recorded ({key('resolve-effect', 'id')} and -key, "
        "-outcome, -reason) or the slot is given up"),),
    examples=("kubectl agentrun claim study-research-1a2b3c4d      "
              "# start the next attempt (Manual runs)",))
