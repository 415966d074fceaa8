"""``steps.next_step`` for a pending command: decided into the ledger, then removed.

Covers, each by the exact step type and its key content:
- a malformed request id: rejected into the ledger (Malformed) under ``invalid-<hash>``,
  then removed; a request id already in the ledger: removed, no Event;
- stamping not in force (``world.stamping`` without an epoch): a ledger entry with
  predicate CommandsRefused and condition CommandsRefused True, which flips False on the
  next command once it is; an unstamped command (``Unstamped``) or one stamped under an
  earlier epoch (``StaleEpoch``): a ledger entry, CommandsRefused untouched; a malformed
  command is judged by its stamp first (``Unstamped``/``StaleEpoch``, else ``Malformed``);
- claim: rejected NotClaimable while the run is suspended or the slot is not claimable;
  accepted under Manual as one status write that is both the ledger entry and Claiming;
- reassignment: the LaunchSpec snapshot is created first, then the reopened status
  (RetryWait, spec pinned, Reopened True) with the Reassigned Event; a prior attempt not
  observed, a non-owner without ``override`` and a blank reason are rejected;
- hold and release; give-up of an Active slot: Failed, then the annotations removed,
  the live pod deleted and the lease tombstoned with outcome GaveUp, then nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentrun.api import conditions, names
from agentrun.api.slots import CommandKind, CommandRecord, Outcome, Predicate, SlotState, SlotStatus
from agentrun.core.base.actions import (
    Create,
    DeletePod,
    RemoveCommand,
    Tombstone,
    Wait,
    WriteStatus,
)
from agentrun.core.commands import parsing
from agentrun.core.launchspecs import launchpins
from agentrun.core.machine import transitions
from agentrun.core.policies.stamping import Stamping
from agentrun.core.slots import attemptlife, commandsteps, inputs, specsnapshots, steps
from agentrun.core.slots.inputs import World
from tests.unit.core import corefakes as f
from tests.unit.core.corefakes import expect

NOT_IN_FORCE = Stamping(epoch=None, problem="actors cannot be verified: the policy is missing")
GPU_SPEC = f.launch_spec("gpu-spec", classes=["gpu"], runs=[f.RUN])
GPU_SNAPSHOT = f"{f.RUN}-lspec-{launchpins.digest(GPU_SPEC.spec)[:10]}"
TERMINAL_PRIOR = f.objects(1, pod=f.pod(1, "Failed"), lease=f.lease(1, outcome="Failed"))


def reassign(request_id: str = "req-1", *, actor: str | None = "alice",
             reason: str = "the node was flaky") -> dict[str, str]:
    return f.command("reassign", request_id, actor=actor, reason=reason, worker_class="gpu",
                     run=f.RUN)


def reassign_world(status: SlotStatus | None = None, **kwargs: Any) -> World:
    values: dict[str, Any] = {"annotations": reassign(), "now": f.T0 + f.seconds(60),
                                 "launch_specs": (f.CPU_SPEC, GPU_SPEC),
                                 "attempt": TERMINAL_PRIOR}
    values.update(kwargs)
    return f.world(status or f.retry_wait(owner="alice", retry_at=f.T0 + f.seconds(600)),
                   **values)


def ledger_entry(step: WriteStatus) -> CommandRecord:
    assert step.point == "command-ledger"
    return step.status.commands[-1]


# --- reading the annotations ---------------------------------------------------------------


@pytest.mark.parametrize("request_id", ["   ", "x" * 254, "no spaces please"],
                         ids=["blank", "too-long", "malformed"])
def test_a_malformed_request_id_is_rejected_into_the_ledger_under_a_derived_id(
        request_id: str) -> None:
    annotations = f.command("hold", request_id, reason="look")
    step = expect(steps.next_step(f.world(f.ready(), annotations=annotations)), WriteStatus)
    entry = ledger_entry(step)
    assert entry.request_id == parsing.invalid_id(names.HOLD_ID, request_id)
    assert (entry.outcome, entry.predicate) == ("Rejected", Predicate.MALFORMED)
    assert entry.message.startswith("agentrun.dev/hold-id ")
    assert step.event is not None
    assert (step.event.type, step.event.reason) == ("Warning", "CommandRejected")
    assert step.status.state is SlotState.READY
    # Once recorded, the annotations are removed without a second entry.
    again = f.world(step.status, annotations=annotations)
    removed = expect(steps.next_step(again), RemoveCommand)
    assert set(removed.keys) == set(annotations)
    assert removed.event is None


@pytest.mark.parametrize(("epoch", "predicate"), [
    (None, Predicate.UNSTAMPED), ("b2xkLWVwb2No", Predicate.STALE_EPOCH)],
    ids=["unstamped", "stale-epoch"])
def test_a_malformed_command_is_judged_by_its_stamp_before_its_content(
        epoch: str | None, predicate: Predicate) -> None:
    # Only a command whose actor can be believed is judged Malformed; a ledger entry either way.
    annotations = f.command("hold", "no spaces!", epoch=epoch, reason="x" * 2000)
    step = expect(steps.next_step(f.world(f.ready(), annotations=annotations)), WriteStatus)
    entry = ledger_entry(step)
    assert (entry.request_id, entry.outcome, entry.predicate) == (
        parsing.invalid_id(names.HOLD_ID, "no spaces!"), "Rejected", predicate)
    believed = f.command("hold", "no spaces!", reason="x" * 2000)
    step = expect(steps.next_step(f.world(f.ready(), annotations=believed)), WriteStatus)
    assert ledger_entry(step).predicate == Predicate.MALFORMED


def test_a_request_id_already_in_the_ledger_is_only_removed() -> None:
    decided = CommandRecord(request_id="req-1", kind=CommandKind.HOLD, actor="alice",
                            outcome="Rejected", predicate=Predicate.BLANK_REASON, time=f.T0)
    status = f.ready().model_copy(update={"commands": [decided]})
    # Even a now-valid command, or one while admission is missing, is not decided again.
    world = f.world(status, annotations=f.command("hold", "req-1", reason="now with a reason"),
                    stamping=NOT_IN_FORCE)
    step = expect(steps.next_step(world), RemoveCommand)
    assert step.event is None
    assert set(step.keys) == {names.HOLD_ID, names.HOLD_ACTOR, names.HOLD_EPOCH,
                              names.HOLD_REASON}


def test_stamping_is_read_for_a_pending_command_only_until_it_is_in_the_ledger() -> None:
    # A decided command waits only for its annotations' removal, which needs no stamping:
    # its three quorum reads are not made again (they count against the operator's QPS).
    annotations = f.command("hold", "req-1", reason="r")
    pending = f.slot(f.ready()).model_copy(update={"metadata": f.slot().metadata.model_copy(
        update={"annotations": annotations})})
    assert inputs.reads_for(pending, max_active=False).stamping
    decided = CommandRecord(request_id="req-1", kind=CommandKind.HOLD, actor="alice",
                            outcome="Rejected", predicate=Predicate.BLANK_REASON, time=f.T0)
    ledgered = pending.model_copy(update={"status": pending.status.model_copy(
        update={"commands": [decided]})})
    assert not inputs.reads_for(ledgered, max_active=False).stamping
    other = ledgered.model_copy(update={"metadata": pending.metadata.model_copy(
        update={"annotations": f.command("hold", "req-2", reason="r")})})
    assert inputs.reads_for(other, max_active=False).stamping


def test_only_the_first_pending_command_in_order_is_decided() -> None:
    annotations = {**f.command("give-up", "g-1", reason="stop"), **reassign("r-1")}
    step = expect(steps.next_step(reassign_world(annotations=annotations)), Create)
    assert step.point == "launch-spec-snapshot"  # the reassignment goes first


# --- admission missing -------------------------------------------------------------------------


def test_a_command_while_stamping_is_not_in_force_is_refused_in_the_ledger() -> None:
    world = f.world(f.ready(), annotations=f.command("claim"),
                    run=f.agent_run(claim_policy="Manual"), stamping=NOT_IN_FORCE)
    step = expect(steps.next_step(world), WriteStatus)
    entry = ledger_entry(step)
    message = ("Claim req-1 refused: actors cannot be verified: the policy is missing; "
               "re-send it with a new request id once it is in force")
    assert (entry.request_id, entry.outcome, entry.predicate, entry.message) == (
        "req-1", "Rejected", Predicate.COMMANDS_REFUSED, message)
    assert entry.actor == "alice"  # recorded as written, never believed
    refused_condition = f.condition(step.status, commandsteps.COMMANDS_REFUSED)
    assert (refused_condition.status, refused_condition.reason) == ("True",
                                                                    "StampingNotInForce")
    assert step.status.state is SlotState.READY  # nothing else changed
    assert step.event is not None
    assert (step.event.type, step.event.reason) == ("Warning", "CommandRejected")


@pytest.mark.parametrize(("annotations", "predicate", "says"), [
    (f.command("claim", actor=None), Predicate.UNSTAMPED,
     "Claim req-1 carries no actor and epoch stamped by admission (it was written while "
     "stamping was not in force), so its actor is not verified; re-send it with a new "
     "request id"),
    (f.command("claim", epoch=None), Predicate.UNSTAMPED, "carries no actor and epoch"),
    (f.command("claim", epoch="b2xkLWVwb2No"), Predicate.STALE_EPOCH,
     "Claim req-1 was stamped under an earlier stamping epoch (the admission policy, its "
     "binding or the epoch changed since it was written), so its actor is not verified; "
     "re-send it with a new request id"),
], ids=["no-actor", "no-epoch", "stale-epoch"])
def test_a_command_not_stamped_under_the_current_epoch_is_refused(
        annotations: dict[str, str], predicate: Predicate, says: str) -> None:
    world = f.world(f.ready(), annotations=annotations, run=f.agent_run(claim_policy="Manual"))
    step = expect(steps.next_step(world), WriteStatus)
    entry = ledger_entry(step)
    assert (entry.outcome, entry.predicate) == ("Rejected", predicate)
    assert says in entry.message
    assert f.condition(step.status, transitions.COMMAND_REJECTED).reason == str(predicate)
    assert conditions.find(step.status.conditions, commandsteps.COMMANDS_REFUSED) is None
    assert step.status.state is SlotState.READY and step.status.pending_worker is None


def test_once_the_policy_is_back_commands_refused_flips_false_on_the_next_command() -> None:
    refused = expect(steps.next_step(f.world(
        f.ready(), annotations=f.command("hold", "h-1", reason="x"),
        stamping=NOT_IN_FORCE)), WriteStatus).status
    world = f.world(refused, annotations=f.command("hold", "h-2", reason="investigating"),
                    now=f.T0 + f.seconds(5))
    step = expect(steps.next_step(world), WriteStatus)
    assert ledger_entry(step).outcome == "Accepted"
    flipped = f.condition(step.status, commandsteps.COMMANDS_REFUSED)
    assert (flipped.status, flipped.reason) == ("False", "StampingInForce")
    assert flipped.last_transition_time == f.T0 + f.seconds(5)
    assert f.condition(step.status, transitions.HELD).status == "True"
    assert step.event is not None and step.event.reason == "Held"


# --- claim commands ------------------------------------------------------------------------------


def test_a_claim_while_the_run_is_suspended_is_rejected_not_claimable() -> None:
    world = f.world(f.ready(), annotations=f.command("claim"),
                    run=f.agent_run(suspend=True, claim_policy="Manual"))
    step = expect(steps.next_step(world), WriteStatus)
    entry = ledger_entry(step)
    assert (entry.outcome, entry.predicate) == ("Rejected", Predicate.NOT_CLAIMABLE)
    assert "suspended" in entry.message
    assert (step.status.state, step.status.attempt_count) == (SlotState.READY, 0)
    assert f.condition(step.status, transitions.COMMAND_REJECTED).reason == "NotClaimable"
    assert step.event is not None and step.event.type == "Warning"


def test_a_claim_of_a_slot_that_is_not_claimable_is_rejected() -> None:
    world = f.world(f.claiming(1), annotations=f.command("claim"),
                    attempt=f.objects(1, pod=None, lease=None))
    entry = ledger_entry(expect(steps.next_step(world), WriteStatus))
    assert (entry.outcome, entry.predicate) == ("Rejected", Predicate.NOT_CLAIMABLE)


@pytest.mark.parametrize(("status", "worker"), [
    (f.ready(), f.worker(1)),
    (f.retry_wait(retry_at=f.T0), f.worker(2)),
], ids=["ready", "retry-wait"])
def test_an_accepted_claim_starts_with_its_lease_carrying_the_request(status: SlotStatus,
                                                                     worker: str) -> None:
    """The claim command's first write is the Lease (request id and owner on it); its
    ledger entry is in the claiming world, written with the claim's one status write."""
    number = status.attempt_count + 1
    world = f.world(status, annotations=f.command("claim", actor="bob"),
                    run=f.agent_run(claim_policy="Manual"), now=f.T0 + f.seconds(1),
                    attempt=TERMINAL_PRIOR if status.prior_worker else None,
                    next_attempt=f.objects(number))
    decision = steps.decide(world)
    step = expect(decision.step, Create)
    assert (step.point, step.body["kind"], step.body["metadata"]["name"]) == (
        "claim-lease", "Lease", worker)
    annotations = step.body["metadata"]["annotations"]
    assert (annotations["agentrun.dev/claim-id"], annotations["agentrun.dev/owner-actor"]) == (
        "req-1", "bob")
    new = decision.world.slot.status
    entry = new.commands[-1]
    assert (entry.kind, entry.outcome, entry.actor) == (CommandKind.CLAIM, "Accepted", "bob")
    assert (new.pending_worker, new.attempt_count, new.next_owner_actor) == (
        worker, number, "bob")


