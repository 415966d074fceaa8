"""The orchestrator's safety rules added after review (no cluster).

Covers: a slot without a live run (gone, being deleted, a later run of the same name)
only winds down; a replacement waits until the predecessor's pod is gone; objects left by
an earlier slot of the same name are waited out, never fenced or counted; the pinned
configuration is checked before a pod mounts it; a request id reused by another kind of command is
not silently dropped; a give-up of a claim under way is owner-checked.
"""

from __future__ import annotations

import dataclasses

from agentrun.api.slots import CommandKind, Outcome, Predicate, SlotState
from agentrun.core.base.actions import (
    Create,
    DeletePod,
    RemoveCommand,
    Tombstone,
    Wait,
    WriteStatus,
)
from agentrun.core.commands import guards
from agentrun.core.slots import steps
from tests.unit.core import corefakes as f

expect = f.expect


# --- no live run: wind down ----------------------------------------------------------------


def test_an_active_attempt_is_followed_to_its_end_when_the_run_is_gone() -> None:
    ended = f.objects(1, pod=f.pod(1, "Failed"), lease=f.lease(1, outcome=None, holder=False))
    step = expect(steps.next_step(f.world(f.active(1), run=None, attempt=ended)), WriteStatus)
    assert step.status.state is SlotState.RETRY_WAIT
    assert step.status.attempts[-1].outcome is Outcome.FAILED


def test_a_claim_under_way_fails_when_the_run_is_gone() -> None:
    step = expect(steps.next_step(f.world(f.claiming(1), run=None,
                                          attempt=f.objects(1))), WriteStatus)
    assert step.point == "claim-failed"
    assert "run is gone" in step.status.attempts[-1].reason  # type: ignore[operator]


def test_a_slot_without_a_run_never_claims_and_ignores_commands() -> None:
    world = f.world(f.ready(), run=None, annotations=f.command("claim"))
    assert expect(steps.next_step(world), Wait).until is None


def test_a_slot_being_deleted_fences_its_prior_attempt() -> None:
    world = f.world(f.retry_wait(), attempt=f.objects(1, pod=f.pod(1, "Running"),
                                                      lease=f.lease(1, outcome="Failed")))
    slot = world.slot
    deleting = slot.model_copy(update={"metadata": slot.metadata.model_copy(
        update={"deletion_timestamp": f.T0})})
    step = steps.next_step(dataclasses.replace(world, slot=deleting))
    assert isinstance(step, DeletePod)


# --- a replacement waits for the predecessor's pod ----------------------------------------


def test_no_claim_while_the_prior_pod_is_still_terminating() -> None:
    prior = f.objects(1, pod=f.pod(1, "Running", deleting=True),
                      lease=f.lease(1, holder=False, outcome="Failed"))
    step = expect(steps.next_step(f.world(f.retry_wait(retry_at=f.T0), attempt=prior)), Wait)
    assert "is gone" in step.message


def test_a_claim_starts_once_the_prior_pod_is_gone() -> None:
    prior = f.objects(1, pod=None, lease=f.lease(1, holder=False, outcome="Failed"))
    step = expect(steps.next_step(f.world(f.retry_wait(retry_at=f.T0), attempt=prior,
                                          next_attempt=f.objects(2))), Create)
    assert (step.point, step.body["metadata"]["name"]) == ("claim-lease", f.worker(2))


# --- leftovers of an earlier slot of the same name ------------------------------------------


def test_a_leftover_pod_and_lease_are_never_fenced() -> None:
    leftover = f.objects(1, pod=f.pod(1, "Running", owner_uid="uid-old-slot"),
                         lease=f.lease(1, owner_uid="uid-old-slot"))
    step = steps.next_step(f.world(f.retry_wait(retry_at=f.T0), attempt=leftover))
    assert not isinstance(step, DeletePod | Tombstone)


# --- the pinned configuration ----------------------------------------------------------------


def test_a_pod_is_not_created_from_a_swapped_snapshot() -> None:
    problem = "the pinned bindings snapshot x is missing or is not the run's pinned copy"
    world = f.world(f.claiming(1), attempt=f.objects(1, lease=f.lease(1)), pins_problem=problem)
    step = expect(steps.next_step(world), WriteStatus)
    assert step.point == "claim-failed"
    assert problem in step.status.attempts[-1].reason  # type: ignore[operator]
    assert step.fresh  # the pins were read from caches: decided again from the API first


# --- request ids ------------------------------------------------------------------------------


def test_a_request_id_reused_by_another_kind_of_command_is_reported() -> None:
    status = f.retry_wait(retry_at=f.T0 + f.seconds(600))
    hold = guards.decide(command=guards.Command(kind=CommandKind.HOLD, request_id="req-1",
                                                actor="alice", reason="look"),
                         slot=f.slot(status), tenant=f.TENANT, prior=None, launch_specs=[],
                         now=f.T0).status
    step = expect(steps.next_step(f.world(hold, annotations=f.command("release"))),
                  RemoveCommand)
    assert step.event is not None
    assert step.event.type == "Warning"
    assert "already used by a Hold command" in step.event.message


# --- give-up of a claim under way ---------------------------------------------------------------


def test_a_give_up_of_a_claim_under_way_is_owner_checked() -> None:
    claiming = f.claiming(1).model_copy(update={"next_owner_actor": "bob"})
    decision = guards.decide(
        command=guards.Command(kind=CommandKind.GIVE_UP, request_id="g1", actor="carol",
                               reason="stop"),
        slot=f.slot(claiming), tenant=f.TENANT, prior=None, launch_specs=[], now=f.T0)
    assert decision.predicate is Predicate.NOT_OWNER
    by_owner = guards.decide(
        command=guards.Command(kind=CommandKind.GIVE_UP, request_id="g2", actor="bob",
                               reason="stop"),
        slot=f.slot(claiming), tenant=f.TENANT, prior=None, launch_specs=[], now=f.T0)
    assert by_owner.accepted
