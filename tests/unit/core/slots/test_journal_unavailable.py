"""The slot condition JournalUnavailable, mirrored from the latest attempt's Lease.

Covers, each by the exact step: the store error on the active attempt's Lease sets the
condition True (StoreNotAnswering) in one status write (point ``journal-unavailable``)
naming the attempt, the pinned store and the error, with a Warning Event; seen again,
nothing; a changed error, a new message; gone, the condition turns False (StoreAnswering,
point ``journal-answers``) with a Normal Event; never set and no error, nothing; an
attempt that ended with the error on its Lease says so; a finished slot writes nothing; an
error over its bound is clipped; and the observation never stands in the way of judging an
attempt whose pod finished (the end is decided first).
"""

from __future__ import annotations

from typing import Any

from agentrun.api import bounds, names
from agentrun.api.runs import JournalPin
from agentrun.api.slots import SlotState, SlotStatus
from agentrun.core.base.actions import WriteStatus
from agentrun.core.slots import journalsteps, steps
from agentrun.core.slots.inputs import World
from tests.unit.core import corefakes as f
from tests.unit.core.corefakes import expect

CONDITION = names.JOURNAL_UNAVAILABLE_CONDITION
ERROR = "storing agentrun/ns/uid/s/1/sha256/ab: connection refused"


def with_error(lease: dict[str, Any], error: str | None) -> dict[str, Any]:
    if error is not None:
        lease["metadata"]["annotations"][names.JOURNAL_ERROR_ANNOTATION] = error
    return lease


def journaled_run() -> Any:
    run = f.agent_run()
    pinned = run.status.pinned.model_copy(update={"journal": JournalPin(
        endpoint="http://store.example:8333", bucket="journal", prefix="agentrun/ns/uid")})
    return run.model_copy(update={"status": run.status.model_copy(update={"pinned": pinned})})


def active_world(status: SlotStatus, error: str | None) -> World:
    return f.world(status, run=journaled_run(), attempt=f.objects(
        1, pod=f.pod(1), lease=with_error(f.lease(1, renew_time="r"), error)),
        observation=f.observed(f.T0))


def test_an_error_on_the_active_lease_sets_the_condition_once() -> None:
    step = expect(steps.next_step(active_world(f.active(1), ERROR)), WriteStatus)
    assert step.point == "journal-unavailable"
    found = f.condition(step.status, CONDITION)
    assert (found.status, found.reason) == ("True", names.JOURNAL_STORE_FAILING)
    assert f.worker(1) in found.message and "http://store.example:8333" in found.message
    assert "bucket journal" in found.message and ERROR in found.message
    assert "retries while it holds its lease" in found.message
    assert step.event is not None and step.event.type == "Warning"
    assert step.event.reason == CONDITION
    assert step.status.state is SlotState.ACTIVE
    again = active_world(step.status, ERROR)
    assert journalsteps.observe_step(again) is None
    changed = expect(journalsteps.observe_step(active_world(step.status, "another error")),
                     WriteStatus)
    assert "another error" in f.condition(changed.status, CONDITION).message


def test_the_condition_clears_once_the_error_is_gone() -> None:
    shown = expect(steps.next_step(active_world(f.active(1), ERROR)), WriteStatus).status
    step = expect(steps.next_step(active_world(shown, None)), WriteStatus)
    assert step.point == "journal-answers"
    found = f.condition(step.status, CONDITION)
    assert (found.status, found.reason) == ("False", names.JOURNAL_STORE_ANSWERS)
    assert "answers again" in found.message
    assert step.event is not None and step.event.type == "Normal"
    assert journalsteps.observe_step(active_world(step.status, None)) is None


def test_no_error_and_no_condition_writes_nothing() -> None:
    assert journalsteps.observe_step(active_world(f.active(1), None)) is None
    assert journalsteps.observe_step(f.world(f.active(1))) is None  # no attempt read


def test_an_attempt_that_ended_on_the_error_says_so() -> None:
    world = f.world(f.retry_wait(retry_at=f.T0 + f.seconds(60)), run=journaled_run(),
                    attempt=f.objects(1, pod=f.pod(1, "Failed"), lease=with_error(
                        f.lease(1, outcome="Failed"), ERROR)))
    step = expect(steps.next_step(world), WriteStatus)
    message = f.condition(step.status, CONDITION).message
    assert "ended while it could not reach" in message and "resumes from" in message


def test_a_finished_slot_writes_nothing() -> None:
    world = f.world(f.finished(SlotState.FAILED), attempt=f.objects(
        1, pod=f.pod(1, "Failed"), lease=with_error(f.lease(1, outcome="Failed"), ERROR)))
    assert journalsteps.observe_step(world) is None


def test_an_error_over_its_bound_is_clipped() -> None:
    step = expect(journalsteps.observe_step(active_world(f.active(1), "x" * 5000)),
                  WriteStatus)
    assert len(f.condition(step.status, CONDITION).message) <= bounds.MESSAGE_CHARS


def test_without_a_journal_pin_the_store_is_named_generically() -> None:
    world = f.world(f.active(1), attempt=f.objects(1, pod=f.pod(1), lease=with_error(
        f.lease(1, renew_time="r"), ERROR)), observation=f.observed(f.T0))
    step = expect(journalsteps.observe_step(world), WriteStatus)
    assert "the journal's store: " in f.condition(step.status, CONDITION).message


def test_a_finished_pod_is_judged_before_the_error_is_shown() -> None:
    world = f.world(f.active(1), run=journaled_run(), attempt=f.objects(
        1, pod=f.pod(1, "Failed", exit_code=1),
        lease=with_error(f.lease(1, renew_time="r", holder=False), ERROR)),
        observation=f.observed(f.T0))
    step = expect(steps.next_step(world), WriteStatus)
    assert step.point == "attempt-ended", step


LOSS = "attempt 1's journal, commit 2 of 3: agentrun/ns/uid/s/1/sha256/ab: S3 404 NoSuchKey"


def lost_world(status: SlotStatus, *, lost: str | None, head: bool = False) -> World:
    lease = f.lease(2, renew_time="r")
    if lost is not None:
        lease["metadata"]["annotations"][names.JOURNAL_LOST_ANNOTATION] = lost
    if head:
        lease["metadata"]["annotations"][names.JOURNAL_HEAD_ANNOTATION] = "0000000001-" + "a" * 64
    return f.world(status, run=journaled_run(), attempt=f.objects(2, pod=f.pod(2), lease=lease),
                   observation=f.observed(f.T0))


def test_a_journal_that_lost_committed_work_is_shown_until_a_later_attempt_reads_it() -> None:
    step = expect(steps.next_step(lost_world(f.active(2), lost=LOSS)), WriteStatus)
    assert step.point == "journal-lost"
    found = f.condition(step.status, names.JOURNAL_LOST_CONDITION)
    assert (found.status, found.reason) == ("True", names.JOURNAL_WORK_MISSING)
    assert LOSS in found.message and "no attempt starts from less than was committed" in (
        found.message)
    assert step.event is not None and step.event.type == "Warning"
    assert journalsteps.observe_step(lost_world(step.status, lost=LOSS)) is None
    # a later attempt's Lease without a loss: not cleared until it has committed (a head)
    assert journalsteps.observe_step(lost_world(step.status, lost=None)) is None
    cleared = expect(journalsteps.observe_step(lost_world(step.status, lost=None, head=True)),
                     WriteStatus)
    assert f.condition(cleared.status, names.JOURNAL_LOST_CONDITION).reason == names.JOURNAL_READ
    assert cleared.point == "journal-answers"
