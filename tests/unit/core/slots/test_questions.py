"""Questions in the core: the attempt that asked, the wait, the answer, the deadline.

Covers, each by the exact step and its content:
- an Active attempt whose Lease carries its own ``.question`` record ends ``Asked`` (pod
  Failed or Succeeded alike): RetryWait with no retryAt, ``askedAttempts`` counted, the
  entry in ``status.questions`` with question, schema and digest, condition
  QuestionPending True naming them and the answer command, a Normal Event; no claim while it
  waits; a record that is not a question (a step result, a bad key) ends the attempt as before;
- an Asked attempt is not counted against maxAttempts;
- answer, exhaustively over state x actor x override x reason x key x value against an
  oracle of the predicate order (WrongRun, BlankReason, NotOwner, Malformed,
  NoPendingQuestion, AnswerInvalid); accepted: the entry Answered with the canonical value
  and actor, the slot Reopened (no attempt created), then the claim's Lease carries
  ``<key>.answer`` with the value and digest; a second answer is NoPendingQuestion;
- the deadline: on expiry the slot fails (QuestionExpired) or takes the default and
  reopens, both in the ledger; an answer after it is QuestionExpired;
- a reassignment reopens without an answer; the next attempt's question replaces the one
  it asks again; a worker's schema out of bounds refuses every answer with why.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from datetime import timedelta
from typing import Any

import pytest

from agentrun.api import bounds, names, questions, records
from agentrun.api.slots import (
    CommandKind,
    Outcome,
    Predicate,
    QuestionState,
    SlotState,
    SlotStatus,
)
from agentrun.core.attempts import questionrecords
from agentrun.core.base.actions import Create, Wait, WriteStatus
from agentrun.core.commands import guards
from agentrun.core.slots import steps
from agentrun.core.slots.inputs import World
from tests.unit.core import corefakes as f
from tests.unit.core.corefakes import expect

CONDITION = names.QUESTION_PENDING_CONDITION
SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}},
          "required": ["approved"]}
DIGEST = questions.digest(question="Publish the report?", schema=SCHEMA)


def question_record(*, attempt: int = 1, key: str = "plan", schema: Any = SCHEMA,
                    kind: records.Kind = records.Kind.DECISION, deadline: int | None = None,
                    on_expiry: str = "fail", default: Any = None) -> tuple[str, str]:
    payload = {"question": "Publish the report?", "schema": schema,
               "deadlineSeconds": deadline, "onExpiry": on_expiry, "default": default}
    data = records.canonical(payload)
    record = records.Record(attempt=attempt, digest=records.digest(data), inline=payload,
                            key=f"{key}.question", kind=kind, size=len(data))
    return record.annotation, records.encode(record)


def ended_world(*found: tuple[str, str], phase: str = "Failed", owner: str | None = "alice",
                **kwargs: Any) -> World:
    """Attempt 1 ended (pod finished, Lease released) with ``found`` records on its Lease."""
    lease = f.lease(1, holder=False)
    lease["metadata"]["annotations"].update(dict(found))
    return f.world(f.active(1, owner=owner), attempt=f.objects(1, pod=f.pod(1, phase),
                                                               lease=lease), **kwargs)


def asked_status(**kwargs: Any) -> SlotStatus:
    record = question_record(**{k: v for k, v in kwargs.items() if k != "owner"})
    step = expect(steps.next_step(ended_world(record, owner=kwargs.get("owner", "alice"))),
                  WriteStatus)
    return step.status


def fenced_world(status: SlotStatus, **kwargs: Any) -> World:
    """The asked attempt fenced: its Lease tombstoned, its pod finished."""
    return f.world(status, attempt=f.objects(1, pod=f.pod(1, "Failed"),
                                             lease=f.lease(1, outcome="Asked")), **kwargs)


@pytest.mark.parametrize("phase", ["Failed", "Succeeded"])
def test_an_attempt_that_asked_ends_asked_and_shows_the_question(phase: str) -> None:
    step = expect(steps.next_step(ended_world(question_record(), phase=phase)), WriteStatus)
    status = step.status
    assert (status.state, status.retry_at, status.asked_attempts) == (
        SlotState.RETRY_WAIT, None, 1)
    assert status.attempts[-1].outcome is Outcome.ASKED
    [entry] = status.questions
    assert (entry.key, entry.attempt, entry.question, entry.state, entry.digest) == (
        "plan", 1, "Publish the report?", QuestionState.PENDING, DIGEST)
    assert json.loads(entry.json_schema or "") == SCHEMA
    found = f.condition(status, CONDITION)
    assert (found.status, found.reason) == ("True", "Asked")
    for text in ("Publish the report?", DIGEST, '"approved"', "kubectl agentrun answer",
                 names.ANSWER_VALUE):
        assert text in found.message, text
    assert step.event is not None and (step.event.type, step.event.reason) == (
        "Normal", "QuestionAsked")
    assert not any(c.type == "AwaitingReassignment" for c in status.conditions)
    waited = expect(steps.next_step(fenced_world(status)), Wait)  # Automatic: still no claim
    assert "asks (key plan; answer: kubectl agentrun answer" in waited.message


@pytest.mark.parametrize("record", [
    question_record(kind=records.Kind.STEP_RESULT), question_record(key="bad.key"),
    question_record(attempt=2)], ids=["step-result", "bad-key", "other-attempt"])
def test_records_that_are_not_a_question_end_the_attempt_as_before(
        record: tuple[str, str]) -> None:
    step = expect(steps.next_step(ended_world(record)), WriteStatus)
    assert step.status.attempts[-1].outcome is Outcome.FAILED
    assert step.status.questions == [] and step.status.asked_attempts == 0


def answer(status: SlotStatus, *, actor: str | None = "alice", override: bool = False,
           reason: str | None = "the plan is within budget", key: str | None = "plan",
           value: str | None = '{"approved": true}', run: str | None = f.RUN,
           request_id: str = "r-1", now_s: float = 120) -> guards.Decision:
    command = guards.Command(kind=CommandKind.ANSWER, request_id=request_id, actor=actor,
                             override=override, reason=reason, question_key=key, value=value,
                             run=run)
    return guards.decide(command=command, slot=f.slot(status), tenant=f.TENANT, prior=None,
                         launch_specs=(f.CPU_SPEC,), now=f.T0 + f.seconds(now_s))


def test_an_asked_attempt_is_not_counted_against_max_attempts() -> None:
    """maxAttempts 2: attempt 1 asked, attempt 2 failed: one automatic attempt is left."""
    answered = answer(asked_status()).status
    second = answered.model_copy(update={
        "state": SlotState.ACTIVE, "active_worker": f.worker(2), "prior_worker": f.worker(1),
        "attempt_count": 2, "attempts": [*answered.attempts, f.attempt(2, ended=False)]})
    world = f.world(second, run=f.agent_run(max_attempts=2), attempt=f.objects(
        2, pod=f.pod(2, "Failed"), lease=f.lease(2, holder=False)))
    ended = expect(steps.next_step(world), WriteStatus).status
    assert ended.attempts[-1].outcome is Outcome.FAILED
    assert ended.retry_at is not None
    assert not any(c.type == "AwaitingReassignment" for c in ended.conditions)


STATES = [SlotState.RETRY_WAIT, SlotState.ACTIVE, SlotState.FAILED]
VALUES = ['{"approved": true}', '{"approved": "yes"}', "not json", None]
CASES = list(itertools.product(STATES, ["alice", "bob"], [False, True], ["why", " "],
                               ["plan", "other", None], VALUES, [f.RUN, "other-run"]))


@pytest.mark.parametrize(("state", "actor", "override", "reason", "key", "value", "run"),
                         CASES)
def test_answer_predicates_in_order(state: SlotState, actor: str, override: bool, reason: str,
                                    key: str | None, value: str | None, run: str) -> None:
    status = asked_status().model_copy(update={"state": state})
    decision = answer(status, actor=actor, override=override, reason=reason, key=key,
                      value=value, run=run)
    expected: Predicate | None
    if run != f.RUN:
        expected = Predicate.WRONG_RUN
    elif not reason.strip():
        expected = Predicate.BLANK_REASON
    elif actor != "alice" and not override:
        expected = Predicate.NOT_OWNER
    elif key is None or value is None:
        expected = Predicate.MALFORMED
    elif key != "plan" or state is not SlotState.RETRY_WAIT:
        expected = Predicate.NO_PENDING_QUESTION
    elif value == "not json":
        expected = Predicate.MALFORMED
    elif value != '{"approved": true}':
        expected = Predicate.ANSWER_INVALID
    else:
        expected = None
    assert decision.predicate is expected
    assert decision.accepted is (expected is None)
    if expected is not None:
        assert decision.status.questions == status.questions  # nothing else changes
        assert decision.status.commands[-1].outcome == "Rejected"
        assert f.condition(decision.status, "CommandRejected").reason == str(expected)
        if expected is Predicate.ANSWER_INVALID:
            assert "'yes' is not of type 'boolean' (at /approved)" in (
                decision.status.commands[-1].message)
        return
    [entry] = decision.status.questions
    assert (entry.state, entry.value, entry.actor) == (
        QuestionState.ANSWERED, '{"approved":true}', actor)
    assert decision.status.commands[-1].override is (True if actor != "alice" else None)


def test_an_accepted_answer_reopens_and_the_claims_lease_carries_it() -> None:
    status = asked_status()
    decision = answer(status)
    new = decision.status
    assert decision.event is not None and decision.event.reason == "QuestionAnswered"
    assert (new.state, new.attempt_count, new.next_owner_actor) == (
        SlotState.RETRY_WAIT, 1, "alice")  # no attempt made; the asker's owner kept
    assert f.condition(new, "Reopened").reason == "Answered"
    pending = f.condition(new, CONDITION)
    assert (pending.status, pending.reason) == ("False", "Answered")
    claim = expect(steps.next_step(fenced_world(new)), Create)
    assert claim.point == "claim-lease"
    annotations = claim.body["metadata"]["annotations"]
    key = f"{records.PREFIX}plan{names.ANSWERED_SUFFIX}"
    record = records.decode(annotation=key, value=annotations[key], attempt=2)
    assert record.inline == {"value": {"approved": True}, "digest": DIGEST,
                             "questionAttempt": 1, "expired": False, "actor": "alice"}
    again = answer(new, request_id="r-2")
    assert again.predicate is Predicate.NO_PENDING_QUESTION
    assert "answered once" in again.status.commands[-1].message


def test_on_expiry_the_slot_fails_as_the_worker_declared() -> None:
    status = asked_status(deadline=60)
    entry = status.questions[0]
    assert entry.deadline == f.T0 + timedelta(seconds=60)
    waited = expect(steps.next_step(fenced_world(status, now=f.T0 + f.seconds(30))), Wait)
    assert waited.until == entry.deadline
    late = answer(status, now_s=61)
    assert late.predicate is Predicate.QUESTION_EXPIRED
    step = expect(steps.next_step(fenced_world(status, now=f.T0 + f.seconds(61))), WriteStatus)
    assert step.status.state is SlotState.FAILED
    assert f.condition(step.status, "Succeeded").reason == "QuestionExpired"
    assert step.status.questions[0].state is QuestionState.EXPIRED
    ledger = step.status.commands[-1]
    assert (ledger.kind, ledger.request_id, ledger.outcome) == (
        CommandKind.ANSWER, "deadline.plan.1", "Accepted")
    assert "the slot fails" in ledger.message
    assert step.event is not None and step.event.reason == "QuestionExpired"


def test_on_expiry_the_default_is_taken_and_the_slot_reopens() -> None:
    status = asked_status(deadline=60, on_expiry="default", default={"approved": False})
    step = expect(steps.next_step(fenced_world(status, now=f.T0 + f.seconds(61))), WriteStatus)
    new = step.status
    [entry] = new.questions
    assert (entry.state, entry.value, entry.actor) == (
        QuestionState.EXPIRED, '{"approved":false}', None)
    assert f.condition(new, "Reopened").status == "True"
    assert new.commands[-1].request_id == "deadline.plan.1"
    claim = expect(steps.next_step(fenced_world(new, now=f.T0 + f.seconds(62))), Create)
    key = f"{records.PREFIX}plan{names.ANSWERED_SUFFIX}"
    record = records.decode(annotation=key, value=claim.body["metadata"]["annotations"][key],
                            attempt=2)
    assert isinstance(record.inline, dict)
    assert (record.inline["value"], record.inline["expired"]) == ({"approved": False}, True)


def test_a_reassignment_reopens_without_an_answer_and_the_next_question_replaces_it() -> None:
    status = asked_status()
    world = fenced_world(status, annotations=f.command(
        "reassign", reason="ask again", run=f.RUN, worker_class="cpu"),
        snapshots=frozenset({f.PINNED_RUN_SNAPSHOT}))
    reopened = expect(steps.next_step(world), WriteStatus).status
    assert answer(reopened).predicate is Predicate.NO_PENDING_QUESTION
    assert [q.state for q in reopened.questions] == [QuestionState.CLOSED]
    pending = f.condition(reopened, CONDITION)
    assert (pending.status, pending.reason) == ("False", "Reassigned")
    assert "asks its question again" in pending.message
    second = reopened.model_copy(update={
        "state": SlotState.ACTIVE, "active_worker": f.worker(2), "prior_worker": f.worker(1),
        "attempt_count": 2, "attempts": [*reopened.attempts, f.attempt(2, ended=False)]})
    lease = f.lease(2, holder=False)
    lease["metadata"]["annotations"].update(dict([question_record(attempt=2)]))
    ended = expect(steps.next_step(f.world(second, attempt=f.objects(
        2, pod=f.pod(2, "Failed"), lease=lease))), WriteStatus).status
    assert [(q.key, q.attempt, q.state) for q in ended.questions] == [
        ("plan", 1, QuestionState.CLOSED), ("plan", 2, QuestionState.PENDING)]
    assert ended.asked_attempts == 2


def test_a_give_up_ends_the_wait() -> None:
    world = fenced_world(asked_status(deadline=60), annotations=f.command(
        "give-up", reason="nobody will answer"))
    failed = expect(steps.next_step(world), WriteStatus).status
    assert failed.state is SlotState.FAILED
    assert not any(c.type == CONDITION for c in failed.conditions)
    assert [q.state for q in failed.questions] == [QuestionState.CLOSED]
    later = fenced_world(failed, now=f.T0 + f.seconds(120))  # past the deadline: nothing
    assert isinstance(steps.next_step(later), Wait)


def test_a_schema_and_default_past_their_bounds_are_shown_clipped_and_refuse_answers() -> None:
    """A worker past the SDK: the schema shown clipped (no longer JSON), a default too
    large dropped (the deadline then fails the slot), every answer refused with why."""
    big = asked_status(schema={"enum": ["x" * 600]})
    [entry] = big.questions
    assert entry.json_schema is not None and entry.json_schema.endswith("…")
    defaulted = asked_status(schema=None, deadline=60, on_expiry="default", default="y" * 600)
    assert (defaulted.questions[0].on_expiry, defaulted.questions[0].default) == ("fail", None)
    decision = answer(big, value='"x"')
    assert decision.predicate is Predicate.ANSWER_INVALID
    assert "cannot check this answer" in decision.status.commands[-1].message


def test_a_schema_past_its_bounds_refuses_every_answer_with_why() -> None:
    status = asked_status(schema={"type": "string", "pattern": "(a)\\1"})
    decision = answer(status, value='"aa"')
    assert decision.predicate is Predicate.ANSWER_INVALID
    assert "cannot check this answer" in decision.status.commands[-1].message


def test_a_pattern_that_backtracks_in_python_is_checked_in_linear_time() -> None:
    """``^(a+)+$`` against 400 a's and a '!' takes Python's re longer than the universe has;
    RE2 answers at once."""
    status = asked_status(schema={"type": "string", "pattern": "^(a+)+$"})
    decision = answer(status, value=json.dumps("a" * 400 + "!"))
    assert decision.predicate is Predicate.ANSWER_INVALID
    assert "does not match '^(a+)+$'" in decision.status.commands[-1].message
    assert answer(status, value=json.dumps("a" * 400)).accepted


def test_an_answer_names_the_question_it_answers_by_digest() -> None:
    status = asked_status()
    command = guards.Command(kind=CommandKind.ANSWER, request_id="r-9", actor="alice",
                             reason="yes", question_key="plan", value='{"approved": true}',
                             run=f.RUN, digest="f" * 64)
    other = guards.decide(command=command, slot=f.slot(status), tenant=f.TENANT, prior=None,
                          launch_specs=(f.CPU_SPEC,), now=f.T0 + f.seconds(120))
    assert other.predicate is Predicate.NO_PENDING_QUESTION
    assert "not the question you read" in other.status.commands[-1].message
    same = guards.decide(command=dataclasses.replace(command, digest=DIGEST),
                         slot=f.slot(status), tenant=f.TENANT, prior=None,
                         launch_specs=(f.CPU_SPEC,), now=f.T0 + f.seconds(120))
    assert same.accepted


def test_no_answer_or_default_reopens_a_slot_out_of_attempt_numbers() -> None:
    capped = asked_status(deadline=60, on_expiry="default", default={"approved": False})
    capped = capped.model_copy(update={"attempt_count": bounds.MAX_ATTEMPT_NUMBER})
    assert answer(capped, now_s=30).predicate is Predicate.ATTEMPT_LIMIT
    shown = questionrecords.with_condition(capped, slot=f.SLOT, now=f.T0)
    assert "no answer can be accepted" in f.condition(shown, CONDITION).message
    step = expect(steps.next_step(fenced_world(capped, now=f.T0 + f.seconds(61))), WriteStatus)
    assert step.status.state is SlotState.FAILED
    assert f"all {bounds.MAX_ATTEMPT_NUMBER} attempt numbers" in step.status.commands[-1].message


def test_a_failed_attempt_at_the_last_attempt_number_is_not_retried() -> None:
    """Asked attempts are not counted against maxAttempts, but numbers still run out."""
    status = f.active(1).model_copy(update={"attempt_count": bounds.MAX_ATTEMPT_NUMBER,
                                            "asked_attempts": 10})
    world = f.world(status, run=f.agent_run(max_attempts=1000), attempt=f.objects(
        1, pod=f.pod(1, "Failed"), lease=f.lease(1, holder=False)))
    ended = expect(steps.next_step(world), WriteStatus).status
    assert ended.retry_at is None
    waits = f.condition(ended, "AwaitingReassignment")
    assert (waits.status, waits.reason) == ("True", "AttemptNumbersExhausted")
    assert "give it up" in waits.message and "reassign the" not in waits.message


def test_the_question_is_shown_with_its_control_characters_escaped() -> None:
    payload = {"question": "ok?\x1b[2J\u202e\nfake line", "schema": None}
    data = records.canonical(payload)
    record = records.Record(attempt=1, digest=records.digest(data), inline=payload,
                            key="plan.question", kind=records.Kind.DECISION, size=len(data))
    step = expect(steps.next_step(ended_world((record.annotation, records.encode(record)))),
                  WriteStatus)
    message = f.condition(step.status, CONDITION).message
    assert "ok?\\x1b[2J\\u202e\\x0afake line" in message
    assert step.event is not None and "\x1b" not in step.event.message
    assert step.status.questions[0].question == payload["question"]  # kept exact
