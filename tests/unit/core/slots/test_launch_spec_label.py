"""The label naming a slot's pinned LaunchSpec (``agentrun.dev/launch-spec``).

Covers: a slot with nothing else to do gets the label of its pin (a metadata patch that
removes no annotation); after a reassignment it rides on the annotation removal; a slot
already labelled, or pinned to a name too long for a label value, is left alone.
"""

from __future__ import annotations

from agentrun.api import names
from agentrun.api.slots import CommandKind, CommandRecord
from agentrun.core.base.actions import RemoveCommand, Wait
from agentrun.core.slots import steps
from agentrun.core.slots.inputs import World
from tests.unit.core import corefakes as f
from tests.unit.core.corefakes import expect


def unlabelled(world: World) -> World:
    meta = world.slot.metadata.model_copy(update={"labels": {}})
    return World(**{**world.__dict__, "slot": world.slot.model_copy(update={"metadata": meta})})


def test_a_waiting_slot_gets_the_label_of_its_pin() -> None:
    world = unlabelled(f.world(f.ready(), run=f.agent_run(claim_policy="Manual")))
    step = expect(steps.next_step(world), RemoveCommand)
    assert (step.keys, step.labels) == ((), {names.LAUNCH_SPEC_LABEL: f.PINNED.name})
    labelled = f.world(f.ready(), run=f.agent_run(claim_policy="Manual"))
    assert isinstance(steps.next_step(labelled), Wait)


def test_the_label_rides_on_the_removal_of_a_decided_command() -> None:
    decided = CommandRecord(request_id="req-1", kind=CommandKind.HOLD, actor="alice",
                            outcome="Accepted", time=f.T0)
    status = f.ready().model_copy(update={"commands": [decided]})
    world = unlabelled(f.world(status, annotations=f.command("hold", "req-1", reason="x")))
    step = expect(steps.next_step(world), RemoveCommand)
    assert step.keys and step.labels == {names.LAUNCH_SPEC_LABEL: f.PINNED.name}


def test_a_name_too_long_for_a_label_is_not_labelled() -> None:
    long = f.PINNED.model_copy(update={"name": "l" * 64})
    status = f.ready().model_copy(update={"launch_spec": long})
    world = unlabelled(f.world(status, run=f.agent_run(claim_policy="Manual")))
    assert isinstance(steps.next_step(world), Wait)
