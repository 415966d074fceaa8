"""A run's status derived from its slots: counts, conditions, deadline, dependencies."""

from __future__ import annotations

from datetime import timedelta

import pytest

from agentrun.api import conditions, names
from agentrun.api.runs import AgentRun, AgentRunStatus, SlotCounts
from agentrun.api.slots import Slot, SlotState
from agentrun.core.runs import resolution, rollup, runobjects
from agentrun.core.runs.resolution import Problem, Resolution
from tests.unit.core import launchfakes as lf

S = SlotState
NODES = ["research", "report", "review"]


def pinned_run(*, deadline: int | None = None, generation: int = 3,
               status: AgentRunStatus | None = None) -> AgentRun:
    base = lf.run(deadline=deadline, generation=generation)
    found = resolution.resolve(run=base, config_maps=lf.config_maps())
    assert isinstance(found, Resolution)
    pins = runobjects.pins(run=base, resolution=found, journal=None)
    pinned = rollup.record_pins(run=base, pins=pins, now=lf.T0)
    return base.model_copy(update={"status": status or pinned})


def derive(run: AgentRun, slots: list[Slot], *, after: float = 60,
           nodes: list[str] | None = None) -> AgentRunStatus:
    return rollup.derive(run=run, nodes=NODES if nodes is None else nodes, slots=slots,
                       now=lf.T0 + timedelta(seconds=after))


def cond(status: AgentRunStatus, type_: str) -> tuple[str, str]:
    found = conditions.find(status.conditions, type_)
    assert found is not None
    return found.status, found.reason


def message(status: AgentRunStatus, type_: str) -> str:
    found = conditions.find(status.conditions, type_)
    assert found is not None
    return found.message


def states(*pairs: tuple[str, SlotState]) -> list[Slot]:
    return [lf.slot(node, state) for node, state in pairs]


# --- counts -------------------------------------------------------------------------------

def test_counts_over_a_mixed_set() -> None:
    slots = states(("a", S.PENDING), ("b", S.READY), ("c", S.CLAIMING), ("d", S.ACTIVE),
                   ("e", S.RETRY_WAIT), ("f", S.SUCCEEDED), ("g", S.FAILED))
    own = rollup.own_slots(run=pinned_run(), slots=slots)
    counts = rollup.count(nodes=[*"abcdefg", "h"], slots=own)
    assert counts == SlotCounts(total=8, pending=1, ready=1, active=2, retry_wait=1,
                                succeeded=1, failed=1)


def test_slots_of_another_run_are_not_counted() -> None:
    stranger = lf.slot("report", S.SUCCEEDED, run_uid="uid-deleted-run-of-the-same-name")
    other = lf.slot("review", S.SUCCEEDED, run_name="research-2")
    status = derive(pinned_run(), [lf.slot("research", S.SUCCEEDED), stranger, other])
    assert status.slots == SlotCounts(total=3, succeeded=1)
    assert status.done == "1/3"


# --- conditions ---------------------------------------------------------------------------

def test_unpinned_run_shows_its_problem() -> None:
    problem = Problem(reason="ConfigNotFound", message="workflow 'x': not found")
    status = rollup.derive(run=lf.run(), nodes=[], slots=[], now=lf.T0, problem=problem)
    assert cond(status, "Pinned") == ("False", "ConfigNotFound")
    assert message(status, "Pinned") == problem.message
    assert cond(status, "Ready") == ("False", "NotPinned")
    assert cond(status, "Succeeded") == ("False", "InProgress")
    assert cond(status, "Failed") == ("False", "NoSlotFailed")
    assert status.done == "0/0"
    assert status.pinned is None
    assert status.start_time is None


def test_unpinned_run_without_a_problem_is_resolving() -> None:
    status = rollup.derive(run=lf.run(), nodes=[], slots=[], now=lf.T0)
    assert cond(status, "Pinned") == ("Unknown", "Resolving")


def test_record_pins_sets_pins_and_start_time_once() -> None:
    run = pinned_run()
    assert run.status.pinned is not None
    assert run.status.start_time == lf.T0
    assert cond(run.status, "Pinned") == ("True", "Pinned")
    later = rollup.record_pins(run=run, pins=run.status.pinned, now=lf.T0 + timedelta(hours=1))
    assert later == run.status
    other = run.status.pinned.model_copy(update={
        "workflow": run.status.pinned.workflow.model_copy(update={"revision": 2})})
    with pytest.raises(ValueError, match="already pinned"):
        rollup.record_pins(run=run, pins=other, now=lf.T0)


