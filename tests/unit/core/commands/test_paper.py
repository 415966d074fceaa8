"""Named cases, each checking one sentence of the seed paper (quoted in its docstring)."""

from __future__ import annotations

import pytest

from agentrun.api.slots import CommandKind, Outcome, Predicate, SlotState, SlotStatus
from agentrun.core.attempts.observations import LeaseStatus, PodPhase
from agentrun.core.commands import guards
from agentrun.core.machine import retries, transitions
from tests.unit.core import corefakes as f

GPU = f.launch_spec("gpu-spec", classes=["gpu"])
TERMINAL = guards.Prior(pod=PodPhase.FAILED, lease=LeaseStatus.RELEASED)
POLICY = retries.effective(node=None, run=None)


def reassign(status: SlotStatus, *, actor: str = "alice", reason: str = "pod evicted",
             worker_class: str = "gpu", run: str | None = f.RUN, tenant: str | None = None,
             prior: guards.Prior | None = TERMINAL, request_id: str = "r1",
             override: bool = False, specs: list | None = None) -> guards.Decision:  # type: ignore[type-arg]
    command = guards.Command(kind=CommandKind.REASSIGN, request_id=request_id, actor=actor,
                             reason=reason, worker_class=worker_class, run=run, tenant=tenant,
                             override=override)
    return guards.decide(command=command, slot=f.slot(status), tenant=f.TENANT, prior=prior,
                           launch_specs=[GPU] if specs is None else specs, now=f.T0)


def claim(status: SlotStatus, *, now=f.T0) -> SlotStatus:  # type: ignore[no-untyped-def]
    """A claim as the operator makes it: one nobody asked for is the run creator's."""
    if status.next_owner_actor is None:
        status = status.model_copy(update={"next_owner_actor": f.CREATOR})
    started = transitions.start_claim(status, slot=f.SLOT, now=now)
    return transitions.finish_claim(started, now=now)


def test_reassignment_does_not_create_an_attempt() -> None:
    """This makes the slot available for the next claim without claiming that a new attempt
    already exists."""
    before = f.retry_wait()
    decision = reassign(before)
    assert decision.accepted
    assert decision.status.attempt_count == before.attempt_count
    assert decision.status.attempts == before.attempts
    assert decision.status.active_worker is None and decision.status.pending_worker is None
    assert transitions.is_claimable(decision.status, now=f.T0, claim_policy="Automatic")


def test_reassignment_preserves_identity_and_prior() -> None:
    """It preserves slot identity and the prior-worker reference."""
    before = f.retry_wait()
    after = reassign(before).status
    assert after.prior_worker == before.prior_worker == f"{f.SLOT}-1"
    assert after.state is SlotState.RETRY_WAIT


def test_reassignment_clears_workers_and_retry_time() -> None:
    """The command updates the existing slot with that specification, clears pending and
    active worker references, leaves the slot in retry-wait, and clears its retry time."""
    after = reassign(f.retry_wait(retry_at=f.T0 + f.seconds(60))).status
    assert after.retry_at is None
    assert after.launch_spec is not None and after.launch_spec.name == "gpu-spec"
    assert after.launch_spec.snapshot == f"{f.RUN}-lspec-{after.launch_spec.digest[:10]}"
    assert after.worker_class == "gpu"


def test_claim_creates_the_next_attempt() -> None:
    """The claim path later creates a worker and lease for that slot."""
    after = claim(reassign(f.retry_wait()).status)
    assert after.state is SlotState.ACTIVE
    assert after.active_worker == f"{f.SLOT}-2" and after.attempt_count == 2
    assert [a.number for a in after.attempts] == [1, 2]
    assert not transitions.is_reopened(after)


def test_prior_attempt_stays_addressable() -> None:
    """The prior attempt remains addressable for provenance and recovery analysis."""
    after = claim(reassign(f.retry_wait()).status)
    first = after.attempts[0]
    assert (first.pod, first.outcome) == (f"{f.SLOT}-1", Outcome.FAILED)


def test_rejects_a_held_slot() -> None:
    """These checks reject a held or active slot, a slot from another tenant or run, and a
    reassignment by a different actor when ownership is recorded. (held)"""
    held = transitions.hold(f.retry_wait(), reason="investigating", now=f.T0)
    assert reassign(held).predicate is Predicate.HELD


def test_rejects_an_active_slot() -> None:
    """These checks reject a held or active slot ... (active)"""
    active = claim(reassign(f.retry_wait()).status)
    assert reassign(active, request_id="r2").predicate is Predicate.NOT_RETRY_WAIT