# --- reassignment ---------------------------------------------------------------------------------


def test_an_accepted_reassignment_creates_its_launch_spec_snapshot_first() -> None:
    step = expect(steps.next_step(reassign_world()), Create)
    assert (step.point, step.claim) == ("launch-spec-snapshot", False)
    assert (step.body["kind"], step.body["metadata"]["name"]) == ("ConfigMap", GPU_SNAPSHOT)
    assert step.body["metadata"]["annotations"][names.LAUNCH_SPEC_ANNOTATION] == "gpu-spec@1"


def test_with_its_snapshot_an_accepted_reassignment_reopens_the_slot() -> None:
    before = transitions.end_attempt(
        f.active(3, owner="alice"), outcome=Outcome.FAILED, message="x", exit_code=1,
        policy=attemptlife.policy(f.world()), now=f.T0)
    assert f.condition(before, transitions.AWAITING_REASSIGNMENT).status == "True"
    world = reassign_world(before, snapshots=frozenset({GPU_SNAPSHOT}),
                           attempt=f.objects(3, pod=None, lease=f.lease(3, outcome="Failed")))
    step = expect(steps.next_step(world), WriteStatus)
    entry = ledger_entry(step)
    assert (entry.outcome, entry.kind, entry.worker_class) == ("Accepted", CommandKind.REASSIGN,
                                                               "gpu")
    new = step.status
    assert new.state is SlotState.RETRY_WAIT
    assert new.launch_spec is not None
    assert (new.launch_spec.name, new.launch_spec.snapshot) == ("gpu-spec", GPU_SNAPSHOT)
    assert new.worker_class == "gpu"
    assert (new.retry_at, new.next_owner_actor, new.prior_worker) == (None, "alice", f.worker(3))
    assert (new.attempt_count, new.attempts) == (before.attempt_count, before.attempts)
    assert f.condition(new, transitions.REOPENED).status == "True"
    assert conditions.find(new.conditions, transitions.AWAITING_REASSIGNMENT) is None
    assert step.event is not None
    assert (step.event.type, step.event.reason) == ("Normal", "Reassigned")
    # The snapshot holds the chosen spec, as the pin says.
    body = specsnapshots.body(run=f.agent_run(), pinned=new.launch_spec, spec=GPU_SPEC.spec,
                          tenant=f.TENANT)
    assert specsnapshots.read(body, pinned=new.launch_spec) == GPU_SPEC.spec