def stamped(creator: str | None, epoch: str | None) -> AgentRun:
    run = lf.run()
    annotations = {k: v for k, v in ((names.CREATOR_ANNOTATION, creator),
                                     (names.CREATOR_EPOCH_ANNOTATION, epoch)) if v}
    return run.model_copy(update={"metadata": run.metadata.model_copy(
        update={"annotations": annotations})})


@pytest.mark.parametrize(("creator", "epoch", "in_force", "verified"), [
    ("alice", "e1", "e1", "alice"),
    ("alice", "e0", "e1", "StaleEpoch"),
    ("alice", None, "e1", "Unstamped"),
    (None, "e1", "e1", "Unstamped"),
    ("alice", "e1", None, "StampingNotInForce"),
    ("a" * 257, "e1", "e1", "Unstamped"),  # clipped, it could name someone else
])
def test_the_creator_is_believed_only_under_the_epoch_in_force(
        creator: str | None, epoch: str | None, in_force: str | None, verified: str) -> None:
    run = stamped(creator, epoch)
    found = rollup.verified_creator(run, epoch=in_force)
    pins = pinned_run().status.pinned
    assert pins is not None
    status = rollup.record_pins(run=run, pins=pins, now=lf.T0, creator=found)
    if verified == "alice":
        assert status.creator == "alice"
        assert cond(status, "CreatorVerified") == ("True", "Stamped")
    else:
        assert isinstance(found, Problem) and found.reason == verified
        assert status.creator is None
        assert cond(status, "CreatorVerified") == ("False", verified)
    # Pinning again (a retry) never changes who created the run.
    again = run.model_copy(update={"status": status})
    assert rollup.record_pins(run=again, pins=pins, now=lf.T0,
                              creator="mallory").creator == status.creator


def test_all_slots_created_and_running_is_ready() -> None:
    status = derive(pinned_run(), states(("research", S.ACTIVE), ("report", S.PENDING),
                                         ("review", S.PENDING)))
    assert cond(status, "Pinned") == ("True", "Pinned")
    assert cond(status, "Ready") == ("True", "SlotsCreated")
    assert cond(status, "Succeeded") == ("False", "InProgress")
    assert cond(status, "Failed") == ("False", "NoSlotFailed")
    assert status.slots == SlotCounts(total=3, pending=2, active=1)
    assert status.pinned is not None
    assert status.start_time == lf.T0


def test_missing_slots_are_named() -> None:
    status = derive(pinned_run(), states(("research", S.PENDING)))
    assert cond(status, "Ready") == ("False", "SlotsMissing")
    text = message(status, "Ready")
    assert "1 of 3" in text
    assert "report, review" in text


def test_a_failed_slot_with_others_open_is_not_yet_failed() -> None:
    status = derive(pinned_run(), states(("research", S.SUCCEEDED), ("report", S.FAILED),
                                         ("review", S.RETRY_WAIT)))
    assert cond(status, "Ready") == ("False", "SlotFailed")
    assert cond(status, "Failed") == ("False", "SlotsFinishing")
    assert cond(status, "Succeeded") == ("False", "InProgress")


def test_a_failed_slot_with_every_slot_terminal_fails_the_run() -> None:
    status = derive(pinned_run(), states(("research", S.SUCCEEDED), ("report", S.FAILED),
                                         ("review", S.FAILED)))
    assert cond(status, "Failed") == ("True", "SlotsFailed")
    assert cond(status, "Succeeded") == ("False", "SlotsFailed")
    assert "report, review" in message(status, "Failed")
    assert rollup.is_finished(status)


def test_a_missing_slot_is_not_terminal() -> None:
    status = derive(pinned_run(), states(("research", S.FAILED), ("report", S.FAILED)))
    assert cond(status, "Failed") == ("False", "SlotsFinishing")


