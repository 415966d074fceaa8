"""``spec.maxActive``: at most that many of a run's slots claim or run an attempt at once.

Covers: a Ready slot waits (no claim, no attempt number) while the run's other slots
already hold ``maxActive`` attempts Claiming or Active, and claims as soon as one fewer
does; without ``maxActive`` the count is not consulted.
"""

from __future__ import annotations

from agentrun.api.runs import AgentRun
from agentrun.api.slots import Predicate, SlotState
from agentrun.core.base.actions import Create, Wait, WriteStatus
from agentrun.core.slots import steps
from tests.unit.core import corefakes as f
from tests.unit.core.corefakes import expect


def limited(max_active: int | None) -> AgentRun:
    run = f.agent_run()
    return run.model_copy(update={"spec": run.spec.model_copy(
        update={"max_active": max_active})})


def test_a_ready_slot_waits_while_the_run_is_at_max_active() -> None:
    world = f.world(f.ready(), run=limited(2), active_in_run=2)
    step = expect(steps.next_step(world), Wait)
    assert "spec.maxActive (2)" in step.message
    assert step.until is None  # woken when one of them ends (and by the resync)


def test_it_claims_once_one_fewer_is_active() -> None:
    world = f.world(f.ready(), run=limited(2), active_in_run=1, next_attempt=f.objects(1))
    step = expect(steps.next_step(world), Create)
    assert (step.point, step.body["metadata"]["name"]) == ("claim-lease", f.worker(1))


def test_without_max_active_the_count_does_not_matter() -> None:
    world = f.world(f.ready(), run=limited(None), active_in_run=500, next_attempt=f.objects(1))
    assert expect(steps.next_step(world), Create).point == "claim-lease"


def test_a_slot_not_yet_claimable_is_not_told_about_max_active() -> None:
    """RetryWait before its retry time waits for that time, not for maxActive."""
    status = f.retry_wait(retry_at=f.T0 + f.seconds(30))
    world = f.world(status, run=limited(1), active_in_run=1,
                    attempt=f.objects(1, pod=f.pod(1, "Failed"),
                                      lease=f.lease(1, outcome="Failed")))
    step = expect(steps.next_step(world), Wait)
    assert step.until == f.T0 + f.seconds(30)


def test_a_claim_command_at_max_active_is_rejected_not_claimable() -> None:
    run = limited(1).model_copy(update={"spec": limited(1).spec.model_copy(
        update={"claim_policy": "Manual"})})
    world = f.world(f.ready(), run=run, active_in_run=1, annotations=f.command("claim"))
    step = expect(steps.next_step(world), WriteStatus)
    entry = step.status.commands[-1]
    assert (entry.outcome, entry.predicate) == ("Rejected", Predicate.NOT_CLAIMABLE)
    assert "spec.maxActive (1)" in entry.message
    assert step.status.state is SlotState.READY
