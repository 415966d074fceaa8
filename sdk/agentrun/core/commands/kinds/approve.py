"""Approve: a person approves the exact payload of an effect waiting for approval.

Checked in order: the run named is the slot's (``WrongRun``), a reason, then
:func:`agentrun.core.attempts.approvalrecords.failure`: an approval waits under the key
(``NoPendingQuestion``: none, or it was decided), for this digest (``DigestMismatch``),
not from the run's creator without ``approve-own`` (``SelfApproval``), from someone
granted ``approve`` (``NotApprover``), once per person (``AlreadyApproved``); and the
attempt-number cap. Accepted, it counts; once enough distinct people approved, the slot
reopens (no Pod or Lease until the claim, whose Lease carries ``<key>.approved``).
"""

from __future__ import annotations

from agentrun.api import names
from agentrun.api.slots import CommandKind
from agentrun.core.commands import approving, fields
from agentrun.core.commands.ledger import Context, Decision, Failure
from agentrun.core.commands.spec import CommandSpec


def check(context: Context) -> Failure | None:
    return approving.checked(context, deny=False)


def apply(context: Context) -> Decision:
    return approving.decided(context, deny=False)


SPEC = CommandSpec(
    kind=CommandKind.APPROVE, word="approve", check=check, apply=apply, shown=8, opens=True,
    help="approve the exact payload of an effect waiting for approval (status.questions)",
    takes=(fields.APPROVAL_KEY, fields.PAYLOAD_DIGEST, fields.REASON, fields.RUN,
           fields.TENANT),
    verbs=(names.VERB_APPROVE, names.VERB_APPROVE_OWN), state=approving.STATE,
    examples=("kubectl agentrun approve study-research-1a2b3c4d --key publish \\",
              "    --digest 9f86d081884c7d65... --reason \"checked the recipients\""))