def test_rejects_another_tenant() -> None:
    """The slot must resolve within the command's tenant and execution run. (tenant)"""
    decision = reassign(f.retry_wait(), tenant="globex")
    assert decision.predicate is Predicate.WRONG_TENANT
    assert "globex" in decision.status.commands[-1].message


def test_rejects_another_run() -> None:
    """The slot must resolve within the command's tenant and execution run. (run)"""
    assert reassign(f.retry_wait(), run="other-run").predicate is Predicate.WRONG_RUN
    assert reassign(f.retry_wait(), run=None).predicate is Predicate.WRONG_RUN


def test_rejects_a_different_actor_when_owned() -> None:
    """If the prior worker has an owner actor recorded, the command actor must match that
    owner."""
    owned = f.retry_wait(owner="bob")
    assert reassign(owned).predicate is Predicate.NOT_OWNER
    assert reassign(owned, actor="bob").accepted
    assert reassign(owned, override=True).accepted  # the audited admin path


def test_requires_a_nonempty_reason() -> None:
    """The command requires a nonempty reason."""
    for reason in ["", "   ", "x" * 1025]:
        assert reassign(f.retry_wait(), reason=reason).predicate is Predicate.BLANK_REASON
    assert reassign(f.retry_wait(), reason="x" * 1024).accepted


def test_requires_a_terminal_prior_worker_and_lease() -> None:
    """It must refer to a prior worker whose worker status and lease are terminal."""
    alive = guards.Prior(pod=PodPhase.RUNNING, lease=LeaseStatus.EXPIRED)
    held = guards.Prior(pod=PodPhase.FAILED, lease=LeaseStatus.HELD)
    assert reassign(f.retry_wait(), prior=alive).predicate is Predicate.PRIOR_NOT_TERMINAL
    assert reassign(f.retry_wait(), prior=held).predicate is Predicate.PRIOR_NOT_TERMINAL
    assert reassign(f.retry_wait(), prior=None).predicate is Predicate.PRIOR_NOT_TERMINAL


def test_no_compatible_specification() -> None:
    """If no compatible specification exists, the reassignment cannot prepare the slot for
    that class."""
    unknown = reassign(f.retry_wait(), worker_class="tpu")
    assert unknown.predicate is Predicate.UNKNOWN_WORKER_CLASS
    scoped = f.launch_spec("gpu-elsewhere", classes=["gpu"], runs=["other-run"])
    incompatible = reassign(f.retry_wait(), specs=[scoped])
    assert incompatible.predicate is Predicate.NO_COMPATIBLE_LAUNCH_SPEC
    assert unknown.status.commands[-1].message != incompatible.status.commands[-1].message
    assert incompatible.status.launch_spec == f.retry_wait().launch_spec


def test_selected_spec_matches_class_and_scope() -> None:
    """The runtime then selects a launch specification whose claim compatibility matches
    that worker class and whose scope matches R and q."""
    specs = [f.launch_spec("cpu-only", classes=["cpu"], priority=900),
             f.launch_spec("gpu-any", classes=["gpu"], priority=100),
             f.launch_spec("gpu-this-node", classes=["gpu"], nodes=[f.NODE])]
    decision = reassign(f.retry_wait(), specs=specs)
    assert decision.choice is not None and decision.choice.spec.metadata.name == "gpu-this-node"
    assert decision.status.launch_spec is not None
    assert "gpu-this-node" in decision.status.launch_spec.reason


def test_records_the_reason() -> None:
    """It records the selected specification and reassignment reason."""
    decision = reassign(f.retry_wait(), reason="node drained for maintenance")
    entry = decision.status.commands[-1]
    assert (entry.outcome, entry.reason, entry.actor) == (
        "Accepted", "node drained for maintenance", "alice")
    assert decision.event is not None and decision.event.reason == "Reassigned"


def test_duplicate_request_is_a_no_op() -> None:
    """Rejection of inadmissible reassignment: a request id already in the ledger never
    applies twice, and a rejection is never flipped into an acceptance."""
    rejected = reassign(f.retry_wait(), reason="").status
    again = reassign(rejected, reason="now with a reason")
    assert again.duplicate and again.status == rejected and again.event is None


def test_rejection_changes_nothing_but_the_ledger() -> None:
    """Confirm that only an authorized retry-wait slot with a terminal prior attempt can be
    reopened."""
    before = f.retry_wait()
    decision = reassign(before, actor="mallory", tenant="globex")
    assert not decision.accepted
    assert decision.status.model_copy(
        update={"commands": [], "conditions": []}) == before.model_copy(update={"conditions": []})
    assert decision.event is not None and decision.event.type == "Warning"