def test_every_slot_succeeded_is_success() -> None:
    status = derive(pinned_run(), states(*((n, S.SUCCEEDED) for n in NODES)))
    assert cond(status, "Succeeded") == ("True", "AllSlotsSucceeded")
    assert cond(status, "Failed") == ("False", "Succeeded")
    assert cond(status, "Ready") == ("True", "SlotsCreated")
    assert status.done == "3/3"
    assert rollup.is_finished(status)


def test_observed_generation_and_stable_transition_times() -> None:
    run = pinned_run(generation=7)
    slots = states(*((n, S.PENDING) for n in NODES))
    first = derive(run, slots, after=10)
    again = derive(run.model_copy(update={"status": first}), slots, after=500)
    assert again.observed_generation == 7
    assert all(c.observed_generation == 7 for c in again.conditions)
    assert again.conditions == first.conditions
    flipped = derive(run.model_copy(update={"status": again}),
                     states(*((n, S.SUCCEEDED) for n in NODES)), after=900)
    succeeded = conditions.find(flipped.conditions, "Succeeded")
    ready = conditions.find(flipped.conditions, "Ready")
    assert succeeded is not None
    assert ready is not None
    assert succeeded.last_transition_time == lf.T0 + timedelta(seconds=900)
    assert ready.last_transition_time == lf.T0 + timedelta(seconds=10)


def test_verdicts_are_sticky() -> None:
    run = pinned_run()
    done = derive(run, states(*((n, S.SUCCEEDED) for n in NODES)))
    stale = derive(run.model_copy(update={"status": done}), [])
    assert cond(stale, "Succeeded") == ("True", "AllSlotsSucceeded")
    failed = derive(run, states(("research", S.FAILED), ("report", S.FAILED),
                                ("review", S.FAILED)))
    later = derive(run.model_copy(update={"status": failed}),
                   states(*((n, S.SUCCEEDED) for n in NODES)))
    assert cond(later, "Failed") == ("True", "SlotsFailed")
    assert cond(later, "Succeeded") == ("False", "SlotsFailed")


# --- deadline -----------------------------------------------------------------------------

def test_deadline_counts_from_start_time() -> None:
    run = pinned_run(deadline=600)
    assert rollup.deadline(run) == lf.T0 + timedelta(seconds=600)
    assert not rollup.deadline_passed(run=run, now=lf.T0 + timedelta(seconds=599))
    assert rollup.deadline_passed(run=run, now=lf.T0 + timedelta(seconds=600))


def test_no_deadline_without_the_setting_or_before_pinning() -> None:
    assert rollup.deadline(pinned_run()) is None
    assert not rollup.deadline_passed(run=pinned_run(), now=lf.T0 + timedelta(days=365))
    unpinned = lf.run(deadline=1)
    assert rollup.deadline(unpinned) is None
    assert not rollup.deadline_passed(run=unpinned, now=lf.T0 + timedelta(days=1))


def test_a_passed_deadline_fails_the_run_with_slots_still_open() -> None:
    status = derive(pinned_run(deadline=60), states(*((n, S.ACTIVE) for n in NODES)), after=61)
    assert cond(status, "Failed") == ("True", "DeadlineExceeded")
    assert cond(status, "Ready") == ("False", "DeadlineExceeded")
    assert cond(status, "Succeeded") == ("False", "DeadlineExceeded")
    assert "activeDeadlineSeconds (60)" in message(status, "Failed")


def test_success_before_the_deadline_stands() -> None:
    run = pinned_run(deadline=60)
    done = derive(run, states(*((n, S.SUCCEEDED) for n in NODES)), after=30)
    later = derive(run.model_copy(update={"status": done}),
                   states(*((n, S.SUCCEEDED) for n in NODES)), after=3600)
    assert cond(later, "Succeeded") == ("True", "AllSlotsSucceeded")
    assert cond(later, "Failed") == ("False", "Succeeded")


# --- a slot's dependencies are its own run's slots --------------------------------------

def test_a_slot_of_a_deleted_same_name_run_is_not_the_runs_own() -> None:
    """Dependencies are judged on ``own_slots``: a leftover of an earlier run never counts."""
    run = pinned_run()
    stale = lf.slot("research", S.SUCCEEDED, run_uid="uid-deleted-run")
    fresh = lf.slot("report", S.PENDING)
    assert set(rollup.own_slots(run=run, slots=[stale, fresh])) == {"report"}
