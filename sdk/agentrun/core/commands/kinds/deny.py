"""Deny: a person refuses an effect waiting for approval; it is never sent.

Checked as an approval is (:mod:`..approving`), except that one deny decides, and that the
run's creator may deny its own run's effects (stopping is always theirs); anyone else
needs the verb ``approve``. The slot reopens; the next attempt's Lease carries
``<key>.approved`` with the decision ``denied``, and the worker's effect call raises
``EffectDenied`` instead of sending it.
"""

from __future__ import annotations

from agentrun.api import names
from agentrun.api.slots import CommandKind
from agentrun.core.commands import approving, fields
from agentrun.core.commands.ledger import Context, Decision, Failure
from agentrun.core.commands.spec import CommandSpec


def check(context: Context) -> Failure | None:
    return approving.checked(context, deny=True)


def apply(context: Context) -> Decision:
    return approving.decided(context, deny=True)


SPEC = CommandSpec(
    kind=CommandKind.DENY, word="deny", check=check, apply=apply, shown=9, opens=True,
    help="deny an effect waiting for approval: it is never sent (status.questions)",
    takes=(fields.APPROVAL_KEY, fields.PAYLOAD_DIGEST, fields.REASON, fields.RUN,
           fields.TENANT),
    verbs=(names.VERB_APPROVE,), state=approving.STATE,
    examples=("kubectl agentrun deny study-research-1a2b3c4d --key publish \\",
              "    --digest 9f86d081884c7d65... --reason \"wrong recipients\""))
