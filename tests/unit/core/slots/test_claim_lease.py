"""The Lease as the claim's commit point: Lease, Pod, one status write.

A claim under way is not a status: it is the slot's own untombstoned Lease of attempt
n+1 (n = attemptCount), found in the world. These cases drive ``steps.next_step`` over
worlds as the operator would read them after each write (and after a crash at any point),
and the core's answers to a create that failed (``steps.on_exists``,
``attemptlife.on_rejected``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from agentrun.api import names
from agentrun.api.meta import ObjectMeta, OwnerReference
from agentrun.api.slots import CommandKind, Outcome, SlotState, SlotStatus
from agentrun.core.base import events
from agentrun.core.base.actions import Create, DeletePod, RemoveCommand, Wait, WriteStatus
from agentrun.core.machine import transitions
from agentrun.core.slots import attemptlife, commandsteps, decisions, inputs, steps
from tests.unit.core import corefakes as f
from tests.unit.core.corefakes import expect


def own_lease(number: int, *, owner: str | None = None, request_id: str | None = None,
              launch_spec: str = "cpu-spec@1", **kw: Any) -> dict[str, Any]:
    lease = f.lease(number, **kw)
    lease["metadata"]["annotations"][names.LAUNCH_SPEC_ANNOTATION] = launch_spec
    if owner is not None:
        lease["metadata"]["annotations"][names.OWNER_ACTOR_ANNOTATION] = owner
    if request_id is not None:
        lease["metadata"]["annotations"][names.CLAIM_ID] = request_id
    return lease


def after_lease(status: SlotStatus | None = None, **kw: Any) -> inputs.World:
    """A Ready slot (or ``status``) whose Lease of the next attempt exists, no Pod yet."""
    status = status or f.ready()
    number = status.attempt_count + 1
    return f.world(status, next_attempt=f.objects(number, lease=own_lease(number)), **kw)


# --- the three writes -----------------------------------------------------------------------


def test_the_first_write_is_the_lease_and_no_status() -> None:
    step = expect(steps.next_step(f.world(f.ready(), next_attempt=f.objects(1))), Create)
    assert (step.point, step.claim, step.body["kind"]) == ("claim-lease", True, "Lease")
    meta = step.body["metadata"]
    assert meta["labels"][names.ATTEMPT_LABEL] == "1"
    assert names.CLAIM_ID not in meta["annotations"]  # an automatic claim serves no command
    # ... and is the run's creator's: the owner checks of every command apply to it.
    assert meta["annotations"][names.OWNER_ACTOR_ANNOTATION] == f.CREATOR


def test_in_a_run_without_a_verified_creator_an_automatic_claim_is_no_ones() -> None:
    run = f.agent_run()
    run = run.model_copy(update={"status": run.status.model_copy(update={"creator": None})})
    step = expect(steps.next_step(f.world(f.ready(), run=run, next_attempt=f.objects(1))),
                  Create)
    assert names.OWNER_ACTOR_ANNOTATION not in step.body["metadata"]["annotations"]


def test_with_its_lease_the_claim_creates_the_pod() -> None:
    step = expect(steps.next_step(after_lease()), Create)
    assert (step.point, step.body["kind"], step.body["metadata"]["name"]) == (
        "claim-pod", "Pod", f.worker(1))


def test_with_lease_and_pod_one_status_write_makes_the_slot_active() -> None:
    world = f.world(f.ready(), generation=2, now=f.T0 + f.seconds(1), next_attempt=f.objects(
        1, lease=own_lease(1), pod=f.pod(1, "Pending")))
    step = expect(steps.next_step(world), WriteStatus)
    assert step.point == "active" and step.event is None
    new = step.status
    assert (new.state, new.active_worker, new.pending_worker, new.attempt_count) == (
        SlotState.ACTIVE, f.worker(1), None, 1)
    assert new.observed_generation == 2  # the first status rides on the claim's write
    assert [a.number for a in new.attempts] == [1]


def test_a_claim_under_way_is_finished_before_any_command() -> None:
    world = dataclass_replace(after_lease(), annotations=f.command("hold", reason="wait"))
    assert expect(steps.next_step(world), Create).point == "claim-pod"


def dataclass_replace(world: inputs.World, *, annotations: dict[str, str]) -> inputs.World:
    slot = world.slot.model_copy(update={"metadata": world.slot.metadata.model_copy(
        update={"annotations": annotations})})
    return inputs.World(**{**world.__dict__, "slot": slot})


def test_a_claim_under_way_finishes_even_once_held_or_suspended() -> None:
    """The commit point was passed: a hold or a suspend after it stops the next claim."""
    held = transitions.hold(f.ready(), reason="x", now=f.T0)
    assert expect(steps.next_step(after_lease(held)), Create).point == "claim-pod"
    suspended = after_lease(run=f.agent_run(suspend=True))
    assert expect(steps.next_step(suspended), Create).point == "claim-pod"


# --- a Manual claim -------------------------------------------------------------------------


def test_a_manual_claims_ledger_entry_is_rebuilt_from_its_lease_and_written_with_active() -> None:
    lease = own_lease(1, owner="bob", request_id="req-1")
    world = f.world(f.ready(), annotations=f.command("claim", actor="bob"),
                    run=f.agent_run(claim_policy="Manual"), now=f.T0 + f.seconds(3),
                    next_attempt=f.objects(1, lease=lease, pod=f.pod(1, "Pending")))
    step = expect(steps.next_step(world), WriteStatus)
    assert step.point == "active"
    entry = step.status.commands[-1]
    assert (entry.request_id, entry.kind, entry.outcome, entry.actor) == (
        "req-1", CommandKind.CLAIM, "Accepted", "bob")
    assert step.status.attempts[-1].owner_actor == "bob"
    assert step.event is not None and step.event.reason == "Claimed"  # the command's outcome
    # Then the annotations go: the request id is in the ledger.
    after = f.world(step.status, annotations=f.command("claim", actor="bob"),
                    run=f.agent_run(claim_policy="Manual"),
                    attempt=f.objects(1, lease=lease, pod=f.pod(1, "Pending")))
    assert expect(steps.next_step(after), RemoveCommand).keys


# --- what never leads to a Pod --------------------------------------------------------------


def test_a_tombstoned_own_lease_spends_the_attempt_as_claim_failed_and_no_pod() -> None:
    """A stale operator (or a person) ended attempt n+1 before its Pod existed: the
    number is spent; the next claim takes n+2."""
    tombstoned = own_lease(1, holder=False, outcome="ClaimFailed")
    world = f.world(f.ready(), next_attempt=f.objects(1, lease=tombstoned))
    # Not "under way" (tombstoned), so the Ready slot decides a claim: it meets the Lease.
    step = expect(steps.next_step(world), WriteStatus)
    assert step.point == "claim-failed"
    new = step.status
    assert (new.state, new.prior_worker, new.attempt_count) == (
        SlotState.RETRY_WAIT, f.worker(1), 1)
    assert new.attempts[-1].outcome is Outcome.CLAIM_FAILED


def test_a_lease_found_tombstoned_on_already_exists_never_leads_to_a_pod() -> None:
    decision = steps.decide(f.world(f.ready(), next_attempt=f.objects(1)))
    create = expect(decision.step, Create)
    found = own_lease(1, holder=False, outcome="Succeeded")
    then = steps.on_exists(decision.world, create=create, found=found)
    then = expect(then, WriteStatus)
    assert then.point == "claim-failed"
    assert then.status.attempts[-1].outcome is Outcome.CLAIM_FAILED


def test_a_foreign_lease_on_already_exists_is_a_squat_and_spends_nothing() -> None:
    decision = steps.decide(f.world(f.ready(), next_attempt=f.objects(1)))
    create = expect(decision.step, Create)
    foreign = f.lease(1, owner_uid="someone-else")
    foreign["metadata"]["ownerReferences"] = []
    then = expect(steps.on_exists(decision.world, create=create, found=foreign),
                  WriteStatus)
    assert f.condition(then.status, transitions.NAME_SQUATTED).status == "True"
    assert then.status.attempts == []


def test_an_own_live_lease_on_already_exists_goes_on_to_the_pod() -> None:
    decision = steps.decide(f.world(f.ready(), next_attempt=f.objects(1)))
    create = expect(decision.step, Create)
    found = expect(steps.on_exists(decision.world, create=create, found=own_lease(1)),
                   decisions.Decision)
    then = expect(found.step, Create)
    assert then.point == "claim-pod"


def test_a_lease_naming_another_launch_spec_than_the_pin_never_leads_to_a_pod() -> None:
    world = f.world(f.ready(), next_attempt=f.objects(1, lease=own_lease(
        1, launch_spec="gpu-spec@4")))
    step = expect(steps.next_step(world), WriteStatus)
    assert step.point == "claim-failed"
    assert "gpu-spec@4" in (step.status.attempts[-1].reason or "")


# --- failures of the claim's creates --------------------------------------------------------


def test_a_quota_refusing_the_pod_waits_and_spends_no_attempt() -> None:
    decision = steps.decide(after_lease())
    create = expect(decision.step, Create)
    then = expect(attemptlife.on_rejected(decision.world, create=create, status=403,
                                           message="pods is forbidden: exceeded quota"),
                  WriteStatus)
    assert then.point == "quota-exceeded"
    assert f.condition(then.status, transitions.QUOTA_EXCEEDED).status == "True"
    assert then.status.attempts == []  # nothing spent: the claim stays under way
    assert then.status.pending_worker == f.worker(1)


def test_a_pod_refused_by_a_policy_ends_the_attempt_as_claim_failed() -> None:
    decision = steps.decide(after_lease())
    create = expect(decision.step, Create)
    then = expect(attemptlife.on_rejected(decision.world, create=create, status=403,
                                           message="violates PodSecurity"), WriteStatus)
    assert then.point == "claim-failed"
    assert (then.status.state, then.status.prior_worker) == (SlotState.RETRY_WAIT,
                                                             f.worker(1))


def test_a_refused_snapshot_is_an_event_and_the_error_stands() -> None:
    world = f.world(launch_specs=(f.CPU_SPEC,))
    create = expect(steps.next_step(world), Create)
    assert create.point == "launch-spec-snapshot"
    event = attemptlife.on_rejected(world, create=create, status=403, message="no")
    assert isinstance(event, events.Event) and event.reason == "CreateFailed"


# --- wind-down ------------------------------------------------------------------------------


@pytest.mark.parametrize("pod", [None, "Pending"])
def test_wind_down_with_a_claim_under_way_records_it_and_starts_no_pod(pod: str | None) -> None:
    world = f.world(f.ready(), run=None, next_attempt=f.objects(
        1, lease=own_lease(1), pod=None if pod is None else f.pod(1, pod)))
    step = expect(steps.next_step(world), WriteStatus)
    assert step.point == "claim-failed"
    new = step.status
    assert (new.prior_worker, new.attempts[-1].outcome) == (f.worker(1), Outcome.CLAIM_FAILED)
    # Next: its pod (if any) is deleted, then its Lease tombstoned.
    fenced = f.world(new, run=None, attempt=f.objects(
        1, lease=own_lease(1), pod=None if pod is None else f.pod(1, pod)))
    nxt = steps.next_step(fenced)
    assert type(nxt).__name__ == ("Tombstone" if pod is None else "DeletePod")


def test_wind_down_of_a_pending_slots_claim_under_way_records_it_too() -> None:
    """The claim started from a Ready status decided in memory (a crash after its Lease):
    the run is gone, so the attempt is recorded ClaimFailed with the re-chosen pin."""
    world = f.world(run=None, next_attempt=f.objects(1, lease=own_lease(1)))
    step = expect(steps.next_step(world), WriteStatus)
    assert step.point == "claim-failed"
    assert (step.status.prior_worker, step.status.attempt_count) == (f.worker(1), 1)
    assert step.status.launch_spec is not None


def test_a_deleted_slot_with_nothing_under_way_starts_nothing() -> None:
    slot = f.slot(f.ready())
    deleting = slot.model_copy(update={"metadata": slot.metadata.model_copy(
        update={"deletion_timestamp": f.T0})})
    world = inputs.World(**{**f.world(f.ready()).__dict__, "slot": deleting})
    assert isinstance(steps.next_step(world), Wait)


# --- an older operator's Claiming -----------------------------------------------------------


def test_a_slot_left_claiming_by_an_older_operator_still_converges() -> None:
    world = f.world(f.claiming(1), attempt=f.objects(1))
    assert expect(steps.next_step(world), Create).point == "claim-lease"
    world = f.world(f.claiming(1), attempt=f.objects(1, lease=own_lease(1)))
    assert expect(steps.next_step(world), Create).point == "claim-pod"
    world = f.world(f.claiming(1), attempt=f.objects(1, lease=own_lease(1),
                                                     pod=f.pod(1, "Pending")))
    assert expect(steps.next_step(world), WriteStatus).status.state is SlotState.ACTIVE


# --- maxActive, reads, runs -----------------------------------------------------------------


def test_a_sibling_with_a_claim_under_way_is_busy() -> None:
    ready = f.slot(f.ready())
    assert not inputs.busy(ready, next_lease=None)
    assert inputs.busy(ready, next_lease=own_lease(1))
    assert not inputs.busy(ready, next_lease=own_lease(1, holder=False, outcome="Failed"))
    assert inputs.busy(f.slot(f.claiming(1)), next_lease=None)
    assert inputs.busy(f.slot(f.active(1)), next_lease=None)


def test_what_is_read_is_a_function_of_the_slot() -> None:
    reads = inputs.reads_for(f.slot(f.ready()), max_active=True)
    assert (reads.siblings, reads.selecting, reads.worker, reads.next_worker,
            reads.stamping) == (True, False, None, f.worker(1), False)
    pending = inputs.reads_for(f.slot(), max_active=False)
    assert (pending.siblings, pending.selecting, pending.next_worker) == (False, True,
                                                                          f.worker(1))
    active = inputs.reads_for(f.slot(f.active(2)), max_active=True)
    assert (active.siblings, active.worker, active.next_worker) == (False, f.worker(2), None)


def test_the_run_served_is_the_slots_controlling_owner() -> None:
    run = f.agent_run()
    assert run is not None
    slot = f.slot(f.ready())
    assert inputs.serving_run(slot=slot, run=run) is None  # no controller reference
    owned = slot.model_copy(update={"metadata": slot.metadata.model_copy(update={
        "owner_references": [OwnerReference(api_version=names.API_VERSION, kind="AgentRun",
                                            name=f.RUN, uid=f.RUN_UID, controller=True)]})})
    assert inputs.serving_run(slot=owned, run=run) is run
    later = run.model_copy(update={"metadata": ObjectMeta(name=f.RUN, namespace=f.NS,
                                                          uid="uid-later")})
    assert inputs.serving_run(slot=owned, run=later) is None
    assert inputs.serving_run(slot=owned, run=None) is None


# --- writes that change nothing, and the label ----------------------------------------------


def test_a_status_write_that_changes_nothing_is_a_wait() -> None:
    held = transitions.hold(f.active(1), reason="x", now=f.T0)
    world = f.world(held, attempt=f.objects(1, pod=f.pod(1), lease=f.lease(1)),
                    observation=f.observed(f.T0))
    assert isinstance(steps.next_step(world), Wait)


def test_an_active_slot_gets_no_label_write_of_its_own() -> None:
    slot = f.slot(f.active(1))
    bare = slot.model_copy(update={"metadata": slot.metadata.model_copy(update={"labels": {}})})
    world = inputs.World(**{**f.world(f.active(1), attempt=f.objects(
        1, pod=f.pod(1), lease=f.lease(1)), observation=f.observed(f.T0)).__dict__,
        "slot": bare})
    assert isinstance(steps.next_step(world), Wait)


def test_a_ready_slot_that_waits_gets_its_label() -> None:
    slot = f.slot(f.ready())
    bare = slot.model_copy(update={"metadata": slot.metadata.model_copy(update={"labels": {}})})
    base = f.world(f.ready(), run=f.agent_run(claim_policy="Manual"))
    world = inputs.World(**{**base.__dict__, "slot": bare})
    step = expect(steps.next_step(world), RemoveCommand)
    assert (step.point, step.labels) == ("label", {names.LAUNCH_SPEC_LABEL: "cpu-spec"})


# --- what a cache must not decide, and blind time -------------------------------------------


def test_ending_an_attempt_and_deleting_a_pod_need_a_fresh_read() -> None:
    ended = f.world(f.active(1), attempt=f.objects(1, pod=f.pod(1, "Failed"), lease=None))
    step = steps.next_step(ended)
    assert isinstance(step, WriteStatus) and step.point == "attempt-ended"
    assert step.fresh
    expired = f.world(f.active(1), now=f.T0 + f.seconds(100), ticks=f.T0 + f.seconds(100),
                      attempt=f.objects(1, pod=f.pod(1), lease=f.lease(1, renew_time="r")),
                      observation=f.observed(f.T0, "r"))
    delete = steps.next_step(expired)
    assert isinstance(delete, DeletePod) and delete.fresh
    claim = expect(steps.next_step(f.world(f.ready(), next_attempt=f.objects(1))), Create)
    assert not hasattr(claim, "fresh")  # a claim's create is never decided again first


def test_a_command_judged_on_an_expired_prior_lease_needs_a_fresh_read() -> None:
    status = f.retry_wait(owner="alice")
    late: dict[str, Any] = {"now": f.T0 + f.seconds(100), "ticks": f.T0 + f.seconds(100)}
    expired = f.world(status, observation=f.observed(f.T0, "r"), **late,
                      attempt=f.objects(1, pod=None, lease=f.lease(1, renew_time="r")))
    ledger = commandsteps.ledger(expired, status=status, event=None)
    assert ledger.point == "command-ledger" and ledger.fresh
    released = f.world(status, **late, attempt=f.objects(
        1, pod=None, lease=f.lease(1, holder=False, outcome="Failed")))
    assert not commandsteps.ledger(released, status=status, event=None).fresh


def test_the_operators_blind_time_never_counts_toward_expiry() -> None:
    """45 s lease, last renewal seen at T0, 50 s later: expired, unless the operator was
    blind for 10 of those seconds (then it is held 5 s more)."""
    base: dict[str, Any] = {
        "now": f.T0 + f.seconds(50), "ticks": f.T0 + f.seconds(50),
        "attempt": f.objects(1, pod=f.pod(1), lease=f.lease(1, renew_time="r")),
        "observation": f.observed(f.T0, "r")}
    assert type(steps.next_step(f.world(f.active(1), **base))).__name__ == "DeletePod"
    held = steps.next_step(f.world(f.active(1), blind=timedelta(seconds=10), **base))
    assert isinstance(held, Wait) and held.until == f.T0 + f.seconds(55)
