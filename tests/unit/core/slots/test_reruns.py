"""Reruns in the core: the command, what it cuts, the dependents that follow, the run.

Covers, each by the exact decision or step and its content:
- the rerun command's predicates, in order (WrongRun, NotRerunnable, Held,
  PriorNotTerminal, EffectUnresolved, QuestionPending, BlankReason, NotOwner,
  StepNotCommitted, RerunLimitReached, AttemptLimitReached);
- accepted from a step or from the start: reopened (no attempt), the cut at the step's
  first commit still standing, ``reruns`` grown, ``maxAttempts`` afresh, a finished slot
  open again; the claim's Lease carries the cuts;
- a dependent superseded whatever its state: a live attempt closed and fenced, Pending
  with its whole prefix cut, its pin kept when it leaves Pending, the sum recorded;
- the run's verdict reopened by a larger sum of reruns only, and saying why.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentrun.api import bounds, cuts
from agentrun.api.runs import AgentRunStatus
from agentrun.api.slots import (
    CommandKind,
    EffectEntry,
    Outcome,
    Predicate,
    QuestionEntry,
    SlotState,
    SlotStatus,
)
from agentrun.core.attempts import attemptobjects
from agentrun.core.attempts.observations import LeaseStatus, PodPhase
from agentrun.core.base.actions import DeletePod, Wait, WriteStatus
from agentrun.core.commands import guards
from agentrun.core.machine import retries, transitions
from agentrun.core.runs import rollup
from agentrun.core.slots import steps
from tests.unit.core import corefakes as f
from tests.unit.core.corefakes import expect

NOW = f.T0 + f.seconds(600)
ENDED = guards.Prior(pod=PodPhase.SUCCEEDED, lease=LeaseStatus.RELEASED)
STEP_AT = {"draft": ((1, 2, 0), (2, 1, 3))}  # where "draft" was committed: attempts 1 and 2


def send(status: SlotStatus, *, actor: str = "alice", from_step: str | None = "draft",
         reason: str | None = "the draft missed a source", run: str | None = f.RUN,
         prior: guards.Prior | None = ENDED, override: bool = False,
         commits: Any = STEP_AT, request_id: str = "r-1", resend: str | None = None,
         resend_reason: str | None = None, journal_gone: str | None = None,
         depends_on: list[str] | None = None, deadline_passed: bool = False,
         ) -> guards.Decision:
    command = guards.Command(kind=CommandKind.RERUN, request_id=request_id, actor=actor,
                             reason=reason, run=run, from_step=from_step, override=override,
                             resend=resend, resend_reason=resend_reason)
    slot = f.slot(status)
    if depends_on:
        slot = slot.model_copy(update={"spec": slot.spec.model_copy(
            update={"depends_on": depends_on})})
    return guards.decide(command=command, slot=slot, tenant=f.TENANT, prior=prior,
                         launch_specs=(f.CPU_SPEC,), now=NOW, commits=commits,
                         journal_gone=journal_gone, deadline_passed=deadline_passed)


def succeeded(attempts: int = 2) -> SlotStatus:
    status = f.finished(SlotState.SUCCEEDED)
    return status.model_copy(update={
        "attempt_count": attempts, "prior_worker": f.worker(attempts),
        "attempts": [f.attempt(n, outcome=Outcome.FAILED if n < attempts else Outcome.SUCCEEDED)
                     for n in range(1, attempts + 1)],
        "conditions": transitions.end_attempt(
            f.active(1), outcome=Outcome.SUCCEEDED, message="done", exit_code=0,
            policy=retries.DEFAULT, now=f.T0).conditions})


def rejected(decision: guards.Decision) -> tuple[Predicate | None, str]:
    assert not decision.accepted
    return decision.predicate, decision.status.commands[-1].message


@pytest.mark.parametrize(("change", "kwargs", "predicate", "words"), [
    ({}, {"run": "other"}, Predicate.WRONG_RUN, "names run 'other'"),
    ({"state": SlotState.ACTIVE}, {}, Predicate.NOT_RERUNNABLE, "is Active"),
    ({"state": SlotState.PENDING}, {}, Predicate.NOT_RERUNNABLE, "is Pending"),
    ({"held": True}, {}, Predicate.HELD, "is held"),
    ({}, {"prior": guards.Prior(pod=PodPhase.RUNNING, lease=LeaseStatus.HELD)},
     Predicate.PRIOR_NOT_TERMINAL, "is not terminal (pod Running, lease Held)"),
    ({"effect": True, "state": SlotState.RETRY_WAIT}, {}, Predicate.EFFECT_UNRESOLVED,
     "effect publish waits"),
    ({}, {"deadline_passed": True}, Predicate.NOT_RERUNNABLE, "activeDeadlineSeconds"),
    ({"question": True}, {}, Predicate.QUESTION_PENDING, "plan waits for a person"),
    ({}, {"reason": "  "}, Predicate.BLANK_REASON, "non-blank"),
    ({}, {"actor": "bob"}, Predicate.NOT_OWNER, "owned by 'alice', not 'bob'"),
    ({}, {"commits": {"draft": ()}}, Predicate.STEP_NOT_COMMITTED, "it was never committed"),
    ({}, {"commits": "the run has no journal"}, Predicate.STEP_NOT_COMMITTED,
     "cannot be found: the run has no journal"),
    ({"cut": "0.0.0-2"}, {}, Predicate.STEP_NOT_COMMITTED, "an earlier rerun took it out"),
    ({}, {"journal_gone": "was deleted (retention)"}, Predicate.JOURNAL_GONE,
     "the run's journal was deleted (retention)"),
    ({"cuts": True}, {"commits": {"draft": ((99, 1, 0),)}}, Predicate.RERUN_LIMIT,
     "at most 32"),
    ({"limit": True}, {}, Predicate.ATTEMPT_LIMIT, "all 1000 attempt numbers"),
])
def test_a_rerun_is_refused_by_its_first_failed_predicate(
        change: dict[str, Any], kwargs: dict[str, Any], predicate: Predicate,
        words: str) -> None:
    status = succeeded()
    if "state" in change:
        status = status.model_copy(update={"state": change["state"]})
    if change.get("held"):
        status = transitions.hold(status, reason="wait", now=f.T0)
    if change.get("effect"):
        status = status.model_copy(update={"effects": [EffectEntry(
            key="publish", attempt=2, observed_at=f.T0)]})
    if change.get("question"):
        status = status.model_copy(update={"questions": [QuestionEntry(
            key="plan", attempt=2, digest="0" * 64, asked_at=f.T0)]})
    if "cut" in change:
        status = status.model_copy(update={"cuts": [change["cut"]]})
    if change.get("cuts"):  # 32 separate cuts kept, and a 33rd would not merge
        status = status.model_copy(update={
            "attempt_count": 100, "cuts": [f"{3 * n + 2}.1.0-{3 * n + 2}" for n in range(32)]})
    if change.get("limit"):
        status = status.model_copy(update={"attempt_count": bounds.MAX_ATTEMPT_NUMBER})
    found, message = rejected(send(status, **kwargs))
    assert found is predicate and words in message, message


def test_a_rerun_from_a_step_reopens_the_slot_with_a_cut_at_its_first_commit() -> None:
    decision = send(succeeded())
    assert decision.accepted and decision.event is not None
    status = decision.status
    assert (status.state, status.reruns, status.cuts) == (
        SlotState.RETRY_WAIT, 1, ["1.2.0-2"])
    assert (status.attempt_count, status.attempts_before_rerun, status.pending_worker,
            status.next_owner_actor) == (2, 2, None, "alice")
    reopened = f.condition(status, transitions.REOPENED)
    assert (reopened.status, reopened.reason) == ("True", "Rerun")
    assert "rerun from step draft by alice: the draft missed a source" in reopened.message
    assert not any(c.type == transitions.SUCCEEDED for c in status.conditions)
    assert (decision.event.reason, status.commands[-1].outcome) == ("Rerun", "Accepted")
    # the claim's Lease carries the cut: the worker's prefix stops there
    body = attemptobjects.lease_body(slot=f.slot(status), attempt=3, owner_actor="alice",
                                     tenant=f.TENANT, launch_spec=f.PINNED,
                                     lease_duration_seconds=30)
    assert body["metadata"]["annotations"][cuts.ANNOTATION] == "1.2.0-2"


def test_a_rerun_from_the_start_cuts_everything_and_a_later_one_merges() -> None:
    first = send(succeeded(), from_step=None, commits=None).status
    assert first.cuts == ["0.0.0-2"]
    again = first.model_copy(update={"state": SlotState.SUCCEEDED, "attempt_count": 4,
                                     "prior_worker": f.worker(4)})
    second = send(again, commits={"draft": ((3, 1, 0),)}, request_id="r-2").status
    assert (second.cuts, second.reruns) == (["0.0.0-2", "3.1.0-4"], 2)
    third = send(second.model_copy(update={"state": SlotState.FAILED}), from_step=None,
                 commits=None, request_id="r-3").status
    assert third.cuts == ["0.0.0-4"]  # from the start again: one cut


def test_a_rerun_of_a_slot_with_dependencies_looks_at_them_again() -> None:
    never = transitions.fail(SlotStatus(), reason="DependencyFailed", message="x", now=f.T0)
    status = send(never, from_step=None, prior=None).status
    assert (status.state, status.cuts, status.reruns) == (SlotState.PENDING, [], 1)
    ran = send(succeeded(), from_step=None, depends_on=["gather"]).status
    assert (ran.state, ran.launch_spec, ran.cuts) == (SlotState.PENDING, f.PINNED, ["0.0.0-2"])
    failed = dependent(ran, reruns=0, dependencies={"gather": SlotState.FAILED})
    assert expect(steps.next_step(failed), WriteStatus).status.state is SlotState.FAILED


def test_max_attempts_counts_afresh_after_a_rerun() -> None:
    status = send(succeeded(attempts=3), from_step=None).status
    policy = retries.Effective(max_attempts=1, backoff=retries.DEFAULT.backoff)
    claimed = transitions.finish_claim(transitions.start_claim(status, slot=f.SLOT, now=NOW),
                                       now=NOW)
    ended = transitions.end_attempt(claimed, outcome=Outcome.FAILED, message="x",
                                    exit_code=1, policy=policy, now=NOW)
    assert ended.retry_at is None  # the one attempt after the rerun is used: exhausted
    assert f.condition(ended, transitions.AWAITING_REASSIGNMENT).reason == "AttemptsExhausted"
    two = retries.Effective(max_attempts=2, backoff=retries.DEFAULT.backoff)
    assert transitions.end_attempt(claimed, outcome=Outcome.FAILED, message="x",
                                   exit_code=1, policy=two, now=NOW).retry_at is not None


def dependent(status: SlotStatus, *, reruns: int, **kwargs: Any) -> Any:
    kwargs.setdefault("dependencies", {"gather": SlotState.SUCCEEDED})
    return f.world(status, depends_on=["gather"], dependency_reruns=reruns, **kwargs)


def test_a_dependent_is_superseded_and_its_live_attempt_fenced() -> None:
    active = f.active(2).model_copy(update={"attempt_count": 2, "cuts": ["1.3.0-1"]})
    step = expect(steps.next_step(dependent(active, reruns=1, attempt=f.objects(
        2, pod=f.pod(2, "Running"), lease=f.lease(2)))), WriteStatus)
    status = step.status
    assert (status.state, status.prior_worker, status.active_worker, status.reruns) == (
        SlotState.PENDING, f.worker(2), None, 1)
    assert status.attempts[-1].outcome is Outcome.SUPERSEDED
    assert status.cuts == ["0.0.0-2"]  # its whole prefix, the earlier cut merged in
    assert f.condition(status, transitions.SUPERSEDED_CONDITION).status == "True"
    assert step.event is not None and step.event.reason == "Superseded"
    fence = steps.next_step(dependent(status, reruns=1, attempt=f.objects(
        2, pod=f.pod(2, "Running"), lease=f.lease(2))))
    assert expect(fence, DeletePod).name == f.worker(2)


@pytest.mark.parametrize("state", [SlotState.SUCCEEDED, SlotState.FAILED, SlotState.READY])
def test_a_finished_or_waiting_dependent_goes_back_to_pending(state: SlotState) -> None:
    status = (f.finished(state) if state is not SlotState.READY else f.ready())
    step = expect(steps.next_step(dependent(status, reruns=2, attempt=f.objects(
        1, pod=f.pod(1, "Succeeded"), lease=f.lease(1, outcome="Succeeded")))), WriteStatus)
    assert step.status.state is SlotState.PENDING
    assert step.status.cuts == ([] if state is SlotState.READY else ["0.0.0-1"])


def test_a_dependent_that_saw_the_reruns_is_left_alone_and_records_them_when_ready() -> None:
    status = f.finished(SlotState.SUCCEEDED).model_copy(update={"dependency_reruns": 2})
    assert expect(steps.next_step(dependent(status, reruns=2)), Wait)
    pending = SlotStatus(state=SlotState.PENDING, launch_spec=f.PINNED, worker_class="gpu",
                           attempt_count=1, prior_worker=f.worker(1),
                           attempts=[f.attempt(1, outcome=Outcome.SUPERSEDED)])
    ready = steps.ready_world(dependent(pending, reruns=3, attempt=f.objects(
        1, pod=f.pod(1, "Succeeded"), lease=f.lease(1, outcome="Superseded"))))
    assert not isinstance(ready, (Wait, WriteStatus))
    assert (ready.slot.status.state, ready.slot.status.dependency_reruns,
            ready.slot.status.launch_spec, ready.slot.status.worker_class) == (
        SlotState.READY, 3, f.PINNED, "gpu")  # the pin kept, not chosen again


def run_status(*, reruns: int, succeeded: bool = True) -> Any:
    run = f.agent_run()
    conds = rollup.derive(run=run, nodes=["a"], slots=[], now=f.T0).conditions
    if succeeded:
        conds = [c.model_copy(update={"status": "True"}) if c.type == "Succeeded" else c
                 for c in conds]
    return run.model_copy(update={"status": AgentRunStatus(conditions=conds, reruns=reruns)})


def test_the_run_reopens_only_for_more_reruns_and_says_why() -> None:
    status = f.retry_wait()
    slot = f.slot(send(status.model_copy(update={"state": SlotState.SUCCEEDED}),
                       from_step=None).status)
    owned = slot.model_copy(update={"metadata": slot.metadata.model_copy(update={
        "owner_references": f.agent_run().metadata.owner_references or _owner()})})
    derived = rollup.derive(run=run_status(reruns=0), nodes=[f.NODE], slots=[owned], now=NOW)
    found = next(c for c in derived.conditions if c.type == "Succeeded")
    assert (found.status, found.reason, derived.reruns) == ("False", "Rerun", 1)
    assert f"nodes {f.NODE} are rerun" in found.message
    stale = rollup.derive(run=run_status(reruns=2), nodes=[f.NODE], slots=[owned], now=NOW)
    assert next(c for c in stale.conditions if c.type == "Succeeded").status == "True"


def _owner() -> list[Any]:
    from agentrun.api.meta import OwnerReference
    run = f.agent_run()
    return [OwnerReference(api_version="agentrun.dev/v1alpha1", kind="AgentRun",
                           name=run.metadata.name, uid=run.metadata.uid or "",
                           controller=True)]


def resend(status: SlotStatus, *, reason: str | None = "the blog lost the post",
           outcome: Any = ((1, 3, 2),), request_id: str = "r-9") -> guards.Decision:
    return send(status, from_step=None, request_id=request_id, resend="publish",
                resend_reason=reason, commits={"publish.outcome": outcome})


def test_an_applied_effect_is_sent_again_only_on_purpose_and_with_its_own_reason() -> None:
    assert rejected(resend(succeeded(), reason=" "))[0] is Predicate.BLANK_REASON
    found, message = rejected(resend(succeeded(), outcome=()))
    assert found is Predicate.NO_APPLIED_EFFECT and "nothing to send again" in message
    accepted = resend(succeeded())
    assert accepted.accepted and accepted.status.resends == ["publish=2@2"]
    assert "sending effect publish again as a new effect (generation 2" in (
        accepted.status.commands[-1].message)
    body = attemptobjects.lease_body(slot=f.slot(accepted.status), attempt=3,
                                     owner_actor="alice", tenant=f.TENANT,
                                     launch_spec=f.PINNED, lease_duration_seconds=30)
    assert body["metadata"]["annotations"][cuts.RESENDS_ANNOTATION] == "publish=2@2"
    # Sent again since (attempt 3 applied it): a third generation; before that, nothing new.
    later = accepted.status.model_copy(update={"state": SlotState.SUCCEEDED,
                                               "attempt_count": 3, "prior_worker": f.worker(3)})
    found, _ = rejected(resend(later, request_id="r-10"))  # the outcome at attempt 1 is left out
    assert found is Predicate.NO_APPLIED_EFFECT
    third = resend(later, outcome=((1, 3, 2), (3, 1, 1)), request_id="r-11")
    assert third.status.resends == ["publish=3@3"]


def test_an_effect_sent_again_is_not_handed_its_earlier_approval_or_resolution() -> None:
    from agentrun.api.slots import EffectState
    from agentrun.core.attempts import effectrecords, questionrecords
    approved = QuestionEntry(key="publish", attempt=1, digest="a" * 64, asked_at=f.T0,
                             approvers=1, value='{"decision":"approved"}')
    resolved = EffectEntry(key="publish", attempt=1, observed_at=f.T0, outcome="applied",
                           state=EffectState.RESOLVED)
    status = succeeded().model_copy(update={"questions": [approved], "effects": [resolved]})
    assert questionrecords.answer_annotations(status, attempt=3)
    assert effectrecords.resolved_annotations(status, attempt=3)
    again = status.model_copy(update={"resends": ["publish=2@2"]})
    assert questionrecords.answer_annotations(again, attempt=3) == {}
    assert effectrecords.resolved_annotations(again, attempt=3) == {}


def test_a_superseded_slot_that_fails_before_it_runs_again_stays_failed() -> None:
    ended = f.objects(1, pod=f.pod(1, "Succeeded"), lease=f.lease(1, outcome="Succeeded"))
    superseded = expect(steps.next_step(dependent(f.finished(SlotState.SUCCEEDED), reruns=1,
                                                  attempt=ended)), WriteStatus).status
    assert (superseded.state, superseded.dependency_reruns) == (SlotState.PENDING, 1)
    failing = dependent(superseded, reruns=1, dependencies={"gather": SlotState.FAILED},
                        attempt=f.objects(1, pod=f.pod(1, "Succeeded"),
                                          lease=f.lease(1, outcome="Succeeded")))
    failed = expect(steps.next_step(failing), WriteStatus).status
    assert failed.state is SlotState.FAILED and failed.reruns == 1
    again = dependent(failed, reruns=1, dependencies={"gather": SlotState.FAILED},
                      attempt=f.objects(1, pod=f.pod(1, "Succeeded"),
                                        lease=f.lease(1, outcome="Succeeded")))
    assert expect(steps.next_step(again), Wait)  # not superseded again for the same rerun


def test_a_held_dependent_is_superseded_once_released() -> None:
    held = transitions.hold(f.active(1), reason="look first", now=f.T0)
    world = dependent(held, reruns=1, attempt=f.objects(1, pod=f.pod(1, "Running"),
                                                        lease=f.lease(1)))
    step = steps.next_step(world)
    assert not (isinstance(step, WriteStatus) and step.status.state is SlotState.PENDING)
    released = transitions.release(held, message="go", now=f.T0)
    step = expect(steps.next_step(dependent(released, reruns=1, attempt=f.objects(
        1, pod=f.pod(1, "Running"), lease=f.lease(1)))), WriteStatus)
    assert step.status.state is SlotState.PENDING


def test_a_claiming_dependent_is_superseded_and_its_claim_closed() -> None:
    claiming = f.claiming(1)
    step = expect(steps.next_step(dependent(claiming, reruns=1)), WriteStatus)
    assert (step.status.state, step.status.prior_worker, step.status.pending_worker) == (
        SlotState.PENDING, f.worker(1), None)
    assert step.status.attempts[-1].outcome is Outcome.SUPERSEDED


def test_the_journal_is_read_for_a_pending_rerun_only() -> None:
    from agentrun.core.slots import inputs
    annotations = f.command("rerun", "r-5", run=f.RUN, reason="redo", from_step="draft",
                            resend="publish", resend_reason="lost")
    slot = f.slot(succeeded()).model_copy(update={"metadata": f.slot().metadata.model_copy(
        update={"annotations": annotations})})
    reads = inputs.reads_for(slot, max_active=False)
    assert (reads.journal_keys, reads.journal_request) == (("draft", "publish.outcome"), "r-5")
    plain = f.command("rerun", "r-6", run=f.RUN, reason="redo")
    slot = slot.model_copy(update={"metadata": slot.metadata.model_copy(
        update={"annotations": plain})})
    assert inputs.reads_for(slot, max_active=False).journal_keys == ()
    assert inputs.reads_for(f.slot(succeeded()), max_active=False).journal_keys == ()



def test_a_finished_slots_open_effect_waits_for_its_answer_after_the_rerun() -> None:
    open_effect = [EffectEntry(key="publish", attempt=2, observed_at=f.T0)]
    failed = succeeded().model_copy(update={"state": SlotState.FAILED, "effects": open_effect})
    accepted = send(failed, from_step=None)
    assert accepted.accepted and accepted.status.state is SlotState.RETRY_WAIT
    waits = steps.next_step(f.world(accepted.status, attempt=f.objects(
        2, pod=f.pod(2, "Succeeded"), lease=f.lease(2, outcome="Succeeded"))))
    assert isinstance(waits, Wait) and "unresolved effect" in waits.message
    pending = send(failed, from_step=None, depends_on=["gather"]).status
    held_back = steps.next_step(dependent(pending, reruns=0, attempt=f.objects(
        2, pod=f.pod(2, "Succeeded"), lease=f.lease(2, outcome="Succeeded"))))
    assert isinstance(held_back, Wait) and "unresolved effect" in held_back.message


def test_a_superseded_ready_slot_keeps_its_pin() -> None:
    ready = f.ready().model_copy(update={"worker_class": "gpu"})
    pending = expect(steps.next_step(dependent(ready, reruns=1)), WriteStatus).status
    assert (pending.state, pending.launch_spec) == (SlotState.PENDING, f.PINNED)
    again = steps.ready_world(dependent(pending, reruns=1))
    assert not isinstance(again, (Wait, WriteStatus))
    assert (again.slot.status.launch_spec, again.slot.status.worker_class) == (f.PINNED, "gpu")


def test_the_journal_is_not_read_for_a_rerun_its_cheap_checks_refuse() -> None:
    from agentrun.core.slots import inputs
    command = f.command("rerun", "r-7", actor="bob", run=f.RUN, reason="redo",
                        from_step="draft")
    slot = f.slot(succeeded())
    bobs = slot.model_copy(update={"metadata": slot.metadata.model_copy(
        update={"annotations": command})})
    assert inputs.reads_for(bobs, max_active=False).journal_keys == ()  # alice owns it
    held = f.slot(transitions.hold(succeeded(), reason="x", now=f.T0))
    held = held.model_copy(update={"metadata": held.metadata.model_copy(update={
        "annotations": f.command("rerun", "r-8", run=f.RUN, reason="x",
                                 from_step="draft")})})
    assert inputs.reads_for(held, max_active=False).journal_keys == ()