@pytest.mark.parametrize(("kwargs", "predicate"), [
    ({"attempt": None}, Predicate.PRIOR_NOT_TERMINAL),
    ({"attempt": f.objects(1, pod=f.pod(1, "Running", deleting=True),
                           lease=f.lease(1, holder=False, outcome="Failed"))},
     Predicate.PRIOR_NOT_TERMINAL),
    ({"annotations": reassign(actor="bob")}, Predicate.NOT_OWNER),
    ({"annotations": reassign(reason="   ")}, Predicate.BLANK_REASON),
    ({"launch_specs": (f.CPU_SPEC,)}, Predicate.UNKNOWN_WORKER_CLASS),
], ids=["prior-not-read", "prior-terminating", "not-owner", "blank-reason", "unknown-class"])
def test_a_reassignment_failing_a_predicate_is_rejected_into_the_ledger(
        kwargs: dict[str, Any], predicate: Predicate) -> None:
    step = expect(steps.next_step(reassign_world(**kwargs)), WriteStatus)
    entry = ledger_entry(step)
    assert (entry.outcome, entry.predicate) == ("Rejected", predicate)
    assert step.status.launch_spec == f.PINNED  # nothing else changed
    assert conditions.find(step.status.conditions, transitions.REOPENED) is None
    assert step.event is not None and step.event.reason == "CommandRejected"


