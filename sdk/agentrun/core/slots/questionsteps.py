"""The slot steps of questions: the attempt that asked, a question's deadline, and the wait.

:func:`ended` is the end of an attempt that asked (``<key>.question`` on its Lease): it
ends ``Asked`` (``transitions.end_attempt``) with its questions in ``status.questions``,
the condition ``QuestionPending`` and a Normal Event. :func:`expiry_step` ends the wait
when a question's deadline passes: the slot fails, or takes the worker's default answer
and reopens, as the worker declared; either way a ledger entry says so. :func:`gate`
keeps a slot whose question waits from claiming (it waits until the next deadline). The
decisions are :mod:`agentrun.core.attempts.questionrecords`'s.

Why nothing is missed: an attempt ends only once its pod and Lease are terminal
(``core.attempts.ending``), so its Lease holds every record its worker committed, and
:func:`ended` reads the questions from that Lease in the same decision that ends it.
"""

from __future__ import annotations

from agentrun.api import bounds, names
from agentrun.api.slots import CommandKind, Outcome, QuestionEntry, SlotStatus
from agentrun.core.attempts import approvalrecords, questionrecords
from agentrun.core.base import actions, events
from agentrun.core.commands import ledger
from agentrun.core.machine import retries, transitions
from agentrun.core.slots import inputs


def asked(world: inputs.World) -> list[QuestionEntry]:
    """The questions the active attempt's own pod committed on its Lease."""
    status, objects = world.slot.status, world.attempt
    if objects is None:
        return []
    pod_uid = next((a.pod_uid for a in status.attempts if a.lease == objects.name), None)
    found = [*questionrecords.asked_on(objects.lease, now=world.now, pod_uid=pod_uid),
             *approvalrecords.requested_on(objects.lease, now=world.now, pod_uid=pod_uid,
                                           floors=_floors(world))]
    return found[:bounds.QUESTIONS_KEPT]


def _floors(world: inputs.World) -> dict[str, int] | approvalrecords.Unknown:
    """The pinned LaunchSpec's approval floors; when its snapshot cannot be read now,
    :data:`approvalrecords.UNKNOWN` (the most approvers, never fewer than the floor)."""
    if world.launch_spec is not None:
        return world.launch_spec.approval_floors()
    return approvalrecords.UNKNOWN if world.slot.status.launch_spec is not None else {}


def ended(world: inputs.World, *, entries: list[QuestionEntry], message: str,
          exit_code: int | None, policy: retries.Effective) -> actions.WriteStatus:
    """The attempt that asked ends ``Asked``, its questions shown."""
    status, name = world.slot.status, world.slot.metadata.name
    new = transitions.end_attempt(status, outcome=Outcome.ASKED, message=message,
                                  exit_code=exit_code, policy=policy, now=world.now)
    new = questionrecords.with_condition(questionrecords.observed(new, asked=entries),
                                         slot=name, now=world.now)
    told = questionrecords.describe(entries[0], slot=name)
    return actions.WriteStatus(status=new, point="attempt-ended", fresh=True, event=events.Event(
        type="Normal", reason=names.QUESTION_ASKED_EVENT,
        message=f"attempt {status.active_worker} ended Asked: {told}"))


def _deadline_entry(status: SlotStatus, *, entry: QuestionEntry, message: str,
                    world: inputs.World) -> SlotStatus:
    command = ledger.Command(kind=CommandKind.ANSWER,
                             request_id=f"deadline.{entry.key}.{entry.attempt}",
                             actor=None, question_key=entry.key, reason=message)
    new, _ = ledger.accept(command=command, status=status, message=message,
                           reason=names.QUESTION_EXPIRED, now=world.now)
    return new


def expiry_step(world: inputs.World) -> actions.WriteStatus | None:
    """A waiting question past its deadline: fail the slot, or take the default."""
    status, name = world.slot.status, world.slot.metadata.name
    entry = questionrecords.expired(status, now=world.now)
    if entry is None:
        return None
    when = entry.deadline.isoformat() if entry.deadline else "?"
    if entry.on_expiry == "default" and entry.default is not None and (
            status.attempt_count < bounds.MAX_ATTEMPT_NUMBER):
        message = (f"question {entry.key} of attempt {entry.attempt} was not answered by its "
                   f"deadline {when}: the worker's default answer {entry.default} is taken")
        new = questionrecords.answered(status, key=entry.key, value=entry.default, actor=None,
                                       reason=message, slot=name, now=world.now, expired=True)
        new = questionrecords.reopened(_deadline_entry(new, entry=entry, message=message,
                                                       world=world),
                                       owner=ledger.owner_of(status, status.prior_worker).actor,
                                       message=message, now=world.now)
    else:
        capped = status.attempt_count >= bounds.MAX_ATTEMPT_NUMBER
        message = (f"question {entry.key} of attempt {entry.attempt} was not answered by its "
                   f"deadline {when}: the slot fails, " + (
                       f"having used all {bounds.MAX_ATTEMPT_NUMBER} attempt numbers"
                       if capped and entry.on_expiry == "default" else "as the worker declared"))
        new = questionrecords.expire(status, key=entry.key)
        new = transitions.fail(_deadline_entry(new, entry=entry, message=message, world=world),
                               reason=names.QUESTION_EXPIRED, message=message, now=world.now)
    return actions.WriteStatus(status=new, point="question-expired", event=events.Event(
        type="Warning", reason=names.QUESTION_EXPIRED, message=message))


def gate(world: inputs.World) -> actions.Wait | None:
    """A Wait while a question waits for its answer (until its deadline, if any)."""
    status = world.slot.status
    waiting = questionrecords.waiting(status)
    if not waiting:
        return None
    return actions.Wait(message=questionrecords.describe(waiting[0],
                                                         slot=world.slot.metadata.name),
                        until=questionrecords.next_deadline(status))
