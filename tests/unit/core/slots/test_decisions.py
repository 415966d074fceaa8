"""``steps.decide``: a step with the world it was decided in (``decisions.Decision``).

Covers: a claim's create comes with its claiming world (the slot Claiming in memory, its
attempt pending), any other step with the world given; ``next_step`` is the decision's
step; ``on_exists`` hands a claim's next create back with the claiming world that holds
the object found, and any other step bare.
"""

from __future__ import annotations

from agentrun.api import names
from agentrun.api.slots import SlotState
from agentrun.core.base.actions import Create, WriteStatus
from agentrun.core.slots import decisions, steps
from tests.unit.core import corefakes as f
from tests.unit.core.corefakes import expect


def test_a_claims_lease_is_decided_in_its_claiming_world() -> None:
    world = f.world(f.ready(), next_attempt=f.objects(1))
    decision = steps.decide(world)
    create = expect(decision.step, Create)
    assert create.claim and create.point == "claim-lease"
    claiming = decision.world.slot.status
    assert (claiming.state, claiming.pending_worker) == (SlotState.CLAIMING, f.worker(1))
    assert world.slot.status == f.ready()  # the world read is left as read
    assert steps.next_step(world) == create


def test_any_other_step_is_decided_in_the_world_given() -> None:
    world = f.world(generation=3, depends_on=["other"])
    decision = steps.decide(world)
    assert expect(decision.step, WriteStatus).point == "observed"
    assert decision.world is world


def test_a_snapshot_create_is_shared_and_decided_in_the_world_given() -> None:
    world = f.world(launch_specs=(f.CPU_SPEC,))
    decision = steps.decide(world)
    create = expect(decision.step, Create)
    assert (create.point, create.shared, create.claim) == ("launch-spec-snapshot", True, False)
    assert decision.world is world


def test_the_pod_after_a_lease_found_is_decided_with_the_lease_in_its_world() -> None:
    decision = steps.decide(f.world(f.ready(), next_attempt=f.objects(1)))
    found = f.lease(1)
    found["metadata"]["annotations"][names.LAUNCH_SPEC_ANNOTATION] = "cpu-spec@1"
    then = expect(steps.on_exists(decision.world, create=expect(decision.step, Create),
                                  found=found), decisions.Decision)
    assert expect(then.step, Create).point == "claim-pod"
    assert then.world.next_attempt is not None and then.world.next_attempt.lease == found
