"""Approvals in the core: the attempt that asked for one, the approvers, the decision.

Covers, each by the exact step and its content:
- an Active attempt whose Lease carries its own ``.approval`` record ends ``Asked``: the
  entry in ``status.questions`` with the view, the payload's digest and the approvers
  needed; QuestionPending names the approve command and the digest;
- approve and deny over the predicates, in order: WrongRun, BlankReason, NoPendingQuestion
  (no approval, or decided), DigestMismatch, SelfApproval (the run's creator, or a run
  without a verified creator, unless ``approve-own``), NotApprover, AlreadyApproved;
- two approvers: the first counts and the slot still waits; the second decides, the slot
  reopens (no attempt made) and the claim's Lease carries ``<key>.approved`` bound to the
  digest; a deny decides at once, and anything after it is NoPendingQuestion;
- the answer command refuses an approval.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from agentrun.api import names, records
from agentrun.api.launchspecs import ApprovalFloor
from agentrun.api.slots import CommandKind, Outcome, Predicate, QuestionState, SlotStatus
from agentrun.core.base.actions import Create, WriteStatus
from agentrun.core.commands import guards
from agentrun.core.slots import steps
from tests.unit.core import corefakes as f
from tests.unit.core.corefakes import expect
from tests.unit.core.slots.test_questions import ended_world, fenced_world

DIGEST = hashlib.sha256(b'{"to":"all"}').hexdigest()
APPROVE, OWN = names.VERB_APPROVE, names.VERB_APPROVE_OWN


def approval_record(*, approvers: int = 2, digest: str = DIGEST) -> tuple[str, str]:
    payload = {"effect": "publish", "owner": "blog", "digest": digest,
               "view": '{"to":"all"}', "approvers": approvers}
    data = records.canonical(payload)
    record = records.Record(attempt=1, digest=records.digest(data), inline=payload,
                            key="publish.approval", kind=records.Kind.DECISION, size=len(data))
    return record.annotation, records.encode(record)


def requested(approvers: int = 2) -> SlotStatus:
    step = expect(steps.next_step(ended_world(approval_record(approvers=approvers))),
                  WriteStatus)
    return step.status


def send(status: SlotStatus, kind: CommandKind = CommandKind.APPROVE, *, actor: str = "bob",
         granted: frozenset[str] = frozenset({APPROVE}), digest: str = DIGEST,
         key: str = "publish", reason: str | None = "checked the recipients",
         run: str | None = f.RUN, creator: str | None = f.CREATOR,
         request_id: str = "a-1") -> guards.Decision:
    command = guards.Command(kind=kind, request_id=request_id, actor=actor, granted=granted,
                             reason=reason, approval_key=key, payload_digest=digest, run=run)
    return guards.decide(command=command, slot=f.slot(status), tenant=f.TENANT, prior=None,
                         launch_specs=(f.CPU_SPEC,), now=f.T0 + f.seconds(120),
                         creator=creator)


def test_an_attempt_that_asks_for_approval_ends_asked_and_shows_the_payload() -> None:
    status = requested()
    assert status.attempts[-1].outcome is Outcome.ASKED and status.retry_at is None
    entry = status.questions[0]
    assert (entry.key, entry.digest, entry.approvers, entry.approved_by, entry.state) == (
        "publish", DIGEST, 2, [], QuestionState.PENDING)
    assert entry.question == 'effect publish (owner blog): {"to":"all"}'
    pending = f.condition(status, names.QUESTION_PENDING_CONDITION)
    assert pending.status == "True"
    assert f"kubectl agentrun approve {f.SLOT} --key publish --digest {DIGEST}" in pending.message
    assert "2 distinct approvers needed, 0 so far" in pending.message


@pytest.mark.parametrize(("change", "predicate", "words"), [
    ({"run": "other"}, Predicate.WRONG_RUN, "names run"),
    ({"reason": " "}, Predicate.BLANK_REASON, "non-blank"),
    ({"key": "other"}, Predicate.NO_PENDING_QUESTION, "no pending approval 'other'"),
    ({"digest": "b" * 64}, Predicate.DIGEST_MISMATCH, "not the payload you checked"),
    ({"actor": f.CREATOR}, Predicate.SELF_APPROVAL, "separation of duties"),
    ({"actor": f.CREATOR, "granted": frozenset({OWN})}, Predicate.NOT_APPROVER,
     "needs the verb 'approve'"),
    ({"creator": None}, Predicate.SELF_APPROVAL, "no verified creator"),
    ({"granted": frozenset()}, Predicate.NOT_APPROVER, "agentrun-approver"),
])
def test_an_approval_is_refused_with_why_and_changes_nothing(
        change: dict[str, Any], predicate: Predicate, words: str) -> None:
    status = requested()
    decision = send(status, **change)
    assert (decision.accepted, decision.predicate) == (False, predicate)
    assert words in decision.status.commands[-1].message
    assert decision.status.questions == status.questions
    assert decision.status.state is status.state


def test_the_creator_with_approve_own_and_a_run_without_a_creator_with_it_may_approve() -> None:
    both = frozenset({APPROVE, OWN})
    assert send(requested(1), actor=f.CREATOR, granted=both).accepted
    assert send(requested(1), creator=None, granted=both).accepted


def test_two_distinct_approvers_decide_and_the_claims_lease_carries_the_decision() -> None:
    first = send(requested(2))
    assert first.accepted and first.event is not None
    assert first.event.reason == names.APPROVED_EVENT
    waiting = first.status
    assert waiting.questions[0].state is QuestionState.PENDING
    assert len(waiting.questions[0].approved_by) == 1
    assert "1 of 2 approvers so far" in waiting.commands[-1].message
    assert not any(c.type == "Reopened" for c in waiting.conditions)  # waits for the second
    again = send(waiting, request_id="a-2")
    assert again.predicate is Predicate.ALREADY_APPROVED

    second = send(waiting, actor="carol", request_id="a-3")
    assert second.accepted
    done = second.status
    assert done.questions[0].state is QuestionState.ANSWERED
    assert done.questions[0].value == '{"approvals":2,"decision":"approved","required":2}'
    assert (done.attempt_count, f.condition(done, "Reopened").reason) == (1, "Answered")
    claim = expect(steps.next_step(fenced_world(done)), Create)
    key = f"{records.PREFIX}publish{names.APPROVED_SUFFIX}"
    record = records.decode(annotation=key, value=claim.body["metadata"]["annotations"][key],
                            attempt=2)
    assert record.inline is not None and record.inline["digest"] == DIGEST
    assert record.inline["value"] == {"decision": "approved", "required": 2, "approvals": 2}
    late = send(done, actor="dave", request_id="a-4")
    assert late.predicate is Predicate.NO_PENDING_QUESTION
    assert "was approved" in late.status.commands[-1].message


def test_a_deny_decides_at_once_the_creator_may_deny_and_nothing_counts_after() -> None:
    status = requested(2)
    stranger = send(status, CommandKind.DENY, actor="dave", granted=frozenset())
    assert stranger.predicate is Predicate.NOT_APPROVER
    denied = send(status, CommandKind.DENY, actor=f.CREATOR, granted=frozenset())
    assert denied.accepted and denied.event is not None
    assert denied.event.reason == names.APPROVAL_DENIED_EVENT
    entry = denied.status.questions[0]
    assert entry.state is QuestionState.ANSWERED
    assert entry.value == '{"approvals":0,"decision":"denied","required":2}'
    after = send(denied.status, request_id="a-2")
    assert after.predicate is Predicate.NO_PENDING_QUESTION
    assert "was denied" in after.status.commands[-1].message


def test_the_pinned_launchspecs_floor_raises_what_a_worker_asked_for() -> None:
    """A worker that wrote its own request asking for 1 approver still needs the floor's 3."""
    spec = f.CPU_SPEC.spec.model_copy(update={"approvals": [
        ApprovalFloor(effect="publish", approvers=3)]})
    step = expect(steps.next_step(ended_world(approval_record(approvers=1),
                                              launch_spec=spec)), WriteStatus)
    assert step.status.questions[0].approvers == 3
    # The pinned snapshot unreadable now: the most approvers, never fewer than the floor.
    unread = expect(steps.next_step(ended_world(approval_record(approvers=1),
                                                launch_spec=None)), WriteStatus)
    assert unread.status.questions[0].approvers == 3


def test_the_answer_command_refuses_an_approval() -> None:
    command = guards.Command(kind=CommandKind.ANSWER, request_id="r-1", actor=f.CREATOR,
                             reason="yes", question_key="publish", value="true", run=f.RUN)
    decision = guards.decide(command=command, slot=f.slot(requested()), tenant=f.TENANT,
                             prior=None, launch_specs=(f.CPU_SPEC,), now=f.T0)
    assert decision.predicate is Predicate.NO_PENDING_QUESTION
    assert "approve (or deny)" in decision.status.commands[-1].message
