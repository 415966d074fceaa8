"""Answer: a person answers a question a worker asked (the slot condition ``QuestionPending``).

Accepted only if every predicate holds; the first that fails, in this order, is the one
reported (the ledger's ``predicate``), after ``WrongTenant`` (every kind's):

1. ``WrongRun``: the command's run is not the slot's run;
2. ``BlankReason``: the reason is empty, blank, or longer than 1 KiB;
3. ``NotOwner``: the attempt that asked records an owner actor, the command's actor
   differs, and the actor has no ``override``;
4. ``NoPendingQuestion``: no question with the key is waiting (none asked, an unknown
   key, or answered already: a question is answered once), or the one waiting is not the
   one the person read (``answer-digest`` given and not its digest); ``QuestionExpired``:
   its deadline has passed;
5. ``Malformed``: the value is not JSON or over its bound, or given both ways or neither,
   or its reference (``answer-value-from``: a ConfigMap of the slot's namespace, the key
   in it and the value's sha256, read when the command is decided) names a ConfigMap or
   key that is not there, a value over 64 KiB, or other bytes than its digest;
   ``AnswerInvalid``: the question's schema refuses the value, with the schema's message
   (or cannot check it: a schema out of its bounds, too costly for this answer);
6. ``AttemptLimitReached``: the slot has used every attempt number it may have;

then by :mod:`agentrun.core.attempts.questionrecords`. Accepted, the answer is recorded on
the question (``status.questions``) and, once none is waiting, the slot is *reopened* as
a reassignment reopens it (same worker class and pinned LaunchSpec, the asking attempt's
owner kept): no Pod or Lease until the claim, whose Lease carries the answer.
"""

from __future__ import annotations

import hashlib

from agentrun.api import bounds, names
from agentrun.api.slots import CommandKind, Predicate
from agentrun.core.attempts import questionrecords
from agentrun.core.commands import fields, ledger
from agentrun.core.commands.ledger import Context, Decision, Failure
from agentrun.core.commands.spec import CommandSpec


def check(context: Context) -> Failure | None:
    command, slot = context.command, context.slot
    status, name = slot.status, slot.metadata.name
    wrong = ledger.wrong_run(command, slot=slot, annotation=names.ANSWER_RUN)
    if wrong is not None:
        return wrong
    if ledger.is_blank(command.reason):
        return ledger.blank_reason()
    refused = ledger.owner_of(status, status.prior_worker).refusal(
        command, whose="the attempt that asked", what="answer it")
    if refused is not None:
        return refused
    if (command.value is None) == (command.value_from is None):
        return (Predicate.MALFORMED, f"give the answer as {names.ANSWER_VALUE} or by "
                f"reference as {names.ANSWER_VALUE_FROM}, exactly one of the two")
    value: str | questionrecords.Given = command.value if command.value is not None else (
        lambda: referenced(context))
    return questionrecords.failure(
        key=command.question_key, value=value, digest=command.digest, status=status,
        slot=name, now=context.now, limit=bounds.ANSWER_FILE_BYTES if (
            command.value_from is not None) else bounds.ANSWER_VALUE_BYTES,
    ) or ledger.attempt_limit(status, name=name)


def referenced(context: Context) -> str | Failure:
    """The answer's text from its reference (``value-from``), or why it cannot be had.

    Only the plugin's own ConfigMap of this very command may be named
    (``agentrun-answer-<request id>``, a re-sent command's too): a person cannot make the
    operator read, or a worker's pod mount, another ConfigMap of the namespace, and the
    refusal says nothing of what another ConfigMap holds. A run without a journal cannot
    take one: its worker keeps the answer as a step on its Lease, 1 KiB at most."""
    command = context.command
    assert command.value_from is not None
    where, digest = command.value_from.split("@sha256:")
    configmap, key = where.split("/", 1)
    own = f"agentrun-answer-{command.request_id.removesuffix('.resend')}"
    if configmap != own:
        return (Predicate.MALFORMED, f"{names.ANSWER_VALUE_FROM} must name this command's "
                f"own ConfigMap, {own} (as kubectl agentrun answer --file writes it)")
    if not context.journaled:
        return (Predicate.MALFORMED, "the run has no journal: its worker cannot keep an "
                f"answer over {bounds.ANSWER_VALUE_BYTES} bytes; answer in "
                f"{names.ANSWER_VALUE}")
    data = context.referenced.get(configmap)
    text = None if data is None else data.get(key)
    if text is None or len(digest) != bounds.DIGEST_CHARS or (
            hashlib.sha256(text.encode()).hexdigest() != digest):
        return (Predicate.MALFORMED, f"{names.ANSWER_VALUE_FROM}: ConfigMap {configmap!r} "
                f"does not hold, under {key!r}, the value of sha256 {digest[:64]} (missing, "
                "or changed since the command was written): send the answer again")
    if len(text.encode()) > bounds.ANSWER_FILE_BYTES:
        return (Predicate.MALFORMED, f"{names.ANSWER_VALUE_FROM}: the value is over "
                f"{bounds.ANSWER_FILE_BYTES} bytes")
    return text


def apply(context: Context) -> Decision:
    """The answer recorded; the slot reopened once no question waits."""
    command, slot, now = context.command, context.slot, context.now
    status = slot.status
    value = command.value if command.value_from is None else referenced(context)
    assert command.question_key is not None and isinstance(value, str)
    message = (f"question {command.question_key} answered by {command.actor}: "
               f"{command.reason}; the next claim's attempt reads the answer")
    new, event = ledger.accept(command=command, status=status, message=message,
                               reason=names.QUESTION_ANSWERED_EVENT, now=now)
    owner = ledger.owner_of(status, status.prior_worker)
    new = ledger.overridden(new, command=command, owner=owner)
    new = questionrecords.answered(new, key=command.question_key, value=value,
                                   actor=command.actor, reason=command.reason or "",
                                   slot=slot.metadata.name, now=now,
                                   value_from=command.value_from)
    return Decision(accepted=True, event=event, status=questionrecords.reopened(
        new, owner=owner.actor, message=message, now=now))


SPEC = CommandSpec(
    kind=CommandKind.ANSWER, word="answer", check=check, apply=apply, shown=7, opens=True,
    help="answer a question a worker asked (status.questions); the slot reopens",
    takes=(fields.QUESTION_KEY, fields.VALUE, fields.REASON, fields.DIGEST, fields.RUN,
           fields.TENANT, fields.VALUE_FROM),
    admission=((f"('{names.ANSWER_VALUE}' in variables.new) != "
                f"('{names.ANSWER_VALUE_FROM}' in variables.new)",
                f"an answer is given as {names.ANSWER_VALUE} or by reference as "
                f"{names.ANSWER_VALUE_FROM}: exactly one of the two"),),
    owner="prior",
    state=("variables.state == 'RetryWait'",
           "only a RetryWait slot whose last attempt asked a question can be answered"),
    examples=("kubectl agentrun answer study-research-1a2b3c4d --key approve-plan \\",
              """    --value '{"approved": true}' --reason "the plan is within budget\""""))