def test_an_ended_attempt_is_fenced_before_a_command_is_judged_against_it() -> None:
    """The pod of the prior attempt still runs: kill it first, then decide the command."""
    running = f.objects(1, pod=f.pod(1, "Running"), lease=f.lease(1, renew_time="r"))
    step = expect(steps.next_step(reassign_world(attempt=running,
                                                 observation=f.observed(f.T0 + f.seconds(50)))),
                  DeletePod)
    assert step.name == f.worker(1)


def test_an_admin_with_override_may_reassign_anothers_attempt() -> None:
    world = reassign_world(annotations={**reassign(actor="bob"), names.REASSIGN_OVERRIDE: "true"},
                           snapshots=frozenset({GPU_SNAPSHOT}))
    step = expect(steps.next_step(world), WriteStatus)
    entry = ledger_entry(step)
    assert (entry.outcome, entry.actor, entry.override) == ("Accepted", "bob", True)
    assert step.status.next_owner_actor == "bob"


@pytest.mark.parametrize("written", ["false", "True", "yes", ""])
def test_override_is_only_the_stamped_true(written: str) -> None:
    world = reassign_world(annotations={**reassign(actor="bob"), names.REASSIGN_OVERRIDE: written},
                           snapshots=frozenset({GPU_SNAPSHOT}))
    entry = ledger_entry(expect(steps.next_step(world), WriteStatus))
    assert (entry.outcome, entry.predicate, entry.override) == ("Rejected", Predicate.NOT_OWNER,
                                                                None)