def test_recovery_trace() -> None:
    """A research worker is assigned slot q in run R. Its attempt reaches a terminal
    outcome, and q enters retry-wait while retaining the prior-worker reference. An
    authorized caller submits a reassignment command with a reason and requested worker
    class. ... No worker or lease has been created at this point. ... A later claim
    performs the separate creation step."""
    policy = retries.effective(node=None, run=None)
    status = transitions.deps_met(SlotStatus(), worker_class="cpu", launch_spec=f.PINNED,
                                  now=f.T0)
    status = claim(status)
    status = transitions.end_attempt(status, outcome=Outcome.LOST, message="node lost",
                                     exit_code=None, policy=policy, now=f.T0)
    assert (status.state, status.prior_worker) == (SlotState.RETRY_WAIT, f"{f.SLOT}-1")
    decision = reassign(status)
    assert decision.accepted and decision.status.attempt_count == 1
    status = claim(decision.status, now=f.T0 + f.seconds(5))
    assert (status.active_worker, status.attempts[-1].owner_actor) == (f"{f.SLOT}-2", "alice")
    assert status.attempts[0].outcome is Outcome.LOST


def test_only_a_claim_creates_an_attempt() -> None:
    """Reassignment and claim are separate state transitions."""
    status = f.retry_wait()
    with pytest.raises(transitions.IllegalTransition):
        transitions.finish_claim(status, now=f.T0)
    started = transitions.start_claim(reassign(status).status, slot=f.SLOT, now=f.T0)
    assert started.state is SlotState.CLAIMING and started.pending_worker == f"{f.SLOT}-2"


def test_claim_failure_is_not_reported_as_success() -> None:
    """Separating these operations makes intermediate state observable and keeps scheduling
    or claim failure from being misreported as successful execution."""
    started = transitions.start_claim(reassign(f.retry_wait()).status, slot=f.SLOT, now=f.T0)
    failed = transitions.fail_claim(started, message="403 forbidden", policy=POLICY, now=f.T0)
    assert failed.state is SlotState.RETRY_WAIT
    assert failed.attempts[-1].outcome is Outcome.CLAIM_FAILED
    assert failed.attempt_count == 2 and failed.prior_worker == f"{f.SLOT}-2"


def test_hold_never_interrupts_an_active_attempt() -> None:
    """Lease state is an input to runtime ownership admissibility, not a semantic-progress
    detector: a hold blocks claims and reassignment, and an Active attempt runs on."""
    active = claim(reassign(f.retry_wait()).status)
    held = transitions.hold(active, reason="look", now=f.T0)
    assert held.state is SlotState.ACTIVE and held.active_worker == active.active_worker
    waiting = transitions.end_attempt(held, outcome=Outcome.FAILED, message="x", exit_code=1,
                                      policy=POLICY, now=f.T0)
    assert not transitions.is_claimable(waiting, now=f.T0 + f.seconds(9999),
                                        claim_policy="Automatic")


def test_exhaustion_awaits_a_person() -> None:
    """An authorized successor must recover the same run and slot obligation: with no
    automatic attempts left the slot waits, without retryAt, for a reassignment."""
    status = f.retry_wait(attempts_used=2).model_copy(update={"prior_worker": None})
    status = claim(status)
    status = transitions.end_attempt(status, outcome=Outcome.FAILED, message="exit 1",
                                     exit_code=1, policy=POLICY, now=f.T0)
    assert status.retry_at is None and status.attempt_count == 3
    assert any(c.type == "AwaitingReassignment" for c in status.conditions)
    assert not transitions.is_claimable(status, now=f.T0 + f.seconds(10**6),
                                        claim_policy="Automatic")
    reopened = reassign(status).status
    assert not any(c.type == "AwaitingReassignment" for c in reopened.conditions)
    assert transitions.is_claimable(reopened, now=f.T0, claim_policy="Automatic")


def test_owner_actor_comes_only_from_a_command() -> None:
    """If the prior worker has an owner actor recorded ...: automatic claims record the
    run's creator, a reassignment's claim the person who sent it."""
    auto = claim(transitions.deps_met(SlotStatus(), worker_class="cpu", launch_spec=f.PINNED,
                                      now=f.T0))
    assert auto.attempts[-1].owner_actor == f.CREATOR
    manual = claim(reassign(f.retry_wait(owner="bob"), actor="bob").status)
    assert manual.attempts[-1].owner_actor == "bob" and manual.next_owner_actor is None
