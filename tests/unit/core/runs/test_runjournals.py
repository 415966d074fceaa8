"""A run owns its journal: the finalizer put on before any slot, the journal deleted with
the run once no attempt of it runs, a silent store shown on the run and tried again.

Covers, each by the exact step: a pinned run with a journal and no finalizer gets it
(kept with any other finalizer) before its slots are laid out; one without a journal
gets none; a run being deleted waits while a slot of it is Claiming or Active (another
run's busy slot does not count), deletes while objects are left (or none were listed),
removes only its own finalizer once none are left; a store error is JournalDeleted False
(StoreNotAnswering, naming store, prefix and the way out) with a Warning Event, written
once, looked at again after RECHECK; a run being deleted with no journal pin just
releases the finalizer.
"""

from __future__ import annotations

from datetime import timedelta

from agentrun.api import conditions, names
from agentrun.api.runs import AgentRun, JournalSettings
from agentrun.api.slots import SlotState
from agentrun.core.base import actions
from agentrun.core.runs import runjournals, runobjects, runsteps
from tests.unit.core import launchfakes as lf

from .test_runsteps import NOW, laid_out_world, pinned, resolved

FINALIZER = names.JOURNAL_FINALIZER
SETTINGS = JournalSettings(endpoint="http://store:8333", bucket="journal")


def journaled(*, finalizers: list[str] | None = None, deleting: bool = False) -> AgentRun:
    base = pinned()
    pins = runobjects.pins(run=base, resolution=resolved(base), journal=SETTINGS)
    run = base.model_copy(update={"status": base.status.model_copy(update={"pinned": pins})})
    update: dict[str, object] = {"finalizers": finalizers or []}
    if deleting:
        update["deletion_timestamp"] = NOW - timedelta(seconds=5)
    return run.model_copy(update={"metadata": run.metadata.model_copy(update=update)})


def test_the_finalizer_goes_on_before_any_slot() -> None:
    step = runsteps.next_step(laid_out_world(journaled(finalizers=["other/keep"])))
    assert step == actions.SetFinalizers(finalizers=("other/keep", FINALIZER),
                                         point="journal-owned")
    laid = runsteps.next_step(laid_out_world(journaled(finalizers=[FINALIZER])))
    assert isinstance(laid, actions.Creates)
    assert runjournals.owning_step(pinned()) is None  # no journal, no finalizer


def deleting(*, slots: list[object] | None = None, left: int | None = None,
             error: str | None = None, run: AgentRun | None = None) -> object:
    return runsteps.next_step(runsteps.RunWorld(
        run=run or journaled(finalizers=["other/keep", FINALIZER], deleting=True),
        tenant=lf.TENANT, now=NOW, slots=slots or [], journal_left=left,  # type: ignore[arg-type]
        journal_error=error))


def test_a_busy_slot_holds_the_deletion() -> None:
    for state in (SlotState.CLAIMING, SlotState.ACTIVE):
        step = deleting(slots=[lf.slot("research", state)], left=1)
        assert isinstance(step, actions.Wait) and step.until == NOW + runjournals.RECHECK
        assert "once the attempts of" in step.message
    other = lf.slot("research", SlotState.ACTIVE, run_uid="uid-another-run")
    assert isinstance(deleting(slots=[other], left=1), actions.DeleteJournal)


def test_objects_left_are_deleted_then_only_our_finalizer_goes() -> None:
    run = journaled(finalizers=["other/keep", FINALIZER], deleting=True)
    assert run.status.pinned is not None
    for left in (None, 1):
        step = deleting(slots=[lf.slot("research", SlotState.FAILED)], left=left)
        assert step == actions.DeleteJournal(journal=run.status.pinned.journal)
    assert deleting(left=0) == actions.SetFinalizers(finalizers=("other/keep",),
                                                     point="journal-released")


def test_a_silent_store_is_shown_once_and_tried_again() -> None:
    step = deleting(left=None, error="S3 0 -: connection refused")
    assert isinstance(step, actions.WriteRun) and step.until == NOW + runjournals.RECHECK
    found = conditions.find(step.status.conditions, names.JOURNAL_DELETED_CONDITION)
    assert found is not None and (found.status, found.reason) == (
        "False", names.JOURNAL_STORE_FAILING)
    for part in ("http://store:8333", "bucket journal", "connection refused",
                 f"remove {FINALIZER}"):
        assert part in found.message
    assert step.event is not None and step.event.type == "Warning"
    run = journaled(finalizers=[FINALIZER], deleting=True)
    shown = run.model_copy(update={"status": step.status})
    again = deleting(run=shown, left=None, error="S3 0 -: connection refused")
    assert isinstance(again, actions.Wait) and again.until == NOW + runjournals.RECHECK


def test_a_run_without_a_journal_pin_releases_the_finalizer() -> None:
    run = pinned().model_copy(update={"metadata": pinned().metadata.model_copy(update={
        "finalizers": [FINALIZER], "deletion_timestamp": NOW})})
    assert deleting(run=run) == actions.SetFinalizers(finalizers=(),
                                                      point="journal-released")


def test_a_live_attempt_holds_the_deletion_whatever_its_slot_says() -> None:
    """A claim under way (its Lease, the slot still Ready) or a fenced attempt's pod not
    finished yet: no deletion until it is over."""
    step = deleting(slots=[lf.slot("research", SlotState.READY)], left=1)
    assert isinstance(step, actions.DeleteJournal)
    held = runsteps.next_step(runsteps.RunWorld(
        run=journaled(finalizers=[FINALIZER], deleting=True), tenant=lf.TENANT, now=NOW,
        journal_left=1, journal_live=["study-research-1"]))
    assert isinstance(held, actions.Wait) and "study-research-1" in held.message


def test_a_journal_whose_secret_is_gone_is_said_left_then_released() -> None:
    run = journaled(finalizers=[FINALIZER], deleting=True)
    why = "its Secret team-a/agentrun-journal is gone"

    def world(of: AgentRun) -> runsteps.RunWorld:
        return runsteps.RunWorld(run=of, tenant=lf.TENANT, now=NOW, journal_orphaned=why)

    said = runsteps.next_step(world(run))
    assert isinstance(said, actions.WriteRun) and said.event is not None
    found = conditions.find(said.status.conditions, names.JOURNAL_DELETED_CONDITION)
    assert found is not None and found.reason == runjournals.SECRET_GONE
    assert why in found.message and "is left in the store" in found.message
    released = runsteps.next_step(world(run.model_copy(update={"status": said.status})))
    assert released == actions.SetFinalizers(finalizers=(), point="journal-released")