def test_the_owner_needs_no_override_and_the_ledger_says_none_was_used() -> None:
    world = reassign_world(annotations={**reassign(actor="alice"),
                                        names.REASSIGN_OVERRIDE: "true"},
                           snapshots=frozenset({GPU_SNAPSHOT}))
    entry = ledger_entry(expect(steps.next_step(world), WriteStatus))
    assert (entry.outcome, entry.override) == ("Accepted", None)


# --- hold, release, give up -----------------------------------------------------------------------


def test_a_release_clears_the_hold() -> None:
    held = transitions.hold(f.ready(), reason="x", now=f.T0)
    step = expect(steps.next_step(f.world(held, annotations=f.command("release"))), WriteStatus)
    assert ledger_entry(step).outcome == "Accepted"
    assert f.condition(step.status, transitions.HELD).status == "False"


def test_a_give_up_by_someone_other_than_the_owner_is_rejected() -> None:
    world = f.world(f.active(1, owner="alice"),
                    annotations=f.command("give-up", actor="bob", reason="stop"),
                    attempt=f.objects(1, pod=f.pod(1), lease=f.lease(1)))
    entry = ledger_entry(expect(steps.next_step(world), WriteStatus))
    assert (entry.outcome, entry.predicate) == ("Rejected", Predicate.NOT_OWNER)


def test_a_give_up_of_an_active_slot_fails_it_then_fences_and_tombstones_the_attempt() -> None:
    annotations = f.command("give-up", reason="the brief changed")
    running = f.objects(1, pod=f.pod(1, "Running"), lease=f.lease(1, renew_time="r"))
    world = f.world(f.active(1), annotations=annotations, attempt=running,
                    now=f.T0 + f.seconds(30), observation=f.observed(f.T0 + f.seconds(25)))
    failed = expect(steps.next_step(world), WriteStatus)
    assert ledger_entry(failed).outcome == "Accepted"
    status = failed.status
    assert (status.state, status.active_worker, status.prior_worker) == (
        SlotState.FAILED, None, f.worker(1))
    assert f.condition(status, transitions.SUCCEEDED).reason == "GaveUp"
    assert status.attempts[-1].outcome is Outcome.GAVE_UP
    assert failed.event is not None
    assert (failed.event.type, failed.event.reason) == ("Normal", "GaveUp")

    # The status is written; the attempt is fenced first, then the annotations go.
    deleted = expect(steps.next_step(f.world(status, annotations=annotations, attempt=running)),
                     DeletePod)
    assert (deleted.name, deleted.uid) == (f.worker(1), "uid-pod-1")

    terminating = f.objects(1, pod=f.pod(1, "Running", deleting=True), lease=running.lease)
    tombstone = expect(steps.next_step(f.world(status, annotations=annotations,
                                               attempt=terminating)), Tombstone)
    assert tombstone.name == f.worker(1)
    assert tombstone.annotations == {
        names.OUTCOME_ANNOTATION: "GaveUp", names.ENDED_AT_ANNOTATION: "2030-01-01T12:00:30Z",
        names.LAUNCH_SPEC_ANNOTATION: "cpu-spec@1", names.OWNER_ACTOR_ANNOTATION: f.CREATOR}

    done = f.objects(1, pod=None, lease=f.lease(1, holder=False, outcome="GaveUp"))
    removed = expect(steps.next_step(f.world(status, annotations=annotations, attempt=done)),
                     RemoveCommand)
    assert (set(removed.keys), removed.event) == (set(annotations), None)
    assert expect(steps.next_step(f.world(status, attempt=done)), Wait).message == \
        "the slot has Failed"
